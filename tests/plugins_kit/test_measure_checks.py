"""`fragbench.testing.check_measure`: a measure that keeps its contract passes, on the kit's
sample series (answered, unparsed, failed and never-sent calls; and no calls at all) and on
data given; each mistake a new author makes fails with an AssertionError naming the promise
it broke."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import polars as pl
import pytest

from fragbench.builtin.availability import Availability
from fragbench.builtin.citations import Citations
from fragbench.builtin.completeness import Completeness, UsageMeasure
from fragbench.testing import check_measure
from fragbench.testing.measure_samples import COST, measure_input

CELL = ["case", "lang", "variant", "mode"]
Tables = dict[str, dict[str, str]]


class CellCost:
    """The cost, per cell, of the calls that were given every condition of their case."""

    name = "cell-cost"
    api_version = "1.0"
    kind = "primary"
    tables: ClassVar[Tables] = {
        "cell_cost": {"case": "String", "lang": "String", "variant": "String", "mode": "String",
                      "calls_all_conditions": "Int32", "cost_usd": "Decimal(38, 18)"}}

    def money(self) -> pl.Expr:
        return pl.col("cost_usd").cast(pl.Decimal(38, 18))

    def table(self, data: Any) -> pl.DataFrame:
        conditions = (data.facts.filter(pl.col("is_condition"))
                      .group_by("case", "lang").agg(pl.col("fact_id").alias("conditions")))
        every = pl.col("conditions").list.set_difference("supplied_ids").list.len() == 0
        return (
            data.calls.join(conditions, on=["case", "lang"], how="left")
            .with_columns(every.fill_null(False).alias("every"))
            .group_by(CELL).agg(
                pl.col("every").sum().cast(pl.Int32).alias("calls_all_conditions"),
                pl.col("cost_usd").filter(pl.col("every")).sum().alias("cost_usd"))
            .with_columns(self.money())
            .sort(CELL)
        )

    def compute(self, data: Any) -> dict[str, pl.DataFrame]:
        if data.calls is None:
            return {}
        return {"cell_cost": self.table(data).select(list(self.tables["cell_cost"]))}


class FloatMoney(CellCost):
    def money(self) -> pl.Expr:
        return pl.col("cost_usd").cast(pl.Float64)


class MoneyDeclaredFloat(FloatMoney):
    tables: ClassVar[Tables] = {
        "cell_cost": {**CellCost.tables["cell_cost"], "cost_usd": "Float64"}}


class UndeclaredType(CellCost):
    tables: ClassVar[Tables] = {
        "cell_cost": {**CellCost.tables["cell_cost"], "calls_all_conditions": "Int64"}}


class NoLanguage(CellCost):
    tables: ClassVar[Tables] = {"cell_cost": {k: v for k, v in CellCost.tables["cell_cost"].items()
                            if k != "lang"}}

    def table(self, data: Any) -> pl.DataFrame:
        return super().table(data).group_by("case", "variant", "mode", maintain_order=True).agg(
            pl.col("calls_all_conditions").sum().cast(pl.Int32), pl.col("cost_usd").sum()
            .cast(pl.Decimal(38, 18)))


class Nondeterministic(CellCost):
    runs = itertools.count()

    def table(self, data: Any) -> pl.DataFrame:
        return super().table(data).with_columns(
            pl.lit(next(self.runs), pl.Int32).alias("calls_all_conditions"))


class BadTableName(CellCost):
    tables: ClassVar[Tables] = {"cost": CellCost.tables["cell_cost"]}

    def compute(self, data: Any) -> dict[str, pl.DataFrame]:
        return {"../cost": self.table(data).select(list(self.tables["cost"]))}


class UndeclaredTable(CellCost):
    def compute(self, data: Any) -> dict[str, pl.DataFrame]:
        return {"costs": self.table(data).select(list(self.tables["cell_cost"]))} \
            if data.calls is not None else {}


class NoApiVersion(CellCost):
    api_version = None


class NoTables(CellCost):
    tables = None


class GlobalKind(CellCost):
    kind = "global"


class Mutates(CellCost):
    def compute(self, data: Any) -> dict[str, pl.DataFrame]:
        data.facts.drop_in_place("text")
        return super().compute(data)


class NeedsCalls(CellCost):
    def compute(self, data: Any) -> dict[str, pl.DataFrame]:
        return {"cell_cost": self.table(data).select(list(self.tables["cell_cost"]))}


class ReservedName(CellCost):
    """Its table would be written over the series' recorded `retrieval.parquet`."""

    tables: ClassVar[Tables] = {"retrieval": CellCost.tables["cell_cost"]}

    def compute(self, data: Any) -> dict[str, pl.DataFrame]:
        return {"retrieval": self.table(data).select(list(self.tables["retrieval"]))} \
            if data.calls is not None else {}


