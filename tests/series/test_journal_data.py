"""A journal is data (issue 14): checked when read, like the ledger, and never able to break a
table or a rebuild with the text it holds.

- a hand-written amount, status, type, call or order is one error naming the file and the line,
  and nothing is rebuilt from it (status.json stays as it was);
- text that is not valid Unicode (a lone surrogate) is kept, escaped, in every table;
- a body received whose outcome was never written is shown; a stop of reason `interrupted`
  makes the series `interrupted`;
- `fragbench.scan` over a folder skips an unreadable series with a warning naming it;
- a failed status.json write leaves no temporary file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.processes import file_size_limit

import fragbench
from fragbench.errors import EXIT_REFUSED, EXIT_STOPPED, SeriesError
from fragbench.series.journal import CHAIN_FIELDS, FORMAT_FIELD, chain, read_journal
from fragbench.series.scan import SkippedSeries

AT = "2026-01-01T00:00:00.000+00:00"
BASE: list[dict[str, Any]] = [
    {"at": AT, "type": "header", "series": "s", "calls": 2},
    {"at": AT, "type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"},
    {"at": AT, "type": "outcome", "call_id": "a", "seq": 1, "status": "completed",
     "cost_usd": "0.02", "counted_usd": "0.02", "usage": {"input_tokens": 3},
     "http_status": None, "text": "t", "model": "m"},
    {"at": AT, "type": "reserve", "call_id": "b", "seq": 2, "reserved_usd": "0.08"},
    {"at": AT, "type": "outcome", "call_id": "b", "seq": 2, "status": "failed",
     "cost_usd": None, "counted_usd": "0.08"},
    {"at": AT, "type": "stop", "reason": "technical_failure", "detail": "d", "call_id": "b",
     "seq": 2},
]


def edited(line: int, **changes: Any) -> list[Any]:
    """BASE with record `line` (from 1) changed; a value of `...` drops the field."""
    records = [dict(r) for r in BASE]
    record = records[line - 1]
    for key, value in changes.items():
        if value is ...:
            record.pop(key, None)
        else:
            record[key] = value
    return records


def write(path: Path, records: list[Any]) -> None:
    """The records as a journal, chained (a text line kept as it is): what a later check
    refuses is then what the line says, not its hash."""
    path.write_bytes(chain(records))


DEEP = "[" * 100_000 + "]" * 100_000
BAD: dict[str, tuple[list[Any], int, str]] = {
    "negative amount": (edited(3, counted_usd="-5"), 3, "counted_usd '-5'"),
    "amount as a number": (edited(3, counted_usd=-5), 3, "counted_usd -5"),
    "amount as a float": (edited(3, cost_usd=0.02), 3, "cost_usd 0.02"),
    "amount with an exponent": (edited(3, counted_usd="1e3"), 3, "counted_usd '1e3'"),
    "amount not finite": (edited(3, counted_usd="NaN"), 3, "counted_usd 'NaN'"),
    "amount finer than the scale": (edited(3, counted_usd="0." + "0" * 18 + "1"), 3,
                                    "at most 18 decimals"),
    "amount beyond the precision": (edited(2, reserved_usd="1" + "0" * 20), 2,
                                    "20 integer digits"),
    "reservation without amount": (edited(2, reserved_usd=...), 2, "reserved_usd None"),
    "reservation null": (edited(4, reserved_usd=None), 4, "reserved_usd None"),
    "amount with a space": (edited(2, reserved_usd=" 0.09"), 2, "reserved_usd ' 0.09'"),
    "status not text": (edited(3, status=5), 3, "has status 5"),
    "status missing": (edited(3, status=...), 3, "has status None"),
    "status too long": (edited(3, status="x" * 101), 3, "at most 100 characters"),
    "unknown type": (edited(3, type="bonus"), 3, "unknown type 'bonus'"),
    "no type": (edited(3, type=...), 3, "unknown type None"),
    "no time": (edited(2, at=...), 2, "has `at` None"),
    "unknown stop reason": (edited(6, reason="bored"), 6, "stop reason 'bored'"),
    "stop without its call": (edited(6, call_id=None, seq=None), 6, "call_id None"),
    "position zero": (edited(2, seq=0), 2, "has seq 0"),
    "position as text": (edited(2, seq="1"), 2, "has seq '1'"),
    "position as a bool": (edited(2, seq=True), 2, "has seq True"),
    "call ID not text": (edited(2, call_id=5), 2, "has call_id 5"),
    "outcome off its reservation's position": (edited(3, seq=2), 3, "reservation has 1"),
    "usage not counts": (edited(3, usage={"input_tokens": "3"}), 3, "has usage"),
    "http status out of range": (edited(3, http_status=70000), 3, "http_status 70000"),
    "text not text": (edited(3, text=["t"]), 3, "has text ['t']"),
    "redacted not a flag": (edited(3, redacted="yes"), 3, "`redacted`"),
    "outcome before its reservation": ([BASE[0], BASE[2], BASE[1], *BASE[3:]], 2,
                                       "no reservation before it"),
    "received after the outcome": ([*BASE[:3], {**BASE[2], "type": "received"}, *BASE[3:]], 4,
                                   "after the call's outcome"),
    "a call reserved twice": ([*BASE[:4], BASE[3], *BASE[4:]], 5,
                              "reserves the call a second time"),
    "two outcomes": ([*BASE[:5], BASE[4], BASE[5]], 6, "after the call's outcome"),
    "a call after the stop": ([*BASE, {**BASE[1], "call_id": "c", "seq": 3}], 7,
                              "after the series' stop record (line 6)"),
    "a second stop": ([*BASE, {**BASE[5], "type": "end"}], 7, "after the series' stop record"),
    "a late header": ([*BASE[:2], BASE[0], *BASE[2:]], 3, "header after"),
    "not an object": ([*BASE[:2], "[1, 2]", *BASE[2:]], 3, "is not a journal record"),
    "nested deeper than a record": ([*BASE[:2], '{"at": "t", "type": "end", "x": '
                                     + "[" * 40 + "]" * 40 + "}", *BASE[2:]], 3,
                                     "is not a journal record"),
    "nested beyond any record": ([*BASE[:2], '{"at": "t", "type": "end", "x": ' + DEEP + "}",
                                  *BASE[2:]], 3, "is not a journal record"),
    "a non-finite number": ([*BASE[:2], '{"at": "t", "type": "end", "x": NaN}', *BASE[2:]], 3,
                            "is not a journal record"),
}


@pytest.mark.parametrize("name", BAD)
def test_a_bad_line_is_one_error_naming_the_file_and_line(tmp_path: Path, name: str) -> None:
    records, line, what = BAD[name]
    path = tmp_path / "journal.jsonl"
    write(path, records)
    with pytest.raises(SeriesError) as caught:
        read_journal(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: line {line} "), message
    assert what in message, message
    assert "restore it from your backup" in message and "\n" not in message


def test_the_base_journal_is_read_and_checked_against_its_plan(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write(path, BASE)
    assert len(read_journal(path, {"a": 1, "b": 2})) == len(BASE)
    with pytest.raises(SeriesError, match=r"line 2 \(call a\) names a call the frozen plan "
                                          "does not have"):
        read_journal(path, {"b": 2})
    with pytest.raises(SeriesError, match=r"line 4 \(call b\) has seq 2; the frozen plan puts "
                                          "this call at 7"):
        read_journal(path, {"a": 1, "b": 7})


# The real series, through the CLI ----------------------------------------------------------


def journal_lines(series_dir: Path) -> list[str]:
    return (series_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()


def rewrite(series_dir: Path, lines: list[str]) -> None:
    """The journal as `lines` (edited by hand), chained again, as by someone who recomputes
    every hash: the checks under test are then those after the chain's."""
    (series_dir / "journal.jsonl").write_bytes(chain(json.loads(line) for line in lines))


