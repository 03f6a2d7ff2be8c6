"""The compiled collection path (`fragbench.retrieval.collection.kernels`, sqrt-lexical's optional
`collection_index_sentences` and `collection_top_k`) against the plugin protocol's sparse path,
which test_collection.py holds to a reference written from the rule's words.

Both paths run on the same inputs: the scorer as it is, and the same scorer seen through a
wrapper that offers only the protocol's three methods (chunk text joined, one sparse matrix per
batch of queries, `select_top`). Inputs are made to reach every branch: many ties, queries
restricted to a passage (and to one that does not exist), passages and chunks with no term
(stopwords only, empty, missing text), k above the candidates, text that is not ASCII (accents
composed and decomposed, a ligature, full-width digits, Greek capitals whose sigma is final or
not, a combining mark opening a sentence), more distinct terms than the vocabulary's first
capacity, and terms so frequent that the kernel takes its dense pass.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import polars as pl
import pytest

from fragbench.builtin import scorers as builtin
from fragbench.builtin.scorers import SqrtLexical
from fragbench.errors import PluginError, UsageError
from fragbench.retrieval.collection import engine as coll
from fragbench.text import STOPWORDS

pytestmark = pytest.mark.slow


class ProtocolOnly:
    """sqrt-lexical through the plugin protocol 1.0 alone: its optional methods hidden."""

    name = "protocol-only"
    api_version = "1.0"
    modes = ("collection",)

    def __init__(self) -> None:
        self.inner = SqrtLexical()

    def collection_index(self, chunks: pl.DataFrame) -> Any:
        return self.inner.collection_index(chunks)

    def collection_queries(self, index: Any, queries: pl.DataFrame) -> Any:
        return self.inner.collection_queries(index, queries)

    def collection_scores(self, index: Any, queries: Any, rows: slice) -> Any:
        return self.inner.collection_scores(index, queries, rows)


WORDS = ["prix", "délai", "de\u0301lai", "offre", "client", "remboursé", "jours", "price",
         "refund", "days", "offer", "hosting", "données", "data", "l’offre", "12,50", "Élevé",
         "eleve", "ﬁnal", "１２", "ΟΔΟΣ", "ΟΔΟΣΟ", "σοφία", "contract", "sans", "without",
         "a1", "B2b", "x"]


def collection(seed: int, passages: int, queries: int, restricted: bool
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = random.Random(seed)
    rows = []
    for p in range(passages):
        lang = rng.choice(["en", "fr", "de"])
        kind = rng.random()
        for position in rng.sample(range(100), rng.randint(1, 8)):
            if kind < 0.05:  # a passage of stopwords only
                text: str | None = " ".join(rng.choice(STOPWORDS.get(lang, ("the",)))
                                            for _ in range(3))
            elif kind < 0.08:
                text = rng.choice(["", None, "  ,;  ", "\u0301Élevé ΟΔΟΣ"])
            else:
                vocabulary = [*WORDS, *STOPWORDS.get(lang, ())[:6]]
                text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 7)))
                if rng.random() < 0.1:
                    text += "."
            rows.append((f"p{p}", position, lang, text))
    rng.shuffle(rows)  # file order: passages interleaved, positions in any order
    frame = pl.DataFrame(rows, schema={"passage": pl.String, "position": pl.Int32,
                                       "lang": pl.String, "text": pl.String}, orient="row")
    qrows = []
    for i in range(queries):
        text = " ".join(rng.choice([*WORDS, "the", "le", "unknownword"])
                        for _ in range(rng.randint(0, 4)))
        qrows.append((f"q{i}", rng.choice(["en", "fr", "de"]), text,
                      rng.choice([f"p{rng.randrange(passages)}", "nowhere"])))
    query_frame = pl.DataFrame(qrows, schema=["query", "lang", "text", "passage"], orient="row")
    return frame, (query_frame if restricted else query_frame.drop("passage"))


def both(sentences: pl.DataFrame, queries: pl.DataFrame, size: int, k: int
         ) -> tuple[pl.DataFrame, pl.DataFrame]:
    fast = coll.retrieve_collection(sentences, queries, size, k)
    slow = coll.retrieve_collection(sentences, queries, size, k, scorer=ProtocolOnly())
    return fast, slow


def assert_same_bits(fast: pl.DataFrame, slow: pl.DataFrame) -> None:
    assert fast.equals(slow)
    assert np.array_equal(fast["score"].to_numpy().view(np.uint64),
                          slow["score"].to_numpy().view(np.uint64))


@pytest.mark.parametrize(("size", "k", "restricted"), [(1, 3, False), (2, 10, False),
                                                       (3, 40, False), (2, 2, True),
                                                       (1, 50, True)])
def test_the_compiled_path_gives_the_protocol_paths_result(size: int, k: int,
                                                            restricted: bool) -> None:
    sentences, queries = collection(1000 + size + k, passages=80, queries=600,
                                    restricted=restricted)
    fast, slow = both(sentences, queries, size, k)
    assert_same_bits(fast, slow)
    assert fast["tied"].sum() > 100  # ties really are exercised
    assert (fast["score"] == 0).sum() > 0  # and the zero-score fill
    if restricted:  # k above a passage's chunks: fewer rows; a passage that is not there: none
        assert fast.height < 600 * k
        gone = queries.filter(pl.col("passage") == "nowhere")["query"]
        assert gone.len() and not fast["query"].is_in(gone.to_list()).any()


def test_shard_tops_agree_row_for_row_counts_included() -> None:
    """The tops (TOPS_SCHEMA: at_key, zero) too, not only what the merge keeps of them."""
    sentences, queries = collection(77, passages=60, queries=400, restricted=False)
    queries = queries.select("lang", "text").with_row_index("n").select(
        pl.format("q{}", "n").alias("query"), "lang", "text")
    chunks = coll.chunk_collection(sentences.lazy(), 2)
    fast = coll.shard_tops(chunks, queries, 7, SqrtLexical())
    slow = coll.shard_tops(chunks, queries, 7, ProtocolOnly())
    assert fast.equals(slow)
    assert (fast["at_key"] > 1).sum() > 100


def test_frequent_terms_take_the_dense_pass_and_agree() -> None:
    """Every chunk holds the same few terms: each query meets more postings than an eighth of
    its candidates, the kernel's dense pass."""
    rng = random.Random(5)
    rows = [(f"p{p}", s, "en", " ".join(rng.choice(["alpha", "beta", "gamma", "delta"])
                                        for _ in range(rng.randint(1, 5))))
            for p in range(300) for s in range(rng.randint(1, 4))]
    sentences = pl.DataFrame(rows, schema=["passage", "position", "lang", "text"],
                             orient="row")
    queries = pl.DataFrame([(f"q{i}", "en", " ".join(rng.sample(["alpha", "beta", "gamma",
                                                                   "delta", "omega"],
                                                                  rng.randint(1, 4))))
                            for i in range(200)], schema=["query", "lang", "text"],
                           orient="row")
    fast, slow = both(sentences, queries, 2, 25)
    assert_same_bits(fast, slow)


