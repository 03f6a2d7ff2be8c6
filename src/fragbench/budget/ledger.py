"""The budget ledger: one per budget id, wherever the experiments that draw on it live.

A budget is money on an account, so its memory cannot belong to one experiment folder: a copied
folder would start with an empty ledger and believe the whole budget free. Every experiment
naming budget id X draws on the one file `X.jsonl` in the ledger store: `$FRAGBENCH_LEDGER_DIR`
if set, else `$XDG_DATA_HOME/fragbench/ledgers` (`~/.local/share/fragbench/ledgers`). Point
FRAGBENCH_LEDGER_DIR at a folder you commit or back up if the budget must follow you to another
machine.

The first record fixes the budget (id, ceiling, prior spend). Then come the `reserve` and
`outcome` records of every series drawing on it (accounting fields only: amounts, call and
series identifiers, statuses; never an answer or a body), and any `ceiling` record: a raise
(`fragbench ledger raise`, `raise_ceiling`), naming the ceiling it replaces, the new one and the
reason, chained like any other. A ceiling is only ever raised: a record lowering it, or naming
another ceiling than the one in force, is an altered ledger. One budget has one ceiling at a
time: a run or plan whose config names another ceiling than the one in force, or another prior
spend, is refused when it first reads the ledger (`_check_config`). A run already going when the
ceiling is raised keeps the ceiling its plan froze, the lower one.

Tamper-evident: each record carries its number `n` and `prev`, the sha256 of the line before
it. A hand-edited line (a negative or unparsable amount, a changed number, a deleted or
inserted line) breaks the chain or the checks, and the ledger is refused with one sentence,
never trusted. What the chain cannot show is the removal of the last lines; a determined forger
can also rewrite every hash. A crash can tear only the last line: it is ignored when reading,
and the next writer closes it with a `repair` record.

The running total is kept in memory and updated from what the file gained since it was last
read, so a call's bookkeeping does not grow with the ledger.

Two stores hold ledgers, with the same records and the same chain: this file store (the
default), and a PostgreSQL server when `FRAGBENCH_LEDGER_URL=postgresql://...` is set
(`fragbench.budget.ledger_pg`: a budget a team shares, the rule checked under a lock per budget held
on the server). `fragbench.budget.stores.ledger_for` picks the store; setting both
FRAGBENCH_LEDGER_URL and FRAGBENCH_LEDGER_DIR is refused, since a budget counted in two stores
is counted twice. Every record's hash is the sha256 of its canonical text (`record_text`: the
JSON a file line holds), so a ledger moved from the file store into the server (`fragbench
ledger move`) keeps its hashes; the file is first retired by a `moved` record naming the server
(written before the copy commits, so that the budget is never live in both stores), and is
refused for any further run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NamedTuple

from fragbench.budget.money import Budget, usd
from fragbench.columns import PLAIN_AMOUNT
from fragbench.errors import FragbenchError
from fragbench.files import (
    GENESIS,
    fsync_dir,
    line_hash,  # the series journal's chain hashes alike
    make_dirs,
    now,
)
from fragbench.redact import Redactor

LEDGER_ENV = "FRAGBENCH_LEDGER_DIR"
LEDGER_URL_ENV = "FRAGBENCH_LEDGER_URL"
KINDS = ("budget", "series", "reserve", "outcome", "repair", "moved", "ceiling")
"""Every record type a ledger may hold."""
LEDGER_FIELDS = ("type", "call_id", "seq", "reserved_usd", "status", "cost_usd", "counted_usd")
"""A journal record's fields the ledger copies (with the series' name and uid): accounting
only, never an answer or a body."""
REASON_MAX = 500
"""The most characters a raise's reason may have (one line of `fragbench ledger show`)."""


class LedgerError(FragbenchError):
    """The budget's ledger is unusable: unreadable, altered, or for another budget."""


class LedgerServerError(LedgerError):
    """The ledger's server cannot be used (down, unreachable, a refused login, missing rights):
    nothing is known about the ledger's records, which are neither read nor judged."""


