"""Built-in measure `availability` (primary, upstream of the model).

Which of the case's condition IDs were supplied, by exact ID: for every retrieval setting of the
sensitivity matrix (and the full passage), and for every planned call.

Each condition is in exactly one of three lists: supplied whole (its whole sentence was given),
supplied only cut (a selected span touched its sentence but none held all of it: the model saw
a fragment under its ID), or missing (in no selected chunk). A sentence chunker supplies every
sentence whole, so its tables are what they were before span chunkers existed, with
`conditions_cut` empty. The ID lists hold each ID once, in the order first supplied (chunks
that overlap, such as sliding windows, may supply an ID twice: `supplied_ids` shows that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.columns import CALL_COLUMNS, CALL_TYPES, IDS, PASSAGE, PASSAGE_COLUMNS, PASSAGE_TYPES
from fragbench.hookspecs import hookimpl
from fragbench.interfaces import MeasureInput

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl



def _empty() -> pl.Expr:
    return pl.lit([], dtype=pl.List(pl.String))


SPLIT_SCHEMA = {
    "supplied_ids": "fact IDs given (or that would be given) to the model, in order, whole or "
                    "cut",
    "conditions": "the case's condition IDs",
    "conditions_supplied": "condition IDs supplied whole (exact ID match): the whole sentence "
                           "was given; every sentence a sentence chunker supplies is whole",
    "conditions_cut": "condition IDs supplied only cut: a selected span touched the sentence "
                      "but none held all of it (the model saw a fragment); always empty for a "
                      "sentence chunker",
    "conditions_missing": "condition IDs supplied neither whole nor cut",
    "n_conditions_supplied": "how many condition IDs were supplied whole",
    "n_conditions_cut": "how many condition IDs were supplied only cut",
    "n_conditions": "how many condition IDs the case has",
    "others_supplied": "non-condition IDs that came along (whole or cut)",
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

SPLIT_TYPES = {
    "supplied_ids": IDS, "conditions": IDS, "conditions_supplied": IDS, "conditions_cut": IDS,
    "conditions_missing": IDS, "n_conditions_supplied": "Int32", "n_conditions_cut": "Int32",
    "n_conditions": "Int32", "others_supplied": IDS,
}
TABLES = {
    "availability": {**PASSAGE_TYPES, "mode": "String", "chunk_size": "Int32", "top_k": "Int32",
                     "main_setting": "Boolean", **SPLIT_TYPES},
    "call_availability": {**CALL_TYPES, "status": "String", **SPLIT_TYPES},
}
"""The tables `availability` writes (call_availability only for a collected series), each
column's type as `Measure.tables` declares it; the meanings are in the *_SCHEMA dicts."""


READS = {"calls": ("call_id", "case", "lang", "variant", "mode", "rep", "status",
                   "supplied_ids", "supplied_texts"),
         "retrieval": (*PASSAGE, "chunk_size", "top_k", "chunk", "fact_ids", "whole_fact_ids",
                       "selected"),
         "facts": ("case", "lang", "fact_id", "text", "is_condition")}
"""The columns `availability` reads (`reads`): given only these, so that the core holds
neither the calls' bodies nor the chunks' text for it."""


def split_supplied(frame: pl.DataFrame, facts: pl.DataFrame) -> pl.DataFrame:
    """Add the SPLIT_SCHEMA columns to a frame with case, lang, supplied_ids and, optionally,
    whole_ids (the supplied IDs whose whole sentence was given; absent or null: all were)."""
    conditions = (
        facts.filter(pl.col("is_condition"))
        .group_by(["case", "lang"], maintain_order=True)
        .agg(pl.col("fact_id").alias("conditions"))
    )
    if "whole_ids" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.List(pl.String)).alias("whole_ids"))
    base = (
        frame.join(conditions, on=["case", "lang"], how="left")
        .with_columns(pl.col("conditions").fill_null(_empty()),
                      pl.col("whole_ids").fill_null(pl.col("supplied_ids")))
        .with_row_index("_row")
    )
    whole = (
        base.select("_row", pl.col("whole_ids").alias("fact_id"))
        .explode("fact_id")
        .drop_nulls("fact_id")
        .unique()
        .with_columns(pl.lit(True).alias("_whole"))
    )
    supplied = (
        base.select("_row", "case", "lang", pl.col("supplied_ids").alias("fact_id"))
        .explode("fact_id")
        .drop_nulls("fact_id")
        .join(facts.select("case", "lang", "fact_id", "is_condition"),
              on=["case", "lang", "fact_id"], how="left", maintain_order="left")
        .join(whole, on=["_row", "fact_id"], how="left", maintain_order="left")
        .with_columns(pl.col("is_condition", "_whole").fill_null(False))
    )
    condition = pl.col("is_condition")
    split = supplied.group_by("_row").agg(
        pl.col("fact_id").filter(condition & pl.col("_whole")).unique(maintain_order=True)
        .alias("conditions_supplied"),
        pl.col("fact_id").filter(condition & ~pl.col("_whole")).unique(maintain_order=True)
        .alias("conditions_cut"),
        pl.col("fact_id").filter(~condition).unique(maintain_order=True)
        .alias("others_supplied"),
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
            pl.col("conditions_supplied", "conditions_cut", "others_supplied",
                   "conditions_missing").fill_null(_empty())
        )
        .with_columns(
            pl.col("conditions_supplied").list.len().cast(pl.Int32).alias("n_conditions_supplied"),
            pl.col("conditions_cut").list.len().cast(pl.Int32).alias("n_conditions_cut"),
            pl.col("conditions").list.len().cast(pl.Int32).alias("n_conditions"),
        )
        .sort("_row")
        .drop("_row", "whole_ids")
    )