def rewrite_unchained(series_dir: Path, lines: list[str]) -> None:
    """The journal as `lines` with no chain fields, as a fragbench before the chain wrote it
    (JSON escapes for what is not ASCII), and series.json without the chaining fragbench's
    `"journal": "chained"` (in the header too), which would refuse it."""
    records = [{k: v for k, v in json.loads(line).items()
                if k not in (*CHAIN_FIELDS, FORMAT_FIELD)} for line in lines]
    (series_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records),
                                              encoding="utf-8")
    info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
    info.pop(FORMAT_FIELD, None)
    (series_dir / "series.json").write_text(json.dumps(info), encoding="utf-8")


def first_outcome(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if '"type": "outcome"' in line)


def test_a_negative_spend_never_reaches_status_json(extractive: Path) -> None:
    """Issue 14, item 13: `counted_usd: -5` written by hand is refused, naming the file and
    the line, before anything is rebuilt."""
    lines = journal_lines(extractive)
    at = first_outcome(lines)
    record = json.loads(lines[at])
    record["counted_usd"] = "-5"
    lines[at] = json.dumps(record, ensure_ascii=False)
    rewrite(extractive, lines)
    status = (extractive / "status.json").read_bytes()
    for command in ("measure", "report"):
        result = run_cli(command, str(extractive))
        assert result.returncode == EXIT_REFUSED, result.stderr
        (line,) = error_lines(result.stderr)
        assert f"journal.jsonl: line {at + 1} (call {record['call_id']}) has counted_usd " \
               "'-5'" in line, line
        assert "restore it from your backup" in line
    assert (extractive / "status.json").read_bytes() == status


