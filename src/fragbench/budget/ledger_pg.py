"""The PostgreSQL ledger store: a budget a team shares, on a server every run reaches.

Selected by `FRAGBENCH_LEDGER_URL=postgresql://user:password@host:port/database` (any libpq
URL; psycopg 3, installed with `fragbench[postgres]`, imported only when the variable is set).
What a user can rely on:

- The same records as the file store, in the same canonical text
(`fragbench.budget.ledger.record_text`),
  with the same chain: each record's `prev` is the sha256 of the text of the record before it.
  A ledger moved from a file (`move`) keeps every hash.
- The same rule under a lock per budget: every read and every write happens in a transaction
  holding `pg_advisory_xact_lock` on a key derived from the budget id, so two runs on two
  machines take turns between "everything still planned fits in the balance" and the
  reservation. A record is durable when the lock is released (the transaction commits); a
  failure before that rolls back everything written under the lock (no call was sent then:
  a call goes out only after its reservation is committed).
- Tamper-evident: a row edited, deleted or inserted by hand breaks the chain, and the ledger is
  refused in one sentence naming the first bad record. The server also keeps each budget's head
  (its last record's number and hash, written in the same transaction as the record), so that
  removing or editing the last records is seen too, unless the head is forged as well.
- Bounded: every exchange with the server ends within `FRAGBENCH_LEDGER_TIMEOUT` seconds
  plus `GRACE` (5 s), per address tried when connecting (60 by default, 2 to 3600;
  `ledger_timeout`). A connection attempt is given up at that bound for each address a host
  name resolves to (libpq's `connect_timeout`: `localhost` may try ::1, then 127.0.0.1); the
  server cancels a wait for the budget's lock, or a statement, that lasts longer
  (`lock_timeout`; `statement_timeout`, a second more, so that a lock wait is said to be one)
  and ends a session idle inside a transaction that long
  (`idle_in_transaction_session_timeout`: a run stopped while holding the lock frees it); and
  fragbench cuts the connection when the server says nothing at all for the bound plus `GRACE`
  seconds (a stopped or unreachable server cancels nothing: TCP keepalives, also set, see only
  a host or network that is gone), from one watchdog thread per connection, started when
  connecting (a thread that cannot be started, at the system's thread limit, is said in one
  line then, never mid-run). Waiting for the lock is
  waiting like any other: another run holds it only while it checks and writes one record
  (milliseconds), so a wait longer than the bound means that run, or the server, is stalled,
  and the waiting run stops (`cannot_record`, one line naming the server) rather than hang.
- The URL's user name, password and options are never written or printed: the ledger is shown
  as `postgresql://host:port/database`, and a server's error text has the password (the URL's
  or PGPASSWORD's) removed and every user or role name it quotes replaced by `[hidden]`
  (libpq says `password authentication failed for user [hidden]`).

The tables (`fragbench_ledger`: budget id, record number, record text; `fragbench_ledger_head`)
are created by the first run that writes, when its user may create tables; an administrator may
create them beforehand (docs/running.md, "A budget a team shares").
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from fragbench.budget.ledger import (
    LEDGER_URL_ENV,
    Ledger,
    LedgerBase,
    LedgerError,
    LedgerServerError,
    _parse,
    record_text,
)
from fragbench.budget.money import Budget
from fragbench.files import line_hash, now
from fragbench.redact import Redactor

if TYPE_CHECKING:
    import psycopg

TABLE = "fragbench_ledger"
HEAD = "fragbench_ledger_head"
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (budget_id text NOT NULL, n bigint NOT NULL, "
    "line text NOT NULL, PRIMARY KEY (budget_id, n))",
    f"CREATE TABLE IF NOT EXISTS {HEAD} (budget_id text PRIMARY KEY, n bigint NOT NULL, "
    "sha256 text NOT NULL)",
)
"""The tables, for an administrator who creates them (docs/running.md, "A budget a team
shares") and for the first writer."""
SCHEMES = ("postgresql://", "postgres://")
TIMEOUT_ENV = "FRAGBENCH_LEDGER_TIMEOUT"
DEFAULT_TIMEOUT = 60
"""Seconds: what a careful user waits for a server that answers in milliseconds before
calling it stalled (a loaded server, a slow network and a long lock wait stay well below)."""
GRACE = 5.0
"""Seconds after the bound before fragbench cuts a silent connection: a server that is alive
cancels a statement or a lock wait itself at the bound, and says why."""
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
             "keepalives_count": 3}
