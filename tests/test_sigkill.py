"""SIGKILL the collector (`fragbench run` in a subprocess, one call at a time) at chosen points of
a run, one at each kind of durable write, then a few random ones: the journal stays readable,
every sent call is counted at least at its reservation, `measure` rebuilds the series, and the
next run's budget check refuses anything that would cross the ceiling.

The points are reached without any hook in fragbench: the loopback server holds a chosen
request (the call is then reserved in the ledger and the journal, and sent), and the test holds
the budget's ledger lock as another run drawing on the budget would (the process then waits at
its next ledger write, which the test sees in /proc: `blocked_on_ledger`). Waits are bounded by
PATIENCE, a bound on a failure: nothing asserts a duration. docs/testing.md ("The SIGKILL
trials") says what each point proves and which write each would catch out of order.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import polars as pl
import pytest
from conftest import CANARY_KEY, PATIENCE, ROOT, process_env, refreeze, run_cli
from loopback import Handler, Server, ok

from fragbench.budget import balance
from fragbench.config import load_experiment
from fragbench.journal import read_journal
from fragbench.ledger import Ledger, ledger_path
from fragbench.redact import Redactor

pytestmark = pytest.mark.slow

CALLS = 72
RANDOM_TRIALS = 3
"""Random kills right after an answer left the server: the windows no chosen point can hold
open (the answer's body journaled but not yet its outcome, a reservation in the ledger but not
yet in the journal), hit now and then."""
RANDOM_AMONG = 8
"""The random kills follow one of the first 8 answers: the windows between two writes are the
same at every call (a later one only has more settled calls before it, which the chosen points
show), and a run killed early costs a loaded machine less."""
Tight = tuple[Path, dict[str, Decimal]]
"""The refrozen experiment and its calls' reservations (`tight`)."""
FLOCK_SYSCALL = {"x86_64": 73, "aarch64": 32}
"""flock(2)'s number in /proc/PID/syscall, by machine (Linux's syscall tables)."""


class Holder:
    """A server action: every request answered at once with a valid answer, except request
    `at` (0-based), held until `release()`. `arrived` is set when it comes in, `answered` once
    its answer was written (or the client was gone)."""

    def __init__(self, at: int | None, *, hold: bool = True) -> None:
        self.at = at
        self.arrived = threading.Event()
        self.answered = threading.Event()
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.answer = ok()

    def release(self) -> None:
        self.gate.set()

    def __call__(self, handler: Handler, number: int, body: dict[str, Any]) -> None:
        mine = number == self.at
        if mine:
            self.arrived.set()
            self.gate.wait(PATIENCE)
        try:
            self.answer(handler, number, body)
        except OSError:  # the client was killed: expected here
            handler.close_connection = True
        finally:
            if mine:
                self.answered.set()


