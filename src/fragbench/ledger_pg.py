"""The PostgreSQL ledger store: a budget a team shares, on a server every run reaches.

Selected by `FRAGBENCH_LEDGER_URL=postgresql://user:password@host:port/database` (any libpq
URL; psycopg 3, installed with `fragbench[postgres]`, imported only when the variable is set).
What a user can rely on:

- The same records as the file store, in the same canonical text (`fragbench.ledger.record_text`),
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
- The URL's user name, password and options are never written or printed: the ledger is shown
  as `postgresql://host:port/database`, and a server's error text has the password (the URL's
  or PGPASSWORD's) removed and every user or role name it quotes replaced by `[hidden]`
  (libpq says `password authentication failed for user [hidden]`).

The tables (`fragbench_ledger`: budget id, record number, record text; `fragbench_ledger_head`)
are created by the first run that writes, when its user may create tables; an administrator may
create them beforehand (README, "A budget a team shares").
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from fragbench.config import Budget
from fragbench.journal import now
from fragbench.ledger import (
    LEDGER_URL_ENV,
    Ledger,
    LedgerBase,
    LedgerError,
    LedgerServerError,
    _line_hash,
    _parse,
    record_text,
)
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
"""The tables, for an administrator who creates them (README) and for the first writer."""
SCHEMES = ("postgresql://", "postgres://")
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

    def _connect(self) -> psycopg.Connection[Any]:
        psycopg = _psycopg()
        try:
            return psycopg.connect(self.url, autocommit=True, application_name="fragbench")
        except psycopg.Error as exc:
            raise self._server_error(exc) from None

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
            raise self._server_error(exc) from None
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
        for n, line in rows:
            raw = str(line).encode("utf-8", "surrogatepass")
            record = _parse(raw)
            if record is None or not isinstance(record, dict):
                raise self._fail(f"record {n} is not a ledger record")
            if n != self._n + 1 or record.get("n") != n:
                raise self._fail(f"record {self._n + 1} does not follow the record before it "
                                 "(a record was edited, deleted or inserted)")
            self._apply(record, raw, n)
        head = conn.execute(f"SELECT n, sha256 FROM {HEAD} WHERE budget_id = %s",
                            (self.budget_id,)).fetchone()
        found = None if head is None else (int(head[0]), str(head[1]))
        if found != (None if self._n < 0 else (self._n, self._last)):
            last = "none" if found is None else f"record {found[0]}"
            raise self._fail(f"its records end at record {self._n} but the head the server "
                             f"keeps names {last} (its last records were edited, deleted or "
                             "inserted)")
        self._check_moved()

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
        n, prev = self._n + 1, self._last
        raw = record_text(self._redactor.value({"n": n, "prev": prev, "at": now(), **record}))
        self._apply(json.loads(raw), raw, n)
        self._write(conn, n, raw)

    def _write(self, conn: psycopg.Connection[Any], n: int, raw: bytes) -> None:
        conn.execute(f"INSERT INTO {TABLE} (budget_id, n, line) VALUES (%s, %s, %s)",
                     (self.budget_id, n, raw.decode("utf-8", "surrogatepass")))
        conn.execute(f"INSERT INTO {HEAD} (budget_id, n, sha256) VALUES (%s, %s, %s) "
                     "ON CONFLICT (budget_id) DO UPDATE SET n = EXCLUDED.n, "
                     "sha256 = EXCLUDED.sha256", (self.budget_id, n, _line_hash(raw)))

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
                    len(records), _line_hash(records[-1]), source.spent()):
                raise LedgerError(f"ledger {target.where}: the copy differs from "
                                  f"{source.where}; nothing was written to the server: "
                                  f"{_retired_advice(source)}.")
    finally:
        conn.close()
    return Moved(_read_back(source, target, records), len(records), copied=not held)


def _read_back(source: Ledger, target: PgLedger, records: list[bytes]) -> PgLedger:
    """The committed copy read back on a new connection: the file's records, first."""
    check = PgLedger(target.url, source.budget_id)
    check.kept = []
    check.load()
    if [raw for raw, _record in check.kept[:len(records)]] != records:
        raise LedgerError(f"ledger {check.where}: reads back differently from "
                          f"{source.where} after the copy committed; "
                          f"{_retired_advice(source)}.")
    check.kept = None
    return check