def ledger_dir() -> Path:
    configured = os.environ.get(LEDGER_ENV, "").strip()
    if configured:
        if not Path(configured).is_absolute():
            # A relative folder would be another ledger from every working directory.
            raise LedgerError(f"{LEDGER_ENV}={configured}: give an absolute path, so that "
                              "every run drawing on a budget finds the same ledger.")
        return Path(configured)
    data = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(data) if data and Path(data).is_absolute() else Path.home() / ".local" / "share"
    return base / "fragbench" / "ledgers"


def ledger_path(budget_id: str) -> Path:
    return ledger_dir() / f"{budget_id}.jsonl"


def ledger_url() -> str | None:
    """The server FRAGBENCH_LEDGER_URL names, or None for the file store. Both it and
    FRAGBENCH_LEDGER_DIR set is refused: which store counts a budget must never be a guess."""
    url = os.environ.get(LEDGER_URL_ENV, "").strip()
    if not url:
        return None
    if os.environ.get(LEDGER_ENV, "").strip():
        raise LedgerError(f"{LEDGER_URL_ENV} and {LEDGER_ENV} are both set: a budget is counted "
                          "in one store; unset one of them (nothing was sent).")
    return url


STORE_HELP = (f"set {LEDGER_ENV} (an absolute path) to use another store; without it the "
              "store is $XDG_DATA_HOME/fragbench/ledgers, else ~/.local/share/fragbench/ledgers")
"""How to point at another ledger store, for the lines that name the store."""


def _why(exc: OSError) -> str:
    """An OSError's reason, once (its message when it has no strerror)."""
    return exc.strerror or str(exc)


def record_text(record: dict[str, Any]) -> bytes:
    """A record's canonical text, the one its successor's `prev` hashes in either store."""
    return json.dumps(record, ensure_ascii=True).encode()