def launch(experiment: Path, out: Path, server: Server) -> subprocess.Popen[bytes]:
    """`fragbench run` of the experiment's billed series, as a user starts it."""
    env = process_env({"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    return subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                             "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_until(what: str, condition: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    """Wait for `condition`, failing with what the process said if it ended first, or after
    PATIENCE (a bound on a failure, never on a passing run)."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if proc.poll() is not None:
            assert condition(), (f"the run ended before {what}",
                                 proc.stderr.read().decode() if proc.stderr else "")
            return
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)  # the journal is read back at each look: not too often on a busy CPU


def wait_event(what: str, event: threading.Event, proc: subprocess.Popen[bytes]) -> None:
    wait_until(what, event.is_set, proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(PATIENCE)
    if proc.stderr is not None:
        proc.stderr.close()


def blocked_on_ledger(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process's main thread is inside flock(2): waiting for the ledger's lock,
    the only file lock a run takes after it started. False where /proc cannot say (another
    machine or system): the caller then waits for the record the point is about alone."""
    number = FLOCK_SYSCALL.get(platform.machine())
    try:
        fields = Path(f"/proc/{proc.pid}/syscall").read_text(encoding="ascii").split()
    except OSError:
        return False
    return number is not None and bool(fields) and fields[0] == str(number)


@contextlib.contextmanager
def ledger_held(path: Path) -> Iterator[None]:
    """The budget ledger's lock, taken as another run drawing on the budget takes it."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def journal_has(series_dir: Path, kind: str, seq: int | None = None) -> bool:
    """Whether the series' journal holds a `kind` record (of call `seq`): read back as
    `measure` would, a torn last line and all."""
    path = series_dir / "journal.jsonl"
    if not path.exists():
        return False
    return any(r["type"] == kind and (seq is None or r.get("seq") == seq)
               for r in read_journal(path))


@attrs.frozen
class Killed:
    """What a killed run left: the requests the server saw, the journal read back, the
    reservations and outcomes in it, and what the ledger counts for each reserved call."""

    received: int
    series_dir: Path
    records: list[dict[str, Any]]
    reserves: list[dict[str, Any]]
    outcomes: dict[str, dict[str, Any]]
    counted: dict[str, Decimal | None]
    spent: Decimal


def read_back(experiment: Path, out: Path, server: Server) -> Killed:
    series_dir = out / "protocol-1.0" / "openai"
    journal = series_dir / "journal.jsonl"
    records = read_journal(journal) if journal.exists() else []
    reserves = [r for r in records if r["type"] == "reserve"]
    outcomes = {r["call_id"]: r for r in records if r["type"] == "outcome"}
    ledger = Ledger(ledger_path("protocol-1.0-openai"), load_experiment(experiment).budget)
    ledger.load()
    uid = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))["series_uid"] \
        if (series_dir / "series.json").exists() else None
    counted = ledger.series_calls(uid) if uid else {}
    with server.lock:
        received = len(server.requests)
    return Killed(received, series_dir, records, reserves, outcomes, counted, ledger.spent())


def check_recovery(experiment: Path, out: Path, server: Server, killed: Killed,
                   reserved: dict[str, Decimal]) -> None:
    """What holds wherever the kill landed: a reservation on disk for every request the server
    saw, every reserved call counted by the ledger (at its outcome if recorded there, else at
    its reservation), `measure` rebuilds the series, and the next run is refused, sending
    nothing, exactly when the plan no longer fits the ledger's balance."""
    assert len(killed.reserves) >= killed.received, (len(killed.reserves), killed.received)
    assert set(killed.counted) >= {r["call_id"] for r in killed.reserves}
    floor = sum((Decimal(killed.outcomes[r["call_id"]]["cost_usd"])
                 if r["call_id"] in killed.outcomes else reserved[r["call_id"]]
                 for r in killed.reserves), Decimal(0))
    assert killed.spent >= floor

    if killed.records:
        measured = run_cli("measure", str(killed.series_dir))
        assert measured.returncode == 0, measured.stderr
        calls = pl.read_parquet(killed.series_dir / "calls.parquet")
        assert calls.filter(pl.col("status") != "not_sent").height == len(killed.reserves)
        assert calls.filter(pl.col("status") == "completed").height == len(killed.outcomes)

    budget = load_experiment(experiment).budget
    fits = sum(reserved.values(), Decimal(0)) <= balance(budget, killed.spent)
    server.reset()
    nxt = run_cli("run", str(experiment), "--series", "after-kill", "--backend", "openai",
                  "--out", str(out),
                  env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    if fits:
        assert nxt.returncode == 0, nxt.stderr
        assert f"{CALLS} of {CALLS} calls sent" in nxt.stdout
    else:
        assert nxt.returncode != 0 and "nothing was sent" in nxt.stderr, nxt.stderr
        assert server.requests == []
        assert not (out / "protocol-1.0" / "after-kill").exists()


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Tight:
    """The protocol-1.0 experiment, copied once for the file's tests (each run writes only
    under its own output folder, and each test has its own ledger store), refrozen with a
    ceiling that fits the plan with less slack than any single call's reservation: once one
    call is counted, a whole new series can no longer fit. (the experiment, call id ->
    reservation)."""
    root = tmp_path_factory.mktemp("sigkill")
    experiment = root / "experiments" / "protocol-1.0"
    shutil.copytree(ROOT / "experiments" / "protocol-1.0", experiment,
                    ignore=shutil.ignore_patterns("outputs"))
    shutil.copytree(ROOT / "corpus", root / "corpus")
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "7"')
    plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    reserved = {c["id"]: Decimal(c["reserved_usd"]) for c in plan["schedule"]}
    assert len(reserved) == CALLS
    assert Decimal(plan["budget"]["total_reservation_usd"]) + min(reserved.values()) > \
        Decimal(plan["budget"]["balance_usd"])
    return experiment, reserved


def fresh(server: Server, action: Holder, trial: str, experiment: Path) -> Path:
    """A budget of its own (no ledger yet), the server reset to `action`, and an output
    folder named after the trial."""
    ledger_path("protocol-1.0-openai").unlink(missing_ok=True)
    server.reset()
    server.default = action
    return experiment.parent.parent / f"outputs-{trial}"


def call_id(reserved: dict[str, Decimal], seq: int) -> str:
    return list(reserved)[seq - 1]


def test_sigkill_waiting_for_the_ledger_lock_before_anything_is_counted(
        tight: Tight, server: Server) -> None:
    """Killed while another run holds the budget's ledger lock, before its first write: no
    series folder, the ledger as the other run left it, and the next run has the whole budget."""
    if platform.machine() not in FLOCK_SYSCALL:
        pytest.skip(f"/proc cannot show a process waiting in flock(2) on {platform.machine()}: "
                    "without it the kill could land before the run reaches the lock")
    experiment, reserved = tight
    out = fresh(server, Holder(None), "waiting", experiment)
    path = ledger_path("protocol-1.0-openai")
    other = Ledger(path, load_experiment(experiment).budget).open(Redactor())
    other.close()  # the budget's ledger, started by another run (its opening record only)
    with ledger_held(path):
        proc = launch(experiment, out, server)
        wait_until("the run waiting for the ledger's lock", lambda: blocked_on_ledger(proc),
                   proc)
        kill(proc)
    killed = read_back(experiment, out, server)
    assert not killed.series_dir.exists() and killed.received == 0
    assert len(path.read_bytes().splitlines()) == 1 and killed.spent == 0
    check_recovery(experiment, out, server, killed, reserved)


def killed_holding_call(experiment: Path, server: Server, number: int, trial: str
                        ) -> tuple[Killed, Path]:
    """A fresh run killed while the server holds call `number` unanswered (the calls before
    it answered), the held call then let go: what it left (read back) and its output folder."""
    holder = Holder(number - 1)
    out = fresh(server, holder, trial, experiment)
    proc = launch(experiment, out, server)
    wait_event(f"call {number} at the server", holder.arrived, proc)
    kill(proc)
    holder.release()
    return read_back(experiment, out, server), out


def test_sigkill_with_the_first_call_sent_and_unanswered(tight: Tight, server: Server) -> None:
    """Call 1 reserved (ledger, then journal) and sent, its answer held by the server: the
    ledger counts it at its whole reservation, `measure` shows it sent and unanswered."""
    experiment, reserved = tight
    killed, out = killed_holding_call(experiment, server, 1, "first")
    first = call_id(reserved, 1)
    assert killed.received == 1
    assert [r["call_id"] for r in killed.reserves] == [first] and killed.outcomes == {}
    assert not journal_has(killed.series_dir, "received")
    assert killed.counted == {first: None} and killed.spent == reserved[first]
    check_recovery(experiment, out, server, killed, reserved)


def test_sigkill_mid_run_with_a_call_sent_and_unanswered(tight: Tight, server: Server) -> None:
    """Calls 1-36 answered and recorded, call 37 sent and held: the ledger counts the 36 at
    their outcomes and call 37 at its reservation."""
    experiment, reserved = tight
    killed, out = killed_holding_call(experiment, server, 37, "mid")
    ids = list(reserved)
    assert killed.received == 37
    assert [r["call_id"] for r in killed.reserves] == ids[:37]
    assert sorted(killed.outcomes) == sorted(ids[:36])
    assert killed.counted == {**{i: Decimal(killed.outcomes[i]["counted_usd"]) for i in ids[:36]},
                              ids[36]: None}
    assert killed.spent == sum((Decimal(killed.outcomes[i]["counted_usd"]) for i in ids[:36]),
                               reserved[ids[36]])
    check_recovery(experiment, out, server, killed, reserved)


def test_sigkill_after_an_outcome_is_journaled_before_the_ledger_has_it(
        tight: Tight, server: Server) -> None:
    """Call 2 answered while another run holds the ledger's lock: its body and outcome are in
    the journal (written first, since an outcome at or below its reservation keeps what was
    paid for there), the ledger still counts it at its whole reservation: never under."""
    experiment, reserved = tight
    holder = Holder(1)
    out = fresh(server, holder, "outcome", experiment)
    proc = launch(experiment, out, server)
    wait_event("call 2 at the server", holder.arrived, proc)
    series_dir = out / "protocol-1.0" / "openai"
    with ledger_held(ledger_path("protocol-1.0-openai")):
        holder.release()
        wait_until("call 2's outcome journaled, or the run waiting for the ledger",
                   lambda: journal_has(series_dir, "outcome", 2) or blocked_on_ledger(proc),
                   proc)
        kill(proc)
    killed = read_back(experiment, out, server)
    first, second = call_id(reserved, 1), call_id(reserved, 2)
    assert killed.received == 2
    assert journal_has(series_dir, "received", 2)
    assert sorted(killed.outcomes) == sorted([first, second])
    assert killed.counted == {first: Decimal(killed.outcomes[first]["counted_usd"]),
                              second: None}
    assert killed.spent == Decimal(killed.outcomes[first]["counted_usd"]) + reserved[second]
    check_recovery(experiment, out, server, killed, reserved)


def test_sigkill_after_the_last_record(tight: Tight, server: Server) -> None:
    """Every call answered and the journal's `end` written, killed while the tables are being
    derived (or after): the ledger counts every call at its outcome, none open; `measure`
    derives the tables."""
    experiment, reserved = tight
    out = fresh(server, Holder(None), "end", experiment)
    series_dir = out / "protocol-1.0" / "openai"
    proc = launch(experiment, out, server)
    wait_until("the journal's end record", lambda: journal_has(series_dir, "end"), proc)
    kill(proc)
    killed = read_back(experiment, out, server)
    assert killed.received == CALLS and len(killed.outcomes) == CALLS
    assert killed.counted == {i: Decimal(o["counted_usd"]) for i, o in killed.outcomes.items()}
    assert killed.spent == sum((Decimal(o["counted_usd"]) for o in killed.outcomes.values()),
                               Decimal(0))
    check_recovery(experiment, out, server, killed, reserved)


def killed_mid_run(experiment: Path, out: Path, server: Server, rng: random.Random
                   ) -> tuple[int, Path, list[dict[str, Any]]]:
    """`fragbench run` in a subprocess, SIGKILLed a random instant (up to 20 ms) after the
    server wrote the answer to a random one of its first `RANDOM_AMONG` requests: how many
    requests the server received, the series folder, and its journal read back (readable, torn
    last line or not)."""
    holder = Holder(rng.randrange(0, RANDOM_AMONG), hold=False)
    server.reset()
    server.default = holder
    proc = launch(experiment, out, server)
    wait_event("the chosen answer sent", holder.answered, proc)
    time.sleep(rng.uniform(0, 0.02))
    kill(proc)
    series_dir = out / "protocol-1.0" / "openai"
    with server.lock:
        received = len(server.requests)
    return received, series_dir, read_journal(series_dir / "journal.jsonl")


def test_sigkill_at_random_points_after_an_answer(tight: Tight, server: Server) -> None:
    """A random instant after a random answer: what holds wherever the kill lands
    (`check_recovery`), in the windows between two writes that no chosen point holds open."""
    experiment, reserved = tight
    rng = random.Random(20261129)
    for trial in range(RANDOM_TRIALS):
        out = fresh(server, Holder(None), f"random-{trial}", experiment)
        received, _, _ = killed_mid_run(experiment, out, server, rng)
        killed = read_back(experiment, out, server)
        assert killed.received == received and killed.reserves
        check_recovery(experiment, out, server, killed, reserved)
