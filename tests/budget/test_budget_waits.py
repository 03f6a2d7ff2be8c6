"""Issue 24, item 11: the budget check with calls in flight, at a tight moment.

One scenario, three rules. Four calls reserve 1 USD each (each costs 0.015) under a ceiling of
4, two allowed in flight. Call 1 is in flight, held, when another series reserves 0.5: call
2's check then fails (3 still planned, 4 - 1 - 0.5 = 2.5 left) with exactly one call in
flight. One call at a time, call 2 would be checked with call 1 recorded at its cost and fit
(4 - 0.015 - 0.5 = 3.485), and so would every later call. The rules:

- the failed check waits for the one call in flight, checks again once it is recorded, and the
  series completes (the suite tried only three calls in flight);
- while it waits, the collector does not take the ledger's lock again (it does not spin on it:
  nothing can have freed room before a call in flight is recorded);
- the limit lowered at that moment is restored when room returns: calls 2 and 3 are in flight
  together afterwards (they meet at a barrier only two calls in flight can pass).

The file ledger, the collector itself and a scripted concurrency-safe session: nothing is timed
but the window in which a spinning collector would take the lock (a passing run never takes it
then, however long the window or loaded the machine).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from support.collector import COST, USAGE, billed, concurrent_backend, planned, replay_ceiling
from support.suite import PATIENCE

from fragbench.budget.ledger import Ledger
from fragbench.budget.money import Budget
from fragbench.calls.collector import collect
from fragbench.interfaces import Reply, Request
from fragbench.redact import Redactor
from fragbench.series.journal import read_journal, spent

BARRIER_PATIENCE = 60.0
"""How long calls 2 and 3 wait for each other: a bound on a failure (a limit never restored)."""
WINDOW = 0.5
"""Seconds after the failed check in which the lock entries are counted (a spinning collector
takes the lock every loop, many times a second; a correct one never)."""


class Tight(Ledger):
    """A file ledger that, right before the first lock entry after call 1's reservation (call
    2's check), has another series reserve 0.5 (through a ledger of its own, as another run
    would); counts every lock entry, and opens `failed` when that check appended nothing."""

    def __init__(self, path: Path, budget: Budget) -> None:
        super().__init__(path, budget)
        self.entries = 0
        self.armed = False
        self.fired = False
        self.failed = threading.Event()

    def append(self, record: dict[str, Any]) -> None:
        super().append(record)
        if record["type"] == "reserve" and record["seq"] == 1:
            self.armed = True
        self.appended = True

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        checking = self.armed and not self.fired
        if checking:
            self.fired = True
            other = Ledger(self.path, self.budget or self.budget_id).open(Redactor())
            try:
                with other.locked():
                    other.append({"type": "reserve", "series_uid": "other", "call_id": "o",
                                  "seq": 1, "reserved_usd": "0.5"})
            finally:
                other.close()
        self.entries += 1
        self.appended = False
        with super().locked():
            yield
        if checking and not self.appended:
            self.failed.set()


class Session:
    """Call 1 answers once call 2's check failed and WINDOW passed (the lock entries counted
    over it); calls 2 and 3 answer only together; call 4 at once."""

    endpoint = "scripted"
    concurrent = True

    def __init__(self, ledger: Tight) -> None:
        self.ledger = ledger
        self.together = threading.Barrier(2, timeout=BARRIER_PATIENCE)
        self.lock = threading.Lock()
        self.in_flight = self.most_after = 0
        self.entries_in_window: int | None = None

    def send(self, request: Request) -> Reply:
        with self.lock:
            self.in_flight += 1
            if request.call_id != "c0":
                self.most_after = max(self.most_after, self.in_flight)
        try:
            if request.call_id == "c0":
                assert self.ledger.failed.wait(PATIENCE), "call 2's check never failed"
                before = self.ledger.entries
                time.sleep(WINDOW)
                self.entries_in_window = self.ledger.entries - before
            elif request.call_id in ("c1", "c2"):
                self.together.wait()  # BrokenBarrierError: a technical failure, then a stop
            return Reply(status="completed", model="m", service_tier=None, request_id=None,
                         usage=USAGE, text='{"answer": "", "citations": []}')
        finally:
            with self.lock:
                self.in_flight -= 1

    def close(self) -> None:
        return None


def tight_run(tmp_path: Path) -> tuple[Any, Session, list[dict[str, Any]]]:
    _budget, ledger, journal, book = billed(tmp_path, Decimal(4), Tight)
    assert isinstance(ledger, Tight)
    session = Session(ledger)
    calls = [planned(i) for i in range(4)]
    try:
        stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session,
                       concurrent_backend(2), journal, book)
    finally:
        ledger.failed.set()
        journal.close()
        ledger.close()
    return stop, session, read_journal(tmp_path / "journal.jsonl")


def test_a_check_failing_with_one_call_in_flight_waits_for_it(tmp_path: Path) -> None:
    stop, _session, records = tight_run(tmp_path)
    assert stop is None, stop
    assert records[-1]["type"] == "end"
    order = [(r["type"], r["seq"]) for r in records if r["type"] in ("reserve", "outcome")]
    assert order.index(("reserve", 2)) > order.index(("outcome", 1))  # checked again after
    assert spent(records) == 4 * COST
    replay_ceiling(tmp_path / "b.jsonl", [Decimal(1)] * 4)


def test_a_failed_check_does_not_spin_on_the_ledger_lock(tmp_path: Path) -> None:
    _stop, session, _records = tight_run(tmp_path)
    assert session.entries_in_window == 0, (
        f"the ledger's lock was taken {session.entries_in_window} times while the one call "
        "in flight was unanswered")


def test_the_lowered_limit_is_restored_when_room_returns(tmp_path: Path) -> None:
    stop, session, records = tight_run(tmp_path)
    assert stop is None, stop  # calls 2 and 3 met at their barrier: two in flight again
    assert session.most_after == 2
    assert sorted(r["seq"] for r in records if r["type"] == "outcome") == [1, 2, 3, 4]
