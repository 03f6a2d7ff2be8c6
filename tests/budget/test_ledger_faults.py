"""Issue 24, items 5 and 6: a ledger server that fails or stalls mid-run, with calls in flight.

A real PostgreSQL server of the test's own (tests/support/pg_server.py: the faults would break the
session's shared one), the real `fragbench run` with the real openai SDK against the loopback
server, eight calls in flight. The server answers the first calls at once and holds the eight
after them behind a gate; with those eight in flight, the test injects the fault (`pg_ctl
restart -m fast`, SIGKILL of the postmaster, SIGSTOP of the run's backend, another connection
holding the budget's lock), then opens the gate. Every answer the loopback server gave, each
one paid for, must be in the journal (its body and its outcome), the ledger must still count
the calls whose outcomes it lacks at their whole reservations, and the run must stop as
`cannot_record` in one line naming the server, never its password. Nothing is timed but the
stall bound (FRAGBENCH_LEDGER_TIMEOUT, BOUND): waits are for states, bounded by PATIENCE.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import pg_server
from support.cli import error_lines, run_cli
from support.collector import IN_FLIGHT, after, with_in_flight
from support.pg_server import PASSWORD
from support.suite import CANARY_KEY, PATIENCE

from fragbench.budget.ledger import Ledger
from fragbench.budget.ledger_pg import TIMEOUT_ENV, PgLedger, _lock_key, shown_url
from fragbench.series.journal import read_journal
from fragbench.testing.loopback import Action, Handler, Server, ok

pytestmark = pytest.mark.slow

BUDGET_ID = "protocol-1.0-openai"
ANSWERED_FIRST = 12
"""Calls answered at once before the eight the server holds (the issue's fault came after 20
requests: 12 answered, 8 in flight)."""
BOUND = "5"
"""FRAGBENCH_LEDGER_TIMEOUT for a whole run: it bounds the normal exchanges before the fault
too (every statement and transaction), so it leaves room for a loaded machine's pauses, while
a stall test still ends within seconds (the bound plus the 5 s grace)."""


@pytest.fixture
def own_server() -> Iterator[pg_server.Server]:
    """A server of this test's own (not the session's shared one): the faults restart, kill or
    stop it."""
    from support.pg_server import started_postgresql

    yield from started_postgresql()


@pytest.fixture
def pg_url(own_server: pg_server.Server, monkeypatch: pytest.MonkeyPatch) -> str:
    url = own_server.new_database()
    monkeypatch.delenv("FRAGBENCH_LEDGER_DIR", raising=False)
    monkeypatch.setenv("FRAGBENCH_LEDGER_URL", url)
    return url


def wait_for(what: str, condition: Callable[[], bool], alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert alive(), f"the run ended before {what}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)  # each look opens a connection: not too often on a loaded machine


class HeldRun:
    """`fragbench run` of the billed series in a thread (the CLI in process), eight calls in
    flight; the loopback server answers the first ANSWERED_FIRST requests and holds the rest
    behind `gate`."""

    def __init__(self, experiment: Path, server: Server, url: str,
                 env: dict[str, str] | None = None) -> None:
        with_in_flight(experiment)
        self.url = url
        self.gate = threading.Event()
        self.server = server
        held = after(self.gate, ok())
        answered = ok()

        def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
            # `number` counts from 0
            (answered if number < ANSWERED_FIRST else held)(handler, number, body)

        action: Action = act
        server.default = action
        self.out = experiment.parent.parent / "outputs"
        self.series_dir = self.out / "protocol-1.0" / "openai"
        self.results: list[Any] = []
        environment = {"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url,
                       **(env or {})}
        self.thread = threading.Thread(target=lambda: self.results.append(run_cli(
            "run", str(experiment), "--series", "openai", "--backend", "openai", "--out",
            str(self.out), env=environment)))

    def __enter__(self) -> HeldRun:
        self.thread.start()
        wait_for("eight calls held in flight",
                 lambda: len(self.server.requests) >= ANSWERED_FIRST + IN_FLIGHT
                 and self.ledger_settled(), self.thread.is_alive)
        return self

    def ledger_settled(self) -> bool:
        """The answered calls' outcomes and the held calls' reservations are all in the
        ledger (the run now only waits for the held answers)."""
        with psycopg.connect(self.url) as conn:
            kinds = [json.loads(line)["type"] for (line,) in conn.execute(
                "SELECT line FROM fragbench_ledger WHERE budget_id = %s", (BUDGET_ID,))]
        return (kinds.count("outcome"), kinds.count("reserve")) == (
            ANSWERED_FIRST, ANSWERED_FIRST + IN_FLIGHT)

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        self.thread.join(PATIENCE)
        assert not self.thread.is_alive(), "the run did not end"

    def stopped_in_one_line(self, url: str) -> str:
        """The run stopped as cannot_record (exit 3) in one line naming the server as
        `shown_url` shows it, never the password; the line."""
        [result] = self.results
        assert result.returncode == 3, result.stderr
        everything = result.stdout + result.stderr
        assert PASSWORD not in everything
        [line] = error_lines(result.stderr)
        assert "cannot_record" in line and shown_url(url) in line, line
        return line

    def journal(self) -> list[dict[str, Any]]:
        return read_journal(self.series_dir / "journal.jsonl")


def every_answer_journaled(run: HeldRun) -> list[dict[str, Any]]:
    """Each request the server answered has its body and its outcome in the journal; nothing
    more was sent; the journal's stop is cannot_record. Returns the journal."""
    records = run.journal()
    sent = len(run.server.requests)
    assert sent == ANSWERED_FIRST + IN_FLIGHT  # nothing started after the fault
    for kind in ("reserve", "received", "outcome"):
        assert sorted(r["seq"] for r in records if r["type"] == kind) == \
            list(range(1, sent + 1)), kind
    assert {r["status"] for r in records if r["type"] == "outcome"} == {"completed"}
    [stop] = [r for r in records if r["type"] == "stop"]
    assert stop["reason"] == "cannot_record" and records[-1] == stop
    return records


