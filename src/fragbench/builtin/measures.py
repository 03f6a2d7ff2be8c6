"""Built-in measures. Each is computed from recorded tables only, never from a call."""

from __future__ import annotations

from typing import Any

import polars as pl

from fragbench.hookspecs import hookimpl
from fragbench.interfaces import MeasureInput

PASSAGE = ["case", "lang", "variant"]

AVAILABILITY_SCHEMA = {
    "case": "case ID",
    "lang": "language code",
    "variant": "sentence order",
    "mode": "retrieval (selected chunks of the setting) or full (all sentences)",
    "chunk_size": "retrieval setting; null for full",
    "top_k": "retrieval setting; null for full",
    "supplied_ids": "fact IDs that would be given to the model, passage order",
    "conditions": "the case's condition IDs",
    "conditions_supplied": "condition IDs among the supplied ones (exact ID match)",
    "conditions_missing": "condition IDs not supplied",
    "n_conditions_supplied": "how many condition IDs were supplied",
    "n_conditions": "how many condition IDs the case has",
    "others_supplied": "non-condition IDs that came along",
}


class Availability:
    """Primary, upstream of the model: which condition IDs each setting supplies, by exact ID."""

    name = "availability"
    kind = "primary"

    def compute(self, data: MeasureInput) -> dict[str, pl.DataFrame]:
        conditions = (
            data.facts.filter(pl.col("is_condition"))
            .group_by(["case", "lang"], maintain_order=True)
            .agg(pl.col("fact_id").alias("conditions"))
        )
        retrieval = (
            data.retrieval.filter(pl.col("selected"))
            .sort([*PASSAGE, "chunk_size", "top_k", "chunk"])
            .group_by([*PASSAGE, "chunk_size", "top_k"], maintain_order=True)
            .agg(pl.col("fact_ids").list.explode(keep_nulls=False, empty_as_null=False)
                 .alias("supplied_ids"))
            .with_columns(pl.lit("retrieval").alias("mode"))
        )
        full = (
            data.retrieval.filter(pl.col("chunk_size") == pl.col("chunk_size").min())
            .filter(pl.col("top_k") == pl.col("top_k").min())
            .sort([*PASSAGE, "chunk"])
            .group_by(PASSAGE, maintain_order=True)
            .agg(pl.col("fact_ids").list.explode(keep_nulls=False, empty_as_null=False)
                 .alias("supplied_ids"))
            .with_columns(
                pl.lit("full").alias("mode"),
                pl.lit(None, pl.Int32).alias("chunk_size"),
                pl.lit(None, pl.Int32).alias("top_k"),
            )
        )
        empty = pl.lit([], dtype=pl.List(pl.String))
        base = (
            pl.concat([retrieval, full.select(retrieval.columns)])
            .join(conditions, on=["case", "lang"], how="left")
            .with_columns(pl.col("conditions").fill_null(empty))
            .with_row_index("_row")
        )
        supplied = (
            base.select("_row", "case", "lang", pl.col("supplied_ids").alias("fact_id"))
            .explode("fact_id")
            .drop_nulls("fact_id")
            .join(data.facts.select("case", "lang", "fact_id", "is_condition"),
                  on=["case", "lang", "fact_id"], how="left")
            .with_columns(pl.col("is_condition").fill_null(False))
        )
        split = supplied.group_by("_row").agg(
            pl.col("fact_id").filter(pl.col("is_condition")).alias("conditions_supplied"),
            pl.col("fact_id").filter(~pl.col("is_condition")).alias("others_supplied"),
        )
        missing = (
            base.select("_row", pl.col("conditions").alias("fact_id"))
            .explode("fact_id")
            .drop_nulls("fact_id")
            .join(supplied.select("_row", "fact_id"), on=["_row", "fact_id"], how="anti")
            .group_by("_row", maintain_order=True)
            .agg(pl.col("fact_id").alias("conditions_missing"))
        )
        table = (
            base.join(split, on="_row", how="left")
            .join(missing, on="_row", how="left")
            .with_columns(
                pl.col("conditions_supplied", "others_supplied", "conditions_missing")
                .fill_null(empty)
            )
            .with_columns(
                pl.col("conditions_supplied").list.len().cast(pl.Int32)
                .alias("n_conditions_supplied"),
                pl.col("conditions").list.len().cast(pl.Int32).alias("n_conditions"),
            )
            .sort("_row")
        )
        return {"availability": table.select(list(AVAILABILITY_SCHEMA))}


@hookimpl
def register_measures(register: Any) -> None:
    register(Availability())
