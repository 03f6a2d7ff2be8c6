"""Built-in scorer `sqrt-lexical` (the rule is in `fragbench.text`)."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from fragbench.hookspecs import hookimpl
from fragbench.text import STOPWORDS, TOKEN_PATTERN, all_terms, normalized

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

QUERY = ["case", "lang"]


INDEX_SLICE = 65_536
"""Chunks tokenized at once while indexing: bounds the bytes and term ids held for one slice."""

SCORE_SLICE = 65_536
"""Chunks `score` takes at once (a slice per thread): bounds the term lists held beside the
result."""

KEY_TABLE_LIMIT = 1 << 24
"""At most this many (matched terms, chunk term count) pairs in `collection_top_k`'s table of
tie keys; a run that would need more (queries of thousands of distinct terms against chunks of
thousands of distinct lengths), or a query of 65,536 distinct terms or more (the kernel counts
in 16 bits), goes the sparse way (`collection_scores`)."""


class _Index:
    """Chunk terms tokenized once: term -> chunks postings, and each chunk's term count."""

    def __init__(self, vocab: Any, term_ptr: Any, term_chunks: Any, n_terms: Any) -> None:
        import numpy as np

        self.vocab = vocab
        """The terms (`fragbench.retrieval.collection.kernels.Vocabulary`), stopwords included."""
        self.term_ptr = term_ptr
        self.term_chunks = term_chunks
        """Postings: the chunks holding term t are term_chunks[term_ptr[t]:term_ptr[t + 1]],
        ascending."""
        self.n_terms = n_terms
        """Each chunk's term count, repeats counted."""
        self.sqrt_terms = np.sqrt(n_terms.astype(np.float64))
        """sqrt of each chunk's term count (0 for a chunk with none)."""

    @property
    def postings(self) -> Any:
        """A binary term x chunk CSR matrix: whether the chunk holds the term."""
        import numpy as np
        from scipy import sparse

        return sparse.csr_matrix(
            (np.ones(self.term_chunks.size, dtype=np.int32), self.term_chunks, self.term_ptr),
            shape=(self.term_ptr.size - 1, self.n_terms.size))


def _text_bytes(texts: pl.Series) -> tuple[Any, Any, Any]:
    """Texts as bytes for `fragbench.retrieval.collection.kernels`: (data, offsets, pretokenized).

    ASCII texts go as they are (the kernel lowercases and splits them: for ASCII that is the
    whole rule, as in `_term_lists`); any other text is normalized and split here by the rule's
    expressions and goes as its terms joined by spaces (`pretokenized`). A text is ASCII when
    it has as many bytes as characters; a missing text has no term."""
    import numpy as np

    texts = texts.fill_null("")
    unicode = texts.str.len_bytes() != texts.str.len_chars()
    if unicode.any():
        rows = unicode.arg_true()
        split = (texts.gather(rows).to_frame("t").select(all_terms(pl.col("t")).list.join(" "))
                 .to_series())
        texts = texts.scatter(rows, split)
    lengths = texts.str.len_bytes().cast(pl.Int64).to_numpy()
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(texts.str.join("").cast(pl.Binary).item(), dtype=np.uint8)
    return data, offsets, unicode.to_numpy()


def _lang_masks(langs: pl.Series) -> Any:
    """Each language's stopword bit (that of its list in `STOPWORDS`; 0: a language with no
    list)."""
    bits = {lang: 1 << bit for bit, lang in enumerate(STOPWORDS)}
    return langs.replace_strict(bits, default=0, return_dtype=pl.Int64).fill_null(0).to_numpy()


def _postings(parts: list[tuple[Any, Any, Any]], n_terms: int) -> tuple[Any, Any]:
    """Term-major postings (term_ptr, term_chunks) from rows' distinct term ids, part after
    part (row_ptr, ids, each row's chunk; rows in chunk order): each part is placed, then
    let go, so that the postings and the parts are never held twice over."""
    import numpy as np

    from fragbench.retrieval.collection import kernels

    per_term = np.zeros(n_terms, dtype=np.int64)
    for _, ids, _ in parts:
        per_term += np.bincount(ids, minlength=n_terms)
    term_ptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(per_term, out=term_ptr[1:])
    del per_term
    term_chunks = np.empty(int(term_ptr[-1]), dtype=np.int32)
    fill = term_ptr[:-1].copy()
    while parts:
        row_ptr, ids, rows = parts.pop(0)
        kernels.fill_postings(fill, term_chunks, row_ptr, ids, rows)
        del row_ptr, ids, rows
    return term_ptr, term_chunks


