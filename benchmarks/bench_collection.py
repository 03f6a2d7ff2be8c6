"""Collection-scale retrieval, side by side on the same chunks. Results go to benchmarks/RESULTS.md.

A reproducible synthetic bilingual corpus (a seed; Zipf-distributed synthetic words, English and
French passages of 3 to 12 sentences, 8 to 24 words per sentence, stopwords, French elisions,
numbers, a few stopword-only sentences and passages) and 1,000 queries of 2 to 8 terms are
written to Parquet in a temporary folder, then each contender runs in a process of its own (its
peak resident memory is that process's `ru_maxrss`, read with `os.wait4` by a small launcher
process, since Linux carries a parent's peak into its children):

- `fragbench-lib`: `fragbench.retrieval.collection.engine.retrieve_collection` on the frames
already read (the
  Polars default thread pool, 2 threads on the project machine). Its index phase ends when the
  scorer's `collection_index` returns (timed by wrapping that method); its query phase is the
  rest: every batch of queries, the selection, the result frame. Should that split not exist,
  the query phase is estimated as (all queries) - (one query, `fragbench-lib-1q`, a process of
  its own);
- `fragbench-lib-1t`: the same call with `POLARS_MAX_THREADS=1`, for a one-thread comparison;
- `fragbench-cli`: `fragbench retrieve --collection ... --queries ... --chunk-size 3 --top-k 10
  --out results.parquet` as a whole process (start-up, reading, writing included);
- `bm25s`: bm25s, numpy backend, one thread: tokenize, index, tokenize the queries and
  retrieve the top 10 (same chunks, same tokens: lowercase, `[a-z0-9]+`, the stopword lists);
- `rank_bm25`: BM25Okapi, on the queries that fit in a time budget (default 20 s); its query
  rate and total for 1,000 queries are EXTRAPOLATED from that sample, and marked so;
- `tantivy`, `tantivy-lean`: tantivy 0.27 (Rust, Python binding), one writer thread, the
  index in memory, the same chunks, each query an OR of its terms, its own BM25 (time and
  memory compared, not results): the text field as declared by default (positions), and the
  least its BM25 needs (frequencies only, bm25s's tokens, stopwords never indexed). They
  INCLUDE reading the prepared chunk and query texts (chunks.txt, queries.txt: one line each),
  indexing and the 1,000 searches (chunk ids read back); they EXCLUDE what fragbench's CLI
  process also pays: reading the Parquet files, chunking, writing a result table (and Polars'
  import). The issue's targets are against `tantivy`;
- `tantivy-pipeline`: an extra comparison, not a target: tantivy with `tantivy`'s settings
  (the same code, `worker_tantivy(pipeline=True)`) doing the CLI's whole job from the same
  files, as a user of tantivy would: sentences.parquet and queries.parquet read with Polars
  (the library fragbench also uses; its default threads), the chunks built in Polars by
  `chunk_frame` (the one chunking rule here: chunks.txt is written with it), indexing, the
  1,000 searches, the top 10 per query written as Parquet (query, rank, passage, chunk,
  score; tantivy's BM25, so only matching chunks, no zero-score fill). It INCLUDES everything
  the CLI's process does but the CLI's start-up and argument checks; it is checked (its chunks
  are the reference's, ranks 1..k), not compared with the reference (another score);
- `scipy-ref`: the reference, a plain scipy.sparse implementation of the same score that shares
  no code with fragbench (its own tokenizer for the ASCII synthetic text plus the stopword lists
  of `fragbench.text.STOPWORDS`, which are data): binary chunk x term CSR, binary query x term
  CSR, product, division by the square root of the chunk's term count, top 10 with the tie rule.

`fragbench-cli` is also run `--repeat` times on a collection of five sentences (the
`fragbench-cli-fixed` line): its peak RSS is what the process holds before any data (the
interpreter, Polars, numba, the compiled loops loaded from numba's cache), printed beside each
size's so that the part that grows with the collection is seen apart.

After each size's table: the query phase's memory-bandwidth floor (the bytes the 1,000 queries
must read: every posting of their terms, 4 B, and every matched (query, chunk) pair's term
count, 4 B, counted by the reference; over a numpy copy bandwidth measured here), and each
query phase as a multiple of it. bm25s and rank_bm25 run up to `--bm25-max` (1M) only.

fragbench's top 10 (library and CLI) must equal the reference's on every query: same chunks,
scores within 1e-12, same tie flags. Any disagreement is printed and the script exits 1.

Every fragbench and bm25s contender runs `--repeat` times (default 3), round robin, and the
medians are reported; the reference and rank_bm25 run once. The machine is shared: the load
average is printed at the start and at the end.

Run: `make bench`, or
`.venv/bin/python benchmarks/bench_collection.py [--sizes 10k,100k,200k] [--repeat N]
[--queries 1000] [--seed 7] [--shuffle] [--json FILE]`; `--sizes 1m` for a million sentences;
issue 17's run: `--sizes 200k,1m,5m --repeat 3 --workdir /tmp/benchcorpus --no-rank-bm25`.
Single-threaded contenders get OMP/OPENBLAS/MKL/POLARS thread counts of 1. Tests never assert
timings; this script only reports them (the issue's targets are printed beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
CHUNK_SIZE = 3
TOP_K = 10
TIE_DECIMALS = 12
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1", "POLARS_MAX_THREADS": "1"}
TERM = re.compile(r"[a-z0-9]+")
FR_ELIDED = ("l", "d", "j", "m", "n", "s", "t", "c", "qu")


def stopword_lists(folder: Path | None = None) -> dict[str, frozenset[str]]:
    """The stopword lists are data fixed by the contract (`fragbench.text.STOPWORDS`); only
    the lists are taken from fragbench, never its tokenizer or scorer. The workers read the
    copy in the corpus folder, so that no contender but fragbench imports fragbench (nor,
    through it, Polars: it would count in their memory)."""
    if folder is not None:
        lists = json.loads((folder / "stopwords.json").read_text(encoding="utf-8"))
        return {lang: frozenset(words) for lang, words in lists.items()}
    from fragbench.text import STOPWORDS

    return {lang: frozenset(words) for lang, words in STOPWORDS.items()}


# --------------------------------------------------------------------------- the corpus


def synthetic_words(rng: np.random.Generator, n: int, banned: set[str]) -> list[str]:
    consonants = list("bcdfghjklmnprstvz")
    vowels = list("aeiou")
    words: list[str] = []
    seen = set(banned)
    while len(words) < n:
        syllables = int(rng.integers(2, 5))
        word = "".join(consonants[int(rng.integers(len(consonants)))]
                       + vowels[int(rng.integers(len(vowels)))] for _ in range(syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def build_corpus(n_sentences: int, n_queries: int, seed: int, shuffle: bool, folder: Path
                 ) -> dict[str, Any]:
    """Writes sentences.parquet, queries.parquet (the contract's columns) and chunks.txt,
    queries.txt (one text a line, chunks in collection order) for the BM25 contenders."""
    import polars as pl

    rng = np.random.default_rng(seed)
    stop = stopword_lists()
    langs = ("en", "fr")
    banned = set().union(*stop.values())
    vocab_size = 40_000
    vocab = np.array(synthetic_words(rng, vocab_size + 2_000, banned), dtype=object)
    unknown = vocab[vocab_size:]  # never in a passage: queries with no known term
    vocab = vocab[:vocab_size]
    zipf = 1.0 / np.arange(1, vocab_size + 1) ** 1.07
    zipf /= zipf.sum()
    perm = {lang: rng.permutation(vocab_size) for lang in langs}  # each language's ranking
    stop_tokens = {
        "en": np.array(["'s" if w == "s" else w for w in sorted(stop["en"])], dtype=object),
        "fr": np.array([w + "'" if w in FR_ELIDED else w for w in sorted(stop["fr"])],
                       dtype=object),
    }
    numbers = np.array([str(i) for i in range(1000)], dtype=object)

    # passages: 3 to 12 sentences; a few are one stopword-only sentence (a chunk with no term)
    lengths: list[int] = []
    empty_passage: list[bool] = []
    total = 0  # a running sum: summing the list at every passage was quadratic
    while total < n_sentences:
        if rng.random() < 0.003:
            lengths.append(1)
            empty_passage.append(True)
        else:
            lengths.append(int(rng.integers(3, 13)))
            empty_passage.append(False)
        total += lengths[-1]
    lengths[-1] -= sum(lengths) - n_sentences
    n_passages = len(lengths)
    passage_lang = np.where(rng.random(n_passages) < 0.6, "en", "fr")
    ids: set[str] = set()
    passage_ids: list[str] = []
    for lang in passage_lang:  # random ids: sorting by id is not the collection order
        while True:
            pid = f"{lang}-{int(rng.integers(16 ** 8)):08x}"
            if pid not in ids:
                ids.add(pid)
                passage_ids.append(pid)
                break

    sent_passage = np.repeat(np.arange(n_passages), lengths)
    sent_lang = passage_lang[sent_passage]
    sent_position = np.concatenate([np.arange(n) for n in lengths])
    all_stop = (rng.random(n_sentences) < 0.003) | np.array(empty_passage)[sent_passage]
    sent_len = rng.integers(8, 25, size=n_sentences)
    tok_sent = np.repeat(np.arange(n_sentences), sent_len)
    tok_lang = sent_lang[tok_sent]
    n_tokens = len(tok_sent)
    is_stop = (rng.random(n_tokens) < 0.3) | all_stop[tok_sent]
    is_number = ~is_stop & (rng.random(n_tokens) < 0.02)
    ranks = rng.choice(vocab_size, size=n_tokens, p=zipf)
    tokens = np.empty(n_tokens, dtype=object)
    for lang in langs:
        mine = tok_lang == lang
        content = mine & ~is_stop & ~is_number
        tokens[content] = vocab[perm[lang][ranks[content]]]
        stops = mine & is_stop
        tokens[stops] = stop_tokens[lang][rng.integers(len(stop_tokens[lang]),
                                                       size=int(stops.sum()))]
    tokens[is_number] = numbers[rng.integers(1000, size=int(is_number.sum()))]
    comma = ~is_stop & (rng.random(n_tokens) < 0.05)
    tokens[comma] = tokens[comma] + ","
    token_list = tokens.tolist()
    bounds = np.concatenate([[0], np.cumsum(sent_len)]).tolist()
    texts = []
    for i in range(n_sentences):
        text = " ".join(token_list[bounds[i]:bounds[i + 1]])
        text = text.replace("' ", "'").replace(" 's", "'s")
        texts.append(text[0].upper() + text[1:] + ".")

    # queries: 2 to 8 terms, mostly words of one sentence of the query's language, some Zipf
    # draws, 0-2 stopwords; 1% only stopwords, 1% only unknown words, some repeated terms
    by_lang = {lang: np.flatnonzero((sent_lang == lang) & ~all_stop) for lang in langs}
    q_lang = np.where(rng.random(n_queries) < 0.6, "en", "fr")
    q_texts = []
    for qi in range(n_queries):
        lang = str(q_lang[qi])
        n_terms = int(rng.integers(2, 9))
        kind = rng.random()
        if kind < 0.01:
            words = list(rng.choice(sorted(stop[lang]), size=n_terms))
        elif kind < 0.02:
            words = list(rng.choice(unknown, size=n_terms))
        else:
            s = int(rng.choice(by_lang[lang]))
            own = [w.rstrip(",") for w, st, nb in zip(
                token_list[bounds[s]:bounds[s + 1]], is_stop[bounds[s]:bounds[s + 1]],
                is_number[bounds[s]:bounds[s + 1]], strict=True) if not st and not nb]
            words = []
            for _ in range(n_terms):
                if own and rng.random() < 0.7:
                    words.append(own[int(rng.integers(len(own)))])
                else:
                    words.append(str(vocab[perm[lang][rng.choice(vocab_size, p=zipf)]]))
            if rng.random() < 0.1:
                words.append(words[0])
            for _ in range(int(rng.integers(0, 3))):
                pos = int(rng.integers(len(words) + 1))
                words.insert(pos, str(rng.choice(sorted(stop[lang]))))
        text = " ".join(str(w) for w in words).replace("' ", "'").replace(" 's", "'s")
        q_texts.append(text[0].upper() + text[1:] + "?")
    q_ids = [f"q{i:04d}" for i in range(n_queries)]

    # the file: passages in generation order, or every row shuffled (--shuffle); the collection
    # order is then the order in which passages first appear in the file
    rows = rng.permutation(n_sentences) if shuffle else np.arange(n_sentences)
    sentences = pl.DataFrame({
        "passage": [passage_ids[p] for p in sent_passage[rows].tolist()],
        "position": sent_position[rows].astype(np.int32),
        "lang": sent_lang[rows].tolist(),
        "text": [texts[i] for i in rows.tolist()],
    })
    folder.mkdir(parents=True, exist_ok=True)
    sentences.write_parquet(folder / "sentences.parquet")
    pl.DataFrame({"query": q_ids, "lang": q_lang.tolist(), "text": q_texts}).write_parquet(
        folder / "queries.parquet")

    chunk_texts = chunk_frame(sentences)["text"].to_list()
    (folder / "chunks.txt").write_text("\n".join(chunk_texts) + "\n", encoding="utf-8")
    (folder / "queries.txt").write_text("\n".join(q_texts) + "\n", encoding="utf-8")
    return {"sentences": n_sentences, "passages": n_passages, "chunks": len(chunk_texts),
            "queries": n_queries, "words": n_tokens, "seed": seed, "shuffle": shuffle,
            "stopword_only_passages": int(sum(empty_passage))}


def chunk_frame(sentences: Any) -> Any:
    """The chunks of a sentence frame (Polars), as the contract says: passages in the order of
    their first row, each passage's sentences by position, groups of CHUNK_SIZE consecutive
    sentences joined by a space. Columns passage, chunk (0, 1, ... within the passage), text;
    one row a chunk, in collection order (row i is chunk id i). The one rule of this script:
    chunks.txt is written from it, and the `tantivy-pipeline` contender runs it."""
    import polars as pl

    return (sentences.lazy().select("passage", "position", "text")
            .with_row_index("_row")
            .with_columns(pl.col("_row").min().over("passage").alias("_first"))
            .sort(["_first", "position"])
            .with_columns((pl.int_range(pl.len()).over("passage") // CHUNK_SIZE)
                          .cast(pl.Int64).alias("chunk"))
            .group_by(["_first", "chunk"], maintain_order=True)
            .agg(pl.col("passage").first(), pl.col("text").str.join(" "))
            .select("passage", "chunk", "text")
            .collect())


# --------------------------------------------------------------------------- workers
# Each runs in a process of its own and prints one JSON line of timings last.


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def worker_reference(folder: Path) -> dict[str, Any]:
    """The reference: its own tokenizer (ASCII synthetic text: lowercase, [a-z0-9]+, the
    language's stopwords), scipy.sparse for the scores, its own top-k with the tie rule."""
    import polars as pl
    import scipy.sparse as sp

    stop = stopword_lists(folder)
    t0 = time.perf_counter()
    frame = pl.read_parquet(folder / "sentences.parquet")
    passages = frame["passage"].to_list()
    positions = frame["position"].to_list()
    langs = frame["lang"].to_list()
    texts = frame["text"].to_list()
    qframe = pl.read_parquet(folder / "queries.parquet")
    del frame
    t1 = time.perf_counter()

    # chunks: passages in the order they first appear, sentences by position, groups of N
    members: dict[str, list[int]] = {}
    for row, pid in enumerate(passages):
        members.setdefault(pid, []).append(row)
    vocab: dict[str, int] = {}
    chunk_passage: list[str] = []
    chunk_number: list[int] = []
    token_chunk: list[int] = []
    token_term: list[int] = []
    for pid, rows in members.items():
        rows.sort(key=positions.__getitem__)
        lang_stop = stop[langs[rows[0]]]
        for number, start in enumerate(range(0, len(rows), CHUNK_SIZE)):
            cid = len(chunk_passage)
            chunk_passage.append(pid)
            chunk_number.append(number)
            for row in rows[start:start + CHUNK_SIZE]:
                if not texts[row].isascii():
                    raise SystemExit("the reference tokenizer handles ASCII text only")
                for word in TERM.findall(texts[row].lower()):
                    if word not in lang_stop:
                        token_chunk.append(cid)
                        token_term.append(vocab.setdefault(word, len(vocab)))
    n_chunks, n_terms = len(chunk_passage), len(vocab)
    tc = np.asarray(token_chunk, dtype=np.int64)
    tt = np.asarray(token_term, dtype=np.int64)
    lengths = np.bincount(tc, minlength=n_chunks).astype(np.float64)
    pairs = np.unique(tc * n_terms + tt)
    presence = sp.csr_matrix((np.ones(len(pairs), dtype=np.int32),
                              (pairs // n_terms, pairs % n_terms)), shape=(n_chunks, n_terms))
    term_chunks = presence.T.tocsr()  # term x chunk
    root = np.sqrt(lengths)
    del tc, tt, pairs, token_chunk, token_term
    t2 = time.perf_counter()

    q_ids = qframe["query"].to_list()
    q_rows, q_cols = [], []
    for qi, (lang, text) in enumerate(zip(qframe["lang"].to_list(), qframe["text"].to_list(),
                                          strict=True)):
        distinct = {w for w in TERM.findall(text.lower()) if w not in stop[lang]}
        for term in sorted(vocab[w] for w in distinct if w in vocab):
            q_rows.append(qi)
            q_cols.append(term)
    n_q = len(q_ids)
    query_terms = sp.csr_matrix((np.ones(len(q_rows), dtype=np.int32), (q_rows, q_cols)),
                                shape=(n_q, n_terms))
    k = min(TOP_K, n_chunks)
    top = np.zeros((n_q, k), dtype=np.int64)
    top_score = np.zeros((n_q, k), dtype=np.float64)
    top_tied = np.zeros((n_q, k), dtype=bool)
    batch = 64
    pairs = 0
    for b in range(0, n_q, batch):
        shared = (query_terms[b:b + batch] @ term_chunks).tocsr()  # distinct shared terms
        pairs += shared.nnz
        for r in range(shared.shape[0]):
            lo, hi = shared.indptr[r], shared.indptr[r + 1]
            chunk = shared.indices[lo:hi].astype(np.int64)
            score = shared.data[lo:hi] / root[chunk]
            key = np.round(score, TIE_DECIMALS)
            if len(key) > k:
                cut = np.partition(key, len(key) - k)[len(key) - k]
                pick = np.flatnonzero(key >= cut)
            else:
                pick = np.arange(len(key))
            ranked = pick[np.lexsort((chunk[pick], -key[pick]))][:k]
            values, counts = np.unique(key[pick], return_counts=True)
            count_of = dict(zip(values.tolist(), counts.tolist(), strict=True))
            q = b + r
            n = len(ranked)
            top[q, :n] = chunk[ranked]
            top_score[q, :n] = score[ranked]
            top_tied[q, :n] = [count_of[v] > 1 for v in key[ranked].tolist()]
            if n < k:  # zero-score chunks in collection order
                positive = np.zeros(min(n_chunks, len(chunk) + k), dtype=bool)
                small = chunk[chunk < len(positive)]
                positive[small] = True
                fill = np.flatnonzero(~positive)[:k - n]
                top[q, n:] = fill
                top_score[q, n:] = 0.0
                top_tied[q, n:] = (n_chunks - len(chunk)) > 1
    t3 = time.perf_counter()
    np.savez(folder / "reference.npz", top=top, score=top_score, tied=top_tied,
             chunk_passage=np.array(chunk_passage, dtype=str),
             chunk_number=np.array(chunk_number, dtype=np.int64),
             queries=np.array(q_ids, dtype=str))
    postings = int(np.diff(term_chunks.indptr)[query_terms.indices].sum())
    return {"load_s": t1 - t0, "index_s": t2 - t1, "query_s": t3 - t2, "total_s": t3 - t1,
            "queries": n_q, "chunks": n_chunks, "terms": n_terms, "postings": postings,
            "pairs": pairs}


def split_scorer() -> Any:
    """The sqrt-lexical scorer with its `collection_index` timed, when fragbench's collection
    mode is built that way (index once, then batches of queries) and `retrieve_collection`
    takes a scorer: the end of the index phase is then known exactly. None otherwise (the query
    phase is then estimated from a one-query run)."""
    try:
        import inspect

        from fragbench.plugins import registry
        from fragbench.retrieval.collection.engine import retrieve_collection

        if "scorer" not in inspect.signature(retrieve_collection).parameters:
            return None
        scorer = registry().get("scorer", "sqrt-lexical")
        names = [n for n in ("collection_index", "collection_index_sentences")
                 if hasattr(scorer, n)]
    except (ImportError, AttributeError, KeyError, ValueError, TypeError):
        return None

    def timed(inner: Any) -> Any:
        def timed_index(*args: Any, **kwargs: Any) -> Any:
            index = inner(*args, **kwargs)
            scorer.index_done = time.perf_counter()
            return index
        return timed_index

    for name in names:  # whichever builds the index (the local engine indexes sentences)
        setattr(scorer, name, timed(getattr(scorer, name)))
    return scorer


def worker_fragbench(folder: Path, one_query: bool) -> dict[str, Any]:
    import polars as pl

    from fragbench.retrieval.collection.engine import retrieve_collection

    scorer = split_scorer()
    t0 = time.perf_counter()
    sentences = pl.read_parquet(folder / "sentences.parquet")
    queries = pl.read_parquet(folder / "queries.parquet")
    if one_query:
        queries = queries.head(1)
    t1 = time.perf_counter()
    if scorer is not None:
        results = retrieve_collection(sentences, queries, CHUNK_SIZE, TOP_K, scorer=scorer)
    else:
        results = retrieve_collection(sentences, queries, CHUNK_SIZE, TOP_K)
    t2 = time.perf_counter()
    out = f"fragbench-lib-{os.getpid()}.parquet"
    if not one_query:
        results.write_parquet(folder / out)
    timings = {"load_s": t1 - t0, "total_s": t2 - t1, "queries": queries.height,
               "rows": results.height, "out": out, "threads": pl.thread_pool_size()}
    if scorer is not None and hasattr(scorer, "index_done"):
        timings["index_s"] = scorer.index_done - t1  # checks, chunks, terms, index
        timings["query_s"] = t2 - scorer.index_done  # every batch, selection, result frame
    return timings


def worker_bm25s(folder: Path) -> dict[str, Any]:
    import bm25s

    # One list for both languages: the same terms as each language's own list on this corpus,
    # whose passages and queries hold only their own language's stopwords and whose synthetic
    # words are in neither list.
    stop = sorted(set().union(*stopword_lists(folder).values()))
    t0 = time.perf_counter()
    chunks = read_lines(folder / "chunks.txt")
    queries = read_lines(folder / "queries.txt")
    t1 = time.perf_counter()
    corpus_tokens = bm25s.tokenize(chunks, lower=True, token_pattern=r"[a-z0-9]+",
                                   stopwords=stop, show_progress=False)
    t2 = time.perf_counter()
    retriever = bm25s.BM25(backend="numpy")
    retriever.index(corpus_tokens, show_progress=False)
    t3 = time.perf_counter()
    query_tokens = bm25s.tokenize(queries, lower=True, token_pattern=r"[a-z0-9]+",
                                  stopwords=stop, return_ids=False, show_progress=False)
    docs, _scores = retriever.retrieve(query_tokens, k=TOP_K, n_threads=0, show_progress=False,
                                      backend_selection="numpy")
    t4 = time.perf_counter()
    assert docs.shape == (len(queries), TOP_K)
    return {"load_s": t1 - t0, "tokenize_s": t2 - t1, "index_s": t3 - t1, "query_s": t4 - t3,
            "total_s": t4 - t1, "queries": len(queries)}


def worker_tantivy(folder: Path, lean: bool, pipeline: bool = False) -> dict[str, Any]:
    """tantivy 0.27 (the Rust engine's Python binding): one writer thread (heap 128 MB, the
    binding's default), the index in memory (as fragbench's is), the same chunks; each query a
    boolean OR of its terms (tokenized as bm25s's: `[a-z0-9]+` of the lowercased text, the
    stopword lists out), top 10 by tantivy's own BM25, the chunk numbers read back from a
    stored field. Its results are not compared: another score.

    `tantivy`: the text field as a user declares it by default (tokenizer `default`,
    positions kept). `tantivy-lean`: the least tantivy's BM25 needs (term frequencies, no
    positions) and the same tokens as bm25s (the stopwords never indexed). Both read the chunk
    texts the benchmark prepared (chunks.txt, queries.txt) and write nothing.

    `pipeline=True` (`tantivy-pipeline`): the `tantivy` settings doing the whole job of
    fragbench's CLI from the same files, as a user of tantivy would: sentences.parquet and
    queries.parquet read with Polars (the library fragbench also uses), the chunks built in
    Polars by `chunk_frame` (the rule chunks.txt is written with), the top 10 per query written
    to tantivy-pipeline-results.parquet (query, rank, passage, chunk, score: tantivy's BM25).
    Its `total_s` is everything from reading to written; `load_s` the reading, `chunk_s` the
    chunking, `write_s` the result table."""
    import tantivy

    stop = sorted(set().union(*stopword_lists(folder).values()))
    if pipeline:
        import polars as pl
    t0 = time.perf_counter()
    extra: dict[str, float] = {}
    if pipeline:
        sentences = pl.read_parquet(folder / "sentences.parquet")
        query_frame = pl.read_parquet(folder / "queries.parquet")
        extra["load_s"] = time.perf_counter() - t0
        chunk_table = chunk_frame(sentences)
        del sentences
        chunks: Any = chunk_table.get_column("text")  # iterated one str at a time
        chunk_table = chunk_table.drop("text")
        queries = query_frame.get_column("text").to_list()
        extra["chunk_s"] = time.perf_counter() - t0 - extra["load_s"]
    else:
        chunks = read_lines(folder / "chunks.txt")
        queries = read_lines(folder / "queries.txt")
    t1 = time.perf_counter()
    builder = tantivy.SchemaBuilder()
    if lean:
        builder.add_text_field("body", stored=False, tokenizer_name="fb", index_option="freq")
    else:
        builder.add_text_field("body", stored=False)
    builder.add_unsigned_field("id", stored=True)
    schema = builder.build()
    index = tantivy.Index(schema)  # no path: in memory
    index.register_tokenizer("fb", tantivy.TextAnalyzerBuilder(
        tantivy.Tokenizer.regex(r"[A-Za-z0-9]+")).filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.custom_stopword(stop)).build())
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for i, text in enumerate(chunks):
        writer.add_document(tantivy.Document(body=text, id=i))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    del chunks
    t2 = time.perf_counter()
    searcher = index.searcher()
    should = tantivy.Occur.Should
    hit_query: list[int] = []
    hit_rank: list[int] = []
    hit_chunk: list[int] = []
    hit_score: list[float] = []
    for qi, text in enumerate(queries):
        terms = sorted({w for w in TERM.findall(text.lower()) if w not in stop})
        query = tantivy.Query.boolean_query(
            [(should, tantivy.Query.term_query(schema, "body", w)) for w in terms])
        hits = searcher.search(query, TOP_K, count=False).hits
        for rank, (score, address) in enumerate(hits, start=1):
            hit_query.append(qi)
            hit_rank.append(rank)
            hit_chunk.append(searcher.doc(address)["id"][0])
            hit_score.append(score)
    t3 = time.perf_counter()
    timings = {"load_s": t1 - t0, "index_s": t2 - t1, "query_s": t3 - t2, "total_s": t3 - t1,
               "queries": len(queries), "hits": len(hit_chunk)}
    if pipeline:
        result = pl.concat([
            pl.DataFrame({"query": query_frame.get_column("query").gather(hit_query),
                          "rank": pl.Series(hit_rank, dtype=pl.UInt32)}),
            chunk_table.select(pl.col("passage", "chunk").gather(hit_chunk)),
            pl.DataFrame({"score": pl.Series(hit_score, dtype=pl.Float64)}),
        ], how="horizontal")
        result.write_parquet(folder / "tantivy-pipeline-results.parquet")
        t4 = time.perf_counter()
        timings.update(extra, write_s=t4 - t3, total_s=t4 - t0, chunks=chunk_table.height,
                       threads=pl.thread_pool_size())
    return timings


def worker_rank_bm25(folder: Path, budget_s: float) -> dict[str, Any]:
    from rank_bm25 import BM25Okapi

    stop = set().union(*stopword_lists(folder).values())
    t0 = time.perf_counter()
    chunks = read_lines(folder / "chunks.txt")
    queries = read_lines(folder / "queries.txt")
    t1 = time.perf_counter()
    tokens = [[w for w in TERM.findall(t.lower()) if w not in stop] for t in chunks]
    bm = BM25Okapi(tokens)
    t2 = time.perf_counter()
    done = 0
    for text in queries:
        scores = bm.get_scores([w for w in TERM.findall(text.lower()) if w not in stop])
        best = np.argpartition(-scores, TOP_K)[:TOP_K]
        best[np.argsort(-scores[best], kind="stable")]
        done += 1
        if time.perf_counter() - t2 > budget_s:
            break
    t3 = time.perf_counter()
    per_query = (t3 - t2) / done
    return {"load_s": t1 - t0, "index_s": t2 - t1, "query_s": per_query * len(queries),
            "total_s": t2 - t1 + per_query * len(queries), "queries": len(queries),
            "sampled": done, "extrapolated": done < len(queries)}


def run_worker(args: argparse.Namespace) -> None:
    folder = Path(args.dir)
    if args.worker == "scipy-ref":
        out = worker_reference(folder)
    elif args.worker in ("fragbench-lib", "fragbench-lib-1t"):
        out = worker_fragbench(folder, one_query=False)
    elif args.worker == "fragbench-lib-1q":
        out = worker_fragbench(folder, one_query=True)
    elif args.worker == "bm25s":
        out = worker_bm25s(folder)
    elif args.worker in ("tantivy", "tantivy-lean", "tantivy-pipeline"):
        out = worker_tantivy(folder, lean=args.worker == "tantivy-lean",
                             pipeline=args.worker == "tantivy-pipeline")
    elif args.worker == "rank_bm25":
        out = worker_rank_bm25(folder, args.rank_bm25_seconds)
    else:
        raise SystemExit(f"unknown worker {args.worker}")
    print(json.dumps(out))


# --------------------------------------------------------------------------- harness


# Linux keeps a process's peak RSS across execve, and a child starts from its parent's memory
# image: a contender started by this (large) process would report at least this process's peak.
# So every contender is started by this small stdlib-only process, which reports the
# contender's own wall time and rusage.
RUSAGE_WRAPPER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - start
with open(sys.argv[1], "w") as out:
    json.dump({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
               "rss_mib": usage.ru_maxrss / 1024, "rc": os.waitstatus_to_exitcode(status)}, out)
"""


def measure(cmd: list[str], env: dict[str, str], folder: Path, label: str) -> dict[str, Any]:
    """Runs one process; wall time, CPU time and peak RSS of that process alone."""
    out_path, err_path = folder / f"{label}.out", folder / f"{label}.err"
    usage_path = folder / f"{label}.rusage.json"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        subprocess.run([sys.executable, "-I", "-c", RUSAGE_WRAPPER, str(usage_path), *cmd],
                       stdout=out, stderr=err, env=env, check=True)
    result: dict[str, Any] = json.loads(usage_path.read_text())
    stdout = out_path.read_text(encoding="utf-8", errors="replace")
    stderr = err_path.read_text(encoding="utf-8", errors="replace")
    if result["rc"] != 0:
        result["error"] = (stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return result
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if lines:
        result.update(json.loads(lines[-1]))
    return result


def fragbench_command() -> list[str]:
    script = Path(sys.executable).with_name("fragbench")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fragbench"]


def compare(folder: Path, results_path: Path, label: str) -> list[str]:
    """fragbench's rows against the reference's: the disagreements, as lines (empty: agree)."""
    import polars as pl

    with np.load(folder / "reference.npz") as npz:  # each access to an npz re-reads it
        ref = {name: npz[name] for name in npz.files}
    key_of = {(p, int(c)): i for i, (p, c) in enumerate(zip(
        ref["chunk_passage"].tolist(), ref["chunk_number"].tolist(), strict=True))}
    q_index = {q: i for i, q in enumerate(ref["queries"].tolist())}
    top, score, tied = ref["top"], ref["score"], ref["tied"]
    n_q, k = top.shape
    got = pl.read_parquet(results_path)
    problems: list[str] = []
    expected_cols = ["query", "rank", "passage", "chunk", "score", "tied"]
    if got.columns != expected_cols:
        problems.append(f"{label}: columns {got.columns}, expected {expected_cols}")
        return problems
    if got.height != n_q * k:
        problems.append(f"{label}: {got.height} rows, expected {n_q} queries x {k}")
    seen = np.zeros((n_q, k), dtype=bool)
    for q, rank, passage, chunk, s, t in got.iter_rows():
        if q not in q_index or not 1 <= rank <= k:
            problems.append(f"{label}: unexpected row query={q} rank={rank}")
            continue
        qi, r = q_index[q], rank - 1
        if seen[qi, r]:
            problems.append(f"{label}: query {q} rank {rank} twice")
        seen[qi, r] = True
        cid = key_of.get((passage, chunk))
        want = (ref["chunk_passage"][top[qi, r]], int(ref["chunk_number"][top[qi, r]]))
        if cid != top[qi, r]:
            problems.append(f"{label}: query {q} rank {rank}: chunk {passage}#{chunk}, "
                            f"reference {want[0]}#{want[1]} (score {score[qi, r]!r})")
        elif s is None or abs(s - score[qi, r]) > 1e-12:
            problems.append(f"{label}: query {q} rank {rank}: score {s!r}, reference "
                            f"{score[qi, r]!r}")
        elif bool(t) != bool(tied[qi, r]):
            problems.append(f"{label}: query {q} rank {rank}: tied {t}, reference "
                            f"{bool(tied[qi, r])}")
    missing = int((~seen).sum())
    if missing:
        problems.append(f"{label}: {missing} (query, rank) rows missing")
    return problems


def check_pipeline(folder: Path, run: dict[str, Any]) -> list[str]:
    """`tantivy-pipeline`'s table is tantivy's BM25, not our score, so it is not compared with
    the reference; only checked to be the job done: its chunks are the reference's (same
    count, every (passage, chunk) it names is one), at most TOP_K ranks 1, 2, ... per query."""
    import polars as pl

    with np.load(folder / "reference.npz") as npz:
        passages, numbers = npz["chunk_passage"].tolist(), npz["chunk_number"].tolist()
    known = set(zip(passages, numbers, strict=True))
    got = pl.read_parquet(folder / "tantivy-pipeline-results.parquet")
    problems = []
    if run.get("chunks") != len(passages):
        problems.append(f"tantivy-pipeline: {run.get('chunks')} chunks, reference "
                        f"{len(passages)}")
    if got.columns != ["query", "rank", "passage", "chunk", "score"]:
        return [*problems, f"tantivy-pipeline: columns {got.columns}"]
    if got.height != run.get("hits"):
        problems.append(f"tantivy-pipeline: {got.height} rows written, {run.get('hits')} hits")
    unknown = sum((p, c) not in known for p, c in zip(
        got["passage"].to_list(), got["chunk"].to_list(), strict=True))
    if unknown:
        problems.append(f"tantivy-pipeline: {unknown} rows name a chunk the reference lacks")
    ranks = got.group_by("query").agg(n=pl.len(), ok=(pl.col("rank") == pl.int_range(
        1, pl.len() + 1, dtype=pl.UInt32)).all())
    if ranks.filter((pl.col("n") > TOP_K) | ~pl.col("ok")).height:
        problems.append("tantivy-pipeline: a query's ranks are not 1, 2, ... up to top k")
    return problems


def copy_bandwidth(mib: int = 512, tries: int = 5) -> float:
    """Bytes per second numpy copies from one array to another of `mib` MiB, one thread, the
    best of `tries` (each byte read once and written once)."""
    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return src.nbytes / best


def floor_line(result: dict[str, Any], bandwidth: float) -> str | None:
    """The query phase's distance to the memory-bandwidth floor: what the 1,000 queries must
    read at least, over the measured copy bandwidth."""
    ref = result["rows"].get("scipy-ref", {})
    if "postings" not in ref:
        return None
    need = 4 * ref["postings"] + 4 * ref["pairs"]
    floor = need / bandwidth
    parts = [f"query phase floor: {ref['postings']:,} postings (4 B each: an int32 chunk id) + "
             f"{ref['pairs']:,} matched (query, chunk) pairs (4 B each: the chunk's term count) "
             f"= {need / 1e6:,.0f} MB, at {bandwidth / 1e9:.1f} GB/s (numpy copy, one thread) "
             f"= {floor:.3f} s"]
    for label in ("fragbench-lib", "fragbench-lib-1t", "tantivy", "tantivy-lean",
                  "tantivy-pipeline"):
        row = result["rows"].get(label, {})
        if row.get("query_s"):
            parts.append(f"{label} query {row['query_s']:.3f} s = {row['query_s'] / floor:.1f}x")
    return "; ".join(parts)


def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def label_size(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every number over repeated runs (first run's other fields), and the spread of
    the wall time."""
    merged = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, float):
            merged[key] = statistics.median(r[key] for r in runs if key in r)
    merged["runs"] = len(runs)
    merged["wall_min_s"] = min(r["wall_s"] for r in runs)
    merged["wall_max_s"] = max(r["wall_s"] for r in runs)
    return merged


def bench_size(n: int, args: argparse.Namespace, root: Path, fb_available: bool
               ) -> dict[str, Any]:
    folder = root / f"n{n}-s{args.seed}-q{args.queries}{'-shuffled' if args.shuffle else ''}"
    start = time.perf_counter()
    manifest = folder / "corpus.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("v") == SCHEMA_VERSION:
        corpus = json.loads(manifest.read_text())["corpus"]
        generated = "reused"
    else:
        corpus = build_corpus(n, args.queries, args.seed, args.shuffle, folder)
        manifest.write_text(json.dumps({"v": SCHEMA_VERSION, "corpus": corpus}))
        generated = f"{time.perf_counter() - start:.1f} s"
    (folder / "stopwords.json").write_text(json.dumps(
        {lang: sorted(words) for lang, words in stopword_lists().items()}), encoding="utf-8")
    print(f"\n== {label_size(n)} sentences: {corpus['passages']} passages, {corpus['chunks']} "
          f"chunks of {CHUNK_SIZE}, {corpus['queries']} queries (corpus {generated}; {folder})",
          flush=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    one_thread = {**base_env, **ONE_THREAD}
    me = [sys.executable, str(Path(__file__).resolve())]
    worker = [*me, "--dir", str(folder), "--rank-bm25-seconds", str(args.rank_bm25_seconds),
              "--worker"]
    cli_out = folder / "cli-results.parquet"
    contenders: list[tuple[str, list[str], dict[str, str]]] = [
        ("scipy-ref", [*worker, "scipy-ref"], one_thread)]
    if fb_available:
        contenders += [("fragbench-lib", [*worker, "fragbench-lib"], base_env)]
        if split_scorer() is None:  # no exact split: estimate from a one-query run
            contenders += [("fragbench-lib-1q", [*worker, "fragbench-lib-1q"], base_env)]
        contenders += [
            ("fragbench-lib-1t", [*worker, "fragbench-lib-1t"], one_thread),
            ("fragbench-cli", [*fragbench_command(), "retrieve", "--collection",
                               str(folder / "sentences.parquet"), "--queries",
                               str(folder / "queries.parquet"), "--chunk-size",
                               str(CHUNK_SIZE), "--top-k", str(TOP_K), "--out", str(cli_out)],
             base_env),
        ]
    contenders += [("tantivy", [*worker, "tantivy"], one_thread),
                   ("tantivy-lean", [*worker, "tantivy-lean"], one_thread),
                   # Polars with its default threads, as the fragbench CLI; tantivy's own
                   # writer thread count is set in the worker (1, as `tantivy`)
                   ("tantivy-pipeline", [*worker, "tantivy-pipeline"], base_env)]
    if n <= parse_size(args.bm25_max):
        contenders += [("bm25s", [*worker, "bm25s"], one_thread)]
        if not args.no_rank_bm25:
            contenders += [("rank_bm25", [*worker, "rank_bm25"], one_thread)]

    # round robin: run i of every contender, then run i + 1, so that a change in the machine's
    # load falls on all of them alike
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in contenders}
    problems: list[str] = []
    for i in range(args.repeat):
        for label, cmd, env in contenders:
            if i > 0 and (label in ("scipy-ref", "rank_bm25") or runs[label][-1]["rc"] != 0):
                continue  # the slow or failed ones run once
            run = measure(cmd, env, folder, f"{label}-{i}")
            runs[label].append(run)
            if run["rc"] != 0:
                problems.append(f"{label}: exit {run['rc']}: {run.get('error')}")
            elif i == 0 and label in ("fragbench-lib", "fragbench-lib-1t", "fragbench-cli"):
                path = cli_out if label == "fragbench-cli" else folder / run["out"]
                found = compare(folder, path, label)
                run["agrees"] = not found
                problems += found
            elif i == 0 and label == "tantivy-pipeline":
                problems += check_pipeline(folder, run)
            print(f"   {label} run {i + 1}: {run['wall_s']:.2f} s wall, "
                  f"{run['rss_mib']:.0f} MiB", flush=True)
    rows = {label: median_run(r) for label, r in runs.items()}
    if "fragbench-lib-1q" in rows and "fragbench-lib" in rows:
        full, one = rows["fragbench-lib"], rows["fragbench-lib-1q"]
        if "total_s" in full and "total_s" in one:
            full["index_s"] = one["total_s"]  # one query: chunking, terms, index, one score
            full["query_s"] = full["total_s"] - one["total_s"]
            full["query_estimated"] = True
    return {"n": n, "corpus": corpus, "rows": rows, "problems": problems}


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(result: dict[str, Any]) -> str:
    head = ("| contender | threads | index s | query s | queries/s | in-process s | "
            "process wall s, median (min-max) | process CPU s | peak RSS MiB | agrees |")
    lines = [head, "|" + "---|" * 10]
    for label, row in result["rows"].items():
        if label == "fragbench-lib-1q":
            continue
        if row.get("rc"):
            lines.append(f"| {label} | | | | | | | | | failed: {row.get('error')} |")
            continue
        one = ("scipy-ref", "bm25s", "rank_bm25", "fragbench-lib-1t", "tantivy", "tantivy-lean")
        threads = "1" if label in one else "default (2)"
        if label == "tantivy-pipeline":
            threads = "Polars default (2), tantivy 1"
        q_s = row.get("query_s")
        qps = row["queries"] / q_s if q_s and row.get("queries") else None
        mark = ""
        if row.get("extrapolated"):
            mark = f" (extrapolated from {row['sampled']} queries)"
        if row.get("query_estimated"):
            mark = " (estimated: all queries - one query)"
        elif label.startswith("fragbench-lib") and q_s is not None:
            mark = " (after the index)"
        total = row.get("total_s")
        if label == "fragbench-cli":
            total = None
        total_note = ""
        if label == "tantivy-pipeline" and total is not None:  # reading to written
            total_note = (f" (read {fmt(row.get('load_s'))}, chunk {fmt(row.get('chunk_s'))}, "
                          f"write {fmt(row.get('write_s'))})")
        lines.append(
            f"| {label} | {threads} | {fmt(row.get('index_s'))} | {fmt(q_s)}{mark} | "
            f"{fmt(qps, 0)} | {fmt(total)}{total_note} | {fmt(row['wall_s'])} "
            f"({fmt(row['wall_min_s'])}-{fmt(row['wall_max_s'])}, {row['runs']} runs) | "
            f"{fmt(row['cpu_s'])} | "
            f"{fmt(row['rss_mib'], 0)} | {fmt(row.get('agrees'))} |")
    return "\n".join(lines)


def fixed_cost(root: Path, repeat: int) -> dict[str, Any]:
    """The fragbench CLI on a five-sentence collection, `repeat` times: the median of what
    its process holds whatever the collection (`fragbench-cli-fixed`)."""
    import polars as pl

    folder = root / "fixed"
    folder.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({
        "passage": ["en", "en", "en", "fr", "fr"], "position": [0, 1, 2, 0, 1],
        "lang": ["en", "en", "en", "fr", "fr"],
        "text": ["The refund takes 14 days.", "Hosting is included.", "The offer ends.",
                 "Le délai de remboursement est de 14 jours.", "L'offre est élevée."],
    }).write_parquet(folder / "sentences.parquet")
    pl.DataFrame({"query": ["q1"], "lang": ["en"], "text": ["refund days"]}).write_parquet(
        folder / "queries.parquet")
    command = [*fragbench_command(), "retrieve", "--collection",
               str(folder / "sentences.parquet"), "--queries", str(folder / "queries.parquet"),
               "--chunk-size", str(CHUNK_SIZE), "--top-k", str(TOP_K), "--out",
               str(folder / "results.parquet")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    runs = [measure(command, env, folder, f"fragbench-cli-fixed-{i}")
            for i in range(repeat)]
    failed = [r for r in runs if r.get("rc")]
    return failed[0] if failed else median_run(runs)


def targets(results: list[dict[str, Any]], fixed: dict[str, Any] | None = None) -> list[str]:
    lines = []
    if fixed and not fixed.get("rc"):
        lines.append(f"fragbench CLI on 5 sentences (fixed cost): peak RSS "
                     f"{fixed['rss_mib']:.0f} MiB, whole process {fixed['wall_s']:.2f} s")
    by_n = {r["n"]: r["rows"] for r in results}
    for n, rows in sorted(by_n.items()):
        cli, bm, ref, lib = (rows.get(k) for k in ("fragbench-cli", "bm25s", "scipy-ref",
                                                   "fragbench-lib"))
        if not (cli and ref and lib) or any(r.get("rc") for r in (cli, ref, lib)):
            continue
        tag = label_size(n)
        # tantivy is the target; tantivy-pipeline (the same whole job) an extra
        # comparison, said so in its lines.
        for name, extra, words in (("tantivy", "", ("met", "MISSED")),
                                   ("tantivy-pipeline", "(extra, same whole job) ",
                                    ("ahead", "behind"))):
            peer = rows.get(name)
            if not peer or peer.get("rc"):
                continue
            for what, mine, theirs, unit in (
                    ("CLI whole process", cli["wall_s"], peer["wall_s"], "s"),
                    ("library query phase", lib.get("query_s", float("nan")),
                     peer["query_s"], "s"),
                    ("CLI peak RSS", cli["rss_mib"], peer["rss_mib"], "MiB")):
                verdict = words[0] if mine <= theirs else words[1]
                lines.append(f"{tag}: {extra}{what} {mine:.2f} {unit} vs {name} {theirs:.2f} "
                             f"{unit}: {verdict}")
            if fixed and not fixed.get("rc") and not extra:
                lines.append(f"{tag}: CLI peak RSS above its fixed cost "
                             f"{cli['rss_mib'] - fixed['rss_mib']:.0f} MiB; {name}'s whole "
                             f"process {peer['rss_mib']:.0f} MiB")
        if not bm or bm.get("rc"):
            continue
        ok = cli["wall_s"] <= bm["total_s"]
        lines.append(f"{tag}: CLI whole process {cli['wall_s']:.2f} s vs bm25s tokenize+index+"
                     f"retrieve {bm['total_s']:.2f} s: {'met' if ok else 'MISSED'}")
        lib_qps = lib["queries"] / lib["query_s"] if lib.get("query_s", 0) > 0 else 0.0
        ref_qps = ref["queries"] / ref["query_s"]
        ok = lib_qps >= ref_qps
        lines.append(f"{tag}: library query phase {lib_qps:.0f} q/s vs reference "
                     f"{ref_qps:.0f} q/s: {'met' if ok else 'MISSED'}")
        ok = cli["rss_mib"] <= bm["rss_mib"]
        lines.append(f"{tag}: CLI peak RSS {cli['rss_mib']:.0f} MiB vs bm25s process "
                     f"{bm['rss_mib']:.0f} MiB: {'met' if ok else 'MISSED'}")
    small, big = by_n.get(100_000), by_n.get(1_000_000)
    if small and big and "fragbench-cli" in small and "fragbench-cli" in big:
        ratio = big["fragbench-cli"]["wall_s"] / small["fragbench-cli"]["wall_s"]
        lines.append(f"1M / 100k CLI wall time: {ratio:.1f}x for 10x the sentences: "
                     f"{'met (no worse than linear)' if ratio <= 10 else 'MISSED'}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10k,100k,200k",
                        help="sentence counts, comma-separated (10k, 100k, 200k, 1m)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each fragbench and bm25s contender, round robin; "
                             "medians reported (the reference and rank_bm25 run once)")
    parser.add_argument("--shuffle", action="store_true",
                        help="shuffle every row of the sentence file (collection order is "
                             "then first appearance)")
    parser.add_argument("--rank-bm25-seconds", type=float, default=20.0,
                        help="time budget of rank_bm25's query sample")
    parser.add_argument("--no-rank-bm25", action="store_true")
    parser.add_argument("--bm25-max", default="1m",
                        help="largest size at which bm25s and rank_bm25 run (they are slow)")
    parser.add_argument("--workdir", help="keep the corpora here (reused across runs)")
    parser.add_argument("--json", help="write every measurement to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return

    try:
        import fragbench.retrieval.collection.engine  # noqa: F401
        fb_available = True
    except ImportError as exc:
        print(f"fragbench.retrieval.collection.engine is not importable ({exc}): "
              "fragbench is not measured",
              file=sys.stderr)
        fb_available = False
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="fbcoll-"))
    from bench_process import machine_line, source_line  # this script's folder is on sys.path

    print(machine_line(), flush=True)
    print(source_line(), flush=True)
    results = []
    try:
        for size in args.sizes.split(","):
            results.append(bench_size(parse_size(size), args, root, fb_available))
        fixed = fixed_cost(root, args.repeat) if fb_available else None
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    bandwidth = copy_bandwidth()
    problems = []
    for result in results:
        print(f"\n{label_size(result['n'])} sentences, {result['corpus']['chunks']} chunks, "
              f"{result['corpus']['queries']} queries, top {TOP_K}:\n")
        print(table(result))
        line = floor_line(result, bandwidth)
        if line:
            print("\n" + line)
            result["floor"] = line
        problems += result["problems"]
    print()
    if fixed:
        for result in results:
            result["cli_fixed"] = fixed
    for line in targets(results, fixed):
        print(line)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str),
                                   encoding="utf-8")
    if not fb_available:
        print("FAILED: fragbench.retrieval.collection.engine is missing", file=sys.stderr)
        sys.exit(1)
    if problems:
        print(f"\nFAILED: {len(problems)} disagreement(s) or failure(s); the first ones:",
              file=sys.stderr)
        for line in problems[:20]:
            print("  " + line, file=sys.stderr)
        sys.exit(1)
    print("fragbench agrees with the reference on every query.")


if __name__ == "__main__":
    main()