def test_a_vocabulary_larger_than_its_first_capacity_grows_exactly() -> None:
    """More distinct terms (and term bytes) than the vocabulary first holds: it grows between
    calls, every term kept once, byte for byte."""
    rng = random.Random(11)
    words = [f"w{i}x{rng.randrange(10**9)}" for i in range(40_000)]
    texts = [" ".join(rng.sample(words, 12)) for _ in range(8_000)]
    chunks = pl.DataFrame({"chunk_id": range(len(texts)), "lang": ["en"] * len(texts),
                           "text": texts})
    index = SqrtLexical().collection_index(chunks)
    stop = {w for ws in STOPWORDS.values() for w in ws}
    terms = index.vocab.terms()
    assert len(terms) == len(set(terms))
    assert set(terms) - stop == {w for t in texts for w in t.split()}
    assert index.vocab.size > 16_384 and int(index.vocab.counters[1]) > 1 << 17
    postings = index.postings.tocsc()
    for chunk in (0, 4_321, len(texts) - 1):
        held = {terms[t] for t in postings[:, chunk].nonzero()[0]}
        assert held == set(texts[chunk].split())
    assert (index.n_terms == 12).all()


@pytest.mark.parametrize("in_order", [False, True])
def test_sentences_index_equals_the_joined_chunks_index(in_order: bool) -> None:
    """`collection_index_sentences` on the sentences gives `collection_index`'s index of the
    joined chunks: the same terms, postings and term counts (Unicode included: NFKD, marks,
    a final sigma at a sentence's end, a mark opening a sentence, missing text), whether
    the file holds each passage's sentences together and in order (a chunk's terms gathered
    as it is read) or scattered (each sentence's kept, then merged)."""
    sentences, _ = collection(3, passages=120, queries=0, restricted=False)
    if in_order:
        sentences = sentences.sort(pl.col("passage").str.slice(1).cast(pl.Int64), "position")
    chunks = coll.chunk_collection(sentences.lazy(), 3)
    plan, chunk_of_row = coll.chunk_plan(sentences.lazy(), 3)
    assert plan.equals(chunks.drop("text"))
    scorer = SqrtLexical()
    joined = scorer.collection_index(chunks.select("chunk_id", "lang", "text"))
    batches = [sentences["text"].slice(s, 37) for s in range(0, sentences.height, 37)]
    streamed = scorer.collection_index_sentences(iter(batches), chunk_of_row, plan["lang"])
    assert np.array_equal(joined.n_terms, streamed.n_terms)
    joined_terms, streamed_terms = joined.vocab.terms(), streamed.vocab.terms()
    for index, terms in ((joined, joined_terms), (streamed, streamed_terms)):
        pairs = index.postings.tocoo()
        index.pairs = sorted(zip([terms[t] for t in pairs.row], pairs.col.tolist(),
                                 strict=True))
    assert joined.pairs == streamed.pairs
    assert {"delai", "final", "12", "οδος", "οδοσο"} <= set(joined_terms)  # NFKD, final sigma


