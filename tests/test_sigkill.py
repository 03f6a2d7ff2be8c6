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

import json
import platform
import random
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import polars as pl
import pytest
from support.cli import refreeze, run_cli
from support.processes import (
    FLOCK_SYSCALL,
    Holder,
    blocked_on_ledger,
    journal_has,
    kill,
    killed_mid_run,
    launch,
    ledger_held,
    wait_event,
    wait_until,
)
from support.suite import CANARY_KEY, ROOT

from fragbench.budget.ledger import Ledger, ledger_path
from fragbench.budget.money import balance
from fragbench.experiment.config import load_experiment
from fragbench.redact import Redactor
from fragbench.series.journal import read_journal
from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow

CALLS = 72
RANDOM_TRIALS = 3
"""Random kills right after an answer left the server: the windows no chosen point can hold
open (the answer's body journaled but not yet its outcome, a reservation in the ledger but not
yet in the journal), hit now and then."""
Tight = tuple[Path, dict[str, Decimal]]
"""The refrozen experiment and its calls' reservations (`tight`)."""


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