def test_a_call_the_plan_does_not_have_is_refused(extractive: Path) -> None:
    """The journal is checked against the series' frozen plan: a call it does not schedule,
    or at another position, would be counted in status.json and shown nowhere."""
    lines = journal_lines(extractive)
    reserve = next(i for i, line in enumerate(lines) if '"type": "reserve"' in line)
    for change, what in (({"call_id": "bonus-call"}, "names a call the frozen plan does not "
                          "have"), ({"seq": 99}, "has seq 99; the frozen plan puts this call "
                                    "at 1")):
        edited_lines = list(lines)
        edited_lines[reserve] = json.dumps({**json.loads(lines[reserve]), **change})
        rewrite(extractive, edited_lines)
        result = run_cli("measure", str(extractive))
        assert result.returncode == EXIT_REFUSED
        (line,) = error_lines(result.stderr)
        assert f"journal.jsonl: line {reserve + 1} " in line and what in line, line


SURROGATE = "\ud83d"
ESCAPED = "\\ud83d"


def test_lone_surrogates_are_kept_escaped_and_every_table_is_rebuilt(extractive: Path) -> None:
    """Issue 14, item 3 (tables): an answer, a raw body, a refusal, an error and a model that
    hold a lone surrogate, in a journal written before the journal escaped them (JSON `\\ud83d`
    escapes): `fragbench measure` rebuilds every table and the report; the text is there,
    escaped."""
    lines = journal_lines(extractive)
    at = first_outcome(lines)
    record = json.loads(lines[at])
    answer = json.loads(record["text"])
    answer["answer"] = f"before {SURROGATE} after"
    record["text"] = json.dumps(answer, ensure_ascii=False)
    record["raw"] = f'{{"output": "{SURROGATE}"}}'
    record["refusal"] = f"no {SURROGATE}"
    record["error"] = f"err {SURROGATE}"
    record["model"] = f"extractive-baseline{SURROGATE}"
    lines[at] = json.dumps(record)
    # A stop whose detail holds one too (status.json carries the stop).
    end = next(i for i, line in enumerate(lines) if '"type": "end"' in line)
    lines[end] = json.dumps({"at": record["at"], "type": "stop", "reason": "technical_failure",
                             "detail": f"why {SURROGATE}", "call_id": record["call_id"],
                             "seq": record["seq"]})
    rewrite_unchained(extractive, lines)  # as the old journal wrote it: escapes, no chain
    # A hand-edited series.json too (its label is in status.json and the report).
    info = json.loads((extractive / "series.json").read_text(encoding="utf-8"))
    info["label"] = f"label {SURROGATE}"
    (extractive / "series.json").write_text(json.dumps(info), encoding="utf-8")
    for path in extractive.glob("*.parquet"):
        if path.name not in ("facts.parquet", "retrieval.parquet"):
            path.unlink()
    (extractive / "report.md").unlink()
    (extractive / "report.html").unlink()

    result = run_cli("measure", str(extractive))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((extractive / "measures.json").read_text(encoding="utf-8"))
    for entry in manifest:
        pl.read_parquet(extractive / entry["path"])  # every table is there and readable
    calls = pl.read_parquet(extractive / "calls.parquet")
    row = calls.filter(pl.col("call_id") == record["call_id"]).row(0, named=True)
    assert row["answer"] == f"before {ESCAPED} after"
    assert f"before {ESCAPED} after" in row["text"] and row["parsed"] is True
    assert row["raw_response"] == f'{{"output": "{ESCAPED}"}}'
    assert row["refusal"] == f"no {ESCAPED}" and row["error"] == f"err {ESCAPED}"
    assert row["model"] == f"extractive-baseline{ESCAPED}"
    assert row["stop_detail"] == f"why {ESCAPED}"
    status = json.loads((extractive / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "stopped" and status["stop"]["detail"] == f"why {ESCAPED}"
    assert status["label"] == f"label {ESCAPED}"
    assert ESCAPED in (extractive / "report.md").read_text(encoding="utf-8")
    assert (extractive / "report.html").is_file()


def test_an_answer_nested_too_deep_or_with_a_huge_number_is_unparsed(extractive: Path
                                                                     ) -> None:
    """A model's text that the JSON parser cannot take (nesting past the interpreter's limit,
    a number of 5000 digits) is an unparsed answer, not a table that cannot be built."""
    lines = journal_lines(extractive)
    at = [i for i, line in enumerate(lines) if '"type": "outcome"' in line][:2]
    texts = ["[" * 100_000 + "]" * 100_000, '{"answer": ' + "1" * 5000 + "}"]
    ids = []
    for i, text in zip(at, texts, strict=True):
        record = json.loads(lines[i])
        record["text"] = text
        lines[i] = json.dumps(record)
        ids.append(record["call_id"])
    rewrite(extractive, lines)
    result = run_cli("measure", str(extractive))
    assert result.returncode == 0, result.stderr
    calls = pl.read_parquet(extractive / "calls.parquet").filter(pl.col("call_id").is_in(ids))
    assert calls["parsed"].to_list() == [False, False]
    assert all(e.startswith("not JSON") for e in calls["parse_error"].to_list())


def test_a_body_received_whose_outcome_was_never_written_is_shown(extractive: Path) -> None:
    """A crash after the body arrived, before its outcome: the call is interrupted, counted
    at its reservation, and what came back is in raw_response with its HTTP status."""
    lines = journal_lines(extractive)
    last = max(i for i, line in enumerate(lines) if '"type": "outcome"' in line)
    record = json.loads(lines[last])
    received = {"at": record["at"], "type": "received", "call_id": record["call_id"],
                "seq": record["seq"], "http_status": 200, "raw": '{"paid": "for"}'}
    rewrite(extractive, [*lines[:last], json.dumps(received)])  # no outcome, no end
    result = run_cli("measure", str(extractive))
    assert result.returncode == 0, result.stderr
    calls = pl.read_parquet(extractive / "calls.parquet")
    row = calls.filter(pl.col("call_id") == record["call_id"]).row(0, named=True)
    assert row["status"] == "interrupted" and row["raw_response"] == '{"paid": "for"}'
    assert row["http_status"] == 200 and row["counted_usd"] == row["reserved_usd"]
    assert row["text"] is None and row["parsed"] is None
    status = json.loads((extractive / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "interrupted" and status["stop"] is None


def test_a_stop_of_reason_interrupted_makes_the_series_interrupted(extractive: Path) -> None:
    lines = journal_lines(extractive)
    end = next(i for i, line in enumerate(lines) if '"type": "end"' in line)
    last = json.loads(lines[end - 1])
    lines[end] = json.dumps({"at": last["at"], "type": "stop", "reason": "interrupted",
                             "detail": "Ctrl-C: the call in flight was recorded",
                             "call_id": last["call_id"], "seq": last["seq"]})
    rewrite(extractive, lines)
    result = run_cli("measure", str(extractive))
    assert result.returncode == 0, result.stderr
    status = json.loads((extractive / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "interrupted" and status["stop"]["reason"] == "interrupted"
    calls = pl.read_parquet(extractive / "calls.parquet")
    assert calls.filter(pl.col("stop_reason") == "interrupted")["call_id"].to_list() == \
        [last["call_id"]]
    series = fragbench.scan(extractive)["series"].collect()
    assert series.select("state", "series_stop_reason").row(0) == ("interrupted", "interrupted")


# scan over a folder ------------------------------------------------------------------------


def test_scan_skips_an_unreadable_series_with_a_warning(extractive: Path) -> None:
    """Issue 14: one unreadable series no longer hides every other one; strict=True raises."""
    folder = extractive.parent
    broken = folder / "broken"
    broken.mkdir()
    for name in ("series.json", "status.json", "measures.json"):
        (broken / name).write_bytes((extractive / name).read_bytes())
    # Its calls table is gone: a reader cannot scan it.
    with pytest.warns(SkippedSeries) as caught:
        tables = fragbench.scan(folder)
    (warning,) = caught
    assert str(broken) in str(warning.message) and "calls.parquet" in str(warning.message)
    assert tables["calls"].collect()["series"].unique().to_list() == ["extractive"]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict: the error itself, no warning first
        with pytest.raises(SeriesError, match=str(broken)):
            fragbench.scan(folder, strict=True)
        with pytest.raises(SeriesError, match=str(broken)):  # a series named directly
            fragbench.scan(broken)

    # Nothing readable at all: the first series' own error, after a warning for each.
    (extractive / "status.json").unlink()
    with pytest.warns(SkippedSeries) as caught, pytest.raises(SeriesError, match=str(broken)):
        fragbench.scan(folder)
    assert len(caught) == 2 and "status.json" in str(caught[1].message)


# A full disk -------------------------------------------------------------------------------


def test_a_failed_status_write_leaves_no_temporary_file(extractive: Path) -> None:
    """Files may not grow past 100 bytes: status.json (the first write of `measure`) fails;
    the old one stays, no status.json.tmp, and the error names the file."""
    before = (extractive / "status.json").read_bytes()
    with file_size_limit(100):
        result = run_cli("measure", str(extractive))
    assert result.returncode == EXIT_REFUSED
    (line,) = error_lines(result.stderr)
    assert f"{extractive / 'status.json'}: File too large" in line, line
    assert not list(extractive.glob("*.tmp"))
    assert (extractive / "status.json").read_bytes() == before


def test_a_full_disk_mid_run_says_short_write_once(experiment: Path, workspace: Path) -> None:
    """The journal crosses a 60 kB file limit mid-run (as on a full disk): the series stops
    with one line naming the journal and saying why once."""
    out = workspace / "outputs"
    with file_size_limit(60_000):
        result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert result.returncode == EXIT_STOPPED
    (stop,) = [line for line in error_lines(result.stderr) if "series stopped" in line]
    assert "cannot_record" in stop and stop.count("short write") == 1, stop
    assert stop.count("journal.jsonl") == 1, stop