def ledger_counts_them_at_their_reservations(url: str, records: list[dict[str, Any]],
                                             lacking: int) -> None:
    """The ledger holds every reservation the journal does; each call whose outcome it lacks
    counts at its whole reservation (`lacking` of them: the calls in flight at the fault)."""
    ledger = PgLedger(url, BUDGET_ID).load()
    [uid] = ledger.series
    counted = ledger.series_calls(uid)
    reserved = {r["call_id"]: Decimal(r["reserved_usd"]) for r in records
                if r["type"] == "reserve"}
    assert set(counted) == set(reserved)
    open_ = [c for c, v in counted.items() if v is None]
    assert len(open_) == lacking
    outcomes = {r["call_id"]: Decimal(r["counted_usd"]) for r in records
                if r["type"] == "outcome"}
    for call, value in counted.items():
        assert value == (outcomes[call] if value is not None else None)
    assert ledger.spent() == sum((counted[c] if counted[c] is not None else reserved[c]
                                  for c in reserved), Decimal(0))


def settled_from_the_journal(series_dir: Path, load: Callable[[], Any],
                             records: list[dict[str, Any]], lacking: int,
                             env: dict[str, str] | None = None) -> None:
    """`fragbench ledger settle SERIES_DIR` gives the ledger the `lacking` outcomes it lacked,
    each at the journal's counted amount: no reservation of the series is left open, the
    ledger counts what the journal does; run again, it appends nothing."""
    from fragbench.series.journal import spent

    before = load()
    [uid] = before.series
    done = run_cli("ledger", "settle", str(series_dir), env=env)
    assert done.returncode == 0, done.stderr
    assert f"{lacking} outcomes appended" in done.stdout, done.stdout
    after_ = load()
    assert after_.records == before.records + lacking
    assert not [k for k in after_.open_reservations() if k[0] == uid]
    outcomes = {r["call_id"]: Decimal(r["counted_usd"]) for r in records
                if r["type"] == "outcome"}
    assert after_.series_calls(uid) == outcomes
    assert after_.spent() == spent(records)
    again = run_cli("ledger", "settle", str(series_dir), env=env)
    assert again.returncode == 0, again.stderr
    assert "nothing to settle" in again.stdout, again.stdout
    assert load().records == after_.records


