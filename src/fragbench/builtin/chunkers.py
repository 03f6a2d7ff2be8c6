"""Built-in chunker `sentence-groups`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.columns import PASSAGE
from fragbench.hookspecs import hookimpl

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl



class SentenceGroups:
    """Consecutive, non-overlapping groups of `size` sentences from the passage's first one.

    The last group may be shorter.
    """

    name = "sentence-groups"
    api_version = "1.0"

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        if size < 1:
            raise ValueError(f"chunk size must be at least 1, got {size}")
        return (
            sentences.sort([*PASSAGE, "position"])
            .with_columns((pl.col("position") // size).cast(pl.Int32).alias("chunk"))
            .group_by([*PASSAGE, "chunk"], maintain_order=True)
            .agg(
                pl.col("fact_id").alias("fact_ids"),
                pl.col("text").str.join(" ").alias("text"),
            )
        )


@hookimpl
def register_chunkers(register: Any) -> None:
    register(SentenceGroups())
