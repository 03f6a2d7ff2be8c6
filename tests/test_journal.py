"""The journal: durable lines, a torn last line tolerated, an altered one refused."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from fragbench.errors import SeriesError
from fragbench.journal import Journal, read_journal, spent
from fragbench.redact import Redactor


def test_torn_last_line_is_ignored_and_its_call_counts_at_reservation(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, Redactor(["sk-secret-value-123"]))
    journal.append({"type": "header", "budget": "b"})
    journal.append({"type": "reserve", "call_id": "a", "seq": 1, "reserved_usd": "0.09"})
    journal.append({"type": "outcome", "call_id": "a", "seq": 1, "cost_usd": "0.02",
                    "raw": "echo sk-secret-value-123"})
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
    path.write_text('{"type": "header"}\nnot json\n{"type": "end"}\n', encoding="utf-8")
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
    later.append({"type": "reserve", "call_id": "c", "seq": 1, "reserved_usd": "0.08"})
    later.close()
    records = read_journal(path)
    assert [r["type"] for r in records] == ["reserve", "repair", "reserve"]
    assert spent(records) == Decimal("0.17")