"""libpq's TCP keepalives: a server host or network that is gone is seen within about a
minute even while a connection waits."""
_NAMED = re.compile(r'\b(user|role)\s+"(?:[^"]|"")*"', re.IGNORECASE)
"""A user or role name as libpq and the server quote it in their messages."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise LedgerError(f"{LEDGER_URL_ENV} names a PostgreSQL server, but psycopg is not "
                          "installed: install fragbench[postgres], or unset "
                          f"{LEDGER_URL_ENV} to use the file store (nothing was sent).") from None
    return psycopg


def ledger_timeout() -> int:
    """FRAGBENCH_LEDGER_TIMEOUT: the bound, in whole seconds, on any exchange with the server
    (DEFAULT_TIMEOUT when unset). At least 2 (libpq's least connect_timeout), at most 3600."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    if not re.fullmatch(r"[0-9]{1,4}", raw, re.ASCII) or not 2 <= int(raw) <= 3600:
        raise LedgerError(f"{TIMEOUT_ENV}={raw[:16]!r} is not a number of seconds from 2 to "
                          f"3600; give one (or unset it: {DEFAULT_TIMEOUT} s), nothing was "
                          "sent.")
    return int(raw)


class _Watchdog:
    """One thread per connection that cuts it when a wait for the server outlasts its
    deadline: armed before each wait (`arm`), disarmed after (`disarm`). One thread for the
    connection's life, not one per exchange: a thread that cannot be started (the system's
    thread limit) is then met once, when connecting, and said in one line (`_connect`)."""

    def __init__(self, cut: Any) -> None:
        self._cut = cut
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="fragbench-ledger-watchdog",
                                        daemon=True)

    def start(self) -> None:
        """Start the thread: RuntimeError when none can be started."""
        self._thread.start()

    def arm(self, seconds: float) -> None:
        with self._cond:
            self._deadline = time.monotonic() + seconds
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:  # a cut in progress ends first: none comes after this returns
            self._deadline = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._deadline = None
                self._cut()


def _bounded_connection() -> type:
    """psycopg's Connection, every exchange with the server bounded: each wait for the server
    (a statement, BEGIN, COMMIT, a lock) arms the connection's watchdog (`watch`, started
    once connected), which cuts the connection's socket when the server has said nothing for
    `bound` seconds. The wait then fails as on a connection the server closed, and `stalled`
    says why."""
    psycopg = _psycopg()

    class Bounded(psycopg.Connection):  # type: ignore[misc,name-defined]
        bound = float(DEFAULT_TIMEOUT) + GRACE
        stalled = False
        watchdog: _Watchdog | None = None

        def watch(self, bound: float) -> None:
            """Bound every later wait at `bound` seconds; RuntimeError when the watchdog's
            thread cannot be started."""
            self.bound = bound
            watchdog = _Watchdog(self._cut)
            watchdog.start()
            self.watchdog = watchdog

        def _cut(self) -> None:
            self.stalled = True
            # shutdown(2) ends the socket for every descriptor of it: the blocked poll wakes
            # up with end of file. Through a copy of the descriptor, which libpq keeps owning.
            with contextlib.suppress(Exception), socket.socket(  # closed: nothing to cut
                    fileno=os.dup(self.pgconn.socket)) as sock:
                sock.shutdown(socket.SHUT_RDWR)

        def wait(self, *args: Any, **kwargs: Any) -> Any:
            watchdog = self.watchdog
            if watchdog is None:  # only while connecting: libpq's connect_timeout bounds it
                return super().wait(*args, **kwargs)
            watchdog.arm(self.bound)
            try:
                return super().wait(*args, **kwargs)
            finally:
                watchdog.disarm()

        def close(self) -> None:
            if self.watchdog is not None:
                self.watchdog.close()
            super().close()

    return Bounded


def _login() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name: libpq would have none to default to either
        return None


