"""docs/writing-a-measure.md, followed from an empty folder as a reader would (see
walkthrough): a primary measure with a money column, written from the doc alone, installs,
registers, passes `check_measure`, is listed in an experiment and frozen, and its table is
written with the declared types and shown in both reports.

Real subprocesses: what is under test is the install into an environment and plugin discovery
from it, which an in-process run (whose plugins are already loaded) cannot show.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from support.reports import parse
from support.suite import ROOT
from support.walkthrough import follow

from fragbench.report.markdown import SHOWN_ROWS
from fragbench.schemas import type_name

pytestmark = pytest.mark.slow


def test_writing_a_measure_from_scratch(tmp_path: Path) -> None:
    ran = follow(ROOT / "docs" / "writing-a-measure.md", tmp_path)
    assert any("2 passed" in r.stdout for r in ran)  # the package's tests, check_measure too
    series = tmp_path / "fragbench" / "outputs" / "cell-cost" / "cell-cost" / "extractive"
    plan = json.loads((series / "plan.json").read_text(encoding="utf-8"))
    assert plan["parameters"]["measures"][-1] == "cell-cost"  # pre-registered in the plan
    assert any(p.get("name") == "cell-cost" for p in plan["plugins"])
    manifest = json.loads((series / "measures.json").read_text(encoding="utf-8"))
    assert {"table": "cell_cost", "measure": "cell-cost", "kind": "primary",
            "path": "cell_cost.parquet"} in manifest

    table = pl.read_parquet(series / "cell_cost.parquet")
    assert {c: type_name(t) for c, t in table.schema.items()} == {
        "case": "String", "lang": "String", "variant": "String", "mode": "String",
        "calls_all_conditions": "Int32", "cost_usd": "Decimal(38, 18)"}
    # The offline baseline costs nothing: exact zeros where a call was given every condition.
    calls = pl.read_parquet(series / "calls.parquet")
    assert table["calls_all_conditions"].sum() > 0
    assert table.filter(pl.col("calls_all_conditions") > 0)["cost_usd"].to_list() == [
        Decimal(0)] * table.filter(pl.col("calls_all_conditions") > 0).height
    assert table.height == calls.select("case", "lang", "variant", "mode").unique().height

    report = (series / "report.md").read_text(encoding="utf-8")
    assert "## Measure `cell-cost`" in report
    assert f"### cell_cost ({table.height} rows, the first {SHOWN_ROWS} shown)" in report
    # The grep of the doc's last step found the table's heading and its first rows.
    assert "| case | lang | variant | mode | calls_all_conditions | cost_usd |" in ran[-1].stdout
    page = parse((series / "report.html").read_text(encoding="utf-8"))
    [section] = [s for s in page.all("section", "measure")
                 if s.attrs["data-measure"] == "cell-cost"]
    assert len(section.one("table", "measure-table").all("tr")) == 1 + SHOWN_ROWS
