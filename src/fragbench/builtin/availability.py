"""Built-in measure `availability` (primary, upstream of the model).

Which of the case's condition IDs were supplied, by exact ID: for every retrieval setting of the
sensitivity matrix (and the full passage), and for every planned call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.columns import CALL_COLUMNS, PASSAGE_COLUMNS
from fragbench.hookspecs import hookimpl
from fragbench.interfaces import MeasureInput

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

PASSAGE = ["case", "lang", "variant"]


def _empty() -> pl.Expr:
    return pl.lit([], dtype=pl.List(pl.String))

SPLIT_SCHEMA = {
    "supplied_ids": "fact IDs given (or that would be given) to the model, in order",
    "conditions": "the case's condition IDs",
    "conditions_supplied": "condition IDs among the supplied ones (exact ID match)",
    "conditions_missing": "condition IDs not supplied",
    "n_conditions_supplied": "how many condition IDs were supplied",
    "n_conditions": "how many condition IDs the case has",
    "others_supplied": "non-condition IDs that came along",
}

AVAILABILITY_SCHEMA = {
    **PASSAGE_COLUMNS,
    "mode": "retrieval (selected chunks of the setting) or full (all sentences)",
    "chunk_size": "retrieval setting; null for full",
    "top_k": "retrieval setting; null for full",
    "main_setting": "whether this is the setting the calls use (full rows: true)",
    **SPLIT_SCHEMA,
}

CALL_AVAILABILITY_SCHEMA = {
    **CALL_COLUMNS,
    "status": "the call's status (not_sent calls were planned, never given anything)",
    **SPLIT_SCHEMA,
}


def split_supplied(frame: pl.DataFrame, facts: pl.DataFrame) -> pl.DataFrame:
    """Add the SPLIT_SCHEMA columns to a frame with case, lang and supplied_ids."""
    conditions = (
        facts.filter(pl.col("is_condition"))
        .group_by(["case", "lang"], maintain_order=True)
        .agg(pl.col("fact_id").alias("conditions"))
    )
    base = (
        frame.join(conditions, on=["case", "lang"], how="left")
        .with_columns(pl.col("conditions").fill_null(_empty()))
        .with_row_index("_row")
    )
    supplied = (
        base.select("_row", "case", "lang", pl.col("supplied_ids").alias("fact_id"))
        .explode("fact_id")
        .drop_nulls("fact_id")
        .join(facts.select("case", "lang", "fact_id", "is_condition"),
              on=["case", "lang", "fact_id"], how="left", maintain_order="left")
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
        .join(supplied.select("_row", "fact_id"), on=["_row", "fact_id"], how="anti",
              maintain_order="left")
        .group_by("_row", maintain_order=True)
        .agg(pl.col("fact_id").alias("conditions_missing"))
    )
    return (
        base.join(split, on="_row", how="left")
        .join(missing, on="_row", how="left")
        .with_columns(
            pl.col("conditions_supplied", "others_supplied", "conditions_missing")
            .fill_null(_empty())
        )
        .with_columns(
            pl.col("conditions_supplied").list.len().cast(pl.Int32).alias("n_conditions_supplied"),
            pl.col("conditions").list.len().cast(pl.Int32).alias("n_conditions"),
        )
        .sort("_row")
        .drop("_row")
    )


def _concat_ids(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return (
        frame.sort([*keys, "chunk"])
        .group_by(keys, maintain_order=True)
        .agg(pl.col("fact_ids").list.explode(keep_nulls=False, empty_as_null=False)
             .alias("supplied_ids"))
    )


class Availability:
    name = "availability"
    kind = "primary"

    def compute(self, data: MeasureInput) -> dict[str, pl.DataFrame]:
        r = data.retrieval
        selected = _concat_ids(r.filter(pl.col("selected")),
                               [*PASSAGE, "chunk_size", "top_k"]).with_columns(
            pl.lit("retrieval").alias("mode"))
        if data.main_setting is not None:
            size, k = data.main_setting
            selected = selected.with_columns(
                ((pl.col("chunk_size") == size) & (pl.col("top_k") == k)).alias("main_setting"))
        else:
            selected = selected.with_columns(pl.lit(None, pl.Boolean).alias("main_setting"))
        # The full passage: every chunk of one chunk size, in order, is every sentence.
        one_setting = r.filter(pl.col("chunk_size") == pl.col("chunk_size").min(),
                               pl.col("top_k") == pl.col("top_k").min())
        full = _concat_ids(one_setting, PASSAGE).with_columns(
            pl.lit("full").alias("mode"),
            pl.lit(None, pl.Int32).alias("chunk_size"),
            pl.lit(None, pl.Int32).alias("top_k"),
            pl.lit(True).alias("main_setting"),
        )
        table = split_supplied(pl.concat([selected, full.select(selected.columns)]), data.facts)
        tables = {"availability": table.select(list(AVAILABILITY_SCHEMA))}
        if data.calls is not None:
            calls = split_supplied(data.calls.select(
                "call_id", "case", "lang", "variant", "mode", "rep", "status", "supplied_ids"),
                data.facts)
            tables["call_availability"] = calls.select(list(CALL_AVAILABILITY_SCHEMA))
        return tables


@hookimpl
def register_measures(register: Any) -> None:
    register(Availability())
