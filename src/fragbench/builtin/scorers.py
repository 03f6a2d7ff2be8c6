"""Built-in scorer `sqrt-lexical` (the rule is in `fragbench.text`)."""

from __future__ import annotations

from typing import Any

import polars as pl

from fragbench.hookspecs import hookimpl
from fragbench.text import explode_terms

QUERY = ["case", "lang"]


class SqrtLexical:
    """Distinct question terms present in the chunk / sqrt(chunk terms, repeats counted).

    Adds two diagnostic columns so that every score can be checked by hand: `n_terms` (the
    chunk's term count) and `matched_terms` (the distinct question terms found, sorted).
    """

    name = "sqrt-lexical"

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
