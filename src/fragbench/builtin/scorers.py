"""Built-in scorer `sqrt-lexical` (the rule is in `fragbench.text`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.hookspecs import hookimpl
from fragbench.text import TOKEN_PATTERN, all_terms, explode_terms, stopword_frame

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

QUERY = ["case", "lang"]


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
    collection (`collection_index` once, then `collection_scores` per batch of queries: a
    sparse product of the queries' and the chunks' term sets, divided by the chunks' sqrt term
    counts — the same floating-point operations as `score`, so the same bits).
    """

    name = "sqrt-lexical"
    modes = ("passage", "collection")

    def collection_index(self, chunks: pl.DataFrame) -> _Index:
        """`chunks`: chunk_id (0..n-1), lang, text."""
        import numpy as np
        from scipy import sparse

        terms = _terms(chunks, "chunk_id")
        counts = terms.group_by("chunk_id").len()
        n_terms = np.zeros(chunks.height, dtype=np.float64)
        n_terms[counts["chunk_id"].to_numpy()] = counts["len"].to_numpy()
        pairs = terms.unique()
        vocab = pairs.select(pl.col("term").unique(maintain_order=True)).with_row_index(
            "term_id")
        pairs = pairs.join(vocab, on="term")
        postings = sparse.csr_matrix(
            (np.ones(pairs.height, dtype=np.float64),
             (pairs["term_id"].to_numpy(), pairs["chunk_id"].to_numpy())),
            shape=(vocab.height, chunks.height))
        return _Index(vocab, postings, np.sqrt(n_terms))

    def collection_scores(self, index: _Index, queries: pl.DataFrame) -> Any:
        """A CSR matrix, queries x chunks; chunks absent from a row score 0."""
        import numpy as np
        from scipy import sparse

        terms = _terms(queries.with_row_index("q"), "q").unique().join(index.vocab, on="term")
        wanted = sparse.csr_matrix(
            (np.ones(terms.height, dtype=np.float64),
             (terms["q"].to_numpy(), terms["term_id"].to_numpy())),
            shape=(queries.height, index.vocab.height))
        matched = wanted @ index.postings  # distinct query terms found per chunk (CSR)
        np.divide(matched.data, index.sqrt_terms.take(matched.indices), out=matched.data)
        return matched

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        indexed = chunks.with_row_index("_row")
        question_terms = explode_terms(questions, "question", ["case"]).select(
            [*QUERY, "term"]
        ).unique()
        chunk_terms = explode_terms(indexed, "text", ["_row", "case"])
        counts = chunk_terms.group_by("_row").agg(pl.len().cast(pl.Int64).alias("n_terms"))
        matched = (
            chunk_terms.join(question_terms, on=[*QUERY, "term"], how="semi")
            .group_by("_row")
            .agg(pl.col("term").unique().sort().alias("matched_terms"))
        )
        return (
            indexed.join(counts, on="_row", how="left")
            .join(matched, on="_row", how="left")
            .with_columns(
                pl.col("n_terms").fill_null(0),
                pl.col("matched_terms").fill_null(pl.lit([], dtype=pl.List(pl.String))),
            )
            .with_columns(
                pl.when(pl.col("n_terms") > 0)
                .then(
                    pl.col("matched_terms").list.len()
                    / pl.col("n_terms").cast(pl.Float64).sqrt()
                )
                .otherwise(0.0)
                .alias("score")
            )
            .sort("_row")
            .drop("_row")
        )


@hookimpl
def register_scorers(register: Any) -> None:
    register(SqrtLexical())