class Summarized(CellCost):
    """A summary for the reports: the calls given every condition, per case and language. The
    kit calls it only on tables computed (with calls=None there are none, and nor is there a
    section in the reports), so it may index its table."""

    name = "summarized"

    def summary(self, tables: dict[str, pl.DataFrame]) -> list[tuple[str, pl.DataFrame]]:
        return [("Calls given every condition", tables["cell_cost"].group_by(
            "case", "lang", maintain_order=True).agg(pl.col("calls_all_conditions").sum()))]


class SummaryFloatMoney(CellCost):
    def summary(self, tables: dict[str, pl.DataFrame]) -> list[tuple[str, pl.DataFrame]]:
        return [("Cost per cell", tables["cell_cost"].with_columns(
            pl.col("cost_usd").cast(pl.Float64)))]


class SummaryTotal(CellCost):
    def summary(self, tables: dict[str, pl.DataFrame]) -> list[tuple[str, pl.DataFrame]]:
        return [("Total", tables["cell_cost"].select(pl.col("cost_usd").sum()))]


class SummaryColumnName(CellCost):
    def summary(self, tables: dict[str, pl.DataFrame]) -> list[tuple[str, pl.DataFrame]]:
        return [("Costs", tables["cell_cost"].rename({"cost_usd": "cost\n| usd"}))]


class SummaryRaises(CellCost):
    def summary(self, tables: dict[str, pl.DataFrame]) -> list[tuple[str, pl.DataFrame]]:
        return [("Costs", tables["cost"])]


@pytest.mark.parametrize("measure", [Availability(), Citations(), Completeness(),
                                     UsageMeasure(), CellCost(), Summarized()],
                         ids=lambda m: m.name)
def test_a_measure_that_keeps_the_contract_passes(measure: Any) -> None:
    check_measure(measure)
    check_measure(measure, measure_input())


def test_the_sample_series_has_every_kind_of_call() -> None:
    calls = measure_input().calls
    assert calls is not None
    assert sorted(calls["status"].to_list()) == ["completed", "completed", "failed", "not_sent"]
    assert calls["parsed"].to_list().count(True) == 1
    assert str(calls["cost_usd"].drop_nulls()[0]) == COST  # exact: no float holds it
    assert measure_input(calls=False).calls is None


MISTAKES = [
    (FloatMoney(), "writes money as exact decimals",
     "money column cost_usd is Float64, promised Decimal(38, 18)"),
    (MoneyDeclaredFloat(), "writes money as exact decimals",
     "money column cost_usd is declared Float64, not Decimal(38, 18)"),
    (UndeclaredType(), "gives each table the columns and types it declares",
     "column calls_all_conditions is Int32, promised Int64"),
    (NoLanguage(), "keys every table by case and language (no global score)",
     "table cell_cost has no lang column"),
    (Nondeterministic(), "returns the same tables twice (deterministic)",
     "table cell_cost differs from one run to the next"),
    (BadTableName(), "returns a dict of table name -> Polars DataFrame",
     "names a table '../cost'"),
    (UndeclaredTable(), "returns only the tables it declares",
     "returns a table 'costs' it does not declare (it declares: cell_cost)"),
    (NoApiVersion(), "declares the plugin API it is written for", "declares no api_version"),
    (NoTables(), "declares its tables", "declares no tables"),
    (GlobalKind(), "declares its name and kind (primary or diagnostic)", "kind is 'global'"),
    (Mutates(), "never changes its input", "changed its input (facts)"),
    (NeedsCalls(), "computes its tables from any recorded series",
     "before any call (calls=None) raised AttributeError"),
    (ReservedName(), "declares its tables",
     "declares a table 'retrieval', a name fragbench's own tables use (calls, cases, "
     "questions, retrieval, facts)"),
    (SummaryFloatMoney(), "writes money as exact decimals",
     "summary() frame 'Cost per cell': money column cost_usd is Float64, promised "
     "Decimal(38, 18)"),
    (SummaryTotal(), "keys every table by case and language (no global score)",
     "summary() frame 'Total' has no case or lang column"),
    (SummaryColumnName(), "summary(tables) returns titled frames for the reports",
     "summary() frame 'Costs' has a column 'cost\\n| usd'; a column name is 1 to 128 "
     "characters on one line"),
    (SummaryRaises(), "summary(tables) returns titled frames for the reports",
     "summary() of the tables computed on the kit's sample series raised KeyError"),
]


@pytest.mark.parametrize(("measure", "promise", "detail"), MISTAKES,
                         ids=[type(m).__name__ for m, _, _ in MISTAKES])
def test_each_mistake_fails_naming_the_promise(measure: Any, promise: str, detail: str) -> None:
    with pytest.raises(AssertionError) as failed:
        check_measure(measure)
    message = str(failed.value)
    assert message.startswith(f"measure 'cell-cost' breaks its contract ({promise}): "), message
    assert detail in message, message