def _vocabulary() -> Any:
    """An empty vocabulary holding every stopword, with its languages' bits."""
    import numpy as np

    from fragbench.retrieval.collection import kernels

    vocab = kernels.Vocabulary()
    for bit, words in enumerate(STOPWORDS.values()):
        encoded = [w.encode("utf-8") for w in words]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in encoded], out=offsets[1:])
        vocab.add(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets, bit)
    return vocab


class SqrtLexical:
    """Distinct question terms present in the chunk / sqrt(chunk terms, repeats counted).

    Adds two diagnostic columns so that every score can be checked by hand: `n_terms` (the
    chunk's term count) and `matched_terms` (the distinct question terms found, sorted).

    Modes: per passage (`score`, every chunk against its own passage's question), and
    collection (`collection_index` and `collection_queries` once, then `collection_scores` per
    batch of queries: a sparse product of the queries' and the chunks' term sets, divided by
    the chunks' sqrt term counts — the same floating-point operations as `score`, so the same
    bits).
    """

    name = "sqrt-lexical"
    api_version = "1.0"
    modes = ("passage", "collection", "sharded")

    def collection_index(self, chunks: pl.DataFrame) -> _Index:
        """`chunks`: chunk_id (0..n-1), lang, text. Tokenized by compiled loops a slice of
        chunks at a time (`fragbench.retrieval.collection.kernels`): only one slice's bytes are held
        beside the term ids."""
        import numpy as np

        from fragbench.retrieval.collection.engine import check_count

        check_count(chunks.height, "chunks")  # chunk ids are int32 in the postings
        vocab = _vocabulary()
        seen = np.full(vocab.hashes.size, -1, dtype=np.int64)
        counts, parts = [], []
        for start in range(0, chunks.height, INDEX_SLICE):
            part = chunks.slice(start, INDEX_SLICE)
            data, offsets, pre = _text_bytes(part["text"])
            stamps = np.arange(start, start + part.height, dtype=np.int64)
            count, row_ptr, found, seen = vocab.index(data, offsets, pre,
                                                      _lang_masks(part["lang"]), seen, stamps)
            counts.append(count)
            parts.append((row_ptr, found, stamps))
        n_terms = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
        return _Index(vocab, *_postings(parts, vocab.size), n_terms)

    def collection_index_sentences(self, texts: Any, chunk_of_row: Any, chunk_langs: pl.Series
                                   ) -> _Index:
        """The index `collection_index` gives for chunks whose text is their sentences joined
        by spaces, without joining them: `texts` yields the sentences' text (Series) in input
        order, batch after batch; `chunk_of_row[row]` is the chunk (0..n-1) of input row
        `row`; `chunk_langs[c]` the language of chunk c (its stopwords are dropped from its
        sentences).

        The same terms: a space ends every term and the rule's steps never reach across one
        (NFKD reorders marks only up to a starter, and a final sigma is decided within the
        word), so the terms of the joined text are the terms of its sentences, one after the
        other; a chunk's term count and distinct terms do not depend on their order.

        When every chunk's rows follow one another in the input, in chunk order (a file
        written passage by passage), a chunk's distinct terms are gathered as its rows are
        read; otherwise each row's are kept, then merged by chunk."""
        import numpy as np

        from fragbench.retrieval.collection import kernels
        from fragbench.retrieval.collection.engine import check_count

        n_chunks = len(chunk_langs)
        check_count(len(chunk_of_row), "sentences")  # row and chunk ids are int32
        in_order = bool((np.diff(chunk_of_row) >= 0).all())
        vocab = _vocabulary()
        seen = np.full(vocab.hashes.size, -1, dtype=np.int64)
        chunk_masks = _lang_masks(chunk_langs)
        counts, parts = [], []
        start = 0
        for batch in texts:
            rows = chunk_of_row[start:start + len(batch)]
            # In chunk order a row's chunk is its stamp (a view, not a copy); else its row.
            stamps = (rows if in_order
                      else np.arange(start, start + len(batch), dtype=np.int64))
            data, offsets, pre = _text_bytes(batch)
            count, row_ptr, found, seen = vocab.index(data, offsets, pre, chunk_masks[rows],
                                                      seen, stamps)
            if in_order and row_ptr[-1] < 1 << 31:  # held until placed: half the bytes
                row_ptr = row_ptr.astype(np.int32)
            counts.append(count)
            parts.append((row_ptr, found, stamps))
            start += len(batch)
        row_counts = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
        del counts
        n_terms = np.bincount(chunk_of_row, weights=row_counts, minlength=n_chunks
                              ).astype(np.int64)  # exact: counts far below 2**53
        if in_order:
            return _Index(vocab, *_postings(parts, vocab.size), n_terms)
        row_ptr = np.concatenate([np.zeros(1, dtype=np.int64)]
                                 + [p[0][1:] + sum(len(q[1]) for q in parts[:i])
                                    for i, p in enumerate(parts)])
        row_terms = np.concatenate([p[1] for p in parts]) if parts else np.zeros(
            0, dtype=np.int32)
        del parts
        if seen.size < vocab.size:
            seen = np.full(vocab.size, -1, dtype=np.int64)
        _, chunk_ptr, chunk_terms = kernels.merge_rows(
            row_ptr, row_terms, row_counts.astype(np.int64),
            np.asarray(chunk_of_row, dtype=np.int64), n_chunks, seen)
        del row_terms, row_ptr
        chunk_rows = np.arange(n_chunks, dtype=np.int64)
        return _Index(vocab, *_postings([(chunk_ptr, chunk_terms, chunk_rows)], vocab.size),
                      n_terms)

    def collection_queries(self, index: _Index, queries: pl.DataFrame) -> Any:
        """All the queries' distinct terms at once, as a binary query x term CSR matrix
        (`queries`: lang, text; a term the collection lacks can match nothing)."""
        import numpy as np
        from scipy import sparse

        from fragbench.retrieval.collection import kernels

        data, offsets, pre = _text_bytes(queries["text"])
        row_ptr, ids = kernels.lookup_texts(index.vocab.arrays(), data, offsets, pre,
                                            _lang_masks(queries["lang"]))
        return sparse.csr_matrix((np.ones(ids.size, dtype=np.int32), ids, row_ptr),
                                 shape=(queries.height, index.vocab.size))

    def collection_scores(self, index: _Index, queries: Any, rows: slice) -> Any:
        """Scores of the queries in `rows` of `collection_queries`' matrix: a CSR matrix,
        queries x chunks; chunks absent from a row score 0."""
        import numpy as np

        matched = queries[rows] @ index.postings  # distinct query terms found per chunk
        # Set in place: `astype` would sort and merge the indices first, for nothing.
        matched.data = np.divide(matched.data, index.sqrt_terms.take(matched.indices))
        return matched

    def collection_top_k(self, index: _Index, queries: Any, ranges: Any, top_k: int) -> Any:
        """Every query's top-k among its candidate chunks [lo, hi) (`ranges`, one row a query),
        with the core's selection rule, by compiled loops
        (`fragbench.retrieval.collection.kernels`): see
        `fragbench.retrieval.collection.engine.shard_tops` for what it returns. None when the run
        would need a table of tie keys above `KEY_TABLE_LIMIT` (the caller then scores through
        `collection_scores`).

        Each query's score of a chunk is m / sqrt(n) (m distinct query terms found, n the
        chunk's terms), the same division as `collection_scores`; its tie key is read from a
        table of every (m, n) the run can meet, rounded by the very call the core uses (Polars
        `round(12)`), so both are the bits the sparse path gives."""
        import numpy as np

        from fragbench.retrieval.collection import kernels
        from fragbench.retrieval.passages import TIE_DECIMALS

        lengths, n_index = np.unique(index.n_terms, return_inverse=True)
        most = int(np.diff(queries.indptr).max()) if queries.shape[0] else 0
        if (most + 1) * len(lengths) > KEY_TABLE_LIMIT or most >= 1 << 16:
            return None
        roots = np.sqrt(lengths.astype(np.float64))
        matched = np.arange(most + 1, dtype=np.float64)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            grid = np.where(roots > 0, np.divide(matched, roots), 0.0)  # m / sqrt(n)
        keys = pl.Series(grid.ravel(), dtype=pl.Float64).round(TIE_DECIMALS).to_numpy()
        lo = np.array([r[0] for r in ranges], dtype=np.int64)
        hi = np.array([r[1] for r in ranges], dtype=np.int64)
        width = min(top_k, int((hi - lo).max()) if len(ranges) else 0)
        if width == 0:
            n = len(ranges)
            return (np.zeros((n, 0), dtype=np.int64), np.zeros((n, 0)), np.zeros((n, 0)),
                    np.zeros((n, 0), dtype=np.int64), np.zeros((n, 0), dtype=bool),
                    np.zeros(n, dtype=np.int64))
        blocks = max(1, min(len(ranges), kernels.threads()))
        return kernels.top_k_all(queries.indptr.astype(np.int64), queries.indices,
                                 index.term_ptr, index.term_chunks, lo, hi, width,
                                 index.sqrt_terms, n_index.astype(np.int32), keys,
                                 len(lengths), blocks)

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        """Every chunk against its own passage's question (`QUERY`): the chunks, in their
        order, with `n_terms`, `matched_terms` and `score`.

        Whole columns a slice of `SCORE_SLICE` chunks at a time: each chunk's terms as one
        list (never a row per term), its count, and the set intersection with its question's
        distinct terms; so the work grows with the text, and the memory beyond the result
        with the slices in hand. Slices are scored on as many threads as Polars has (each a
        chunk's score alone: the result does not depend on which thread or in what order);
        their results are put back in the chunks' order."""
        wanted = (
            questions.select(*QUERY, _term_lists(questions, "question").alias("_q"))
            .explode("_q").drop_nulls("_q")
            .group_by(QUERY).agg(pl.col("_q").unique())
        )
        slices = [chunks.slice(start, SCORE_SLICE) for start in range(0, chunks.height,
                                                                        SCORE_SLICE)]
        with ThreadPoolExecutor(max_workers=max(1, pl.thread_pool_size())) as pool:
            found = list(pool.map(functools.partial(_found, wanted), slices))
        return chunks.with_columns(
            _joined([f["n_terms"] for f in found], "n_terms", pl.Int64),
            _joined([f["matched_terms"] for f in found], "matched_terms", pl.List(pl.String)),
        ).with_columns(
            pl.when(pl.col("n_terms") > 0)
            .then(pl.col("matched_terms").list.len() / pl.col("n_terms").cast(pl.Float64).sqrt())
            .otherwise(0.0)
            .alias("score")
        )


