"""A measure plugin installed for one test, in process: a real distribution (module + dist-info
with its `fragbench` entry point) laid out in a folder put on sys.path, found by the registry
the way an installed plugin is; removed again after the test (the registry forgets it).

`CELL_COST` is a correct primary measure with a money column (the cost, per cell, of the calls
that were given every condition); tests break one promise at a time by replacing a line.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fragbench.plugins import registry
from support.plugins import fake_distribution

CELL_COST = '''
import polars as pl
from fragbench.hookspecs import hookimpl

CELL = ["case", "lang", "variant", "mode"]


class CellCost:
    name = "NAME"
    api_version = "1.0"
    kind = "KIND"
    tables = {"TABLE": {"case": "String", "lang": "String", "variant": "String",
                        "mode": "String", "calls_all_conditions": "Int32",
                        "cost_usd": "Decimal(38, 18)"}}

    def compute(self, data):
        if data.calls is None:
            return {}
        conditions = (data.facts.filter(pl.col("is_condition"))
                      .group_by("case", "lang").agg(pl.col("fact_id").alias("conditions")))
        every = pl.col("conditions").list.set_difference("supplied_ids").list.len() == 0
        table = (
            data.calls.join(conditions, on=["case", "lang"], how="left")
            .with_columns(every.fill_null(False).alias("every"))
            .group_by(CELL).agg(
                pl.col("every").sum().cast(pl.Int32).alias("calls_all_conditions"),
                pl.col("cost_usd").filter(pl.col("every")).sum().alias("cost_usd"))
            .with_columns(MONEY)
            .sort(CELL)
        )
        return {"TABLE": table.select(list(self.tables["TABLE"]))}


@hookimpl
def register_measures(register):
    register(CellCost())
'''
EXACT = 'pl.col("cost_usd").cast(pl.Decimal(38, 18))'


def cell_cost(name: str = "cell-cost", kind: str = "primary", table: str = "cell_cost",
              money: str = EXACT, replace: tuple[tuple[str, str], ...] = ()) -> str:
    """The measure's module text; `replace` swaps a line's text for a broken one."""
    code = (CELL_COST.replace("NAME", name).replace("KIND", kind).replace("TABLE", table)
            .replace("MONEY", money))
    for old, new in replace:
        assert old in code, old
        code = code.replace(old, new)
    return code


Install = Callable[[str, str], None]


def installer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """A test module's fixture body (`yield from installer(...)`): gives install(distribution,
    code), which lays out the module `distribution` (dashes as underscores), registered
    through its entry point like any installed plugin."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    modules: list[str] = []

    def install_(distribution: str, code: str) -> None:
        module = distribution.replace("-", "_")
        fake_distribution(site, distribution, module, code)
        modules.append(module)
        importlib.invalidate_caches()
        registry.cache_clear()

    yield install_
    for module in modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
    registry.cache_clear()
