"""The series journal: append-only, one per series.

Every record is written with one `write` of a whole line, then fsync'ed before the caller goes
on: the reservation before a request leaves, the outcome after it returns. A crash can at worst
leave a last line without its newline; `read_journal` ignores such a torn line, and a call
whose reservation is on disk without an outcome counts as spent at its reservation.

Records (`type`), each with its time `at`: `header` (series, series_uid, experiment, budget,
backend, plan hash, calls), `reserve` (call_id, seq, reserved_usd), `received` (call_id, seq,
http_status, raw: a body as it arrived, before anything parsed it), `outcome` (call_id, seq,
status, cost_usd or null, counted_usd, the reply; its `raw` only where it is not the call's
last `received` body, so that each body is written once: readers take that body when `raw` is
absent, and an outcome written before this rule, which repeats it, reads the same), `stop`
(reason, detail, call_id, seq), `end`, and `repair` (closes a line torn by a crash). The
budget's own ledger, shared by every series drawing on it, is `fragbench.budget.ledger`.

Before anything is written, secrets are redacted (`fragbench.redact`), and text that is not
valid Unicode is escaped (`valid_text`): a lone surrogate is kept as the six characters
`\\ud83d`, so that every line is UTF-8 and every table can hold it.

A journal is data, checked like the ledger: `read_journal` refuses, in one sentence naming the
file and the line, a record that is not one this module writes (an unknown type; an amount
that is not a non-negative decimal string fit for the money columns; a call or position the
plan does not have; a second reservation or outcome of one call; a call after the series'
end). Fields it does not know are kept and ignored, so that a later version's records stay
readable.

Tamper-evident, as the budget's ledger is: every line opens with `prev`, the sha256 of the
exact bytes of the line before it (`GENESIS`, 64 zeros, for the first), and ends with
`sha256`, the sha256 of its own text without that field (`seal`). Any edit of a line (a status,
a token count, an amount, one byte) breaks its own hash; a line deleted, inserted (a copy of
another included) or moved breaks the `prev` of the line after the gap, or its own. Either is
refused in one sentence naming the file and that line, as the other checks are. A crash's torn
last line is never read, even when it parses (every write ends with its newline); the next
writer closes it with a `repair` record that chains to the last whole line and names the bytes
it closed (`torn_sha256`, `torn_bytes`), so that those bytes too are covered. What the chain
cannot show: the last lines removed (the series then reads as interrupted there, a call
without its outcome counted at its reservation), or every line from some record on rewritten
by someone who recomputes the hashes (a file's own hashes are no witness against its author).
The budget's ledger, where there is one, holds a second copy of each call's status and amounts
(never its tokens or answer); `measure` reads the journal alone and does not compare them.

A journal written by an earlier fragbench, before the chain, holds no chain fields at all: it
is read as before, unchained, and `chain_note` says so (`measure` and `report` print it), since
no edit to it can be detected. A journal whose first record carries the chain and some later
one does not, or the reverse, is refused at that line; such a journal is never appended to.
A chaining fragbench says so (`FORMAT_FIELD`) in the header, in series.json and in the budget
ledger's `series` record: a journal stripped of its chain is refused when any of them says so
(the header here, the others by `fragbench.series.folder.refuse_stripped_chain`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Context, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, BinaryIO

from fragbench.columns import MONEY_PRECISION, MONEY_SCALE, PLAIN_AMOUNT
from fragbench.errors import SeriesError
from fragbench.files import GENESIS, fsync_dir, line_hash, now
from fragbench.http.bounded_json import depth
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


CHAIN_FIELDS = ("prev", "sha256")
"""What a chained record holds beyond its own fields: first `prev`, last `sha256`."""
FORMAT_FIELD, CHAINED = "journal", "chained"
"""Where a series written by a chaining fragbench says its journal is chained
(`"journal": "chained"`): series.json, the journal's header and the budget ledger's `series`
record. A journal with no chain is read as an earlier fragbench's only when none of them says
so (`fragbench.series.folder.refuse_stripped_chain`): stripping the chain from every line is not
enough to pass an edited journal off as one written before the chain."""
_SEAL_OPEN = b', "sha256": "'
_SEAL_LEN = len(_SEAL_OPEN) + 64 + len(b'"}')
_HEX64 = re.compile(rb"[0-9a-f]{64}")


def seal(record: Mapping[str, Any], prev: str) -> bytes:
    """`record` as a chained journal line (UTF-8, no newline): `prev` first, then the record's
    fields, then `sha256`, the hash of the line's text without it (`{"prev": ..., ...}`). A
    chain field the record already holds is replaced."""
    fields = {"prev": prev, **{k: v for k, v in record.items() if k not in CHAIN_FIELDS}}
    body = json.dumps(fields, ensure_ascii=False).encode("utf-8")
    return body[:-1] + _SEAL_OPEN + line_hash(body).encode() + b'"}'


def chain(records: Iterable[Mapping[str, Any] | str | bytes], prev: str = GENESIS) -> bytes:
    """Journal lines for `records`, each chained to the one before and sealed (`seal`), each
    with its newline; a line given as text or bytes is kept as it is, and the next record
    chains to it. (How a test writes a journal by hand; a journal is written by `Journal`.)"""
    out = []
    for record in records:
        line = record.encode("utf-8") if isinstance(record, str) else \
            record if isinstance(record, bytes) else seal(record, prev)
        out.append(line + b"\n")
        prev = line_hash(line)
    return b"".join(out)


def _sealed(line: bytes) -> bool:
    """Whether a line ends with `sha256` and that is the hash of its text without it."""
    end = line[-_SEAL_LEN:]
    digest = end[len(_SEAL_OPEN):-2]
    return (len(line) > _SEAL_LEN and end.startswith(_SEAL_OPEN) and end.endswith(b'"}')
            and _HEX64.fullmatch(digest) is not None
            and line_hash(line[:-_SEAL_LEN] + b"}") == digest.decode())


# Text that is not valid Unicode ------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""Where JSON text (valid Unicode itself) can decode to a lone surrogate: only a \\uD800-
\\uDFFF escape. Text without one skips `valid_unicode`'s walk, which costs a Python call per
string."""
_ESCAPE_IN_LINE = re.compile(rb"\\u[dD][89a-fA-F]")
_ENCODED_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")


