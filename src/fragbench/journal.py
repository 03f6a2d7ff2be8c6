"""The append-only journal of a series: one JSON object per line, each made durable.

Every record is written with one `write` of a whole line, then flushed and fsync'ed before the
caller goes on: the reservation before a request leaves, the outcome after it returns. A crash
can at worst leave a last line without its newline; `read_journal` ignores such a torn line, and
a call whose reservation is on disk without an outcome counts as spent at its reservation.

Records (`type`): `header` (series, experiment, budget, backend, plan hash), `reserve` (call_id,
seq, reserved_usd), `outcome` (call_id, status, cost_usd or null, the reply), `stop` (reason,
call_id), `end`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from fragbench.errors import SeriesError

JOURNAL_FILE = "journal.jsonl"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Journal:
    """Opened for appending; `redact` strings (a key) are replaced before anything is written."""

    def __init__(self, path: Path, redact: Iterable[str] = ()) -> None:
        self.path = path
        self._redact = [s for s in redact if s]
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps({"at": now(), **record}, ensure_ascii=False, sort_keys=False)
        for secret in self._redact:
            line = line.replace(secret, "[redacted]")
        data = (line + "\n").encode("utf-8")
        written = os.write(self._fd, data)
        if written != len(data):  # a short write on a full disk: refuse to go on blind
            raise OSError(f"short write to {self.path}")
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete record; a torn last line (a crash mid-write) is ignored."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SeriesError(f"{path}: cannot be read ({exc.strerror}).") from None
    lines = raw.split(b"\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError):
            if number == len(lines):  # only the unterminated last line may be torn
                continue
            raise SeriesError(f"{path}: line {number} is not a journal record; the journal was "
                              "altered, restore it before collecting again.") from None
    return records


def spent(records: list[dict[str, Any]]) -> Decimal:
    """What a journal's calls cost: the known cost, else the whole reservation."""
    reserved: dict[str, Decimal] = {}
    costs: dict[str, Decimal] = {}
    for r in records:
        if r.get("type") == "reserve":
            reserved[r["call_id"]] = Decimal(r["reserved_usd"])
        elif r.get("type") == "outcome" and r.get("cost_usd") is not None:
            costs[r["call_id"]] = Decimal(r["cost_usd"])
    return sum((costs.get(cid, amount) for cid, amount in reserved.items()), Decimal(0))


def budget_journals(root: Path, budget_id: str) -> list[Path]:
    """The journals under `root` (any depth) whose header draws on `budget_id`."""
    found = []
    for path in sorted(root.glob(f"**/{JOURNAL_FILE}")):
        records = read_journal(path)
        if records and records[0].get("type") == "header" and records[0].get("budget") == budget_id:
            found.append(path)
    return found


def budget_spent(root: Path, budget_id: str) -> Decimal:
    return sum((spent(read_journal(p)) for p in budget_journals(root, budget_id)), Decimal(0))
