"""The series journal: append-only, one per series.

Every record is written with one `write` of a whole line, then fsync'ed before the caller goes
on: the reservation before a request leaves, the outcome after it returns. A crash can at worst
leave a last line without its newline; `read_journal` ignores such a torn line, and a call
whose reservation is on disk without an outcome counts as spent at its reservation.

Records (`type`), each with its time `at`: `header` (series, series_uid, experiment, budget,
backend, plan hash, calls), `reserve` (call_id, seq, reserved_usd), `received` (call_id, seq,
http_status, raw: a body as it arrived, before anything parsed it), `outcome` (call_id, seq,
status, cost_usd or null, counted_usd, the reply), `stop` (reason, detail, call_id, seq), `end`,
and `repair` (closes a line torn by a crash). The budget's own ledger, shared by every series
drawing on it, is `fragbench.ledger`.

Before anything is written, secrets are redacted (`fragbench.redact`), and text that is not
valid Unicode is escaped (`valid_text`): a lone surrogate is kept as the six characters
`\\ud83d`, so that every line is UTF-8 and every table can hold it.

A journal is data, checked like the ledger: `read_journal` refuses, in one sentence naming the
file and the line, a record that is not one this module writes (an unknown type; an amount
that is not a non-negative decimal string fit for the money columns; a call or position the
plan does not have; a second reservation or outcome of one call; a call after the series'
end). Fields it does not know are kept and ignored, so that a later version's records stay
readable.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Context, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from fragbench.bounded_json import depth
from fragbench.columns import MONEY_PRECISION, MONEY_SCALE
from fragbench.errors import SeriesError
from fragbench.redact import Redactor

JOURNAL_FILE = "journal.jsonl"
RECORD_TYPES = ("header", "reserve", "received", "outcome", "stop", "end", "repair")
STOP_REASONS = ("technical_failure", "changed_model", "unknown_cost", "budget",
                "cannot_record", "interrupted")
"""Why a series stopped; `interrupted` is Ctrl-C or SIGTERM, after the call in flight."""
STATUS_MAX = 100
"""The longest outcome status kept whole. A provider's statuses are a word or two; a longer one
(a hostile server's) is cut when written, its raw body keeping it whole, so that the journal
never holds a line its reader refuses."""
MAX_DEPTH = 16
"""The deepest nesting of a journal line (a record holds objects two levels deep); a deeper
line is no record of ours, and is refused before it is parsed."""


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
    disk leaves the old file or the new one, never half of one, and no temporary file. An
    OSError that names no file (or the temporary one) is raised naming `path`."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None \
                and exc.filename in (None, str(tmp), tmp):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_synced(path: Path, data: bytes) -> None:
    """Write `data` to `path` and fsync it before returning."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


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
        try:
            folder.mkdir()
        except FileExistsError:  # another run created it meanwhile: a folder is all we need
            if not folder.is_dir():
                raise
        fsync_dir(folder.parent)


# Text that is not valid Unicode ------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` as valid Unicode, nothing lost: a high and a low surrogate side by side become
    the one character they encode, and a lone surrogate (from a JSON escape such as \\ud83d,
    or a byte that was not UTF-8) becomes the six characters of its escape, `\\ud83d`. Text
    already valid is returned as it is. (A text that held those six characters itself reads
    the same: the escape is for a person, not a round trip.)"""
    if _SURROGATE.search(text) is None:
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", joined)


def valid_unicode(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, scalars) with every string in it, keys
    included, made valid by `valid_text`. Walked with a stack of its own, never by recursion:
    the value may come from outside."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, into, at = stack.pop()
        if isinstance(item, str):
            into[at] = valid_text(item)
        elif isinstance(item, dict):
            copy: dict[Any, Any] = {}
            into[at] = copy
            for key, inner in item.items():
                key = valid_text(key) if isinstance(key, str) else key
                copy[key] = None  # keeps the keys' order
                stack.append((inner, copy, key))
        elif isinstance(item, list | tuple):
            items: list[Any] = [None] * len(item)
            into[at] = items
            stack.extend((inner, items, i) for i, inner in enumerate(item))
        else:
            into[at] = item
    return root[0]


# Writing -----------------------------------------------------------------------------------


def _within_bounds(record: dict[str, Any]) -> dict[str, Any]:
    """The record as the reader will accept it: valid Unicode, an over-long status cut."""
    record = valid_unicode(record)
    status = record.get("status")
    if record.get("type") == "outcome" and isinstance(status, str) and len(status) > STATUS_MAX:
        record["status"] = status[:STATUS_MAX - 1] + "…"
    return record


class Journal:
    """Opened for appending; secrets are redacted and text made valid Unicode before anything
    is written, so that every line is UTF-8."""

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
        # Made valid before the redactor sees it (it need not know surrogates) and after (it
        # may decode escapes in a body it rewrites).
        plain = _within_bounds({"at": now(), **record})
        full = valid_unicode(self.redactor.value(plain))
        if full != plain:
            # Say so: a redacted answer may no longer quote its evidence word for word.
            full["redacted"] = True
        self._write((json.dumps(full, ensure_ascii=False) + "\n").encode("utf-8"))

    def _write(self, data: bytes) -> None:
        written = os.write(self._fd, data)
        if written != len(data):  # a short write on a full disk: refuse to go on blind
            raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes "
                          "written; is the disk full?", str(self.path))
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


# Reading -----------------------------------------------------------------------------------

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(line: bytes) -> Any:
    """The JSON value of a line, or None when it is not one (torn, altered, nested too deep,
    NaN or Infinity, a number too long)."""
    try:
        # The responses' linear depth scan (no recursion), with the journal's own bound.
        if line.count(b"[") + line.count(b"{") > MAX_DEPTH and depth(line.decode()) > MAX_DEPTH:
            return None
        return json.loads(line, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


_MONEY_QUANTUM = Decimal(1).scaleb(-MONEY_SCALE)
_MONEY_CONTEXT = Context(prec=MONEY_PRECISION, traps=[InvalidOperation])
MONEY_TEXT = (f"a non-negative decimal amount written as a string, with at most {MONEY_SCALE} "
              f"decimals and {MONEY_PRECISION - MONEY_SCALE} integer digits")


def exact_money(amount: Any) -> Decimal | None:
    """`amount` (a decimal string, a Decimal or an int) as a Decimal that a money column holds
    exactly (at most MONEY_SCALE decimals and MONEY_PRECISION - MONEY_SCALE integer digits);
    None when it is not one: a float or bool, not a number, not finite, or not exact at that
    scale. Negative amounts pass here (the journal's reader refuses them)."""
    if isinstance(amount, bool) or not isinstance(amount, str | int | Decimal):
        return None
    try:
        exact = Decimal(amount)
        if not exact.is_finite():
            return None
        fitted = exact.quantize(_MONEY_QUANTUM, context=_MONEY_CONTEXT)
    except (InvalidOperation, ValueError):
        return None
    return fitted if fitted == exact else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_PLAIN_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")
"""How `fragbench.budget.usd` writes an amount: digits, maybe a point and more; never a sign,
an exponent, a space or an underscore."""
_TEXT = "text or null"
_WHAT = {"received": "a received body", "outcome": "an outcome"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _count(value: Any) -> bool:
    return value is None or _is_int(value)


def _http_status(value: Any) -> bool:
    return value is None or (_is_int(value) and 0 <= value <= 999)


def _flag(value: Any) -> bool:
    return value is None or isinstance(value, bool)


def _usage(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(
        isinstance(k, str) and _count(v) for k, v in value.items()))


_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "text": (_text, _TEXT),
    "count": (_count, "a whole number or null"),
    "http_status": (_http_status, "an HTTP status (a whole number from 0 to 999) or null"),
    "flag": (_flag, "true, false or null"),
    "usage": (_usage, "an object of token counts (whole numbers or null), or null"),
}
_FIELDS: dict[str, dict[str, str]] = {
    "header": {"experiment": "text", "series": "text", "series_uid": "text", "backend": "text",
               "budget": "text", "plan_sha256": "text", "calls": "count"},
    "reserve": {},
    "received": {"http_status": "http_status", "raw": "text"},
    "outcome": {"failure": "text", "http_status": "http_status", "error": "text",
                "request_id": "text", "model": "text", "service_tier": "text",
                "usage": "usage", "cost_unknown": "text", "never_sent": "flag", "text": "text",
                "refusal": "text", "incomplete_reason": "text", "raw": "text"},
    "stop": {"detail": "text"},
    "end": {},
    "repair": {"note": "text"},
}
"""Per type, the optional fields a table or a reader uses, and what each must be; the call's
own fields, money, status and stop reason are checked apart."""


class _Reader:
    """Checks records one by one, in order, against each other and (if given) the plan."""

    def __init__(self, path: Path, plan_calls: Mapping[str, int] | None) -> None:
        self.path = path
        self.plan_calls = plan_calls
        self.reserved: dict[str, int] = {}
        self.outcomes: set[str] = set()
        self.finished: tuple[str, int] | None = None
        self.seen_records = False

    def fail(self, number: int, record: Any, what: str) -> SeriesError:
        call = record.get("call_id") if isinstance(record, dict) else None
        where = f"line {number}" + (f" (call {call})" if isinstance(call, str) else "")
        return SeriesError(f"{self.path}: {where} {what}; the journal was altered or damaged: "
                           "restore it from your backup, then run the command again.")

    def check(self, number: int, record: Any) -> None:
        if not isinstance(record, dict):
            raise self.fail(number, record, "is not a journal record")
        kind = record.get("type")
        if kind not in RECORD_TYPES:
            raise self.fail(number, record, f"has an unknown type {_shown(kind)} (a journal "
                            f"holds {', '.join(RECORD_TYPES)})")
        if not isinstance(record.get("at"), str):
            raise self.fail(number, record, f"has `at` {_shown(record.get('at'))}, not a time")
        if not _flag(record.get("redacted")):
            raise self.fail(number, record, "has `redacted` that is not true or false")
        for field, check in _FIELDS[kind].items():
            ok, expected = _CHECKS[check]
            if not ok(record.get(field)):
                raise self.fail(number, record,
                                f"has {field} {_shown(record.get(field))}, not {expected}")
        getattr(self, f"_{kind}")(number, record)
        if kind != "repair":
            self.seen_records = True

    def _money(self, number: int, record: dict[str, Any], field: str, nullable: bool) -> None:
        value = record.get(field)
        if value is None and nullable:
            return
        plain = isinstance(value, str) and _PLAIN_DECIMAL.fullmatch(value) is not None
        if not plain or exact_money(value) is None:
            raise self.fail(number, record, f"has {field} {_shown(value)}, not {MONEY_TEXT}"
                            + (" (or null)" if nullable else ""))

    def _call(self, number: int, record: dict[str, Any]) -> str:
        cid, seq = record.get("call_id"), record.get("seq")
        if not isinstance(cid, str) or not cid:
            raise self.fail(number, record, f"has call_id {_shown(cid)}, not a call ID")
        if not _is_int(seq) or seq < 1:
            raise self.fail(number, record, f"has seq {_shown(seq)}, not a position in the "
                            "schedule (a whole number from 1)")
        if self.plan_calls is not None:
            if cid not in self.plan_calls:
                raise self.fail(number, record, "names a call the frozen plan does not have")
            if self.plan_calls[cid] != seq:
                raise self.fail(number, record, f"has seq {seq}; the frozen plan puts this "
                                f"call at {self.plan_calls[cid]}")
        return cid

    def _after_end(self, number: int, record: dict[str, Any]) -> None:
        if self.finished is not None:
            kind, line = self.finished
            raise self.fail(number, record, f"comes after the series' {kind} record (line "
                            f"{line})")

    def _open_call(self, number: int, record: dict[str, Any]) -> str:
        """The call of a received body or an outcome, which must follow its reservation."""
        cid = self._call(number, record)
        self._after_end(number, record)
        if cid not in self.reserved:
            raise self.fail(number, record, f"records {_WHAT[record['type']]} for a call with "
                            "no reservation before it")
        if self.reserved[cid] != record["seq"]:
            raise self.fail(number, record, f"has seq {record['seq']}; the call's reservation "
                            f"has {self.reserved[cid]}")
        if cid in self.outcomes:
            raise self.fail(number, record, f"records {_WHAT[record['type']]} after the "
                            "call's outcome")
        return cid

    def _header(self, number: int, record: dict[str, Any]) -> None:
        if self.seen_records:
            raise self.fail(number, record, "is a header after the journal's first record")

    def _reserve(self, number: int, record: dict[str, Any]) -> None:
        cid = self._call(number, record)
        self._after_end(number, record)
        if cid in self.reserved:
            raise self.fail(number, record, "reserves the call a second time")
        self._money(number, record, "reserved_usd", nullable=False)
        self.reserved[cid] = record["seq"]

    def _received(self, number: int, record: dict[str, Any]) -> None:
        # Several bodies for one call are kept, not refused: a backend that retried was paid
        # for each (the collector records them all, then stops the series, `second_request`).
        self._open_call(number, record)

    def _outcome(self, number: int, record: dict[str, Any]) -> None:
        cid = self._open_call(number, record)
        status = record.get("status")
        if not isinstance(status, str) or len(status) > STATUS_MAX:
            raise self.fail(number, record, f"has status {_shown(status)}, not a status (text "
                            f"of at most {STATUS_MAX} characters)")
        self._money(number, record, "cost_usd", nullable=True)
        self._money(number, record, "counted_usd", nullable=True)
        self.outcomes.add(cid)

    def _stop(self, number: int, record: dict[str, Any]) -> None:
        reason = record.get("reason")
        if reason not in STOP_REASONS:
            raise self.fail(number, record, f"has a stop reason {_shown(reason)}, not one of "
                            f"{', '.join(STOP_REASONS)}")
        self._call(number, record)  # the call it stopped at (interrupted: the first not sent)
        self._finish(number, record)

    def _end(self, number: int, record: dict[str, Any]) -> None:
        self._finish(number, record)

    def _finish(self, number: int, record: dict[str, Any]) -> None:
        self._after_end(number, record)
        self.finished = (record["type"], number)

    def _repair(self, number: int, record: dict[str, Any]) -> None:
        pass


def read_journal(path: Path, plan_calls: Mapping[str, int] | None = None
                 ) -> list[dict[str, Any]]:
    """Every complete record, checked, its text made valid Unicode (`valid_unicode`).

    A torn last line (a crash mid-write), or a torn line that a later writer closed with a
    `repair` record, is ignored. Any other line that is not a record this module writes is a
    SeriesError naming the file, the line and what is wrong (see the module's docstring).
    With `plan_calls` (the frozen schedule's call ID -> seq), every call a record names must be
    the plan's, at its position.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SeriesError(f"{path}: cannot be read ({exc.strerror}).") from None
    reader = _Reader(path, plan_calls)
    lines = raw.split(b"\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            # Only a torn line may be unreadable: the unterminated last one, or one that the
            # next writer marked with a `repair` record.
            if number == len(lines) or b'"type": "repair"' in lines[number]:
                continue
            raise reader.fail(number, None, "is not a journal record")
        record = valid_unicode(record)
        reader.check(number, record)
        records.append(record)
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
