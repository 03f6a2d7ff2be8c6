"""Built-in measures `completeness` and `usage` (primary): raw answers, completeness, errors,
usage and cost, per call and per cell. Nothing is turned into a rate: the three repetitions of a
cell stay three rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fragbench.columns import (
    ANSWERED,
    CALL_COLUMNS,
    CALL_TYPES,
    MONEY_DTYPE,
    MONEY_TYPE,
    PASSAGE_COLUMNS,
    PASSAGE_TYPES,
)
from fragbench.hookspecs import hookimpl
from fragbench.interfaces import MeasureInput

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

CELL = ["case", "lang", "variant", "mode"]

COMPLETENESS_SCHEMA = {
    **CALL_COLUMNS,
    "status": "completed, incomplete, failed, …, interrupted, not_sent",
    "stop_reason": "where the series stopped, on that call",
    "answered": "a response arrived (completed or incomplete)",
    "parsed": "the answer text is valid JSON for the schema",
    "refused": "the model refused; null when no answer arrived",
    "incomplete_reason": "why a response is incomplete",
    "error": "the failure or the provider's error",
}

USAGE_SCHEMA = {
    **PASSAGE_COLUMNS,
    "mode": "retrieval or full",
    "calls_planned": "calls planned in the cell (the repetitions)",
    "calls_sent": "calls sent",
    "input_tokens": "sum over the cell's calls with a known usage; null when none has one",
    "cached_tokens": "idem",
    "cache_write_tokens": "idem",
    "output_tokens": "idem (reasoning included)",
    "reasoning_tokens": "idem",
    "cost_usd": f"sum of known costs, USD ({MONEY_TYPE}); null when no cost is known",
    "calls_cost_unknown": "sent calls whose cost is unknown (counted at their reservation)",
    "counted_usd": f"what the budget counts for the cell, USD ({MONEY_TYPE}); null when "
                   "nothing was sent",
}


TOKENS = ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens",
          "reasoning_tokens")
COMPLETENESS_TABLES = {
    "completeness": {**CALL_TYPES, "status": "String", "stop_reason": "String",
                     "answered": "Boolean", "parsed": "Boolean", "refused": "Boolean",
                     "incomplete_reason": "String", "error": "String"},
}
USAGE_TABLES = {
    "usage": {**PASSAGE_TYPES, "mode": "String", "calls_planned": "Int32", "calls_sent": "Int32",
              **dict.fromkeys(TOKENS, "Int64"), "cost_usd": MONEY_DTYPE,
              "calls_cost_unknown": "Int32", "counted_usd": MONEY_DTYPE},
}
"""The tables each measure writes (none for a series never collected), each column's type as
`Measure.tables` declares it."""


def _known_sum(column: str) -> pl.Expr:
    return pl.when(pl.col(column).is_not_null().any()).then(pl.col(column).sum()).alias(column)


COMPLETENESS_READS = {"calls": (*CALL_COLUMNS, "status", "stop_reason", "stop_detail", "parsed",
                                "refusal", "incomplete_reason", "error")}
USAGE_READS = {"calls": (*CELL, "status", *TOKENS, "cost_usd", "counted_usd")}
"""The columns each measure reads (`reads`): the calls' alone, none of the retrieval table or
the facts, and no body."""


class Completeness:
    name = "completeness"
    api_version = "1.0"
    kind = "primary"
    tables = COMPLETENESS_TABLES
    reads = COMPLETENESS_READS

    def compute(self, data: MeasureInput) -> dict[str, pl.DataFrame]:
        if data.calls is None:
            return {}
        answered = pl.col("status").is_in(ANSWERED)
        table = data.calls.with_columns(
            answered.alias("answered"),
            # Only an answer can be a refusal; for the others nothing is known: null.
            pl.when(answered).then(pl.col("refusal").is_not_null()).alias("refused"),
            pl.coalesce("error", "stop_detail").alias("error"),
        )
        return {"completeness": table.select(list(COMPLETENESS_SCHEMA))}


class UsageMeasure:
    name = "usage"
    api_version = "1.0"
    kind = "primary"
    tables = USAGE_TABLES
    reads = USAGE_READS

    def compute(self, data: MeasureInput) -> dict[str, pl.DataFrame]:
        if data.calls is None:
            return {}
        from fragbench.series.folder import MONEY as money

        sent = pl.col("status") != "not_sent"
        table = (
            data.calls.group_by(CELL, maintain_order=True)
            .agg(
                pl.len().cast(pl.Int32).alias("calls_planned"),
                sent.sum().cast(pl.Int32).alias("calls_sent"),
                # A sum over nothing known is unknown (null), never zero.
                *[_known_sum(t) for t in TOKENS],
                # Summed as exact decimals (same scale, no rounding); the cast pins the
                # documented type whatever precision a Polars version gives a sum.
                *[_known_sum(m).cast(money) for m in ("cost_usd", "counted_usd")],
                (sent & pl.col("cost_usd").is_null()).sum().cast(pl.Int32)
                .alias("calls_cost_unknown"),
            )
            .sort(CELL)
        )
        return {"usage": table.select(list(USAGE_SCHEMA))}


@hookimpl
def register_measures(register: Any) -> None:
    register(Completeness())
    register(UsageMeasure())
