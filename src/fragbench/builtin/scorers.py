"""Built-in scorer `sqrt-lexical` (the rule is in `fragbench.text`)."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from fragbench.hookspecs import hookimpl
from fragbench.text import STOPWORDS, TOKEN_PATTERN, all_terms, normalized, stopword_frame

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

QUERY = ["case", "lang"]


INDEX_SLICE = 4_096
"""Chunks tokenized at once while indexing."""

SCORE_SLICE = 65_536
"""Chunks `score` takes at once (a slice per thread): bounds the term lists held beside the
result."""


class _Index:
    """Chunk terms tokenized once: term -> chunks postings, and each chunk's term count."""

    def __init__(self, vocab: pl.DataFrame, postings: Any, n_terms: Any) -> None:
        self.vocab = vocab
        """term, term_id."""
        self.postings = postings
        """A binary term x chunk CSR matrix: whether the chunk holds the term."""
        self.sqrt_terms = n_terms
        """sqrt of each chunk's term count, repeats counted (0 for a chunk with none)."""


def _terms(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """(key, term): every term of `text`, in the row's language's normalized form, stopwords
    removed; repeats kept.

    ASCII text skips the Unicode steps of the rule: NFKD leaves it as it is and it has no
    combining marks, so lowercasing is the whole normalization (the same terms, much faster
    on a large collection)."""
    rows = frame.lazy().with_columns(pl.col("text").str.contains(r"[^\x00-\x7F]").alias("_u"))
    ascii_terms = rows.filter(~pl.col("_u")).select(
        key, "lang", pl.col("text").str.to_lowercase().str.extract_all(TOKEN_PATTERN)
        .alias("term"))
    other_terms = rows.filter(pl.col("_u")).select(key, "lang",
                                                   all_terms(pl.col("text")).alias("term"))
    return (
        pl.concat([ascii_terms, other_terms])
        .explode("term").drop_nulls("term")
        .join(stopword_frame().lazy(), on=["lang", "term"], how="anti")
        .select(key, "term")
        .collect()
    )


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
    modes = ("passage", "collection")

    def collection_index(self, chunks: pl.DataFrame) -> _Index:
        """`chunks`: chunk_id (0..n-1), lang, text. Tokenized a slice of chunks at a time, so
        that the exploded terms of only one slice are ever held as strings: memory stays
        that of the collection and the integer postings."""
        import numpy as np
        from scipy import sparse

        n_terms = np.zeros(chunks.height, dtype=np.float64)
        vocab = pl.DataFrame(schema={"term": pl.String, "term_id": pl.UInt32})
        term_ids, chunk_ids = [], []
        for start in range(0, chunks.height, INDEX_SLICE):
            terms = _terms(chunks.slice(start, INDEX_SLICE), "chunk_id")
            counts = terms.group_by("chunk_id").len()
            n_terms[counts["chunk_id"].to_numpy()] = counts["len"].to_numpy()
            pairs = terms.unique()
            del terms
            new = (pairs.select(pl.col("term").unique(maintain_order=True))
                   .join(vocab, on="term", how="anti"))
            vocab = pl.concat([vocab, new.with_row_index("term_id", offset=vocab.height)
                              .select("term", pl.col("term_id").cast(pl.UInt32))])
            pairs = pairs.join(vocab, on="term")
            term_ids.append(pairs["term_id"].to_numpy())
            chunk_ids.append(pairs["chunk_id"].to_numpy())
        rows = np.concatenate(term_ids) if term_ids else np.zeros(0, dtype=np.uint32)
        cols = np.concatenate(chunk_ids) if chunk_ids else np.zeros(0, dtype=np.uint32)
        postings = sparse.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, cols)),
                                     shape=(vocab.height, chunks.height))
        return _Index(vocab, postings, np.sqrt(n_terms))

    def collection_queries(self, index: _Index, queries: pl.DataFrame) -> Any:
        """All the queries' distinct terms at once, as a binary query x term CSR matrix
        (`queries`: lang, text; a term the collection lacks can match nothing)."""
        import numpy as np
        from scipy import sparse

        terms = _terms(queries.with_row_index("q"), "q").unique().join(index.vocab, on="term")
        return sparse.csr_matrix(
            (np.ones(terms.height, dtype=np.int32),
             (terms["q"].to_numpy(), terms["term_id"].to_numpy())),
            shape=(queries.height, index.vocab.height))

    def collection_scores(self, index: _Index, queries: Any, rows: slice) -> Any:
        """Scores of the queries in `rows` of `collection_queries`' matrix: a CSR matrix,
        queries x chunks; chunks absent from a row score 0."""
        import numpy as np

        matched = queries[rows] @ index.postings  # distinct query terms found per chunk
        # Set in place: `astype` would sort and merge the indices first, for nothing.
        matched.data = np.divide(matched.data, index.sqrt_terms.take(matched.indices))
        return matched

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