def _found(wanted: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """n_terms and matched_terms of each chunk of `part` (`wanted`: QUERY and the question's
    distinct terms `_q`)."""
    return (
        part.select(*QUERY, _term_lists(part, "text").alias("_t"))
        .join(wanted, on=QUERY, how="left", maintain_order="left")
        .select(
            pl.col("_t").list.len().cast(pl.Int64).fill_null(0).alias("n_terms"),
            # `list.sort()` is many times slower than sorting inside `list.eval`.
            pl.col("_t").list.set_intersection(pl.col("_q"))
            .list.eval(pl.element().sort())
            .fill_null(pl.lit([], dtype=pl.List(pl.String))).alias("matched_terms"),
        )
    )


def _joined(parts: list[pl.Series], name: str, dtype: pl.DataType) -> pl.Series:
    """The slices' values as one column (an empty one for no chunks)."""
    if not parts:
        return pl.Series(name, [], dtype=dtype)
    return pl.concat(parts, rechunk=True).alias(name)


def _term_lists(frame: pl.DataFrame, text: str) -> pl.Series:
    """Each row's terms of column `text` as one list, in order, repeats kept, the row's
    language's stopwords removed: the terms of `fragbench.text.explode_terms`, a row each.

    As in `_terms`, ASCII text is only lowercased (NFKD leaves it as it is and it has no
    combining marks); the other texts alone go through the whole normalization. A text is
    ASCII when it has as many bytes as characters (UTF-8 writes any other character in two
    bytes or more)."""
    texts = frame[text]
    lowered = texts.str.to_lowercase()
    unicode = (texts.str.len_bytes() != texts.str.len_chars()).arg_true()
    if unicode.len():
        lowered = lowered.scatter(
            unicode, texts.gather(unicode).to_frame().select(normalized(pl.first())).to_series())
    terms = lowered.str.extract_all(TOKEN_PATTERN)
    langs = frame["lang"].unique()
    stopwords = {lang: words for lang, words in STOPWORDS.items() if lang in langs}
    if not stopwords:
        return terms
    if langs.len() == 1:  # one language, with stopwords: no row to choose
        return terms.list.eval(pl.element().filter(~pl.element().is_in(*stopwords.values())))
    kept: Any = pl.lit(terms)
    for lang, words in stopwords.items():
        kept = pl.when(pl.col("lang") == lang).then(
            pl.lit(terms).list.eval(pl.element().filter(~pl.element().is_in(words)))
        ).otherwise(kept)
    return frame.select(kept.alias("_terms")).to_series()


@hookimpl
def register_scorers(register: Any) -> None:
    register(SqrtLexical())