def _may_hold_surrogate(line: bytes) -> bool:
    """`SURROGATE_ESCAPE` for a journal line's bytes, which `json.loads` decodes with
    surrogatepass: an escape, or a surrogate encoded as UTF-8 bytes (ED A0-BF). The
    substring tests first: a regular expression over every byte of a large journal costs
    more than the read."""
    return (b"\\u" in line and _ESCAPE_IN_LINE.search(line) is not None) or (
        b"\xed" in line and _ENCODED_SURROGATE.search(line) is not None)


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
    is written, so that every line is UTF-8. Each line is chained to the one before and sealed
    (`seal`); appends from several threads take turns."""

    def __init__(self, path: Path, redactor: Redactor | None = None) -> None:
        self.path = path
        self.redactor = redactor or Redactor()
        self._lock = threading.Lock()
        self._head = GENESIS
        """The sha256 of the last whole line: the next line's `prev`."""
        self._stale = False
        """A write failed: what the file holds is read again before the next one."""
        created = not path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if created:
                fsync_dir(path.parent)
            elif path.stat().st_size:
                self._resume()
        except BaseException:
            os.close(self._fd)
            raise

    def _resume(self) -> None:
        """Take up the chain where the file leaves it (an existing journal, or one whose last
        write failed): its head, and a `repair` closing a last line a crash tore, chained to
        the last whole line and naming the torn bytes. A journal that is altered, or written
        before the chain, is refused (SeriesError): nothing is appended to it."""
        reader, tail = _read(self.path, None)
        if reader.chained is False:
            raise SeriesError(f"{self.path}: was written before the journal was chained (line "
                              f"{reader.first} has no chain fields) and is never appended "
                              "to; record into a new series.")
        self._head = reader.head
        if tail:
            # A crash tore the last line: end it, and say so, so that what follows is whole.
            repair = seal({"at": now(), "type": "repair", "torn_sha256": line_hash(tail),
                           "torn_bytes": len(tail),
                           "note": "the line above was torn by a crash"}, self._head)
            self._write(b"\n" + repair + b"\n")
            self._head = line_hash(repair)

    def append(self, record: dict[str, Any]) -> None:
        # Made valid before the redactor sees it (it need not know surrogates) and after (it
        # may decode escapes in a body it rewrites).
        plain = _within_bounds({"at": now(), **record})
        full = valid_unicode(self.redactor.value(plain))
        if full != plain:
            # Say so: a redacted answer may no longer quote its evidence word for word.
            full["redacted"] = True
        with self._lock:
            if self._stale:
                self._resume_after_failure()
            # Sealed after redaction: the hashes are ours, never a secret, and must stay
            # the hashes of the bytes written.
            line = seal(full, self._head)
            self._write(line + b"\n")
            self._head = line_hash(line)

    def _resume_after_failure(self) -> None:
        """`_resume` after a write that failed. A journal that cannot be taken up then is a
        write that fails (OSError, naming the file), as its cause was: the collector stops
        the series as `cannot_record`, and records nothing more."""
        try:
            self._resume()
        except SeriesError as exc:
            why = str(exc).removeprefix(f"{self.path}: ")
            raise OSError(errno.EIO, f"cannot be continued after a failed write: {why}",
                          str(self.path)) from None
        self._stale = False

    def _write(self, data: bytes) -> None:
        """One write, fsync'ed. On any failure (a short write on a full disk, an fsync that
        fails) the chain's head is no longer known: the next append reads the file again, and
        closes a torn line first."""
        self._stale = True
        written = os.write(self._fd, data)
        if written != len(data):  # a short write on a full disk: refuse to go on blind
            raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes "
                          "written; is the disk full?", str(self.path))
        os.fsync(self._fd)
        self._stale = False

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
               "budget": "text", "plan_sha256": "text", "calls": "count",
               FORMAT_FIELD: "text"},
    "reserve": {},
    "received": {"http_status": "http_status", "raw": "text"},
    "outcome": {"failure": "text", "http_status": "http_status", "error": "text",
                "request_id": "text", "model": "text", "service_tier": "text",
                "usage": "usage", "cost_unknown": "text", "never_sent": "flag", "text": "text",
                "refusal": "text", "incomplete_reason": "text", "raw": "text"},
    "stop": {"detail": "text"},
    "end": {},
    "repair": {"note": "text", "torn_sha256": "text", "torn_bytes": "count"},
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
        self.records: list[dict[str, Any]] = []
        self.chained: bool | None = None
        """Whether the journal's records carry the chain, as its first record says; None
        before it."""
        self.first = 0
        """The line of the journal's first record."""
        self.head = GENESIS
        self.head_line = 0
        """The sha256 of the last line accepted, and its number (0: none yet)."""
        self.blank: int | None = None
        """The first blank line: no line of a chained journal is blank."""
        self.torn: tuple[int, bytes] | None = None
        """The line the next record (a `repair`) closes, and its bytes."""

    def fail(self, number: int, record: Any, what: str) -> SeriesError:
        call = record.get("call_id") if isinstance(record, dict) else None
        where = f"line {number}" + (f" (call {call})" if isinstance(call, str) else "")
        return SeriesError(f"{self.path}: {where} {what}; the journal was altered or damaged: "
                           "restore it from your backup, then run the command again.")

    def check(self, number: int, record: Any, line: bytes) -> None:
        """One record, its exact bytes `line`: its chain first (whether the line is the one
        written, after the one written before it), then what it says."""
        if not isinstance(record, dict):
            raise self.fail(number, record, "is not a journal record")
        self._chain(number, record, line)
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
        self.head, self.head_line = line_hash(line), number

    def _chain(self, number: int, record: dict[str, Any], line: bytes) -> None:
        chained = any(field in record for field in CHAIN_FIELDS)
        if self.chained is None:
            self.chained, self.first = chained, number
            if chained and self.blank is not None:
                raise self.fail(self.blank, None, "is blank, not a journal record")
        if not self.chained:
            if chained:
                raise self.fail(number, record, "carries the chain (prev, sha256) though the "
                                f"journal's first record (line {self.first}) does not: a "
                                "journal is chained throughout or, written before the chain, "
                                "not at all")
            return
        if not isinstance(record.get("sha256"), str):
            raise self.fail(number, record, "has no sha256 of its own, as every line of a "
                            "chained journal has")
        if not _sealed(line):
            raise self.fail(number, record, "does not match its own sha256: the line was "
                            "edited")
        if record.get("prev") != self.head:
            after = (f"line {self.head_line}" if self.head_line
                     else "the start of the journal (genesis)")
            if self.torn is not None:  # a repair: it chains past the line it closes
                after += f", the last whole line before the torn line {self.torn[0]} it closes"
            raise self.fail(number, record, f"does not follow {after}: its prev is not that "
                            "line's sha256 (a line was deleted, inserted or moved)")

    def torn_line(self, number: int, line: bytes) -> None:
        """A line that the next one, a `repair`, closes: torn by a crash, never read."""
        if self.torn is not None:  # a repair, itself closed by another: no writer does that
            raise self.fail(self.torn[0], None, "is not a journal record")
        self.torn = (number, line)

    def blank_line(self, number: int) -> None:
        if self.chained:
            raise self.fail(number, None, "is blank, not a journal record")
        if self.blank is None:
            self.blank = number

    def _money(self, number: int, record: dict[str, Any], field: str, nullable: bool) -> None:
        value = record.get(field)
        if value is None and nullable:
            return
        plain = isinstance(value, str) and PLAIN_AMOUNT.fullmatch(value) is not None
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
        if not self.chained and record.get(FORMAT_FIELD) is not None:
            # Written by a chaining fragbench, yet no line carries the chain: it was stripped.
            raise self.fail(number, record, f"is the header of a chained journal ("
                            f"{FORMAT_FIELD}: {_shown(record.get(FORMAT_FIELD))}), yet no line "
                            "carries the chain (prev, sha256): it was stripped")

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
        torn, self.torn = self.torn, None
        if not self.chained:
            return  # written before the chain: it named no bytes
        if torn is None:
            raise self.fail(number, record, "is a repair with no torn line before it")
        closed, data = torn
        if record.get("torn_sha256") != line_hash(data) or record.get("torn_bytes") != len(data):
            raise self.fail(number, record, f"does not name the bytes of the torn line it "
                            f"closes (line {closed}): one of them was edited")