def run_backends(url: str) -> list[int]:
    """The backends of fragbench's connections to the test database (the run's)."""
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(url) as conn:
        return [int(pid) for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'fragbench' AND "
            "datname = %s", (database,))]


# -- Item 5: a server that fails ---------------------------------------------------------------

def restart_fast(srv: pg_server.Server) -> None:
    # With its log file: a postmaster writing to pg_ctl's output would hold the pipe open.
    done = srv.pg_ctl("-m", "fast", "-l", str(srv.root / "log"), "restart")
    assert done.returncode == 0, done.stderr + srv.log_tail()


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: the postmaster's backends)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The command name in parentheses may hold spaces: the fields after its `)`.
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def gone(pid: int) -> bool:
    """No such process, or only its zombie (exited, not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def kill_postmaster(srv: pg_server.Server) -> None:
    """SIGKILL the postmaster, then wait until its backends have noticed and exited: an
    orphaned backend still serves its connection for a moment, and a write it took would
    meet the fault one call later than the eight in flight (a race seen under load)."""
    pid = srv.postmaster_pid()
    backends = children_of(pid)
    assert backends, "the postmaster has no backends"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + PATIENCE
    while not all(gone(b) for b in backends):
        assert time.monotonic() < deadline, "the orphaned backends did not exit"
        time.sleep(0.05)


@pytest.mark.parametrize("fault", [restart_fast, kill_postmaster], ids=["restart", "kill-9"])
def test_a_ledger_server_that_fails_keeps_every_answer_in_flight(
        experiment: Path, server: Server, own_server: pg_server.Server, pg_url: str,
        fault: Callable[[pg_server.Server], None]) -> None:
    with HeldRun(experiment, server, pg_url) as run:
        fault(own_server)
    line = run.stopped_in_one_line(pg_url)
    assert "cannot be used" in line, line
    assert f"the {IN_FLIGHT} calls in flight" in line and "in the journal, answers and all" in line
    assert "until `fragbench ledger settle` on the series folder" in line, line
    records = every_answer_journaled(run)
    if fault is kill_postmaster:
        own_server.start_again(PATIENCE)
    # The first answer after the fault is the one whose outcome could not reach the ledger;
    # the others were never offered to it: all eight count at their reservations.
    ledger_counts_them_at_their_reservations(pg_url, records, lacking=IN_FLIGHT)
    measured = run_cli("measure", str(run.series_dir))
    assert measured.returncode == 0, measured.stderr
    # The server up again: the journal's outcomes close the eight reservations.
    settled_from_the_journal(run.series_dir, lambda: PgLedger(pg_url, BUDGET_ID).load(),
                             records, lacking=IN_FLIGHT)


# -- Item 6: a server that stalls ---------------------------------------------------------------

@contextlib.contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_stalled_ledger_server_stops_the_run_within_the_bound(
        experiment: Path, server: Server, pg_url: str) -> None:
    """The run's backend stopped (SIGSTOP) with eight calls held: once they are answered, the
    first outcome's ledger write meets a server that says nothing; past the bound the run
    gives the ledger up, awaits and journals the eight, and stops in one line."""
    with HeldRun(experiment, server, pg_url, env={TIMEOUT_ENV: BOUND}) as run:
        backends = run_backends(pg_url)
        assert len(backends) == 1, backends  # the run's one connection
        with stopped(backends):
            run.gate.set()
            run.thread.join(PATIENCE)
            assert not run.thread.is_alive(), "the run hung on a stalled ledger server"
    line = run.stopped_in_one_line(pg_url)
    assert f"did not answer within {BOUND} s ({TIMEOUT_ENV}" in line, line
    assert f"the {IN_FLIGHT} calls in flight" in line and "in the journal, answers and all" in line
    records = every_answer_journaled(run)
    ledger_counts_them_at_their_reservations(pg_url, records, lacking=IN_FLIGHT)


@contextlib.contextmanager
def lock_held(url: str) -> Iterator[psycopg.Connection[Any]]:
    """Budget protocol-1.0-openai's lock, taken as another run taking its turn takes it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_lock_key("ledger", BUDGET_ID),))
        yield conn


