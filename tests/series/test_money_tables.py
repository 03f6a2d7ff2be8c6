"""Money in tables is exact: every `*_usd` column is a Decimal built from the journal's decimal
strings, never via float, so that table sums equal status.json and the journal to the last
digit, and the report shows them as plain exact decimals."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import run_cli
from support.reports import section_table
from support.series import calls_of, collect

import fragbench
from fragbench.budget.money import usd
from fragbench.errors import SeriesError
from fragbench.series.journal import chain
from fragbench.series.scan import SkippedSeries
from fragbench.testing.loopback import Server, http_error

# Over 5 s of tests in all (`make check` leaves it to `make test`: pyproject.toml's markers).
pytestmark = pytest.mark.slow

MONEY = pl.Decimal(38, 18)
CALL_MONEY = ("cost_usd", "reserved_usd", "counted_usd")
USAGE_MONEY = ("cost_usd", "counted_usd")
CELL = ("case", "lang", "variant", "mode")
USAGE_HEADING = "## Usage and cost per cell"


def journal_of(series_dir: Path) -> list[dict[str, Any]]:
    lines = (series_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def expected_cells(series_dir: Path) -> dict[tuple[str, ...], dict[str, Decimal | None]]:
    """Per cell, from the journal alone, in Decimal: the sum of the known costs (None when no
    cost is known) and what the budget counts (None when nothing was sent)."""
    plan = json.loads((series_dir / "plan.json").read_text(encoding="utf-8"))
    cell_of = {c["id"]: tuple(c[k] for k in CELL) for c in plan["schedule"]}
    records = journal_of(series_dir)
    reserved = {r["call_id"]: Decimal(r["reserved_usd"]) for r in records
                if r["type"] == "reserve"}
    outcomes = {r["call_id"]: r for r in records if r["type"] == "outcome"}
    cells: dict[tuple[str, ...], dict[str, Decimal | None]] = {
        cell: {"cost_usd": None, "counted_usd": None} for cell in cell_of.values()}
    for cid, amount in reserved.items():
        sums = cells[cell_of[cid]]
        out = outcomes.get(cid, {})
        recorded = out.get("counted_usd", out.get("cost_usd"))
        counted = Decimal(recorded) if recorded is not None else amount
        sums["counted_usd"] = (sums["counted_usd"] or Decimal(0)) + counted
        if out.get("cost_usd") is not None:
            sums["cost_usd"] = (sums["cost_usd"] or Decimal(0)) + Decimal(out["cost_usd"])
    return cells


def assert_money_exact(series_dir: Path) -> None:
    """calls.parquet, usage.parquet and report.md against the journal and status.json."""
    calls = calls_of(series_dir)
    for column in CALL_MONEY:
        assert calls.schema[column] == MONEY, column
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    spent = Decimal(status["spent_usd"])
    assert calls["counted_usd"].sum() == spent
    records = journal_of(series_dir)
    by_call = {r["call_id"]: r for r in records if r["type"] == "outcome"}
    for row in calls.to_dicts():
        out = by_call.get(row["call_id"], {})
        known = out.get("cost_usd")
        assert row["cost_usd"] == (Decimal(known) if known is not None else None), row
    if all(r.get("cost_usd") is not None for r in by_call.values()):
        assert calls["cost_usd"].sum() == spent

    usage = pl.read_parquet(series_dir / "usage.parquet")
    for column in USAGE_MONEY:
        assert usage.schema[column] == MONEY, column
    expected = expected_cells(series_dir)
    assert usage.height == len(expected)
    for row in usage.to_dicts():
        want = expected[tuple(row[k] for k in CELL)]
        for column in USAGE_MONEY:
            assert row[column] == want[column], (row, column)  # Decimal == Decimal: exact

    # The report shows the same amounts as plain exact decimals, null as —.
    report = (series_dir / "report.md").read_text(encoding="utf-8")
    shown = section_table(report, USAGE_HEADING)
    assert len(shown) == len(expected)
    for row in shown:
        want = expected[tuple(row[k] for k in CELL)]
        for column in USAGE_MONEY:
            amount = want[column]
            assert row[column] == ("—" if amount is None else usd(amount)), (row, column)


def test_a_paid_series_sums_to_the_spend_exactly(experiment: Path, server: Server) -> None:
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    assert_money_exact(series_dir)
    calls = calls_of(series_dir)
    assert calls["cost_usd"].null_count() == 0 and calls["cost_usd"].sum() > 0
    # Nothing in the report is a float's spelling of money.
    report = (series_dir / "report.md").read_text(encoding="utf-8")
    usage = report.split(USAGE_HEADING, 1)[1].split("\n## ", 1)[0]
    assert "e-" not in usage and "000000000000" not in usage


def test_a_stopped_series_counts_reservations_exactly(experiment: Path,
                                                      server: Server) -> None:
    # Call 8 fails: counted at its whole reservation (7 significant digits or more, beside
    # the known costs of its cell), and calls 9 to 72 are never sent (null, never zero).
    server.script[7] = http_error(500)
    result, series_dir = collect(experiment, server)
    assert result.returncode != 0
    assert len(server.requests) == 8
    assert_money_exact(series_dir)
    usage = pl.read_parquet(series_dir / "usage.parquet")
    assert usage.filter(pl.col("calls_sent") == 0)["counted_usd"].null_count() > 0
    assert usage.filter(pl.col("calls_cost_unknown") > 0).height == 1


def test_an_amount_finer_than_the_scale_is_refused_not_rounded(extractive: Path) -> None:
    journal = extractive / "journal.jsonl"
    original = journal.read_text(encoding="utf-8")
    for amount in ("0.0000000000000000001", "100000000000000000000"):
        # One outcome whose counted amount needs 19 decimals, or 21 integer digits.
        lines = original.splitlines()
        first = next(i for i, line in enumerate(lines) if '"type": "outcome"' in line)
        record = json.loads(lines[first])
        record["counted_usd"] = amount
        lines[first] = json.dumps(record, ensure_ascii=False)
        journal.write_bytes(chain(json.loads(line) for line in lines))  # hashes recomputed
        result = run_cli("measure", str(extractive))
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
        assert amount in result.stderr and record["call_id"] in result.stderr


def test_the_offline_series_keeps_exact_zeros(extractive: Path, experiment: Path,
                                              server: Server, tmp_path: Path) -> None:
    assert_money_exact(extractive)
    calls = calls_of(extractive)
    assert calls["cost_usd"].to_list() == [Decimal(0)] * 72
    assert calls["cost_usd"].sum() == Decimal(0)

    # `fragbench measure` rebuilds every table and the report byte for byte.
    before = {p.relative_to(extractive): p.read_bytes()
              for p in extractive.rglob("*") if p.suffix in (".parquet", ".md", ".json")}
    for path in extractive.glob("*.parquet"):
        if path.name not in ("facts.parquet", "retrieval.parquet", "questions.parquet"):
            path.unlink()
    rebuilt = run_cli("measure", str(extractive))
    assert rebuilt.returncode == 0, rebuilt.stderr
    after = {p.relative_to(extractive): p.read_bytes()
             for p in extractive.rglob("*") if p.suffix in (".parquet", ".md", ".json")}
    assert after == before

    # scan keeps the type across series; compare carries the exact costs of both sides.
    _, paid = collect(experiment, server)
    tables = fragbench.scan(extractive.parent)
    for name, columns in (("calls", CALL_MONEY), ("usage", USAGE_MONEY)):
        frame = tables[name].collect()
        assert frame["series"].n_unique() == 2
        for column in columns:
            assert frame.schema[column] == MONEY, (name, column)
    scanned = tables["calls"].filter(pl.col("series") == "openai").collect()
    assert scanned["cost_usd"].sum() == calls_of(paid)["cost_usd"].sum()

    for suffix in ("parquet", "csv", "jsonl"):
        out = tmp_path / f"cmp.{suffix}"
        result = run_cli("compare", str(extractive), str(paid), "--out", str(out))
        assert result.returncode == 0, result.stderr
    table = pl.read_parquet(tmp_path / "cmp.parquet")
    assert table.schema["cost_usd_a"] == MONEY and table.schema["cost_usd_b"] == MONEY
    assert table["cost_usd_a"].sum() == Decimal(0)
    assert table["cost_usd_b"].sum() == calls_of(paid)["cost_usd"].sum()
    lines = (tmp_path / "cmp.jsonl").read_text(encoding="utf-8").splitlines()
    own = {(r["case"], r["lang"], r["variant"], r["mode"], r["rep"]): r["cost_usd"]
           for r in calls_of(paid).to_dicts()}
    for line in lines:  # written as decimal strings, never through a float
        row = json.loads(line)
        key = (row["case"], row["lang"], row["variant"], row["mode"], row["rep"])
        assert Decimal(row["cost_usd_b"]) == own[key]


def test_scan_refuses_money_written_as_float(extractive: Path) -> None:
    # A table written before money was exact: scan refuses rather than fold every series
    # into floats, and says how to rebuild it.
    path = extractive / "calls.parquet"
    pl.read_parquet(path).with_columns(pl.col("cost_usd").cast(pl.Float64)).write_parquet(path)
    refused = r"calls\.parquet.*cost_usd.*fragbench measure"
    with pytest.raises(SeriesError, match=refused):
        fragbench.scan(extractive.parent, strict=True)
    # By default the series is named in a warning (the only one here: then its error too).
    with pytest.warns(SkippedSeries, match=refused), pytest.raises(SeriesError, match=refused):
        fragbench.scan(extractive.parent)