def _parse(raw: bytes) -> Any:
    """The record on a line, or None when the line is not JSON (torn by a crash)."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _is_repair(record: Any) -> bool:
    return isinstance(record, dict) and record.get("type") == "repair"


def amount_of(value: Any) -> Decimal | None:
    """A non-negative finite decimal written as a string, or None when it is not one."""
    if not isinstance(value, str) or PLAIN_AMOUNT.fullmatch(value) is None:
        return None  # Decimal() would also read "١٢", "1_2", " 12" and "1e2"
    try:
        amount = Decimal(value)
    except InvalidOperation:
        return None
    return amount if amount.is_finite() and amount >= 0 else None


class LedgerBase:
    """What both stores share: the records checked one by one (chain, genesis, amounts, each
    call's reservation and outcome) and the running totals. A store reads and writes the
    records (`load`, `refresh`, `open`, `locked`, `append`, `close`) and names itself
    (`where`: the ledger; `store`: what holds it)."""

    unit = "line"
    """What a message calls one record's place: a file's line, a server's record."""
    restore = "restore it from your backup or version control"
    store_help = ""
    """How to point at another store, for the lines that name the store."""

    def __init__(self, budget: Budget | str) -> None:
        self.budget_id = budget if isinstance(budget, str) else budget.id
        self.budget: Budget | None = None if isinstance(budget, str) else budget
        """The config's budget: the genesis record must fix the same; None to read any."""
        self.audit = False
        """Reading to show or audit: a ledger moved to another store is read, not refused."""
        self.kept: list[tuple[bytes, dict[str, Any]]] | None = None
        """When a list: every accepted record with its canonical text, in order."""
        self._redactor = Redactor()
        self._config_checked = False
        """Whether the config's budget was compared with the ledger's (once, at the first
        read that finds records): a ceiling raised while a run goes on leaves that run under
        its plan's lower ceiling, never stopped."""
        self._reset()

    def _reset(self) -> None:
        """Forget what was read: the next read starts from the first record."""
        self._n = -1
        self._last = GENESIS
        self._last_place = 0
        """Where the last record accepted is (its line in a file, its number on a server)."""
        self._reserved: dict[tuple[str, str], Decimal] = {}
        self._counted: dict[tuple[str, str], Decimal] = {}
        self._total = Decimal(0)
        self.ceiling: Decimal | None = None
        self.prior: Decimal | None = None
        """The ceiling in force (the genesis record's, or the last raise's) and the prior
        spend the genesis record fixes, once read."""
        self.first_ceiling: Decimal | None = None
        """The ceiling the genesis record fixed, before any raise."""
        self.moved_to: str | None = None
        self.series: set[str] = set()
        """Uids of the series that drew on the budget."""
        if self.kept is not None:
            self.kept = []

    @property
    def where(self) -> str:
        raise NotImplementedError

    @property
    def store(self) -> str:
        raise NotImplementedError

    def exists(self) -> bool:
        raise NotImplementedError

    def _fail(self, message: str) -> LedgerError:
        return LedgerError(f"ledger {self.where}: {message}; it is never trusted as it is: "
                           f"{self.restore} (see docs/running.md, 'The budget ledger').")

    def _check_moved(self) -> None:
        if self.moved_to is not None and not self.audit:
            raise LedgerError(
                f"ledger {self.where}: budget {self.budget_id!r} was moved to the server "
                f"{self.moved_to}; set {LEDGER_URL_ENV} to that server (and unset "
                f"{LEDGER_ENV}) to draw on it (nothing was sent).")

    @property
    def head(self) -> str:
        """The sha256 of the last record accepted (the chain's head)."""
        return self._last

    def open_reservations(self) -> dict[tuple[str, str], Decimal]:
        """(series uid, call id) -> reservation, for every call with no outcome yet: a call
        in flight, or one a crash left counted at its reservation."""
        return {k: v for k, v in self._reserved.items() if k not in self._counted}

    def _apply(self, record: Any, raw: bytes, line: int, chained: str | None = None) -> None:
        """Check and count one record at `line`. `chained`: the hash the record after it
        chains to (its `prev`, or the head a server keeps for the last record), when known,
        so that a break names the record edited rather than the one after it."""
        if not isinstance(record, dict):
            raise self._fail(f"{self.unit} {line} is not a ledger record")
        if record.get("n") != self._n + 1 or record.get("prev") != self._last:
            raise self._fail(self._break(record, raw, line, chained))
        u = self.unit
        kind = record.get("type")
        if self.moved_to is not None:
            raise self._fail(f"{u} {line} follows the record saying the ledger was moved")
        if self._n == -1:
            self._check_genesis(record, line)
        elif kind == "reserve":
            key, amount = self._key(record, line), self._money(record, "reserved_usd", line)
            if key in self._reserved:
                raise self._fail(f"{u} {line} reserves call {key[1]} of series {key[0]} "
                                 "twice")
            self._reserved[key] = amount
            self._total += amount
            self.series.add(key[0])
        elif kind == "outcome":
            key, amount = self._key(record, line), self._money(record, "counted_usd", line)
            if key in self._counted:  # counted twice, a spend the ledger never had
                raise self._fail(f"{u} {line} records a second outcome for call {key[1]} of "
                                 f"series {key[0]}")
            if key not in self._reserved:
                raise self._fail(f"{u} {line} records an outcome with no open reservation")
            self._counted[key] = amount
            self._total += amount - self._reserved[key]
        elif kind == "moved":
            to = record.get("to")
            if not isinstance(to, str) or not to:
                raise self._fail(f"{u} {line} says the ledger was moved, but not where to")
            self.moved_to = to
        elif kind == "ceiling":
            new = self._money(record, "ceiling_usd", line)
            problem = self._raise_problem(record, new)
            if problem is not None:
                raise self._fail(f"{u} {line} {problem}")
            self.ceiling = new
        elif kind not in ("series", "repair"):
            raise self._fail(f"{u} {line} has an unknown type {kind!r}")
        self._n += 1
        self._last = line_hash(raw)
        self._last_place = line
        if self.kept is not None:
            self.kept.append((raw, record))

    def _break(self, record: dict[str, Any], raw: bytes, line: int, chained: str | None
               ) -> str:
        """Which record a break of the chain before `line` shows altered. A record's text is
        vouched for by the record after it (its `prev`): when the one after `line` vouches for
        it, `line` is intact and the record before it was edited; when it does not, `line`
        itself was edited; with nothing after it, either. A number out of sequence is a
        record deleted or inserted (or renumbered)."""
        u, before = self.unit, self._last_place
        if record.get("n") != self._n + 1:
            return (f"{u} {line} does not follow the {u} before it (it is numbered "
                    f"{record.get('n')!r}, not {self._n + 1}: a {u} was deleted or inserted, "
                    "or renumbered)")
        if self._n < 0:
            return f"{u} {line} was edited (it does not open the chain)"
        if chained is None:
            return (f"{u} {before} or {u} {line} was edited ({u} {line} does not follow the "
                    f"{u} before it)")
        if chained == line_hash(raw):
            if self.kept:  # shown as read, the edited record is not shown as good
                self.kept.pop()
            return (f"{u} {before} was edited (the {u} after it, intact, chains to another "
                    "text)")
        return f"{u} {line} was edited (neither it nor the {u} after it follows the one before)"

    def _raise_problem(self, record: dict[str, Any], new: Decimal | None) -> str | None:
        """What is wrong with a `ceiling` record (`new`: its ceiling_usd read as an amount),
        said after "record N" or "refused to write a raise that"; None when it is a raise of
        the ceiling in force, with a reason."""
        old = amount_of(record.get("previous_ceiling_usd"))
        if new is None:
            return f"has an invalid ceiling_usd ({record.get('ceiling_usd')!r})"
        if self.ceiling is None or old != self.ceiling:
            return (f"raises a ceiling of {record.get('previous_ceiling_usd')!r} USD, not the "
                    f"one in force ({self.ceiling} USD)")
        if new <= old:
            return (f"sets the ceiling to {usd(new)} USD, not above the {usd(old)} USD in "
                    "force: a ceiling is only ever raised")
        reason = record.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            return "gives no reason for the raise"
        return None

    def _check_new(self, record: dict[str, Any]) -> None:
        """Refuse, before it is written, a record the reader would refuse: a second
        reservation or outcome of one call, an outcome with no reservation, a `ceiling`
        record that is no raise of the ceiling in force (a bug that wrote it would leave a
        ledger no run can read again)."""
        if record.get("type") == "ceiling":
            problem = self._raise_problem(record, amount_of(record.get("ceiling_usd")))
            if problem is not None:
                raise LedgerError(f"ledger {self.where}: refused to write a raise that "
                                  f"{problem} (nothing was written).")
            return
        if record.get("type") not in ("reserve", "outcome"):
            return
        key = (record.get("series_uid"), record.get("call_id"))
        if record["type"] == "reserve" and key in self._reserved:
            problem = "a second reservation"
        elif record["type"] == "outcome" and key in self._counted:
            problem = "a second outcome"
        elif record["type"] == "outcome" and key not in self._reserved:
            problem = "an outcome with no reservation"
        else:
            return
        raise LedgerError(f"ledger {self.where}: refused to write {problem} for call "
                          f"{key[1]} of series {key[0]} (nothing was written).")

    def _money(self, record: dict[str, Any], field: str, line: int) -> Decimal:
        amount = amount_of(record.get(field))
        if amount is None:
            raise self._fail(f"{self.unit} {line} has an invalid {field} "
                             f"({record.get(field)!r})")
        return amount

    def _key(self, record: dict[str, Any], line: int) -> tuple[str, str]:
        uid, call = record.get("series_uid"), record.get("call_id")
        if not isinstance(uid, str) or not isinstance(call, str):
            raise self._fail(f"{self.unit} {line} lacks its series_uid or call_id")
        return uid, call

    def _check_genesis(self, record: dict[str, Any], line: int) -> None:
        if record.get("type") != "budget":
            raise self._fail(f"{self.unit} {line} should open the ledger with its budget")
        if record.get("id") != self.budget_id:
            raise self._fail(f"belongs to budget {record.get('id')!r}, not {self.budget_id!r}")
        ceiling = amount_of(record.get("ceiling_usd"))
        prior = amount_of(record.get("prior_spend_usd"))
        if ceiling is None or prior is None:
            raise self._fail(f"{self.unit} {line} has an invalid ceiling or prior spend")
        self.ceiling, self.prior, self.first_ceiling = ceiling, prior, ceiling

    def _check_config(self) -> None:
        """The config's budget against the ledger's, once, after the first read that finds
        records: the same prior spend, and the ceiling in force (the genesis record's, or the
        last raise's). Another ceiling is refused, saying how to agree: `fragbench ledger
        raise` for a higher one, the config set to the ledger's for a lower one."""
        b = self.budget
        if b is None or self._config_checked or self._n < 0 or self.moved_to is not None:
            return
        ceiling, prior = self.ceiling, self.prior
        assert ceiling is not None and prior is not None
        raised = ("" if ceiling == self.first_ceiling else
                  f", raised from the {usd(self.first_ceiling or Decimal(0))} USD of its first "
                  "record")
        if prior != b.prior_spend_usd:
            raise LedgerError(
                f"budget {b.id!r} is already recorded in {self.where} with ceiling "
                f"{usd(ceiling)} USD{raised} and prior spend {usd(prior)} USD, but the config "
                f"says {usd(b.ceiling_usd)} and {usd(b.prior_spend_usd)}: one budget has one "
                "ceiling and one prior spend; give this experiment a budget id of its own or "
                "fix its config (nothing was sent).")
        if ceiling != b.ceiling_usd:
            if b.ceiling_usd > ceiling:
                how = (f"to spend up to {usd(b.ceiling_usd)} USD, raise the ledger's ceiling "
                       f"first: `fragbench ledger raise {b.id} --ceiling {usd(b.ceiling_usd)} "
                       "--reason TEXT`, then run again")
            else:
                how = (f"set ceiling_usd = \"{usd(ceiling)}\" in the config and freeze again "
                       "(a ceiling is never lowered)")
            raise LedgerError(
                f"budget {b.id!r} is already recorded in {self.where} with ceiling "
                f"{usd(ceiling)} USD{raised}, but the config says {usd(b.ceiling_usd)}: one "
                f"budget has one ceiling at a time; {how}, or give this experiment a budget "
                "id of its own (nothing was sent).")
        self._config_checked = True

    def spent(self) -> Decimal:
        """What the budget's series count: each call's counted amount (its cost when known),
        else its whole reservation."""
        return self._total

    def series_calls(self, series_uid: str) -> dict[str, Decimal | None]:
        """Call id -> what the ledger counts for it, for every call series `series_uid`
        reserved; None for a reservation with no outcome yet (counted at the reservation)."""
        return {call: self._counted.get((uid, call)) for uid, call in self._reserved
                if uid == series_uid}

    @property
    def records(self) -> int:
        """How many records have been read and accepted, the budget's opening one included."""
        return self._n + 1

    def genesis(self) -> dict[str, Any]:
        """The record that opens a new ledger: the config's budget."""
        if self.budget is None:
            raise LedgerError(f"ledger {self.where}: holds no record of budget "
                              f"{self.budget_id!r}; a run drawing on it starts it.")
        b = self.budget
        return {"type": "budget", "id": b.id, "ceiling_usd": usd(b.ceiling_usd),
                "prior_spend_usd": usd(b.prior_spend_usd)}

    def raise_ceiling(self, ceiling: Decimal, reason: str) -> dict[str, Any]:
        """Raise the budget's ceiling to `ceiling`, for `reason`: a `ceiling` record naming
        the ceiling in force it replaces, appended under the ledger's lock (the ledger open,
        brought up to date), chained and redacted as any record. Refused, with nothing
        written, when the ledger holds no budget yet or `ceiling` is not above the ceiling in
        force (a ceiling is never lowered: a run going on under it keeps its plan's). Returns
        the record as given to `append`."""
        with self.locked():
            if self.ceiling is None:
                raise LedgerError(f"ledger {self.where}: holds no record of budget "
                                  f"{self.budget_id!r}, so there is no ceiling to raise: set "
                                  "ceiling_usd in the config and freeze again, and the first "
                                  "run records it (nothing was written).")
            if ceiling <= self.ceiling:
                raise LedgerError(
                    f"--ceiling {usd(ceiling)}: is not above budget {self.budget_id}'s ceiling "
                    f"in force, {usd(self.ceiling)} USD (ledger {self.where}): a ceiling is "
                    "only ever raised, never lowered or set again (nothing was written).")
            record = {"type": "ceiling", "previous_ceiling_usd": usd(self.ceiling),
                      "ceiling_usd": usd(ceiling), "reason": reason}
            self.append(record)
        return record

    def load(self) -> LedgerBase:
        raise NotImplementedError

    def refresh(self) -> None:
        raise NotImplementedError

    def open(self, redactor: Redactor) -> LedgerBase:
        raise NotImplementedError

    def locked(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def append(self, record: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Ledger(LedgerBase):
    """A budget's ledger in the file store, read and checked; `open` it to append (under its
    lock: flock on the file)."""

    store_help = STORE_HELP

    def __init__(self, path: Path, budget: Budget | str) -> None:
        self.path = path
        self._fd: int | None = None
        self._offset = 0
        self._line = 0
        """Lines read and accepted (what `_offset` covers)."""
        self._needs_newline = False
        self._needs_repair = False
        super().__init__(budget)

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def store(self) -> str:
        return str(self.path.parent)

    def exists(self) -> bool:
        return self.path.exists()

    # Reading ---------------------------------------------------------------------------------

    def _check_file(self) -> None:
        if self.path.is_symlink() and not self.path.exists():
            raise self._fail("is a dangling symbolic link")
        if self.path.exists() and not self.path.is_file():
            raise self._fail("is not a regular file")

    def load(self) -> Ledger:
        """Read and check the whole ledger (if it exists yet). Returns self."""
        self._check_file()
        if self.path.exists():
            self.refresh()
        return self

    def _read_new(self) -> bytes:
        """What the file gained since last read: through the open descriptor when there is one
        (the file this run writes and locks), by path otherwise."""
        try:
            if self._fd is not None:
                size = os.fstat(self._fd).st_size
                return os.pread(self._fd, max(size - self._offset, 0), self._offset)
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                return fh.read()
        except OSError as exc:
            raise self._fail(f"cannot be read ({exc.strerror})") from None

    def refresh(self) -> None:
        """Read what the file gained since last time; check each new record.

        Only a crash can leave lines that are not records: a last line without its newline
        (torn), later closed by the next writer's `repair` record. So a line that does not
        parse, or that parses but is followed by a `repair`, is torn; torn lines are accepted
        right before a `repair`, or at the very end, where they are left unread for the next
        writer to close. Anything else unreadable is an alteration, and refused.
        """
        data = self._read_new()
        end = data.rfind(b"\n")
        tail = data[end + 1:]
        lines = data[:end].split(b"\n") if end >= 0 else []
        parsed = [_parse(raw) for raw in lines]
        consumed_bytes = consumed_lines = position = 0
        torn_first: int | None = None
        for i, (raw, record) in enumerate(zip(lines, parsed, strict=True)):
            position += len(raw) + 1
            number = self._line + i + 1
            following = parsed[i + 1] if i + 1 < len(parsed) else None
            if record is None or (_is_repair(following) and not _is_repair(record)):
                torn_first = torn_first or number
                continue
            if torn_first is not None and not _is_repair(record):
                raise self._fail(f"line {torn_first} is not a ledger record")
            chained = following.get("prev") if isinstance(following, dict) else None
            self._apply(record, raw, number, chained if isinstance(chained, str) else None)
            torn_first = None
            consumed_bytes, consumed_lines = position, i + 1
        self._offset += consumed_bytes
        self._line += consumed_lines
        self._needs_newline = bool(tail)
        self._needs_repair = bool(tail) or torn_first is not None
        self._check_moved()
        self._check_config()

    # Writing ---------------------------------------------------------------------------------

    def open(self, redactor: Redactor) -> Ledger:
        """Open for appending, creating the store and the ledger (with its budget record) if
        needed. Everything written is redacted."""
        self._check_file()
        self._redactor = redactor
        try:
            make_dirs(self.path.parent)
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            if created:
                fsync_dir(self.path.parent)
        except OSError as exc:
            raise LedgerError(f"ledger {self.path}: cannot be created or opened "
                              f"({_why(exc)}); make {self.path.parent} writable, with room on "
                              f"its disk, or set {LEDGER_ENV} to a folder that is (nothing "
                              "was sent).") from None
        try:
            with self.locked():
                if self._n == -1:
                    self._append(self.genesis())
        except LedgerError:
            self.close()
            raise
        except OSError as exc:  # a full disk, a file-size limit: nothing was counted yet
            if created:
                # An empty or torn ledger of our own making: gone, so that the next run starts
                # it cleanly rather than finding a file that holds no budget.
                with contextlib.suppress(OSError):
                    self.path.unlink()
            self.close()
            raise LedgerError(f"ledger {self.path}: cannot be written ({_why(exc)}); free space "
                              f"on the disk that holds {self.path.parent}, or set {LEDGER_ENV} "
                              "to a folder with room, then run again (nothing was sent)."
                              ) from None
        return self

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock across processes, and the ledger brought up to date: two runs
        drawing on one budget take turns between the balance check and the reservation."""
        assert self._fd is not None, "open the ledger first"
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            try:
                same = os.path.samestat(os.fstat(self._fd), os.stat(self.path))
            except OSError:
                same = False
            if not same:  # renamed over or deleted: our writes and lock would go unseen
                raise self._fail("was replaced or removed while this run was using it; "
                                 "every run drawing on a budget must write the same file")
            self.refresh()
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def append(self, record: dict[str, Any]) -> None:
        """Append under the lock (`with ledger.locked(): ...`)."""
        self._append(record)

    def _append(self, record: dict[str, Any]) -> None:
        """One write: the newline that ends a torn line, the `repair` that says so, the
        record. A crash can then tear only this write's last bytes, never leave a line
        closed but unrepaired."""
        assert self._fd is not None
        self._check_new(record)
        data = b"\n" if self._needs_newline else b""
        n, prev = self._n + 1, self._last
        if self._needs_repair:
            repair = record_text({"n": n, "prev": prev, "at": now(), "type": "repair",
                                  "note": "the line above was torn by a crash"})
            data += repair + b"\n"
            n, prev = n + 1, line_hash(repair)
        full = self._redactor.value({"n": n, "prev": prev, "at": now(), **record})
        data += record_text(full) + b"\n"
        self._write(data)
        self.refresh()

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        written = os.write(self._fd, data)
        if written != len(data):  # a short write on a full disk: refuse to go on blind
            raise OSError(errno.ENOSPC, f"only {written} of {len(data)} bytes written, the "
                          "disk may be full", str(self.path))
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Settled(NamedTuple):
    """What `settle` did for one series."""

    appended: list[str]
    """Call ids whose outcomes it appended, in the journal's order."""
    counted: Decimal
    """What those outcomes count (the journal's counted_usd)."""
    released: Decimal
    """What their reservations counted before."""
    still_open: list[str]
    """Call ids still open in the ledger: the journal holds no counted outcome for them (a
    call abandoned in flight, or cut short by a crash): they stay at their reservations."""


def settle(ledger: LedgerBase, series_uid: str, series: str,
           records: list[dict[str, Any]]) -> Settled:
    """Give the ledger the outcomes it lacks of series `series_uid`, from the series' journal
    (`records`, read and chain-checked by `fragbench.series.journal.read_journal`): the outcomes of
    calls the ledger still counts at their reservations because its write failed (a server
    down or silent, a full disk) while the journal kept them.

    The ledger must be open. Under its lock, brought up to date: for every reservation of the
    series the ledger holds open whose outcome the journal holds with an amount, that
    outcome's ledger copy (`LEDGER_FIELDS`, the journal's counted_usd), each appended as any
    run's (checked first: never a second outcome, never one without its reservation). Refused
    with nothing written when the journal reserves a call at another amount than the ledger
    does (then the two are not one series' records). Run again, it appends nothing."""
    reserved = {r["call_id"]: r for r in records if r.get("type") == "reserve"}
    outcomes = {r["call_id"]: r for r in records if r.get("type") == "outcome"}
    appended: list[str] = []
    counted = released = Decimal(0)
    with ledger.locked():
        open_ = {call: amount for (uid, call), amount in ledger.open_reservations().items()
                 if uid == series_uid}
        for call, amount in open_.items():
            mine = reserved.get(call)
            if mine is not None and amount_of(mine.get("reserved_usd")) != amount:
                raise LedgerError(
                    f"ledger {ledger.where}: reserves call {call} of series {series_uid} at "
                    f"{usd(amount)} USD, its journal at {mine.get('reserved_usd')} USD: they "
                    "are not the records of one series; nothing was written.")
        for call, outcome in outcomes.items():
            if call not in open_ or outcome.get("counted_usd") is None:
                continue
            ledger.append({k: outcome[k] for k in LEDGER_FIELDS if k in outcome}
                          | {"series": series, "series_uid": series_uid})
            appended.append(call)
            counted += Decimal(outcome["counted_usd"])
            released += open_[call]
    return Settled(appended, counted, released, sorted(set(open_) - set(appended)))
