"""`fragbench run` end to end offline, with the extractive (non-model) baseline."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, refreeze, run_cli
from support.measure_plugin import Install, cell_cost, installer
from support.suite import ROOT

from fragbench.errors import EXIT_STOPPED
from fragbench.plugins import registry

# Over 5 s of tests in all (`make check` leaves it to `make test`: pyproject.toml's markers).
pytestmark = pytest.mark.slow


@pytest.fixture
def series(extractive: Path) -> Path:
    return extractive


def test_series_holds_every_table(series: Path) -> None:
    for name in ("plan.json", "series.json", "status.json", "journal.jsonl", "facts.parquet",
                 "retrieval.parquet", "availability.parquet", "calls.parquet"):
        assert (series / name).exists(), name
    info = json.loads((series / "series.json").read_text(encoding="utf-8"))
    assert info["is_model"] is False and info["backend"] == "extractive"
    assert info["budget"] is None
    status = json.loads((series / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "complete"


def test_calls_table_answers_with_supplied_sentences(series: Path) -> None:
    calls = pl.read_parquet(series / "calls.parquet")
    assert calls.height == 72
    assert calls["status"].unique().to_list() == ["completed"]
    assert calls["is_model"].unique().to_list() == [False]
    assert calls["cost_usd"].sum() == 0
    facts = pl.read_parquet(series / "facts.parquet")
    sentence = {(r["case"], r["lang"], r["fact_id"]): r["text"] for r in facts.to_dicts()}
    for row in calls.to_dicts():
        assert row["parsed"] is True
        for citation in row["citations"]:
            assert citation["id"] in row["supplied_ids"]
            assert citation["extract"] == sentence[(row["case"], row["lang"], citation["id"])]


def test_sensitivity_matrix_and_availability_publish_all_four_settings(series: Path) -> None:
    retrieval = pl.read_parquet(series / "retrieval.parquet")
    settings = retrieval.select("chunk_size", "top_k").unique().sort("chunk_size", "top_k")
    assert settings.rows() == [(2, 1), (2, 2), (3, 1), (3, 2)]
    availability = pl.read_parquet(series / "availability.parquet")
    retrieval_rows = availability.filter(pl.col("mode") == "retrieval")
    assert retrieval_rows.height == 3 * 2 * 2 * 4
    assert availability.filter(pl.col("mode") == "full")["n_conditions_supplied"].to_list() == \
        [4] * 12
    for row in retrieval_rows.to_dicts():
        assert row["n_conditions"] == 4
        assert set(row["conditions_supplied"]) | set(row["conditions_missing"]) == set(
            row["conditions"])
        assert sorted(row["conditions_supplied"] + row["others_supplied"]) == sorted(
            row["supplied_ids"])
        assert len(row["supplied_ids"]) <= row["chunk_size"] * row["top_k"]


def test_a_recorded_series_is_never_overwritten(series: Path, experiment: Path) -> None:
    before = {p: p.read_bytes() for p in series.rglob("*") if p.is_file()}
    result = run_cli("run", str(experiment), "--series", "extractive",
                     "--out", str(series.parent.parent))
    assert result.returncode != 0
    assert "already recorded" in result.stderr and "another --series" in result.stderr
    assert {p: p.read_bytes() for p in series.rglob("*") if p.is_file()} == before


def test_measure_rebuilds_the_tables_byte_for_byte(series: Path) -> None:
    before = {p.name: p.read_bytes() for p in series.glob("*.parquet")}
    report = (series / "report.md").read_text(encoding="utf-8")
    for name in ("calls.parquet", "availability.parquet", "citations.parquet"):
        (series / name).unlink()
    result = run_cli("measure", str(series))
    assert result.returncode == 0, result.stderr
    after = {p.name: p.read_bytes() for p in series.glob("*.parquet")}
    assert after == before
    assert (series / "report.md").read_text(encoding="utf-8") == report


def test_every_table_is_documented(series: Path) -> None:
    from fragbench.schemas import TABLES, render

    assert (ROOT / "docs" / "tables.md").read_text(
        encoding="utf-8") == render(), "run: python -m fragbench.schemas > docs/tables.md"
    documented = {name: set(schema) for name, _, schema in TABLES}
    for path in series.glob("*.parquet"):
        columns = set(pl.read_parquet_schema(path))
        assert columns == documented[path.stem], path.name


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    yield from installer(tmp_path, monkeypatch)


ANSWERED = '(data.calls["status"] == "completed").any()'
FAILS_WHEN_ANSWERED = [
    # (how, the line added at the start of compute, what the error line says)
    ("raises", f"        if {ANSWERED}:\n            raise RuntimeError('no answer expected')\n",
     "measure 'cell-cost' (plugin fragbench-cell-cost 0.3) failed: RuntimeError: no answer "
     "expected"),
    ("float money", f"        if {ANSWERED}:\n            return {{'cell_cost': pl.DataFrame("
                    "{'case': ['x'], 'lang': ['en'], 'cost_usd': [0.1]})}\n",
     "measure 'cell-cost' (plugin fragbench-cell-cost 0.3): table cell_cost: money column "
     "cost_usd is Float64, promised Decimal(38, 18)"),
]


@pytest.mark.parametrize(("line", "says"), [(x, s) for _, x, s in FAILS_WHEN_ANSWERED],
                         ids=[how for how, _, _ in FAILS_WHEN_ANSWERED])
def test_a_measure_that_fails_only_on_answered_calls_leaves_the_series_recorded(
        experiment: Path, install: Install, tmp_path: Path, line: str, says: str) -> None:
    """The check before the first call passes (no call is answered yet); after collecting, the
    measure fails. The series stands: the spend is said, status.json is written, the line
    names the measure and says what to do, and `fragbench measure` derives the tables once
    the measure is fixed."""
    start = "    def compute(self, data):\n"
    install("fragbench-cell-cost", cell_cost(replace=((start, start + line),)))
    refreeze(experiment, '"completeness", "usage"]', '"completeness", "usage", "cell-cost"]')
    out = tmp_path / "outputs"
    result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    series_dir = out / "protocol-1.0" / "extractive"
    assert result.returncode == EXIT_STOPPED, result.stderr
    assert "72 of 72 calls sent; spent 0 USD" in result.stdout
    [error] = error_lines(result.stderr)
    assert says in error, error
    assert "the series' calls are recorded in its journal" in error
    assert f"fix the measure, then run `fragbench measure {series_dir}`" in error
    assert "nothing was written" not in error
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "complete" and status["spent_usd"] == "0"
    journal = (series_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum(json.loads(r)["type"] == "outcome" for r in journal) == 72
    assert not (series_dir / "measures.json").exists()

    # Fixed (the same code, without the line), `measure` derives what `run` could not.
    (tmp_path / "site" / "fragbench_cell_cost.py").write_text(cell_cost(), encoding="utf-8")
    sys.modules.pop("fragbench_cell_cost")
    importlib.invalidate_caches()
    registry.cache_clear()
    rebuilt = run_cli("measure", str(series_dir))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (series_dir / "cell_cost.parquet").is_file() and (series_dir / "report.md").is_file()
