"""A measure's tables are checked against what it declares (`Measure.tables`) before anything
is written: `fragbench measure` and `fragbench run` refuse, in one line naming the plugin, the
table, the column, the type found and the type promised, a money column that is not
Decimal(38, 18), a column or type other than declared, or a table not declared; `fragbench
export` refuses money that is not exact, as `fragbench.scan` does.

The measure is a real plugin distribution, found through its entry point (measure_plugin.py);
the CLI runs in process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, refreeze, run_cli
from support.measure_plugin import Install, cell_cost, installer

from fragbench.plugins import registry
from fragbench.testing import check_measure

DOCS = "docs/writing-a-measure.md"
PLUGIN = "measure 'cell-cost' (plugin fragbench-cell-cost 0.3)"


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    yield from installer(tmp_path, monkeypatch)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


SUMMARY_AT = "    def compute(self, data):"
SUMMARY = ("    def summary(self, tables):\n        return [('Cost per cell', {})]\n\n"
           + SUMMARY_AT)

BROKEN = [
    # (what is broken, the line as written -> as broken, what the refusal says)
    ("float money", {"money": 'pl.col("cost_usd").cast(pl.Float64)'},
     "table cell_cost: money column cost_usd is Float64, promised Decimal(38, 18)"),
    ("money declared as a float", {"replace": (('"cost_usd": "Decimal(38, 18)"',
                                                '"cost_usd": "Float64"'),)},
     "table cell_cost: money column cost_usd is declared Float64, not Decimal(38, 18)"),
    ("a type other than declared", {"replace": (('"calls_all_conditions": "Int32"',
                                                 '"calls_all_conditions": "Int64"'),)},
     "table cell_cost: column calls_all_conditions is Int32, promised Int64"),
    ("a declared column missing", {"replace": (('table.select(list(self.tables["cell_cost"]))',
                                                'table.drop("calls_all_conditions")'),)},
     "table cell_cost: column calls_all_conditions is missing, promised Int32"),
    ("a column not declared", {"replace": (('table.select(list(self.tables["cell_cost"]))',
                                            'table.select(*self.tables["cell_cost"], '
                                            'pl.lit(1, pl.Int32).alias("extra"))'),)},
     "table cell_cost: column extra (Int32) is not declared"),
    ("a table not declared", {"replace": (('return {"cell_cost": ',
                                           'return {"cell_costs": '),)},
     "returns a table 'cell_costs' it does not declare (it declares: cell_cost)"),
    ("no tables declared", {"replace": (("tables = {", "declared = {"),
                                        ('list(self.tables["cell_cost"])',
                                         'list(self.declared["cell_cost"])'))},
     "declares no tables; add `tables = "),
    # The core's own tables: a measure's `facts` would be written over the recorded one.
    *[(f"a table named {name}", {"table": name},
       f"declares a table {name!r}, a name fragbench's own tables use (calls, cases, "
       "questions, retrieval, facts): it would overwrite what the series recorded")
      for name in ("facts", "retrieval", "calls", "cases", "questions", "Facts")],
    # A column name is a report's table header: one line, no cell separator.
    *[(f"a column name with {what}", {"replace": (('"calls_all_conditions": "Int32"',
                                                   f'"calls{bad}all": "Int32"'),
                                                  ('.alias("calls_all_conditions")',
                                                   f'.alias("calls{bad}all")'))},
       f"declares table cell_cost with a column {shown}; a column name is 1 to 128 "
       "characters on one line, without '|' or control characters")
      for what, bad, shown in (("a pipe", "|", "'calls|all'"),
                               ("a line break", "\\n", "'calls\\nall'"),
                               ("a control character", "\\x1b", "'calls\\x1ball'"))],
    # What summary() gives the reports keeps the tables' rules.
    ("float money in the summary", {"replace": ((SUMMARY_AT, SUMMARY.format(
        'tables["cell_cost"].with_columns(pl.col("cost_usd").cast(pl.Float64))')),)},
     "summary() frame 'Cost per cell': money column cost_usd is Float64, promised "
     "Decimal(38, 18)"),
    ("a summary frame with no language", {"replace": ((SUMMARY_AT, SUMMARY.format(
        'tables["cell_cost"].group_by("case", maintain_order=True).agg(pl.len())')),)},
     "summary() frame 'Cost per cell' has no lang column; publish results per case and "
     "language"),
]


@pytest.mark.parametrize(("broken", "says"), [(b, s) for _, b, s in BROKEN],
                         ids=[what for what, _, _ in BROKEN])
def test_measure_refuses_a_table_that_breaks_its_declaration_and_writes_nothing(
        extractive: Path, install: Install, broken: dict, says: str) -> None:
    install("fragbench-cell-cost", cell_cost(kind="diagnostic", **broken))
    before = snapshot(extractive)
    result = run_cli("measure", str(extractive), "--diagnostic", "cell-cost")
    assert result.returncode == 4, result.stdout
    [line] = error_lines(result.stderr)
    assert PLUGIN in line and says in line and DOCS in line, line
    assert line.endswith("; nothing was written: fix or uninstall that plugin."), line
    assert snapshot(extractive) == before
    # The kit fails the same plugin in the same words: one check (measure_tables) for both.
    detail = line.split(PLUGIN, 1)[1].removeprefix(":").strip().removesuffix(
        "; nothing was written: fix or uninstall that plugin.")
    with pytest.raises(AssertionError) as failed:
        check_measure(registry().get("measure", "cell-cost"))
    assert detail in str(failed.value), (detail, str(failed.value))


def test_a_measure_that_keeps_its_declaration_is_written_as_declared(
        extractive: Path, install: Install) -> None:
    install("fragbench-cell-cost", cell_cost(kind="diagnostic"))
    result = run_cli("measure", str(extractive), "--diagnostic", "cell-cost")
    assert result.returncode == 0, result.stderr
    schema = pl.read_parquet_schema(extractive / "diagnostics" / "cell_cost.parquet")
    assert schema["cost_usd"] == pl.Decimal(38, 18)
    assert list(schema) == ["case", "lang", "variant", "mode", "calls_all_conditions",
                            "cost_usd"]


def test_run_refuses_a_listed_measure_before_anything_is_sent_or_written(
        experiment: Path, install: Install, tmp_path: Path) -> None:
    """A primary measure is listed in the config and frozen; one that writes float money is
    refused by `run` before the series folder exists (every measure is checked on the series
    as it stands before its first call)."""
    install("fragbench-cell-cost", cell_cost(
        money='pl.col("cost_usd").cast(pl.Float64)'))
    refreeze(experiment, '"completeness", "usage"]', '"completeness", "usage", "cell-cost"]')
    out = tmp_path / "outputs"
    result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert result.returncode == 4, result.stdout
    [line] = error_lines(result.stderr)
    assert PLUGIN in line and "money column cost_usd is Float64, promised Decimal(38, 18)" \
        in line, line
    assert not out.exists()


def test_export_refuses_money_that_is_not_exact(extractive: Path, tmp_path: Path) -> None:
    path = extractive / "usage.parquet"
    pl.read_parquet(path).with_columns(pl.col("counted_usd").cast(pl.Float64)).write_parquet(path)
    out = tmp_path / "export"
    result = run_cli("export", str(extractive), "--format", "csv", "--out", str(out))
    assert result.returncode == 4, result.stdout
    [line] = error_lines(result.stderr)
    assert f"{path}: money column counted_usd is Float64, not the exact Decimal(38, 18)" in line
    assert f"fragbench measure {extractive}" in line
    assert not out.exists() and not (extractive / "export").exists()


def test_a_summary_that_is_not_titled_frames_is_refused_before_anything_is_written(
        extractive: Path, install: Install) -> None:
    install("fragbench-cell-cost", cell_cost(kind="diagnostic", replace=((
        "    def compute(self, data):",
        "    def summary(self, tables):\n        return '<b>cost</b>'\n\n"
        "    def compute(self, data):"),)))
    before = {p: p.read_bytes() for p in extractive.rglob("*") if p.is_file()}
    result = run_cli("measure", str(extractive), "--diagnostic", "cell-cost")
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "measure 'cell-cost' (plugin fragbench-cell-cost 0.3): summary() returned str" in line
    assert {p: p.read_bytes() for p in extractive.rglob("*") if p.is_file()} == before


def test_a_type_is_written_one_way_in_every_table_declaration() -> None:
    """docs/tables.md's types, the shared column types (`IDS`, `PASSAGE_TYPES`) and every
    measure's `tables` are type names (`List(String)`), never Polars types: one name, one
    meaning, wherever it is imported from."""
    from fragbench import columns, schemas

    assert schemas.IDS == columns.IDS == "List(String)"
    assert schemas.PASSAGE_TYPES == columns.PASSAGE_TYPES
    loose = [(table, column, dtype) for table, types in schemas.TYPES.items()
             for column, dtype in types.items() if not isinstance(dtype, str)]
    assert loose == []
    assert schemas.TYPES["retrieval"]["fact_ids"] == "List(String)"
    assert schemas.TYPES["calls"]["cost_usd"] == "Decimal(38, 18)"