def _concat_ids(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The selected chunks' IDs, chunk after chunk: supplied_ids (all touched) and whole_ids.
    A retrieval table recorded before span chunkers existed has no whole_fact_ids: each of its
    facts was whole."""
    whole = "whole_fact_ids" if "whole_fact_ids" in frame.columns else "fact_ids"
    return (
        frame.sort([*keys, "chunk"])
        .group_by(keys, maintain_order=True)
        .agg(pl.col("fact_ids").list.explode(keep_nulls=False, empty_as_null=False)
             .alias("supplied_ids"),
             pl.col(whole).list.explode(keep_nulls=False, empty_as_null=False)
             .alias("whole_ids"))
    )


def _call_whole_ids(calls: pl.DataFrame, facts: pl.DataFrame) -> pl.DataFrame:
    """Add whole_ids to the calls: the supplied IDs shown their whole sentence. A call whose
    supplied_texts is null (or a calls frame without the column) showed every ID whole."""
    if "supplied_texts" not in calls.columns:
        return calls.with_columns(pl.col("supplied_ids").alias("whole_ids"))
    shown = (
        calls.with_row_index("_row")
        .filter(pl.col("supplied_texts").is_not_null())
        .select("_row", "case", "lang", pl.col("supplied_ids").alias("fact_id"),
                pl.col("supplied_texts").alias("_shown"))
        .explode("fact_id", "_shown")
        .drop_nulls("fact_id")
        .join(facts.select("case", "lang", "fact_id", "text"), on=["case", "lang", "fact_id"],
              how="left", maintain_order="left")
        .group_by("_row", maintain_order=True)
        .agg(pl.col("fact_id").filter(pl.col("_shown") == pl.col("text")).alias("_whole"))
    )
    return (
        calls.with_row_index("_row")
        .join(shown, on="_row", how="left", maintain_order="left")
        .with_columns(pl.when(pl.col("supplied_texts").is_null()).then(pl.col("supplied_ids"))
                      .otherwise(pl.col("_whole").fill_null(_empty())).alias("whole_ids"))
        .drop("_row", "_whole")
    )


class Availability:
    name = "availability"
    api_version = "1.0"
    kind = "primary"
    tables = TABLES
    reads = READS

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
        # The full passage: the facts of every chunk of one setting, each once in passage
        # order (overlapping chunks, or two spans that cut one sentence, repeat a fact), all
        # whole: the full calls show every sentence whole.
        one_setting = r.filter(pl.col("chunk_size") == pl.col("chunk_size").min(),
                               pl.col("top_k") == pl.col("top_k").min())
        full = _concat_ids(one_setting, PASSAGE).with_columns(
            pl.col("supplied_ids").list.unique(maintain_order=True),
        ).with_columns(
            pl.col("supplied_ids").alias("whole_ids"),
            pl.lit("full").alias("mode"),
            pl.lit(None, pl.Int32).alias("chunk_size"),
            pl.lit(None, pl.Int32).alias("top_k"),
            pl.lit(True).alias("main_setting"),
        )
        table = split_supplied(pl.concat([selected, full.select(selected.columns)]), data.facts)
        tables = {"availability": table.select(list(AVAILABILITY_SCHEMA))}
        if data.calls is not None:
            calls = split_supplied(_call_whole_ids(data.calls, data.facts).select(
                "call_id", "case", "lang", "variant", "mode", "rep", "status", "supplied_ids",
                "whole_ids"), data.facts)
            tables["call_availability"] = calls.select(list(CALL_AVAILABILITY_SCHEMA))
        return tables


@hookimpl
def register_measures(register: Any) -> None:
    register(Availability())