def waiting_on_the_lock(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                           "'fragbench' AND wait_event_type = 'Lock' AND wait_event = "
                           "'advisory'").fetchone()
    return row is not None and row[0] > 0


def test_a_lock_held_within_the_bound_is_waited_for(experiment: Path, server: Server,
                                                     pg_url: str) -> None:
    """Another run holding the budget's lock (seen waiting on it: not a stall) is waited for,
    and the run completes once the lock is released."""
    with HeldRun(experiment, server, pg_url) as run, lock_held(pg_url):
        run.gate.set()
        wait_for("the run waiting on the lock", lambda: waiting_on_the_lock(pg_url),
                 run.thread.is_alive)
    [result] = run.results
    assert result.returncode == 0, result.stderr
    assert run.journal()[-1]["type"] == "end"


def test_a_lock_held_past_the_bound_stops_the_run_in_one_line(
        experiment: Path, server: Server, pg_url: str) -> None:
    with HeldRun(experiment, server, pg_url, env={TIMEOUT_ENV: BOUND}) as run, lock_held(pg_url):
        run.gate.set()
        run.thread.join(PATIENCE)
        assert not run.thread.is_alive()
    line = run.stopped_in_one_line(pg_url)
    assert f"lock was held by another connection for more than {BOUND} s ({TIMEOUT_ENV}" in line
    records = every_answer_journaled(run)
    ledger_counts_them_at_their_reservations(pg_url, records, lacking=IN_FLIGHT)


@pytest.mark.parametrize("value", ["0", "1", "3601", "1.5", "sixty", "٦٠"])
def test_a_bad_timeout_is_refused_before_anything_is_sent(experiment: Path, server: Server,
                                                          pg_url: str, value: str) -> None:
    result = run_cli("run", str(experiment), "--out", str(experiment.parent.parent / "out"),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url,
                          TIMEOUT_ENV: value})
    assert result.returncode == 4, result.stderr
    [line] = error_lines(result.stderr)
    assert f"{TIMEOUT_ENV}=" in line and "from 2 to 3600" in line
    assert server.requests == [] and not (experiment.parent.parent / "out").exists()


AT_THE_THREAD_LIMIT = r"""
import resource, sys, threading
import psycopg, fragbench.budget.ledger_pg
from fragbench.cli.commands import main  # everything imported before the limit is set
# A thread's stack is mapped when it starts: with it larger than the room the address-space
# limit leaves, pthread_create fails, as at the system's thread limit ("can't start new
# thread"), while the connection's own allocations still fit.
threading.stack_size(512 * 1024 * 1024)
with open("/proc/self/status", encoding="ascii") as fh:
    size = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 128 * 1024 * 1024, resource.RLIM_INFINITY))
try:
    threading.Thread(target=print).start()
except RuntimeError:
    pass
else:
    sys.exit("a thread still starts under the limit: the test proves nothing here")
sys.argv = ["fragbench", "ledger", "verify", "b"]
main()
"""


def test_a_watchdog_that_cannot_start_is_one_line(pg_url: str) -> None:
    """No thread can be started (an address-space limit leaves no room for a thread's stack,
    as the system's thread limit would): the ledger's watchdog, started once per connection,
    cannot start, and the command says so in one line naming the server (exit 4), never in a
    traceback. A real process under a real limit: nothing in fragbench or Python is patched."""
    from support.cli import process_env

    done = subprocess.run([sys.executable, "-c", AT_THE_THREAD_LIMIT], capture_output=True,
                          text=True, timeout=PATIENCE, env=process_env(
                              {"FRAGBENCH_LEDGER_URL": pg_url}), check=False)
    assert done.returncode == 4, done.stderr
    [line] = error_lines(done.stderr)
    assert "no thread could be started to bound the waits for the server" in line, line
    assert shown_url(pg_url) in line and PASSWORD not in done.stdout + done.stderr


