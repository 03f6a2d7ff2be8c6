"""The journal: durable lines, a torn last line tolerated, an altered one refused; every line
valid UTF-8 whatever the text it holds; a short write said once, naming the file."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from support.processes import file_size_limit

from fragbench.errors import SeriesError
from fragbench.redact import Redactor
from fragbench.series.journal import STATUS_MAX, Journal, chain, read_journal, spent


def outcome(call_id: str, seq: int, **fields: object) -> dict[str, object]:
    return {"type": "outcome", "call_id": call_id, "seq": seq, "status": "completed",
            "cost_usd": "0.02", "counted_usd": "0.02", **fields}


def test_torn_last_line_is_ignored_and_its_call_counts_at_reservation(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, Redactor(["sk-secret-value-123"]))
    journal.append({"type": "header", "budget": "b"})
    journal.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    journal.append(outcome("a", 1, raw="echo sk-secret-value-123"))
    journal.append({"type": "reserve", "call_id": "b", "seq": 2, "reserved_usd": "0.08"})
    journal.close()
    with open(path, "ab") as fh:  # a crash in the middle of writing b's outcome
        fh.write(b'{"type": "outcome", "call_id": "b", "cost_u')
    records = read_journal(path)
    assert [r["type"] for r in records] == ["header", "reserve", "outcome", "reserve"]
    assert spent(records) == Decimal("0.10")
    assert b"sk-secret-value-123" not in path.read_bytes()
    assert "[redacted]" in records[2]["raw"]


def test_an_altered_line_in_the_middle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(chain([{"at": "t", "type": "header"}, "not json",
                            {"at": "t", "type": "end"}]))
    with pytest.raises(SeriesError, match="line 2 is not a journal record"):
        read_journal(path)


def test_a_torn_line_is_repaired_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    journal.close()
    with open(path, "ab") as fh:  # a power loss in the middle of the next line
        fh.write(b'{"type": "reserve", "call_id": "b", "se')
    later = Journal(path)  # measure or a later writer opens the journal again
    later.append({"type": "reserve", "call_id": "c", "seq": 2, "reserved_usd": "0.08"})
    later.close()
    records = read_journal(path)
    assert [r["type"] for r in records] == ["reserve", "repair", "reserve"]
    assert spent(records) == Decimal("0.17")


def test_text_that_is_not_valid_unicode_is_written_escaped(tmp_path: Path) -> None:
    """A lone surrogate anywhere (a value, a key, nested) is kept as its six-character escape;
    a high and a low surrogate side by side are the one character they encode; every line is
    valid UTF-8, and the reader gives back exactly what was written."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, Redactor(["sk-secret-value-123"]))
    journal.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    journal.append(outcome("a", 1, text="bad \ud83d end", model="m\udc80",
                           raw='{"x": "\ud83d\ude00 sk-secret-value-123 \ud83d"}',
                           usage={"weird\ud800key": 1}))
    journal.close()
    data = path.read_bytes()
    data.decode("utf-8")  # strict: raises on anything that is not valid UTF-8
    (record,) = [r for r in read_journal(path) if r["type"] == "outcome"]
    assert record["text"] == "bad \\ud83d end"
    assert record["model"] == "m\\udc80"
    assert record["raw"].startswith('{"x": "\U0001f600 [redacted] \\ud83d"')
    assert record["usage"] == {"weird\\ud800key": 1}
    assert record["redacted"] is True


