"""The report, the measures as plugins, and comparing series with Polars."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from matplotlib import image
from support.cli import run_cli, run_process
from support.plugins import fake_distribution, with_path
from support.reports import aggregates, page_data, section_table
from support.series import loopback_series

import fragbench
from fragbench.testing.loopback import Server, http_error

pytestmark = pytest.mark.slow


def test_report_figures_render(extractive: Path) -> None:
    report = (extractive / "report.md").read_text(encoding="utf-8")
    for name in ("availability", "citations"):
        assert f"](figures/{name}.png)" in report
        pixels = image.imread(extractive / "figures" / f"{name}.png")
        assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
        assert np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0).shape[0] > 20
        svg = (extractive / "figures" / f"{name}.svg").read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_report_tables_match_the_parquet_files(extractive: Path) -> None:
    report = (extractive / "report.md").read_text(encoding="utf-8")
    assert "Non-model baseline" in report and "## Limits" in report
    availability = pl.read_parquet(extractive / "availability.parquet")
    rows = section_table(report, "## Retrieval")
    assert len(rows) == 12
    for row in rows:
        for setting, value in row.items():
            if setting in ("case", "lang", "variant"):
                continue
            match = availability.filter(pl.col("case") == row["case"],
                                        pl.col("lang") == row["lang"],
                                        pl.col("variant") == row["variant"])
            if setting == "full":
                match = match.filter(pl.col("mode") == "full")
            else:
                size, k = setting.split()[0].split("/")
                match = match.filter(pl.col("chunk_size") == int(size), pl.col("top_k") == int(k))
            record = match.to_dicts()[0]
            assert value.startswith(f"{record['n_conditions_supplied']}/{record['n_conditions']}")
            assert value.split(": ")[-1].split() == record["conditions_supplied"] or \
                record["n_conditions_supplied"] == 0
    per_call = {r["call_id"]: r for r in
                pl.read_parquet(extractive / "citations_per_call.parquet").to_dicts()}
    rows = section_table(report, "## Citations that hold word for word")
    assert len(rows) == 72
    for row in rows:
        record = per_call[row["call_id"]]
        assert int(row["n_valid"]) == record["n_valid"]
        assert int(row["n_invalid"]) == record["n_invalid"]
        assert int(row["valid"]) == record["n_valid"]
    # Every sent call's raw answer moved to report.html (escaped), beside its call, inside its
    # raw response; report.md links to it (tests/report/test_report_html.py checks that page in
    # full).
    assert "[report.html](report.html)" in report and '{"answer"' not in report
    calls = pl.read_parquet(extractive / "calls.parquet")
    data = {c["id"]: c for c in page_data(extractive / "report.html")["calls"]}  # its data
    for row in calls.to_dicts():
        assert data[row["call_id"]]["status"] == "completed"
        assert data[row["call_id"]]["raw_response"] == row["raw_response"]
        assert json.dumps(row["text"], ensure_ascii=False) in row["raw_response"]
    # No global score anywhere: every number shown belongs to one cell, or is a count of calls,
    # accounting or an identifier (the rule: test_report_guard.py).
    assert aggregates(extractive) == []


def test_primary_and_diagnostic_measures_are_kept_apart(extractive: Path,
                                                        tmp_path: Path) -> None:
    site = tmp_path / "site"
    fake_distribution(site, "fragbench-checker", "fragbench_checker", (
        "import polars as pl\n"
        "from fragbench.hookspecs import hookimpl\n"
        "class Checker:\n"
        "    name = 'checker-0.1'\n"
        "    api_version = '1.0'\n"
        "    tables = {'checker_findings': {'call_id': 'String', 'answer_chars': 'UInt32'}}\n"
        "    kind = 'diagnostic'\n"
        "    def compute(self, data):\n"
        "        return {'checker_findings': data.calls.select('call_id', pl.col('answer')"
        ".str.len_chars().alias('answer_chars'))}\n"
        "@hookimpl\n"
        "def register_measures(register):\n"
        "    register(Checker())\n"))
    result = run_process("measure", str(extractive), "--diagnostic", "checker-0.1",
                         env=with_path(site))
    assert result.returncode == 0, result.stderr
    assert (extractive / "diagnostics" / "checker_findings.parquet").exists()
    assert not (extractive / "checker_findings.parquet").exists()
    manifest = json.loads((extractive / "measures.json").read_text(encoding="utf-8"))
    kinds = {e["table"]: e["kind"] for e in manifest}
    assert kinds["checker_findings"] == "diagnostic" and kinds["citations"] == "primary"
    report = (extractive / "report.md").read_text(encoding="utf-8")
    primary, secondary = report.split("## Secondary diagnostics")
    assert aggregates(extractive) == []  # the diagnostic's table and heading too
    assert "checker_findings" not in primary and "checker_findings" in secondary
    refused = run_cli("measure", str(extractive), "--diagnostic", "citations")
    assert refused.returncode != 0 and "pre-registered" in refused.stderr


def test_scan_loads_every_series_with_a_series_column(extractive: Path, experiment: Path,
                                                      server: Server) -> None:
    loopback_series(experiment, server, "openai")
    tables = fragbench.scan(extractive.parent)
    calls = tables["calls"].collect()
    assert isinstance(tables["calls"], pl.LazyFrame)
    assert sorted(calls["series"].unique().to_list()) == ["extractive", "openai"]
    assert calls.height == 144
    one = fragbench.scan(extractive)["citations"].collect()
    assert one["series"].unique().to_list() == ["extractive"]


def test_compare_side_by_side(extractive: Path, experiment: Path, server: Server,
                              tmp_path: Path) -> None:
    openai = loopback_series(experiment, server, "openai")
    assert aggregates(openai) == []  # a billed series: spend, budget, usage per cell
    out = tmp_path / "cmp.parquet"
    result = run_cli("compare", str(extractive), str(openai), "--out", str(out))
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("A: extractive") and "NON-MODEL BASELINE" in first
    table = pl.read_parquet(out)
    assert table.height == 72 and table["compared"].all()
    own = pl.read_parquet(openai / "citations_per_call.parquet")
    merged = table.join(own.select("case", "lang", "variant", "mode", "rep", "n_valid"),
                        on=["case", "lang", "variant", "mode", "rep"])
    assert merged["n_valid_b"].to_list() == merged["n_valid"].to_list()


def test_compare_warns_first_about_a_stopped_series(extractive: Path, experiment: Path,
                                                    server: Server, tmp_path: Path) -> None:
    server.script[9] = http_error(500)
    stopped = loopback_series(experiment, server, "openai-stopped")
    assert aggregates(stopped) == []  # the stop, the failed call, the calls not sent
    out = tmp_path / "cmp.csv"
    result = run_cli("compare", str(extractive), str(stopped), "--out", str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("WARNING: series B, openai-stopped, is stopped at call 10")
    assert "63 of 72 cells are not compared" in lines[1]  # 62 not sent, 1 failed
    table = pl.read_csv(out)
    assert "warning" not in table.columns  # said once, beside the table, not on every row
    about = json.loads(out.with_name("cmp.csv.json").read_text(encoding="utf-8"))
    assert about["warnings"] == [ln for ln in lines if ln.startswith("WARNING: ")]
    assert [(s["side"], s["series"], s["state"]) for s in about["sides"]] == [
        ("A", "extractive", "complete"), ("B", "openai-stopped", "stopped")]
    assert about["counts"]["not_compared"] == 63
    assert table.filter(pl.col("compared")).height == 9
    not_compared = table.filter(~pl.col("compared"))
    assert not_compared["n_valid_b"].null_count() == 63
    assert set(not_compared["note"].to_list()) == {
        "not compared: A completed, B not_sent", "not compared: A completed, B failed"}