# -- The file store: a ledger's disk full is not the journal's ----------------------------------

class LedgerDiskFull(Ledger):
    """A file ledger on a disk that fills once the calls are in flight: every outcome's write
    fails (ENOSPC), while the series' journal, on another disk, has room."""

    def _write(self, data: bytes) -> None:
        if b'"type": "outcome"' in data:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        super()._write(data)


def test_a_full_ledger_disk_keeps_every_answer_in_flight(tmp_path: Path) -> None:
    """Four calls in flight answer together; the first outcome's ledger write fails: nothing
    more starts, the four are in the journal, the ledger counts them at their reservations,
    and the stop names the ledger's file."""
    from support.collector import Held, billed, concurrent_backend, planned

    from fragbench.calls.collector import collect

    session = Held(held={"c0", "c1", "c2", "c3"}, together=4)
    session.gate.set()
    budget, ledger, journal, book = billed(tmp_path, Decimal(100), LedgerDiskFull)
    calls = [planned(i) for i in range(8)]
    try:
        stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session,
                       concurrent_backend(4), journal, book)
    finally:
        journal.close()
        ledger.close()
    assert stop is not None and stop.reason == "cannot_record", stop
    assert f"cannot write {tmp_path / 'b.jsonl'} (No space left on device)" in stop.detail
    assert "the 4 calls in flight (1, 2, 3, 4) are in the journal" in stop.detail
    assert not stop.abandoned and sorted(session.sent) == ["c0", "c1", "c2", "c3"]
    records = read_journal(tmp_path / "journal.jsonl")
    assert sorted(r["seq"] for r in records if r["type"] == "outcome") == [1, 2, 3, 4]
    assert records[-1]["type"] == "stop"
    assert set(Ledger(tmp_path / "b.jsonl", budget).load().series_calls("this").values()) == {
        None}
    env = {"FRAGBENCH_LEDGER_DIR": str(tmp_path), "FRAGBENCH_LEDGER_URL": ""}
    settled_from_the_journal(tmp_path, lambda: Ledger(tmp_path / "b.jsonl", budget).load(),
                             records, lacking=4, env=env)


def test_settle_refuses_an_edited_journal_and_a_series_being_collected(tmp_path: Path) -> None:
    """`ledger settle` appends only what the journal's chain vouches for, and never under a
    run collecting the series: an edited amount, or the series folder's lock held (as `run`
    holds it), is refused in one line, exit 4, nothing written."""
    import fcntl

    from support.collector import Held, billed, concurrent_backend, planned

    from fragbench.calls.collector import collect

    session = Held(held={"c0", "c1"}, together=2)
    session.gate.set()
    _budget, ledger, journal, book = billed(tmp_path, Decimal(100), LedgerDiskFull)
    calls = [planned(i) for i in range(4)]
    try:
        collect(calls, {c.seq: Decimal(1) for c in calls}, session, concurrent_backend(2),
                journal, book)
    finally:
        journal.close()
        ledger.close()
    env = {"FRAGBENCH_LEDGER_DIR": str(tmp_path), "FRAGBENCH_LEDGER_URL": ""}
    ledger_file = tmp_path / "b.jsonl"
    kept = ledger_file.read_bytes()
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = run_cli("ledger", "settle", str(tmp_path), env=env)
    finally:
        os.close(fd)
    assert busy.returncode == 4, busy.stderr
    [line] = error_lines(busy.stderr)
    assert "a run is collecting this series right now" in line, line
    path = tmp_path / "journal.jsonl"
    text = path.read_text(encoding="utf-8")
    assert text.count('"counted_usd": "0.015"') >= 2
    path.write_text(text.replace('"counted_usd": "0.015"', '"counted_usd": "0.001"', 1),
                    encoding="utf-8")
    edited = run_cli("ledger", "settle", str(tmp_path), env=env)
    assert edited.returncode == 4, edited.stderr
    [line] = error_lines(edited.stderr)
    assert str(path) in line, line
    assert ledger_file.read_bytes() == kept
    # The same edit with the chain stripped from every line (so that it reads as a journal
    # from before the chain): still refused, since nothing vouches for its outcomes.
    stripped = [json.loads(line) for line in text.replace(
        '"counted_usd": "0.015"', '"counted_usd": "0.001"', 1).splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in ("prev", "sha256")})
                            + "\n" for r in stripped), encoding="utf-8")
    unchained = run_cli("ledger", "settle", str(tmp_path), env=env)
    assert unchained.returncode == 4, unchained.stderr
    [line] = error_lines(unchained.stderr)
    assert str(path) in line and "is not chained" in line, line
    assert ledger_file.read_bytes() == kept