def test_too_large_a_key_table_falls_back_to_the_sparse_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sentences, queries = collection(9, passages=40, queries=200, restricted=False)
    want = coll.retrieve_collection(sentences, queries, 2, 5)
    monkeypatch.setattr(builtin, "KEY_TABLE_LIMIT", 0)
    index = SqrtLexical().collection_index(pl.DataFrame(
        {"chunk_id": [0], "lang": ["en"], "text": ["price"]}))
    prepared = SqrtLexical().collection_queries(index, pl.DataFrame({"lang": ["en"],
                                                                     "text": ["price"]}))
    assert SqrtLexical().collection_top_k(index, prepared, [(0, 1)], 1) is None
    assert coll.retrieve_collection(sentences, queries, 2, 5).equals(want)


def test_a_scorer_whose_own_top_k_gives_nan_is_refused(tmp_path: Any) -> None:
    """A scorer's optional `collection_top_k` is held to the promise `collection_scores` is:
    finite scores, or one line naming the scorer, query and chunk."""

    class Broken(ProtocolOnly):
        name = "broken"

        def collection_top_k(self, index: Any, queries: Any, ranges: Any, top_k: int) -> Any:
            found = self.inner.collection_top_k(index, queries, ranges, top_k)
            found[1][0, 0] = np.nan
            return found

    sentences = pl.DataFrame({"passage": ["p1", "p1"], "position": [0, 1],
                              "lang": ["en", "en"], "text": ["Delivery takes two days.",
                                                             "Returns take a week."]})
    queries = pl.DataFrame({"query": ["q1"], "lang": ["en"], "text": ["delivery days"]})
    with pytest.raises(PluginError, match=r"gave query q1 and chunk p1 #0 the score NaN"):
        coll.retrieve_collection(sentences, queries, 1, 1, scorer=Broken())


@pytest.mark.parametrize("column", ["passage", "position"])
def test_missing_passages_or_positions_are_refused_on_the_compiled_path(column: str) -> None:
    """`read_inputs` refuses a sentence without passage or position (tests/
    test_collection_inputs.py); a caller that skips it gets one line from `chunk_plan`, not a
    crash of the compiled loops."""
    sentences, _ = collection(21, passages=30, queries=100, restricted=False)
    holes = sentences.with_columns(
        pl.when(pl.int_range(pl.len()) % 17 == 3).then(None).otherwise(pl.col(column))
        .alias(column))
    with pytest.raises(UsageError, match=f"a sentence without {column}"):
        coll.local_chunks(holes.lazy(), 2, [SqrtLexical()])
    _, rows = coll.local_chunks(sentences.lazy(), 2, [SqrtLexical()])
    assert rows is not None


def test_an_equal_key_met_later_still_wins_on_collection_order() -> None:
    """Few postings (the kernel's sparse pass: chunks in the order their terms list them, not
    in collection order): chunk #10 is met after #50 with the same key, and the best key its
    matched-term count allows; it must still take rank 1, being first in the collection."""
    texts = ["zzz"] * 200
    texts[5] = "aa zzz zzz zzz"  # `aa` gets the lower term id: its postings are read first
    texts[10] = "bb"
    texts[50] = "aa"
    sentences = pl.DataFrame({"passage": [f"p{i:03d}" for i in range(200)], "position": 0,
                              "lang": "en", "text": texts})
    queries = pl.DataFrame({"query": ["q"], "lang": ["en"], "text": ["aa bb"]})
    fast, slow = both(sentences, queries, 1, 1)
    assert_same_bits(fast, slow)
    assert fast.row(0) == ("q", 1, "p010", 0, 1.0, True)