def read_journal(path: Path, plan_calls: Mapping[str, int] | None = None
                 ) -> list[dict[str, Any]]:
    """Every complete record, checked, its text made valid Unicode (`valid_unicode`).

    A torn last line (a crash mid-write: no newline after it, whatever it holds), or a torn
    line that a later writer closed with a `repair` record, is ignored. Any other line that is
    not a record this module writes, or that breaks the chain (see the module's docstring), is
    a SeriesError naming the file, the line and what is wrong. With `plan_calls` (the frozen
    schedule's call ID -> seq), every call a record names must be the plan's, at its position.
    """
    return _read(path, plan_calls)[0].records


def _read(path: Path, plan_calls: Mapping[str, int] | None) -> tuple[_Reader, bytes]:
    """The journal read and checked, and its torn last line (empty when it ends whole).

    Line by line, one line ahead (a repair record closes the line before it): the file is
    never held whole beside its records, which at 100,000 calls is a gigabyte of bytes twice
    over (the file and its lines)."""
    reader = _Reader(path, plan_calls)
    tail = b""

    def whole_lines(fh: BinaryIO) -> Iterator[bytes]:
        nonlocal tail
        for piece in fh:
            if piece.endswith(b"\n"):
                yield piece[:-1]
            else:  # after the last newline: a line a crash tore
                tail = piece

    try:
        with open(path, "rb") as fh:
            lines = whole_lines(fh)
            line = next(lines, None)
            following = _parse(line) if line is not None else None
            number = 0
            while line is not None:
                number += 1
                ahead = next(lines, None)
                record, following = following, _parse(ahead) if ahead is not None else None
                if _is_repair(following):
                    # Closed by the next writer's repair: torn, whatever it holds.
                    reader.torn_line(number, line)
                elif not line.strip():
                    reader.blank_line(number)
                elif record is None:
                    raise reader.fail(number, None, "is not a journal record")
                else:
                    if _may_hold_surrogate(line):  # most lines hold none: no walk
                        record = valid_unicode(record)
                    reader.check(number, record, line)
                    reader.records.append(record)
                line = ahead
    except OSError as exc:
        raise SeriesError(f"{path}: cannot be read ({exc.strerror}).") from None
    return reader, tail


def _is_repair(record: Any) -> bool:
    return isinstance(record, dict) and record.get("type") == "repair"


def chain_note(path: Path) -> str | None:
    """A line saying that a journal predates the chain (none of its records carries one), or
    None. Its first record decides: a journal that mixes both is refused when read."""
    try:
        with open(path, "rb") as fh:
            for line in fh:
                record = _parse(line.rstrip(b"\n"))
                if isinstance(record, dict):
                    if any(field in record for field in CHAIN_FIELDS):
                        return None
                    return (f"note: {path} was written before the journal was chained (no "
                            "record carries prev or sha256): it is read as before, but an edit "
                            "to it cannot be detected; keep a copy of it with your backup.")
    except OSError:
        return None
    return None


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
