"""The journal is tamper-evident (issue 24, item 7): each line chained to the one before
(`prev`) and sealed by the hash of its own text (`sha256`), checked on every read.

- an edited status or token count, a deleted line, an inserted copy of a line and two lines
  swapped are each refused, naming the file and the first bad line: by `read_journal`, and by
  `fragbench measure` (exit 4, one line, calls.parquet and status.json left as they were);
- a torn last line is never read, even when it parses; the repair that closes it chains to the
  last whole line and names the torn bytes, and an edit of either is refused;
- a journal written before the chain (no record carries it) is read, with a note; a journal
  that mixes chained and unchained records is refused;
- a write that failed (a short write on a full disk) is closed by a repair at the next append;
- a journal stripped of its chain (every `prev` and `sha256` removed, then edited) is refused
  by `measure` when series.json, the header or the budget's ledger (file or server) says it was
  written chained; an earlier fragbench's series, with none of them saying so, is read with the
  note, even when its ledger knows the series.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.cli import error_lines, run_cli
from support.processes import file_size_limit
from support.series import collect

from fragbench.budget.ledger import record_text
from fragbench.budget.stores import ledger_for
from fragbench.errors import EXIT_REFUSED, SeriesError
from fragbench.files import GENESIS, line_hash
from fragbench.series.journal import (
    CHAIN_FIELDS,
    CHAINED,
    FORMAT_FIELD,
    Journal,
    chain,
    chain_note,
    read_journal,
)
from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow

Lines = list[bytes]
RESTORE = "the journal was altered or damaged: restore it from your backup"


def index(lines: Lines, kind: str, nth: int = 0) -> int:
    """The index (from 0) of the `nth` line of type `kind`."""
    return [i for i, line in enumerate(lines) if f'"type": "{kind}"'.encode() in line][nth]


def edit(lines: Lines, at: int, change: Callable[[dict[str, Any]], None]) -> Lines:
    """Line `at` with one value changed as a person editing it would: everything else, the
    chain fields included, byte for byte as written."""
    record = json.loads(lines[at])
    assert json.dumps(record, ensure_ascii=False).encode() == lines[at]  # only `change` differs
    change(record)
    edited = json.dumps(record, ensure_ascii=False).encode()
    assert edited != lines[at]
    return [*lines[:at], edited, *lines[at + 1:]]


def set_status(record: dict[str, Any]) -> None:
    assert record["status"] == "completed"
    record["status"] = "complete"


def cut_output_tokens(record: dict[str, Any]) -> None:
    record["usage"]["output_tokens"] //= 10


Tamper = Callable[[Lines], tuple[Lines, int, str]]
"""A journal's lines -> the tampered lines, the line (from 1) refused, and what it says."""


def status_edited(lines: Lines) -> tuple[Lines, int, str]:
    at = index(lines, "outcome")
    return edit(lines, at, set_status), at + 1, "does not match its own sha256: the line was " \
        "edited"


def output_tokens_edited(lines: Lines) -> tuple[Lines, int, str]:
    at = index(lines, "outcome", 1)
    return edit(lines, at, cut_output_tokens), at + 1, "does not match its own sha256"


def line_deleted(lines: Lines) -> tuple[Lines, int, str]:
    # A received body: the reader's other checks keep a call without one.
    at = index(lines, "received", 1)
    return [*lines[:at], *lines[at + 1:]], at + 1, f"does not follow line {at}: its prev is " \
        "not that line's sha256 (a line was deleted, inserted or moved)"


def copy_inserted(lines: Lines) -> tuple[Lines, int, str]:
    # A second copy of a body right after it: a call may hold several bodies (a retry).
    at = index(lines, "received", 2)
    return [*lines[:at + 1], lines[at], *lines[at + 1:]], at + 2, f"does not follow line " \
        f"{at + 1}"


def lines_swapped(lines: Lines) -> tuple[Lines, int, str]:
    # A call's outcome and the next call's reservation: in this order or the other, a
    # journal of calls in flight could hold them.
    at = index(lines, "outcome", 1)
    assert b'"type": "reserve"' in lines[at + 1]
    return [*lines[:at], lines[at + 1], lines[at], *lines[at + 2:]], at + 1, \
        f"does not follow line {at}"