def test_an_over_long_status_is_cut_when_written_and_read_back(tmp_path: Path) -> None:
    """A hostile server's status never makes the journal unreadable: cut, its raw kept."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    journal.append(outcome("a", 1, status="x" * 10_000, raw='{"status": "' + "x" * 10_000))
    journal.close()
    (record,) = [r for r in read_journal(path) if r["type"] == "outcome"]
    assert len(record["status"]) == STATUS_MAX and record["status"].endswith("…")
    assert record["raw"].count("x") == 10_000


def test_a_short_write_names_the_file_and_says_it_once(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    size = path.stat().st_size
    with file_size_limit(size + 20), pytest.raises(OSError) as caught:
        journal.append(outcome("a", 1, text="a long answer " * 20))
    journal.close()
    exc = caught.value
    assert exc.filename == str(path)
    assert exc.strerror is not None and "short write" in exc.strerror
    # How the collector and the CLI show it: the file, then why, the words once.
    shown = f"cannot write {exc.filename or exc} ({exc.strerror or exc})"
    assert shown.count("short write") == 1 and shown.count(str(path)) == 1
    # The torn line is ignored; the call counts at its reservation.
    assert spent(read_journal(path)) == Decimal("0.09")


def write_lines(path: Path, *records: dict[str, object]) -> None:
    path.write_bytes(chain(records))


def write_unchained(path: Path, *records: object) -> None:
    """As a fragbench before the chain wrote a journal."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_a_received_body_and_an_interruption_are_records(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_lines(path, {"at": "t", "type": "header", "calls": 2},
                {"at": "t", "type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "1"},
                {"at": "t", "type": "received", "call_id": "a", "seq": 1, "http_status": 200,
                 "raw": "{}"},
                {"at": "t", "type": "stop", "reason": "interrupted", "detail": "Ctrl-C",
                 "call_id": "b", "seq": 2})
    assert [r["type"] for r in read_journal(path)] == ["header", "reserve", "received", "stop"]


def test_an_older_journal_s_escaped_surrogates_are_read_as_valid_text(tmp_path: Path) -> None:
    """Written before the journal escaped them (and before its chain): JSON escapes of lone
    surrogates, anywhere."""
    path = tmp_path / "journal.jsonl"
    write_unchained(path, {"at": "t", "type": "reserve", "call_id": "a", "seq": 1,
                       "reserved_usd": "1"},
                {"at": "t", "type": "outcome", "call_id": "a", "seq": 1, "status": "completed",
                 "text": "x\udc80", "usage": {"k\ud83d": 1}, "extra": ["\ud83d"]})
    assert "\\udc80" in path.read_text(encoding="utf-8")  # the JSON escape, as written
    records = read_journal(path)
    json.dumps(records, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    assert records[1]["text"] == "x\\udc80" and records[1]["usage"] == {"k\\ud83d": 1}
    assert records[1]["extra"] == ["\\ud83d"]


def test_surrogates_encoded_as_utf8_bytes_are_read_as_valid_text(tmp_path: Path) -> None:
    """A journal that holds a surrogate's UTF-8 bytes (ED A0 BD), not its escape: JSON reads
    them as the surrogate, which is made valid like an escaped one."""
    path = tmp_path / "journal.jsonl"
    write_unchained(path, {"at": "t", "type": "reserve", "call_id": "a", "seq": 1,
                           "reserved_usd": "1"})
    line = json.dumps({"at": "t", "type": "outcome", "call_id": "a", "seq": 1,
                       "status": "completed", "text": "x\ud83d"}, ensure_ascii=False)
    with path.open("ab") as fh:
        fh.write(line.encode("utf-8", "surrogatepass") + b"\n")
    assert b"\xed\xa0\xbd" in path.read_bytes() and b"\\ud83d" not in path.read_bytes()
    records = read_journal(path)
    assert records[1]["text"] == "x\\ud83d"


def test_the_cycle_collector_is_paused_only_within_the_block() -> None:
    """`without_cycle_sweeps`: off inside, restored after (an error too); left off when the
    caller had turned it off."""
    import gc

    from fragbench.series.folder import without_cycle_sweeps

    assert gc.isenabled()
    with without_cycle_sweeps():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), without_cycle_sweeps():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with without_cycle_sweeps():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_freed_memory_is_handed_back_where_the_c_library_can() -> None:
    import platform
    import sys

    from fragbench.memory import release_freed_memory

    # glibc (this suite's Linux machines) has malloc_trim; elsewhere it is a no-op that says so.
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert release_freed_memory() is glibc