def test_a_stalled_server_is_refused_at_connection_within_the_bound(
        own_server: pg_server.Server, pg_url: str) -> None:
    """The postmaster stopped (SIGSTOP): a connection gets no answer; past the bound (libpq's
    connect_timeout), one line naming the server, exit 4."""
    with stopped([own_server.postmaster_pid()]):
        result = run_cli("ledger", "verify", "b", env={TIMEOUT_ENV: "2"})
    assert result.returncode == 4, result.stderr
    [line] = error_lines(result.stderr)
    assert f"did not answer within 2 s ({TIMEOUT_ENV}" in line and shown_url(pg_url) in line
    assert PASSWORD not in result.stdout + result.stderr


# -- Whatever escapes the wait without the ledger (review findings 3 and 6) ---------------------

def journaled(path: Path, kind: str) -> list[str]:
    """The call ids of the `kind` records the journal file holds, as written (read raw: the
    test looks at what reached the file, whatever the reader would make of it)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
               if line.strip()]
    return [r["call_id"] for r in records if r.get("type") == kind]


class AfterTheFirst:
    """A concurrency-safe session offering `on_body`, four calls in flight at once (a
    barrier): c0 answers at once; c1 answers once c0's outcome is in the journal, raising
    `c1_raises` if set; c2 and c3 wait for `late`, then hand over their bodies and answer."""

    endpoint = "scripted"
    concurrent = True

    def __init__(self, journal: Path, c1_raises: BaseException | None = None) -> None:
        self.journal, self.c1_raises = journal, c1_raises
        self.on_body: Any = None
        self.barrier = threading.Barrier(4, timeout=PATIENCE)
        self.late = threading.Event()
        self.returned = threading.Semaphore(0)
        """Released as c2 or c3 return."""

    def send(self, request: Any) -> Any:
        from support.collector import USAGE

        from fragbench.interfaces import Reply

        call = request.call_id
        self.barrier.wait()
        if call == "c1":
            deadline = time.monotonic() + PATIENCE
            while "c0" not in journaled(self.journal, "outcome"):
                assert time.monotonic() < deadline, "c0 was never journaled"
                time.sleep(0.01)
            if self.c1_raises is not None:
                raise self.c1_raises
        if call in ("c2", "c3"):
            try:
                assert self.late.wait(PATIENCE)
                self.on_body(json.dumps({"late": call}), 200)
            finally:
                self.returned.release()
        return Reply(status="completed", model="m", service_tier=None, request_id=None,
                     usage=USAGE, text='{"answer": "", "citations": []}')

    def close(self) -> None:
        return None


def test_a_bug_while_the_ledger_is_lost_still_records_every_call_in_flight(
        tmp_path: Path) -> None:
    """The ledger's disk fills at c0's outcome; then a bug (here in the progress callback)
    is raised while the other calls in flight are awaited: it is raised only after they are
    awaited and journaled, as for a bug at any other time (`salvage`)."""
    from support.collector import billed, concurrent_backend, planned

    from fragbench.calls.collector import collect

    session = AfterTheFirst(tmp_path / "journal.jsonl")
    session.late.set()
    budget, ledger, journal, book = billed(tmp_path, Decimal(100), LedgerDiskFull)
    calls = [planned(i) for i in range(8)]

    def on_progress(progress: Any) -> None:
        raise ValueError("a bug in on_progress")

    try:
        with pytest.raises(ValueError, match="a bug in on_progress"):
            collect(calls, {c.seq: Decimal(1) for c in calls}, session,
                    concurrent_backend(4), journal, book, on_progress=on_progress)
    finally:
        journal.close()
        ledger.close()
    records = read_journal(tmp_path / "journal.jsonl")
    assert sorted(r["call_id"] for r in records if r["type"] == "outcome") == [
        "c0", "c1", "c2", "c3"]
    assert not [r for r in records if r["type"] == "stop"]  # a bug records no stop
    assert set(Ledger(tmp_path / "b.jsonl", budget).load().series_calls("this").values()) == {
        None}


def test_an_interruption_escaping_while_the_ledger_is_lost_leaves_no_call_listening(
        tmp_path: Path) -> None:
    """The ledger's disk fills at c0's outcome; c1's thread then hands back a
    KeyboardInterrupt, which the collector raises (not the backend's to decide) with c2 and
    c3 still in flight: they are given up first, so that the bodies they hand over after
    `collect` returned (when the caller has closed, or is closing, the journal) are never
    written."""
    from support.collector import billed, concurrent_backend, planned

    from fragbench.calls.collector import collect

    path = tmp_path / "journal.jsonl"
    session = AfterTheFirst(path, c1_raises=KeyboardInterrupt())
    _budget, ledger, journal, book = billed(tmp_path, Decimal(100), LedgerDiskFull)
    calls = [planned(i) for i in range(8)]
    try:
        with pytest.raises(KeyboardInterrupt):
            collect(calls, {c.seq: Decimal(1) for c in calls}, session,
                    concurrent_backend(4), journal, book)
        session.late.set()  # c2 and c3 answer now, after collect has returned
        for _ in range(2):
            assert session.returned.acquire(timeout=PATIENCE)
    finally:
        session.late.set()
        journal.close()
        ledger.close()
    assert journaled(path, "outcome") == ["c0"]
    assert journaled(path, "received") == []  # no body written after collect returned


def test_a_call_never_sent_is_not_said_to_be_in_the_journal_with_its_answer(
        tmp_path: Path) -> None:
    """An interruption arrives while c1's reservation is written, c0 in flight: c1 is
    recorded never sent, and that outcome is the ledger write that fails (its disk full).
    The stop says c0, the one call in flight, is in the journal with its answer; c1, never
    sent, has no answer and is not listed with it."""
    from support.collector import Held, billed, concurrent_backend, planned

    from fragbench.calls.collector import collect
    from fragbench.calls.interruption import Interruption

    interruption = Interruption()
    session = Held(held={"c0"})

    class InterruptedAtC1(LedgerDiskFull):
        def _write(self, data: bytes) -> None:
            super()._write(data)
            if b'"type": "reserve"' in data and b'"call_id": "c1"' in data:
                interruption.request()  # as a signal between the check and the send
                session.gate.set()

    _budget, ledger, journal, book = billed(tmp_path, Decimal(100), InterruptedAtC1)
    calls = [planned(i) for i in range(4)]
    try:
        stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session,
                       concurrent_backend(2), journal, book, interruption=interruption)
    finally:
        session.gate.set()
        journal.close()
        ledger.close()
    assert stop is not None and (stop.reason, stop.call_id) == ("cannot_record", "c1"), stop
    assert "call 1, in flight, is in the journal, answers and all" in stop.detail, stop.detail
    assert "2, in flight" not in stop.detail and "calls in flight (1, 2)" not in stop.detail
    records = read_journal(tmp_path / "journal.jsonl")
    outcomes = {r["call_id"]: r for r in records if r["type"] == "outcome"}
    assert sorted(outcomes) == ["c0", "c1"] and outcomes["c1"]["never_sent"] is True
    assert sorted(session.sent) == ["c0"]