def last_line_edited(lines: Lines) -> tuple[Lines, int, str]:
    at = len(lines) - 1
    return edit(lines, at, lambda r: r.update(at=r["at"].replace("+00:00", "Z"))), at + 1, \
        "does not match its own sha256"


def first_line_deleted(lines: Lines) -> tuple[Lines, int, str]:
    return lines[1:], 1, "does not follow the start of the journal (genesis)"


TAMPERS: dict[str, Tamper] = {
    "a status edited": status_edited,
    "output_tokens edited": output_tokens_edited,
    "a line deleted": line_deleted,
    "a copy of a line inserted": copy_inserted,
    "two lines swapped": lines_swapped,
    "the last line edited": last_line_edited,
    "the first line deleted": first_line_deleted,
}


def journal(path: Path) -> Lines:
    """A journal as a run writes it (through `Journal`): three calls, each reserved, its
    body received, its outcome priced, then the end."""
    writer = Journal(path)
    writer.append({"type": "header", "series": "s", "calls": 3})
    for seq in (1, 2, 3):
        cid = f"c{seq}"
        writer.append({"type": "reserve", "call_id": cid, "seq": seq, "reserved_usd": "0.09"})
        writer.append({"type": "received", "call_id": cid, "seq": seq, "http_status": 200,
                       "raw": '{"usage": {"output_tokens": 180}}'})
        writer.append({"type": "outcome", "call_id": cid, "seq": seq, "status": "completed",
                       "cost_usd": "0.02", "counted_usd": "0.02", "http_status": 200,
                       "usage": {"input_tokens": 400, "output_tokens": 180}})
    writer.append({"type": "end"})
    writer.close()
    return path.read_bytes().split(b"\n")[:-1]


