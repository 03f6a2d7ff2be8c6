"""Append-only journals: one per series, and one ledger per budget.

Every record is written with one `write` of a whole line, then fsync'ed before the caller goes
on: the reservation before a request leaves, the outcome after it returns. A crash can at worst
leave a last line without its newline; `read_journal` ignores such a torn line, and a call
whose reservation is on disk without an outcome counts as spent at its reservation.

Series journal records (`type`): `header` (series, series_uid, experiment, budget, backend,
plan hash), `reserve` (call_id, seq, reserved_usd), `outcome` (call_id, status, cost_usd or
null, counted_usd, the reply), `stop` (reason, call_id), `end`.

The budget ledger, `<experiment>/ledger/<budget id>.jsonl`, receives the same `reserve` and
`outcome` records of every series drawing on that budget, tagged with the series' uid, whatever
`--out` the series was written to. What a budget has spent is, for each series, the larger of
what the ledger and the series' own journal (when found under the outputs root) count: deleting
or moving one of them never lowers the count.

Before anything is written, secrets are redacted: the values given (keys from the environment,
raw and stripped) and anything shaped like an OpenAI key, organization or project ID, or an
Authorization header.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from fragbench.errors import SeriesError

JOURNAL_FILE = "journal.jsonl"
LEDGER_DIR = "ledger"

# Shaped like OpenAI's identifiers (long enough that ordinary words never match).
ACCOUNT_PATTERNS = re.compile(
    r"\bsk-[A-Za-z0-9_*-]{16,}"           # keys, masked or not
    r"|\borg-[A-Za-z0-9]{16,}"            # organization IDs
    r"|\bproj_[A-Za-z0-9]{16,}"           # project IDs
    r"|\bBearer\s+[A-Za-z0-9._~+/=-]{16,}"
)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return ACCOUNT_PATTERNS.sub("[redacted]", text)


def _redact_value(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v, secrets) for v in value]
    return value


class Journal:
    """Opened for appending; secrets are redacted before anything is written."""

    def __init__(self, path: Path, redact: Iterable[str] = ()) -> None:
        self.path = path
        self._secrets = sorted({s for v in redact for s in (v, v.strip()) if len(s) >= 8},
                               key=len, reverse=True)
        created = not path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if created:
            fsync_dir(path.parent)
        elif path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            # A crash tore the last line: end it, and say so, so that what follows is whole.
            self._write(b"\n" + json.dumps({"at": now(), "type": "repair", "note":
                                            "the line above was torn by a crash"}).encode()
                        + b"\n")

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def append(self, record: dict[str, Any]) -> None:
        full = _redact_value({"at": now(), **record}, self._secrets)
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

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock across processes: two runs drawing on one budget take turns
        between the balance check and the reservation."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

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


def ledger_path(experiment_dir: Path, budget_id: str) -> Path:
    return experiment_dir / LEDGER_DIR / f"{budget_id}.jsonl"


def budget_spent(ledger: Path, root: Path | None, budget_id: str) -> Decimal:
    """Per series, the larger of the ledger's count and its journal's (under `root`)."""
    by_series: dict[str, Decimal] = {}
    if ledger.exists():
        records = read_journal(ledger)
        for uid in {r.get("series_uid") for r in records}:
            by_series[str(uid)] = spent([r for r in records if r.get("series_uid") == uid])
    if root is not None and root.exists():
        for path in sorted(root.glob(f"**/{JOURNAL_FILE}")):
            records = read_journal(path)
            head = records[0] if records else {}
            if head.get("type") == "header" and head.get("budget") == budget_id:
                uid = str(head.get("series_uid", path))
                by_series[uid] = max(by_series.get(uid, Decimal(0)), spent(records))
    return sum(by_series.values(), Decimal(0))
