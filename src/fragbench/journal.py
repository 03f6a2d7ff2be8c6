"""The series journal: append-only, one per series.

Every record is written with one `write` of a whole line, then fsync'ed before the caller goes
on: the reservation before a request leaves, the outcome after it returns. A crash can at worst
leave a last line without its newline; `read_journal` ignores such a torn line, and a call
whose reservation is on disk without an outcome counts as spent at its reservation.

Records (`type`): `header` (series, series_uid, experiment, budget, backend, plan hash),
`reserve` (call_id, seq, reserved_usd), `outcome` (call_id, status, cost_usd or null,
counted_usd, the reply), `stop` (reason, call_id), `end`. The budget's own ledger, shared by
every series drawing on it, is `fragbench.ledger`.

Before anything is written, secrets are redacted (`fragbench.redact`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from fragbench.errors import SeriesError
from fragbench.redact import Redactor

JOURNAL_FILE = "journal.jsonl"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write `path` through `write(tmp)` beside it, then rename into place: a crash or a full
    disk leaves the old file or the new one, never half of one, and no temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def make_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each made durable in its parent (a power loss
    must not take a folder holding billed records). NotADirectoryError where a file stands in
    the way; other OSErrors as they come."""
    missing = []
    while not path.is_dir():
        if path.exists() or path.is_symlink():
            raise NotADirectoryError(20, "is not a folder", str(path))
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir()
        fsync_dir(folder.parent)


class Journal:
    """Opened for appending; secrets are redacted before anything is written."""

    def __init__(self, path: Path, redactor: Redactor | None = None) -> None:
        self.path = path
        self.redactor = redactor or Redactor()
        created = not path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if created:
            fsync_dir(path.parent)
        elif path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            # A crash tore the last line: end it, and say so, so that what follows is whole.
            self._write(b"\n" + json.dumps({"at": now(), "type": "repair", "note":
                                            "the line above was torn by a crash"}).encode()
                        + b"\n")

    def append(self, record: dict[str, Any]) -> None:
        full = self.redactor.value({"at": now(), **record})
        if full != {"at": full["at"], **record}:
            # Say so: a redacted answer may no longer quote its evidence word for word.
            full["redacted"] = True
        try:
            data = (json.dumps(full, ensure_ascii=False) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in some text: keep it, escaped
            data = (json.dumps(full, ensure_ascii=True) + "\n").encode()
        self._write(data)

    def _write(self, data: bytes) -> None:
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
            # Only a torn line may be unreadable: the unterminated last one, or one that the
            # next writer marked with a `repair` record.
            if number == len(lines) or b'"type": "repair"' in lines[number]:
                continue
            raise SeriesError(f"{path}: line {number} is not a journal record; the journal was "
                              "altered, restore it before collecting again.") from None
    return records


def spent(records: list[dict[str, Any]]) -> Decimal:
    """What a journal's calls count: the outcome's counted amount (its cost when known), else
    the whole reservation."""
    reserved: dict[str, Decimal] = {}
    counted: dict[str, Decimal] = {}
    for r in records:
        if r.get("type") == "reserve":
            reserved[r["call_id"]] = Decimal(r["reserved_usd"])
        elif r.get("type") == "outcome":
            amount = r.get("counted_usd", r.get("cost_usd"))
            if amount is not None:
                counted[r["call_id"]] = Decimal(amount)
    return sum((counted.get(cid, amount) for cid, amount in reserved.items()), Decimal(0))