def write(path: Path, lines: Lines) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def refused(path: Path, line: int) -> str:
    with pytest.raises(SeriesError) as caught:
        read_journal(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: line {line} "), message
    assert RESTORE in message and "\n" not in message
    return message


@pytest.mark.parametrize("name", TAMPERS)
def test_a_tampered_journal_is_refused_at_its_first_bad_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / "journal.jsonl"
    lines = journal(path)
    assert len(read_journal(path)) == len(lines)
    tampered, line, what = TAMPERS[name](lines)
    write(path, tampered)
    assert what in refused(path, line)


def test_every_line_is_chained_and_sealed(tmp_path: Path) -> None:
    """The first line chains to the genesis value, every other to the exact bytes of the line
    before; `chain` (how a test writes a journal by hand) writes the same lines."""
    path = tmp_path / "journal.jsonl"
    lines = journal(path)
    records = [json.loads(line) for line in lines]
    assert records[0]["prev"] == GENESIS
    assert all(r["prev"] == line_hash(before) for r, before in zip(records[1:], lines,
                                                                  strict=False))
    assert all(line.startswith(b'{"prev": "') for line in lines)
    assert chain(records).split(b"\n")[:-1] == lines
    assert chain_note(path) is None


# A torn line and its repair ----------------------------------------------------------------


def torn(path: Path, cut: int) -> tuple[Lines, bytes]:
    """The journal with its last line (the end) torn after `cut` bytes, then reopened and
    appended to, as a later writer would: (the lines, the torn bytes)."""
    lines = journal(path)
    tail = lines[-1][:cut]
    path.write_bytes(b"".join(line + b"\n" for line in lines[:-1]) + tail)
    writer = Journal(path)
    writer.append({"type": "stop", "reason": "interrupted", "detail": "d", "call_id": "c3",
                   "seq": 3})
    writer.close()
    return path.read_bytes().split(b"\n")[:-1], tail


def test_a_torn_line_is_closed_by_a_repair_chained_to_the_last_whole_line(tmp_path: Path
                                                                           ) -> None:
    path = tmp_path / "journal.jsonl"
    lines, tail = torn(path, 30)
    assert lines[-3] == tail
    repair = json.loads(lines[-2])
    assert repair["type"] == "repair" and repair["prev"] == line_hash(lines[-4])
    assert repair["torn_sha256"] == line_hash(tail) and repair["torn_bytes"] == 30
    assert [r["type"] for r in read_journal(path)][-3:] == ["outcome", "repair", "stop"]

    # The repair is sealed like any line.
    write(path, [*lines[:-2], lines[-2].replace(b'"torn_bytes": 30', b'"torn_bytes": 31'),
                 lines[-1]])
    assert "does not match its own sha256" in refused(path, len(lines) - 1)


def test_an_edited_torn_line_is_refused_at_its_repair(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    lines, tail = torn(path, 30)
    write(path, [*lines[:-3], tail[:-1] + b"X", *lines[-2:]])
    message = refused(path, len(lines) - 1)
    assert f"does not name the bytes of the torn line it closes (line {len(lines) - 2})" \
        in message


def test_a_torn_line_that_parses_is_never_read(tmp_path: Path) -> None:
    """Every write ends with its newline: a last line without one was not written whole, even
    when all its JSON is there (it is then closed like any torn line)."""
    path = tmp_path / "journal.jsonl"
    lines = journal(path)
    path.write_bytes(b"".join(line + b"\n" for line in lines)[:-1])
    assert [r["type"] for r in read_journal(path)][-1] == "outcome"
    writer = Journal(path)
    writer.close()
    assert [r["type"] for r in read_journal(path)][-2:] == ["outcome", "repair"]


def test_a_repair_inserted_by_hand_is_refused(tmp_path: Path) -> None:
    """A repair makes the line before it torn (never read): one inserted after a whole line
    would hide that line, and is refused, as is one with no line before it."""
    path = tmp_path / "journal.jsonl"
    records = [json.loads(line) for line in journal(path)]
    repair = {"at": "t", "type": "repair", "note": "n"}
    path.write_bytes(chain([*records[:2], repair, *records[2:]]))
    assert "line 3 does not follow line 1, the last whole line before the torn line 2 it " \
        "closes" in refused(path, 3)
    path.write_bytes(chain([repair, *records]))
    assert "is a repair with no torn line before it" in refused(path, 1)


def test_a_short_write_is_closed_by_the_next_append(tmp_path: Path) -> None:
    """A full disk tears a line mid-write: the journal's next append (room made again) closes
    it with a repair and chains on, so the journal stays readable."""
    path = tmp_path / "journal.jsonl"
    writer = Journal(path)
    writer.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    with file_size_limit(path.stat().st_size + 50), pytest.raises(OSError):
        writer.append({"type": "outcome", "call_id": "a", "seq": 1, "status": "completed",
                       "text": "a long answer " * 20})
    writer.append({"type": "stop", "reason": "cannot_record", "detail": "d", "call_id": "a",
                   "seq": 1})
    writer.close()
    assert [r["type"] for r in read_journal(path)] == ["reserve", "repair", "stop"]


def test_a_journal_altered_after_a_failed_write_is_a_write_that_fails(tmp_path: Path
                                                                       ) -> None:
    """Taken up again after a failed write, a journal that no longer reads is never appended
    to: the append fails as a write does (OSError naming the file), which the collector
    records as `cannot_record`."""
    path = tmp_path / "journal.jsonl"
    writer = Journal(path)
    writer.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    with file_size_limit(path.stat().st_size + 50), pytest.raises(OSError):
        writer.append({"type": "end", "text": "x" * 200})
    size = path.stat().st_size
    path.write_bytes(path.read_bytes().replace(b'"0.09"', b'"0.01"'))
    with pytest.raises(OSError) as caught:
        writer.append({"type": "end"})
    writer.close()
    assert caught.value.filename == str(path) and path.stat().st_size == size
    assert caught.value.strerror is not None
    assert caught.value.strerror.startswith("cannot be continued after a failed write: line 1 ")


# Journals written before the chain ---------------------------------------------------------


def unchained(lines: Lines, marker: bool = True) -> Lines:
    """The lines with their chain fields removed (and, without `marker`, the header's
    `"journal": "chained"`): what a stripper's sed leaves."""
    drop = CHAIN_FIELDS if marker else (*CHAIN_FIELDS, FORMAT_FIELD)
    return [json.dumps({k: v for k, v in json.loads(line).items() if k not in drop}
                       ).encode() for line in lines]


def test_a_journal_written_before_the_chain_is_read_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    old = unchained(journal(path))
    write(path, old)
    assert [r["type"] for r in read_journal(path)] == [json.loads(r)["type"] for r in old]
    note = chain_note(path)
    assert note is not None and str(path) in note and "cannot be detected" in note
    with pytest.raises(SeriesError, match="written before the journal was chained"):
        Journal(path)  # never appended to: its new lines would be a mix


@pytest.mark.parametrize("where", ["an unchained line in a chained journal",
                                   "a chained line in an unchained journal"])
def test_a_journal_that_mixes_chained_and_unchained_lines_is_refused(tmp_path: Path,
                                                                     where: str) -> None:
    path = tmp_path / "journal.jsonl"
    lines = journal(path)
    at = index(lines, "outcome", 1)
    if where.startswith("an unchained"):
        mixed = [*lines[:at], *unchained([lines[at]]), *lines[at + 1:]]
        what = "has no sha256 of its own"
    else:
        mixed = [*unchained(lines[:at]), lines[at], *unchained(lines[at + 1:])]
        what = "carries the chain (prev, sha256) though the journal's first record (line 1)"
    write(path, mixed)
    assert what in refused(path, at + 1)


def test_a_chained_journal_with_a_blank_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    lines = journal(path)
    write(path, [*lines[:3], b"", *lines[3:]])
    assert "is blank" in refused(path, 4)


# Through the CLI: a priced series on the loopback server -----------------------------------

CLI_TAMPERS = ("a status edited", "output_tokens edited", "a line deleted",
               "a copy of a line inserted", "two lines swapped")


def test_measure_refuses_a_tampered_journal_and_rebuilds_nothing(experiment: Path,
                                                                  server: Server) -> None:
    """The issue's series: priced answers from the real SDK. Each tamper alone makes
    `fragbench measure` exit 4 in one line naming the journal and the first bad line, and
    leaves calls.parquet and status.json as they were; the journal restored, it rebuilds."""
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    path = series_dir / "journal.jsonl"
    original = path.read_bytes()
    lines = original.split(b"\n")[:-1]
    kept = {name: (series_dir / name).read_bytes() for name in ("calls.parquet", "status.json")}
    for name in CLI_TAMPERS:
        tampered, line, what = TAMPERS[name](lines)
        write(path, tampered)
        measured = run_cli("measure", str(series_dir))
        assert measured.returncode == EXIT_REFUSED, (name, measured.stdout)
        (error,) = error_lines(measured.stderr)
        assert f"{path}: line {line} " in error and what in error and RESTORE in error, error
        assert {n: (series_dir / n).read_bytes() for n in kept} == kept, name
    path.write_bytes(original)
    measured = run_cli("measure", str(series_dir))
    assert measured.returncode == 0, measured.stderr
    assert "note:" not in measured.stdout  # a chained journal: nothing to say


def as_before_the_chain(series_dir: Path) -> None:
    """A series as an earlier fragbench wrote it: no chain field in any journal line, and no
    `"journal": "chained"` in series.json or in the journal's header."""
    path = series_dir / "journal.jsonl"
    write(path, unchained(path.read_bytes().split(b"\n")[:-1], marker=False))
    drop_marker(series_dir / "series.json")


def drop_marker(path: Path) -> None:
    info = json.loads(path.read_text(encoding="utf-8"))
    assert info.pop(FORMAT_FIELD) == CHAINED
    path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def test_measure_reads_a_series_recorded_before_the_chain_and_says_so(extractive: Path
                                                                       ) -> None:
    """A careful user's paid series from an earlier fragbench: its journal, with no chain
    field in any line (nor the marker a chaining fragbench writes), is read and rebuilt as
    before, and `measure` and `report` say that its edits cannot be detected."""
    path = extractive / "journal.jsonl"
    as_before_the_chain(extractive)
    for command in ("measure", "report"):
        ran = run_cli(command, str(extractive))
        assert ran.returncode == 0, ran.stderr
        (note,) = [line for line in ran.stdout.splitlines() if line.startswith("note:")]
        assert str(path) in note and "written before the journal was chained" in note


# A chain stripped from every line (finding 2 of the review) ---------------------------------

STRIPPED = "carries no chain (no line holds prev or sha256), but "
WITNESSES = {
    # What the stripper removed besides the chain -> what still says it was chained.
    "only the chain": "series.json says it was written chained",
    "the chain and the header's marker": "series.json says it was written chained",
    "the chain and series.json's marker": "is the header of a chained journal",
}


def stripped_and_edited(series_dir: Path, removed: str) -> None:
    """The chain removed from every line (and what `removed` names), then one outcome's
    status edited: the edit the chain exists to catch."""
    path = series_dir / "journal.jsonl"
    lines = unchained(path.read_bytes().split(b"\n")[:-1],
                      marker=removed != "the chain and the header's marker")
    at = index(lines, "outcome")
    record = json.loads(lines[at])
    record["status"] = "complete" if record["status"] != "complete" else "completed"
    write(path, [*lines[:at], json.dumps(record).encode(), *lines[at + 1:]])
    if removed == "the chain and series.json's marker":
        drop_marker(series_dir / "series.json")


def refused_by_measure(series_dir: Path, witness: str, env: dict[str, str] | None = None
                       ) -> None:
    kept = (series_dir / "calls.parquet").read_bytes()
    measured = run_cli("measure", str(series_dir), env=env)
    assert measured.returncode == EXIT_REFUSED, measured.stdout
    (error,) = error_lines(measured.stderr)
    assert f"{series_dir / 'journal.jsonl'}: " in error and witness in error, error
    assert "restore it from your backup" in error, error
    assert (series_dir / "calls.parquet").read_bytes() == kept  # nothing rebuilt


@pytest.mark.parametrize("removed", WITNESSES)
def test_measure_refuses_a_journal_stripped_of_its_chain(extractive: Path, removed: str
                                                         ) -> None:
    """Stripping `prev` and `sha256` from every line does not pass an edited journal off as
    an earlier fragbench's: series.json (written before the journal) or the journal's header
    still says it was chained, and `measure` exits 4 in one line naming the journal."""
    stripped_and_edited(extractive, removed)
    refused_by_measure(extractive, WITNESSES[removed])


@pytest.mark.parametrize("store", ["file", "server"])
def test_measure_refuses_a_stripped_chain_the_budget_ledger_vouches_for(
        experiment: Path, server: Server, store: str, request: pytest.FixtureRequest) -> None:
    """A priced series stripped of its chain and of both markers (series.json and header):
    the budget's ledger, shared by the budget's series and chained itself, still holds the
    series' `series` record saying it was written chained, in the file store and on a
    PostgreSQL server alike."""
    if store == "server":
        request.getfixturevalue("ledger_url")
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    stripped_and_edited(series_dir, "the chain and series.json's marker")
    path = series_dir / "journal.jsonl"
    write(path, unchained(path.read_bytes().split(b"\n")[:-1], marker=False))
    budget = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))["budget"]
    ledger = ledger_for(budget).where
    assert ("postgresql://" in ledger) is (store == "server")
    refused_by_measure(series_dir, f"the budget's ledger {ledger} records it as written "
                       "chained")


def test_measure_reads_an_earlier_priced_series_its_ledger_knows_without_the_marker(
        experiment: Path, server: Server) -> None:
    """An earlier fragbench's priced series: the budget's ledger knows the series (its
    `series` record and reservations), but, written before the chain, its `series` record
    says nothing of the journal. Knowing the series is no witness: it is read with the note.
    """
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    as_before_the_chain(series_dir)
    budget = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))["budget"]
    ledger = Path(ledger_for(budget).where)
    records, prev = [], GENESIS  # the ledger as that fragbench wrote it: no marker, chained
    for line in ledger.read_bytes().split(b"\n")[:-1]:
        record = json.loads(line)
        if record["type"] == "series":
            assert record.pop(FORMAT_FIELD) == CHAINED
        record["prev"] = prev
        records.append(record_text(record))
        prev = line_hash(records[-1])
    ledger.write_bytes(b"".join(raw + b"\n" for raw in records))
    assert run_cli("ledger", "verify", budget).returncode == 0  # a ledger a run accepts
    measured = run_cli("measure", str(series_dir))
    assert measured.returncode == 0, measured.stderr
    (note,) = [line for line in measured.stdout.splitlines() if line.startswith("note:")]
    assert "written before the journal was chained" in note
