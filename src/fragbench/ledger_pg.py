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
  as `postgresql://host:port/database`, and a server's error text has the password removed.

The tables (`fragbench_ledger`: budget id, record number, record text; `fragbench_ledger_head`)
are created by the first run that writes, when its user may create tables; an administrator may
create them beforehand (README, "A budget a team shares").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fragbench.config import Budget
from fragbench.journal import now
from fragbench.ledger import (
    LEDGER_URL_ENV,
    Ledger,
    LedgerBase,
    LedgerError,
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


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise LedgerError(f"{LEDGER_URL_ENV} names a PostgreSQL server, but psycopg is not "
                          "installed: install fragbench[postgres], or unset "
                          f"{LEDGER_URL_ENV} to use the file store (nothing was sent).") from None
    return psycopg


def _lock_key(kind: str, name: str) -> int:
    """A signed 64-bit advisory lock key (a hash: two names sharing one only take turns)."""
    digest = hashlib.sha256(f"fragbench-{kind}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _conninfo(url: str) -> dict[str, Any]:
    if not url.startswith(SCHEMES):
        # The value is not repeated: it may hold a password.
        raise LedgerError(f"{LEDGER_URL_ENV} (or --to) is not a postgresql:// URL; give "
                          "postgresql://user:password@host:port/database (nothing was sent).")
    from psycopg.conninfo import conninfo_to_dict

    try:
        return dict(conninfo_to_dict(url))
    except _psycopg().Error:
        raise LedgerError(f"{LEDGER_URL_ENV} (or --to) is not a valid postgresql:// URL; give "
                          "postgresql://user:password@host:port/database (nothing was sent)."
                          ) from None


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
        password = _conninfo(url).get("password")
        self._secrets = [str(password)] if password else []
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

    def _server_error(self, exc: BaseException) -> LedgerError:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        for secret in self._secrets:  # short passwords too, which the Redactor leaves alone
            text = text.replace(secret, "[redacted]")
        text = Redactor(self._secrets).text(text)
        return LedgerError(f"ledger {self.where}: the server cannot be used ({text}); check "
                           f"that it is up and that {LEDGER_URL_ENV} names it with a user "
                           "that may read and write the ledger tables.")

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


def move(source: Ledger, url: str) -> PgLedger:
    """Move a file ledger into the server at `url`, its chain intact: every record copied with
    its exact text (so every hash stays), the copy checked as a reader checks it and compared
    with the file (head, records, totals) before it commits, then read back. The file, held
    under its lock throughout so that no run appends meanwhile, then ends with a `moved` record
    naming the server, and the file store refuses it from then on. Refused, with nothing
    written, when the server already holds the budget, or the file holds no ledger or one
    already moved."""
    source.audit = True
    source.kept = []
    source.load()
    if not source.exists() or source.records == 0:
        raise LedgerError(f"ledger {source.where}: does not exist; nothing to move (set "
                          "FRAGBENCH_LEDGER_DIR to the folder that holds it).")
    if source.moved_to is not None:
        raise LedgerError(f"ledger {source.where}: was already moved to {source.moved_to}; "
                          "nothing was written.")
    target = PgLedger(url, source.budget_id)
    source.open(Redactor())
    try:
        with source.locked():  # no run appends to the file while it is copied
            if source.moved_to is not None:
                raise LedgerError(f"ledger {source.where}: was moved to {source.moved_to} "
                                  "meanwhile; nothing was written.")
            conn = target._connect()
            try:
                target._create_tables(conn)
                with target._transaction(conn, target._lock):
                    taken = conn.execute(
                        f"SELECT (SELECT count(*) FROM {TABLE} WHERE budget_id = %s) + "
                        f"(SELECT count(*) FROM {HEAD} WHERE budget_id = %s)",
                        (source.budget_id, source.budget_id)).fetchone()
                    if taken and taken[0]:
                        raise LedgerError(
                            f"ledger {target.where}: the server already holds budget "
                            f"{source.budget_id!r}; a budget lives in one store, so nothing "
                            "was moved (the file is unchanged).")
                    assert source.kept is not None
                    for n, (raw, _record) in enumerate(source.kept):
                        target._write(conn, n, raw)
                    target._read_new(conn)  # the copy, checked from its first record
                    if (target.records, target.head, target.spent()) != (
                            source.records, source.head, source.spent()):
                        raise LedgerError(f"ledger {target.where}: the copy differs from "
                                          f"{source.where}; nothing was moved.")
            finally:
                conn.close()
            check = PgLedger(url, source.budget_id).load()
            if (check.records, check.head) != (source.records, source.head):
                raise LedgerError(f"ledger {check.where}: reads back differently from "
                                  f"{source.where}; both are kept: compare them before use.")
            source.append({"type": "moved", "to": target.shown})
    finally:
        source.close()
    return check

