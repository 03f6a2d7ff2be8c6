"""Chunker `sliding-window`: overlapping windows of `size` consecutive sentences, stride 1.

A passage shorter than `size` gives one chunk with all its sentences.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.hookspecs import hookimpl

if TYPE_CHECKING:
    import polars as pl
else:  # imported on first use: `fragbench --help` and `fragbench plugins` never pay for it
    from fragbench.lazy import polars as pl

PASSAGE = ["case", "lang", "variant"]


class SlidingWindow:
    name = "sliding-window"
    api_version = "1.0"
    overlap = True
    """Windows share sentences: the core's (and the test kit's) no-overlap coverage check does
    not apply. No `output` attribute: it returns sentences, the chunker interface it was written
    against."""

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        ordered = sentences.sort([*PASSAGE, "position"])
        # pl.len() is unsigned: a passage shorter than size - 1 would wrap `_n - size + 1`
        # round to 4 billion windows (the test kit's one-sentence passage at size 3).
        n = ordered.group_by(PASSAGE).agg(pl.len().cast(pl.Int64).alias("_n"))
        starts = (
            n.with_columns(pl.int_ranges(0, (pl.col("_n") - size + 1).clip(lower_bound=1))
                           .alias("chunk"))
            .explode("chunk")
            .with_columns(pl.col("chunk").cast(pl.Int32))
        )
        return (
            starts.join(ordered, on=PASSAGE)
            .filter(pl.col("position") >= pl.col("chunk"),
                    pl.col("position") < pl.col("chunk") + size)
            .sort([*PASSAGE, "chunk", "position"])
            .group_by([*PASSAGE, "chunk"], maintain_order=True)
            .agg(
                pl.col("fact_id").alias("fact_ids"),
                pl.col("text").str.join(" ").alias("text"),
            )
        )


@hookimpl
def register_chunkers(register: Any) -> None:
    register(SlidingWindow())