def test_the_query_kernel_uses_at_most_four_threads_with_the_same_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each thread holds 6 bytes per chunk: a 64-core pool must not mean 64 copies. One, two
    and four threads give the same bits."""
    from fragbench.retrieval.collection import kernels

    monkeypatch.setattr(pl, "thread_pool_size", lambda: 64)
    assert kernels.threads() == kernels.MAX_THREADS == 4
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 1)
    assert kernels.threads() == 1
    sentences, queries = collection(5, passages=40, queries=200, restricted=False)
    chunks = coll.chunk_collection(sentences.lazy(), 2)
    one = coll.shard_tops(chunks, queries, 5, SqrtLexical())
    for n in (2, 4):
        monkeypatch.setattr(pl, "thread_pool_size", lambda n=n: n)
        assert coll.shard_tops(chunks, queries, 5, SqrtLexical()).equals(one)


AFTER_THE_WARM_UP = r'''
import json, sys
from pathlib import Path

import polars as pl
from numba.core.registry import CPUDispatcher

from fragbench.retrieval.collection import engine as coll
from fragbench.retrieval.collection import kernels
from fragbench.builtin.scorers import SqrtLexical
from fragbench.retrieval.collection.warm import warm

loops = {n: d for n, d in vars(kernels).items() if isinstance(d, CPUDispatcher)}
called = {name for d in loops.values() for name in d.py_func.__code__.co_names}
entry = sorted(n for n, d in loops.items()
               if n not in called and d.targetoptions.get("inline") != "always")


def compiled():
    return {n: {str(s) for s in d.signatures} for n, d in loops.items()}


warm()
warmed = compiled()
folder = Path(sys.argv[1])
n = 3_000
texts = [f"word{i} the refund délai jours ﬁnal ΟΔΟΣ {i % 13}" if i % 4 else f"w{i} offer"
         for i in range(n)]
sentences = pl.DataFrame({"passage": [f"p{i // 7}" for i in range(n)],
                          "position": [i % 7 for i in range(n)],
                          "lang": ["en" if i % 3 else "fr" for i in range(n)], "text": texts})
queries = pl.DataFrame({"query": [f"q{i}" for i in range(300)],
                        "lang": [["en", "fr", None][i % 3] for i in range(300)],
                        "text": [f"word{i} refund délai" for i in range(300)],
                        "passage": [f"p{i}" for i in range(300)]})
shuffled = sentences.sample(fraction=1.0, shuffle=True, seed=3)
shuffled.write_parquet(folder / "s.parquet", row_group_size=100)
queries.write_parquet(folder / "q.parquet", row_group_size=10)
sentences.write_ndjson(folder / "s.jsonl")
queries.drop("passage").write_ndjson(folder / "q.jsonl")
whole = queries.drop("passage")
runs = [(folder / "s.parquet", folder / "q.parquet"), (folder / "s.jsonl", folder / "q.jsonl"),
        (sentences.with_columns(pl.col("position").cast(pl.Int32)), whole),
        (shuffled.with_columns(pl.col("position").cast(pl.UInt64)), queries),
        (pl.DataFrame({"passage": ["big"] * 40_000, "position": range(40_000),
                       "lang": ["en"] * 40_000, "text": [f"t{i} the" for i in range(40_000)]}),
         whole)]
for source, asked in runs:
    for top_k in (1, 20):
        coll.retrieve_collection(source, asked, 3, top_k)


class JoinedTextOnly:  # beside it, sqrt-lexical indexes the chunks' joined text
    modes = ("collection",)


for frame in (sentences, shuffled):
    lazy = frame.lazy()
    chunks, rows = coll.local_chunks(lazy, 2, [SqrtLexical(), JoinedTextOnly()])
    coll.local_tops(lazy, chunks, rows, whole, 5, SqrtLexical())
after = compiled()
print(json.dumps({"entry": entry, "uncompiled": [n for n in entry if not warmed[n]],
                  "new": {n: sorted(after[n] - warmed[n]) for n in loops
                          if after[n] - warmed[n]}}))
'''


def test_the_warm_up_compiles_every_loop_a_collection_run_calls(tmp_path: Any) -> None:
    """`make`'s warm-up (`fragbench.retrieval.collection.warm`) leaves nothing for a first real run
    to
    compile: in a fresh process, after `warm()`, every compiled loop a Python caller reaches (a
    loop no other loop calls and not inlined) has been compiled, and runs that vary what a
    user can vary (Parquet files of many row groups, JSON lines, integer types of `position`,
    restricted queries, a vocabulary past its first capacity, sqrt-lexical beside a scorer
    that cannot index sentences) compile no further signature. numba compiles once per type
    of the arguments, read-only arrays apart; a miss costs the first large run seconds."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", AFTER_THE_WARM_UP, str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"intern_rows", "plan_chunks", "index_texts", "lookup_texts", "fill_postings",
            "merge_rows", "_top_k_block", "_rehashed"} <= set(found["entry"])
    assert found["uncompiled"] == []
    assert found["new"] == {}