def _lock_key(kind: str, name: str) -> int:
    """A signed 64-bit advisory lock key (a hash: two names sharing one only take turns)."""
    digest = hashlib.sha256(f"fragbench-{kind}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _conninfo(url: str) -> dict[str, Any]:
    if not url.startswith(SCHEMES):
        # The value is not repeated: it may hold a password.
        raise LedgerError(f"{LEDGER_URL_ENV} (or --to) is not a postgresql:// URL; give "
                          "postgresql://user:password@host:port/database (nothing was sent).")
    # psycopg is imported through the check that refuses its absence in one line; importing
    # `psycopg.conninfo` directly would raise ModuleNotFoundError instead.
    psycopg = _psycopg()
    try:
        return dict(psycopg.conninfo.conninfo_to_dict(url))
    except psycopg.Error:
        raise LedgerError(f"{LEDGER_URL_ENV} (or --to) is not a valid postgresql:// URL; give "
                          "postgresql://user:password@host:port/database (nothing was sent)."
                          ) from None


def has_password(url: str) -> bool:
    """Whether the URL holds a password (`user:password@` or `?password=`)."""
    return bool(_conninfo(url).get("password"))


def shown_url(url: str) -> str:
    """The server as printed and recorded: `postgresql://host:port/database`, without the user
    name, password or options (a socket folder as host is percent-encoded)."""
    info = _conninfo(url)
    host = str(info.get("host") or info.get("hostaddr") or "localhost")
    port = str(info.get("port") or "5432")
    db = str(info.get("dbname") or "")
    return f"postgresql://{urllib.parse.quote(host, safe=',')}:{port}/{urllib.parse.quote(db)}"


class PgLedger(LedgerBase):
    """A budget's ledger on a PostgreSQL server; `open` it to append under its lock."""

    unit = "record"
    restore = "restore the budget's records from the server's backup"
    store_help = (f"the store is the server {LEDGER_URL_ENV} names; unset it to use the file "
                  "store")

    def __init__(self, url: str, budget: Budget | str) -> None:
        super().__init__(budget)
        self.url = url
        self.shown = shown_url(url)
        info = _conninfo(url)
        # What a server's error text may quote: the password (the URL's, or the one libpq takes
        # from PGPASSWORD) is removed, the user name (the URL's, PGUSER, or libpq's default, the
        # login name) hidden.
        passwords = (info.get("password"), os.environ.get("PGPASSWORD"))
        self._secrets = [str(p) for p in passwords if p]
        users = (info.get("user"), os.environ.get("PGUSER"), _login())
        self._users = [str(u) for u in users if u]
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = _lock_key("ledger", self.budget_id)
        self.timeout = ledger_timeout()
        """The bound on any exchange with the server, in seconds (`ledger_timeout`)."""

    @property
    def where(self) -> str:
        return f"{self.shown} (budget {self.budget_id})"

    @property
    def store(self) -> str:
        return self.shown

    def exists(self) -> bool:
        return self._n >= 0

    # The server --------------------------------------------------------------------------------

    def _server_error(self, exc: BaseException) -> LedgerServerError:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        for secret in self._secrets:  # short passwords too, which the Redactor leaves alone
            text = text.replace(secret, "[redacted]")
        text = Redactor(self._secrets).text(text)
        text = _NAMED.sub(lambda m: f"{m.group(1)} [hidden]", text)
        for user in self._users:  # a user name quoted in any other phrasing
            text = text.replace(f'"{user}"', "[hidden]")
        return LedgerServerError(f"ledger {self.where}: the server cannot be used ({text}); "
                                 f"check that it is up and that {LEDGER_URL_ENV} names it with "
                                 "a user that may read and write the ledger tables.")

    def _stalled(self) -> LedgerServerError:
        return LedgerServerError(
            f"ledger {self.where}: the server did not answer within {self.timeout} s "
            f"({TIMEOUT_ENV}, default {DEFAULT_TIMEOUT}): it is stalled, overloaded or "
            "unreachable; check it, then run again.")

    def _lock_waited(self) -> LedgerServerError:
        return LedgerServerError(
            f"ledger {self.where}: budget {self.budget_id}'s lock was held by another "
            f"connection for more than {self.timeout} s ({TIMEOUT_ENV}, default "
            f"{DEFAULT_TIMEOUT}): a run or a `ledger move` on the budget is stalled, or the "
            "server is; check it, then run again.")

    def _connect(self) -> psycopg.Connection[Any]:
        psycopg = _psycopg()
        timeout = self.timeout
        try:
            conn = _bounded_connection().connect(
                self.url, autocommit=True, application_name="fragbench",
                connect_timeout=timeout, tcp_user_timeout=timeout * 1000, **KEEPALIVE)
        except getattr(psycopg.errors, "ConnectionTimeout", ()):  # a psycopg without it: the
            # server error's line below, with libpq's "timeout expired"
            raise self._stalled() from None
        except psycopg.Error as exc:
            raise self._server_error(exc) from None
        try:
            conn.watch(timeout + GRACE)
        except RuntimeError as exc:  # CPython: "can't start new thread"
            conn.close()
            raise LedgerServerError(
                f"ledger {self.where}: no thread could be started to bound the waits for the "
                f"server ({type(exc).__name__}: {exc}: the system's thread limit); run again "
                "when fewer threads are running, or with fewer calls in flight "
                "(max_in_flight).") from None
        try:
            # Set here, not in the URL's options (which they would replace): a live server
            # ends a lock wait, a statement or a transaction left idle at the bound itself
            # (a statement a second later, so that a lock wait is said to be one).
            for name, ms in (("lock_timeout", timeout * 1000),
                             ("statement_timeout", timeout * 1000 + 1000),
                             ("idle_in_transaction_session_timeout", timeout * 1000)):
                conn.execute(f"SET {name} = {ms}")
        except psycopg.Error as exc:
            conn.close()
            raise (self._stalled() if conn.stalled else self._server_error(exc)) from None
        return conn

    def _failed(self, conn: psycopg.Connection[Any], exc: BaseException) -> LedgerServerError:
        """What a psycopg error on `conn` means, in one line."""
        psycopg = _psycopg()
        if getattr(conn, "stalled", False):
            return self._stalled()
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return self._lock_waited()
        return self._server_error(exc)

    @contextlib.contextmanager
    def _transaction(self, conn: psycopg.Connection[Any], key: int) -> Iterator[None]:
        """A transaction holding the advisory lock `key` until it commits. Anything raised
        rolls it back and makes the next read start from the first record."""
        psycopg = _psycopg()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                yield
        except psycopg.Error as exc:
            self._reset()
            raise self._failed(conn, exc) from None
        except BaseException:
            if not self.audit:  # an audit keeps what it read before the bad record, to show
                self._reset()
            raise

    def _has_tables(self, conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                           (TABLE, HEAD)).fetchone()
        return bool(row and row[0])

    def _create_tables(self, conn: psycopg.Connection[Any]) -> None:
        with self._transaction(conn, _lock_key("schema", TABLE)):
            if not self._has_tables(conn):
                for statement in SCHEMA:
                    conn.execute(statement)

    # Reading ---------------------------------------------------------------------------------

    def load(self) -> PgLedger:
        """Read and check the whole ledger (if the server holds it yet). Returns self. Reads
        only: creates no table and no record."""
        conn = self._conn or self._connect()
        try:
            self._reset()
            with self._transaction(conn, self._lock):
                self._read_new(conn)
        finally:
            if conn is not self._conn:
                conn.close()
        return self

    def refresh(self) -> None:
        """Read what the server gained since last time; check each new record."""
        if self._conn is None:
            self.load()
            return
        with self._transaction(self._conn, self._lock):
            self._read_new(self._conn)

    def _read_new(self, conn: psycopg.Connection[Any]) -> None:
        """Under the budget's lock: the records after the last one read, then the head."""
        if not self._has_tables(conn):
            if self._n >= 0:
                raise self._fail("its tables were removed from the server")
            return
        rows = conn.execute(f"SELECT n, line FROM {TABLE} WHERE budget_id = %s AND n > %s "
                            "ORDER BY n", (self.budget_id, self._n)).fetchall()
        head = conn.execute(f"SELECT n, sha256 FROM {HEAD} WHERE budget_id = %s",
                            (self.budget_id,)).fetchone()
        found = None if head is None else (int(head[0]), str(head[1]))
        lines = [str(line).encode("utf-8", "surrogatepass") for _n, line in rows]
        records = [_parse(raw) for raw in lines]
        for i, ((n, _line), raw, record) in enumerate(zip(rows, lines, records, strict=True)):
            if record is None or not isinstance(record, dict):
                raise self._fail(f"record {n} is not a ledger record")
            if n != self._n + 1:
                raise self._fail(f"record {self._n + 1} is missing (the records go on at "
                                 f"record {n}: a record was deleted)")
            self._apply(record, raw, n, self._vouched(records, i, n, found))
        if found != (None if self._n < 0 else (self._n, self._last)):
            if found is not None and found[0] == self._n:
                raise self._fail(f"record {self._n} was edited (the head the server keeps "
                                 "hashes another text)")
            last = "none" if found is None else f"record {found[0]}"
            raise self._fail(f"its records end at record {self._n} but the head the server "
                             f"keeps names {last} (its last records were edited, deleted or "
                             "inserted)")
        self._check_moved()
        self._check_config()

    @staticmethod
    def _vouched(records: list[Any], i: int, n: int, head: tuple[int, str] | None
                 ) -> str | None:
        """The hash that vouches for record `n` (the `i`th read): the next record's `prev`, or
        for the last one the head's hash; None when nothing does."""
        if i + 1 < len(records):
            following = records[i + 1]
            chained = following.get("prev") if isinstance(following, dict) else None
            return chained if isinstance(chained, str) else None
        return head[1] if head is not None and head[0] == n else None

    # Writing ---------------------------------------------------------------------------------

    def open(self, redactor: Redactor) -> PgLedger:
        """Connect for appending, creating the tables and the ledger (with its budget record)
        if needed. Everything written is redacted."""
        self._redactor = redactor
        self._conn = self._connect()
        try:
            self._create_tables(self._conn)
            with self.locked():
                if self._n == -1:
                    self.append(self.genesis())
        except BaseException:
            self.close()
            raise
        return self

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The budget's lock on the server (a transaction holding its advisory lock), and the
        ledger brought up to date: two runs drawing on one budget, on any machines, take turns
        between the balance check and the reservation. What is appended commits on leaving."""
        assert self._conn is not None, "open the ledger first"
        with self._transaction(self._conn, self._lock):
            self._read_new(self._conn)
            yield

    def append(self, record: dict[str, Any]) -> None:
        """Append under the lock (`with ledger.locked(): ...`): checked as a reader checks it,
        then written with the head."""
        conn = self._conn
        assert conn is not None and conn.info.transaction_status != \
            _psycopg().pq.TransactionStatus.IDLE, "append under the lock"
        self._check_new(record)
        n, prev = self._n + 1, self._last
        raw = record_text(self._redactor.value({"n": n, "prev": prev, "at": now(), **record}))
        self._apply(json.loads(raw), raw, n)
        self._write(conn, n, raw)

    def _write(self, conn: psycopg.Connection[Any], n: int, raw: bytes) -> None:
        conn.execute(f"INSERT INTO {TABLE} (budget_id, n, line) VALUES (%s, %s, %s)",
                     (self.budget_id, n, raw.decode("utf-8", "surrogatepass")))
        conn.execute(f"INSERT INTO {HEAD} (budget_id, n, sha256) VALUES (%s, %s, %s) "
                     "ON CONFLICT (budget_id) DO UPDATE SET n = EXCLUDED.n, "
                     "sha256 = EXCLUDED.sha256", (self.budget_id, n, line_hash(raw)))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


class Moved(NamedTuple):
    """What `move` did."""

    ledger: PgLedger
    """The budget's ledger on the server, read back after the copy committed."""
    records: int
    """How many of the file's records (those before its `moved` record) the server holds."""
    copied: bool
    """False when an earlier `move` had already committed the copy (this one only checked)."""
    resumed: bool = False
    """An earlier `move` had retired the file (and stopped): this one completed or checked
    it."""


def move(source: Ledger, url: str) -> Moved:
    """Move a file ledger into the server at `url`, its chain intact, never leaving the budget
    live in both stores.

    Under the file's lock throughout (no run appends meanwhile) and the budget's lock on the
    server: the file is first retired by a `moved` record naming the server (`shown_url`),
    written and fsync'ed, so the file store refuses it from then on; then every record before
    it is copied with its exact text (so every hash stays), the copy checked as a reader
    checks it and compared with the file (head, records, totals), committed, and read back.

    Whatever stops it midway (a kill, a server gone, a full disk) leaves at most one store
    usable: before the `moved` record, the file (nothing was written to the server); after
    it, neither until a second `move` to the same server, which completes it: it copies the
    records when the server lacks the budget, or only checks them when the server already
    holds them (a copy that committed; later records the server gained are kept). Refused,
    with nothing written: a file that holds no ledger, or one moved to another server; a
    server that already holds the budget with other records (the file, if retired, stays
    retired: the message says how to compare the two)."""
    source.audit = True
    source.kept = []
    source.load()
    if not source.exists() or source.records == 0:
        raise LedgerError(f"ledger {source.where}: does not exist; nothing to move (set "
                          "FRAGBENCH_LEDGER_DIR to the folder that holds it).")
    target = PgLedger(url, source.budget_id)
    _check_target(source, target)
    source.open(Redactor())
    try:
        with source.locked():  # no run appends to the file while it is copied
            _check_target(source, target)
            return _move_locked(source, target)
    finally:
        source.close()


def _check_target(source: Ledger, target: PgLedger) -> None:
    if source.moved_to is not None and source.moved_to != target.shown:
        raise LedgerError(f"ledger {source.where}: was already moved to {source.moved_to}, "
                          f"not {target.shown}; give that server to complete or check the "
                          "move (nothing was written).")


def _held(conn: psycopg.Connection[Any], budget_id: str) -> tuple[list[bytes], bool]:
    """The budget's records on the server (their text, in order), and whether it has a head."""
    lines = [str(line).encode("utf-8", "surrogatepass") for (line,) in conn.execute(
        f"SELECT line FROM {TABLE} WHERE budget_id = %s ORDER BY n", (budget_id,))]
    head = conn.execute(f"SELECT 1 FROM {HEAD} WHERE budget_id = %s", (budget_id,)).fetchone()
    return lines, head is not None


def _retire(source: Ledger, target: PgLedger) -> None:
    """The file's `moved` record, written and fsync'ed: from here the file store refuses it."""
    try:
        source.append({"type": "moved", "to": target.shown})
    except OSError as exc:
        raise LedgerError(f"ledger {source.where}: cannot be written ({exc.strerror or exc}); "
                          "nothing was copied to the server: free space or fix the file's "
                          "rights, then run `fragbench ledger move` again.") from None


def _copy(conn: psycopg.Connection[Any], target: PgLedger, records: list[bytes]) -> None:
    for n, raw in enumerate(records):
        target._write(conn, n, raw)


def _retired_advice(source: Ledger) -> str:
    budget = source.budget_id
    return (f"the file stays retired (it ends with its `moved` record), so no run draws on "
            f"budget {budget!r} until you compare the two (`fragbench ledger show {budget}` "
            "with FRAGBENCH_LEDGER_DIR, then with FRAGBENCH_LEDGER_URL), make the server's "
            f"records those of the file, and run `fragbench ledger move {budget}` again to "
            "check them")


def _move_locked(source: Ledger, target: PgLedger) -> Moved:
    resumed = source.moved_to is not None
    conn = target._connect()
    try:
        target._create_tables(conn)
        with target._transaction(conn, target._lock):
            held, has_head = _held(conn, source.budget_id)
            if not resumed:
                if held or has_head:
                    raise LedgerError(
                        f"ledger {target.where}: the server already holds budget "
                        f"{source.budget_id!r}; a budget lives in one store, so nothing was "
                        "moved (the file is unchanged).")
                _retire(source, target)
            assert source.kept is not None and source.kept[-1][1].get("type") == "moved"
            records = [raw for raw, _record in source.kept[:-1]]
            if held or has_head:  # a second move: an earlier one's copy committed
                if held[:len(records)] != records:
                    raise LedgerError(f"ledger {target.where}: holds budget "
                                      f"{source.budget_id!r} with records other than the "
                                      f"{len(records)} of {source.where}; nothing was "
                                      f"written: {_retired_advice(source)}.")
            else:
                _copy(conn, target, records)
            target._read_new(conn)  # the server's records, checked from the first
            if not held and (target.records, target.head, target.spent()) != (
                    len(records), line_hash(records[-1]), source.spent()):
                raise LedgerError(f"ledger {target.where}: the copy differs from "
                                  f"{source.where}; nothing was written to the server: "
                                  f"{_retired_advice(source)}.")
    finally:
        conn.close()
    copied = not held
    return Moved(_read_back(source, target, records, copied), len(records), copied=copied,
                 resumed=resumed)


def _read_back(source: Ledger, target: PgLedger, records: list[bytes], copied: bool
               ) -> PgLedger:
    """The committed copy read back on a new connection: the file's records, first. A move
    run again after one whose copy had committed copied nothing (`copied` False): it says so
    rather than speak of a copy it did not make."""
    check = PgLedger(target.url, source.budget_id)
    check.kept = []
    check.load()
    if [raw for raw, _record in check.kept[:len(records)]] != records:
        when = ("after the copy committed" if copied else
                "although an earlier move had copied them and this one had just checked them "
                "there (it copied nothing)")
        raise LedgerError(f"ledger {check.where}: reads back differently from "
                          f"{source.where} {when}; {_retired_advice(source)}.")
    check.kept = None
    return check
