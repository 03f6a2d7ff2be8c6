"""The collector's stop rules, in process, on scripted replies.

Protocol 1.0: stop at the first technical failure, changed model or unknown cost; an incomplete
answer is kept and collection goes on; a stop is recorded after the answer that caused it. The
loopback tests (test_collect_openai.py) show the same through the real SDK, but at 10-20 s each
they cannot run once per mutant; these run in milliseconds, so mutation testing of collect.py
can hold the rules to account. Expected outcomes are the protocol's, worked out by hand.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.collector import (
    COST,
    PRICING,
    USAGE,
    Held,
    billed,
    concurrent_backend,
    planned,
    replay_ceiling,
)
from support.suite import PATIENCE

from fragbench.budget.ledger import Ledger
from fragbench.budget.money import Budget, UnknownCost, cost
from fragbench.calls.collector import collect
from fragbench.calls.interruption import Interruption
from fragbench.experiment.config import BackendConfig
from fragbench.interfaces import COST_FIELDS, BackendFailure, Contract, Reply, Request, Usage
from fragbench.redact import Redactor
from fragbench.series.journal import Journal, read_journal, spent
from fragbench.transport import NEVER_SENT


class Replies:
    """Answers each request with the next reply of a script: (status, model, tier)."""

    endpoint = "scripted"

    def __init__(self, script: list[tuple[str, str, str | None]]) -> None:
        self.script, self.sent = script, 0

    def send(self, request: Request) -> Reply:
        status, model, tier = self.script[self.sent]
        self.sent += 1
        return Reply(status=status, model=model, service_tier=tier, request_id=None,
                     usage=USAGE, text='{"answer": "", "citations": []}',
                     error="scripted error" if status == "failed" else None)

    def close(self) -> None:
        return None


class Raises:
    """Fails on the first request with the given exception."""

    endpoint = "scripted"

    def __init__(self, exc: Exception) -> None:
        self.exc, self.sent = exc, 0

    def send(self, request: Request) -> Reply:
        self.sent += 1
        raise self.exc

    def close(self) -> None:
        return None


def run(tmp_path: Path, script: list[tuple[str, str, str | None]] | Raises | Replies,
        tier: str | None = None, reserved: Decimal = Decimal(1),
        input_bound: int | None = None, snapshot: str | None = None, **options: Any
        ) -> tuple[Any, int, list[dict]]:
    params = {"model": "m"} if tier is None else {"model": "m", "service_tier": tier}
    contract = Contract(model="m", output_ceiling=10**6, usage_fields=frozenset(COST_FIELDS),
                        service_tier=tier)
    if snapshot is not None:
        contract = attrs.evolve(contract, snapshot=snapshot)
    backend = BackendConfig(name="m", plugin="scripted", params=params, pricing=PRICING,
                            contract=contract)
    calls = [planned(i) for i in range(3)]
    tmp_path.mkdir(exist_ok=True)
    journal = Journal(tmp_path / "journal.jsonl")
    session = script if isinstance(script, Raises | Replies) else Replies(script)
    bounds = None if input_bound is None else {c.seq: input_bound for c in calls}
    stop = collect(calls, {c.seq: reserved for c in calls}, session, backend, journal, None,
                   input_bounds=bounds, **options)
    journal.close()
    return stop, session.sent, read_journal(tmp_path / "journal.jsonl")


def test_a_clean_series_goes_to_the_end_and_prices_each_answer(tmp_path: Path) -> None:
    stop, sent, records = run(tmp_path, [("completed", "m", None)] * 3)
    assert stop is None and sent == 3
    outcomes = [r for r in records if r["type"] == "outcome"]
    assert [r["status"] for r in outcomes] == ["completed"] * 3
    assert [Decimal(r["cost_usd"]) for r in outcomes] == [COST] * 3
    assert all(r["cost_unknown"] is None for r in outcomes)
    assert outcomes[0]["usage"] == {"input_tokens": 1000, "cached_tokens": 0,
                                    "cache_write_tokens": 0, "output_tokens": 100,
                                    "reasoning_tokens": 0}


def test_an_incomplete_answer_is_kept_and_collection_goes_on(tmp_path: Path) -> None:
    stop, sent, records = run(tmp_path, [("completed", "m", None), ("incomplete", "m", None),
                                         ("completed", "m", None)])
    assert stop is None and sent == 3
    assert [r["status"] for r in records if r["type"] == "outcome"] == [
        "completed", "incomplete", "completed"]


# (script, asked tier, stop reason, seq of the stop). Model names sort both before and after
# the first one, so that "differs" cannot pass as "sorts after" (or before).
STOPS = {
    "failed status": ([("completed", "m", None), ("failed", "m", None)], None,
                      "technical_failure", 2),
    "first model not the one asked": ([("completed", "other", None)], None, "changed_model", 1),
    "later model sorting after": ([("completed", "m", None), ("completed", "m-2026-09-30", None)],
                                  None, "changed_model", 2),
    "later model sorting before": ([("completed", "m-2026-09-30", None), ("completed", "m", None)],
                                   None, "changed_model", 2),
    "tier sorting after": ([("completed", "m", "priority")], "default", "unknown_cost", 1),
    "tier sorting before": ([("completed", "m", "auto")], "default", "unknown_cost", 1),
}


@pytest.mark.parametrize("name", list(STOPS))
def test_the_first_stop_condition_ends_the_series_after_recording(tmp_path: Path,
                                                                   name: str) -> None:
    script, tier, reason, seq = STOPS[name]
    stop, sent, records = run(tmp_path, script, tier)
    assert stop is not None and (stop.reason, stop.seq) == (reason, seq)
    assert sent == seq  # nothing after the stop, no retry
    # The answer that caused the stop was recorded before the stop itself.
    kinds = [(r["type"], r.get("seq")) for r in records if r["type"] in ("outcome", "stop")]
    assert kinds[-2:] == [("outcome", seq), ("stop", seq)]


def test_an_input_above_the_short_context_limit_is_an_unknown_cost() -> None:
    # The frozen pricing holds up to max_input_tokens (272K) inclusive; one token more is
    # another price list, so the cost is unknown and the series stops.
    limit = PRICING.max_input_tokens
    at_limit = Usage(limit, 0, 0, 0, 0)
    assert cost(at_limit, PRICING) == Decimal(limit * 10) / 1_000_000
    with pytest.raises(UnknownCost, match="exceed"):
        cost(Usage(limit + 1, 0, 0, 0, 0), PRICING)
    assert cost(Usage(limit + 1, 0, 0, 0, 0), PRICING, check_context=False) == \
        Decimal((limit + 1) * 10) / 1_000_000


def test_a_cost_at_its_reservation_is_known_and_above_it_stops(tmp_path: Path) -> None:
    # The reservation bounds what a call can cost; exactly at the bound is still within it.
    stop, sent, _ = run(tmp_path / "at", [("completed", "m", None)] * 3, reserved=COST)
    assert stop is None and sent == 3
    stop, sent, records = run(tmp_path / "above", [("completed", "m", None)] * 3,
                              reserved=COST - Decimal("0.000001"))
    assert stop is not None and (stop.reason, stop.seq, sent) == ("unknown_cost", 1, 1)
    (outcome,) = [r for r in records if r["type"] == "outcome"]
    assert Decimal(outcome["counted_usd"]) == COST  # the evidence, above the reservation


def test_a_usage_above_the_request_bound_is_impossible(tmp_path: Path) -> None:
    # 1000 input tokens reported for a request bounded at 999: evidence of nothing, counted at
    # the reservation, and the cost is unknown.
    stop, sent, records = run(tmp_path / "over", [("completed", "m", None)] * 3,
                              input_bound=999)
    assert stop is not None and (stop.reason, stop.seq, sent) == ("unknown_cost", 1, 1)
    (outcome,) = [r for r in records if r["type"] == "outcome"]
    assert outcome["cost_unknown"].startswith("impossible usage")
    assert Decimal(outcome["counted_usd"]) == Decimal(1)
    stop, _, _ = run(tmp_path / "at", [("completed", "m", None)] * 3, input_bound=1000)
    assert stop is None


@pytest.mark.parametrize(("exc", "counted"), [
    (RuntimeError("a bug in a backend"), Decimal(1)),   # any exception is a technical failure
    (BackendFailure("timeout", "timed out"), Decimal(1)),  # it may have been billed
    (BackendFailure("connection", "refused", never_sent=True), Decimal(0)),  # provably not
])
def test_a_failure_to_get_an_answer_stops_and_counts_what_it_may_have_cost(
        tmp_path: Path, exc: Exception, counted: Decimal) -> None:
    stop, sent, records = run(tmp_path, Raises(exc))
    assert stop is not None and (stop.reason, stop.seq, sent) == ("technical_failure", 1, 1)
    (outcome,) = [r for r in records if r["type"] == "outcome"]
    assert outcome["status"] == "failed"
    assert Decimal(outcome["counted_usd"]) == counted


def test_a_snapshot_is_the_same_model_in_the_contract_s_own_naming(tmp_path: Path) -> None:
    """The Messages API names a dated snapshot `-YYYYMMDD`, OpenAI `-YYYY-MM-DD`: each backend's
    contract says which, and a snapshot in another naming is another model."""
    dated = [("completed", "m-20251001", None)] * 3
    stop, sent, _ = run(tmp_path / "a", dated, snapshot=r"-\d{8}")
    assert stop is None and sent == 3  # priced too: the table's model "m" covers its snapshot
    stop, _, _ = run(tmp_path / "b", dated)  # the default naming: another model
    assert stop is not None and stop.reason == "changed_model"
    stop, _, _ = run(tmp_path / "c", [("completed", "m-2025-10-01", None)],
                     snapshot=r"-\d{8}")
    assert stop is not None and stop.reason == "changed_model"


# -- Issue 14: interruptions, progress that cannot be printed, bodies recorded first -----------

COMPLETED = ("completed", "m", None)


class InterruptedAt(Replies):
    """Requests the interruption while call `at` (1-based) is in flight, then answers it."""

    def __init__(self, interruption: Interruption, at: int) -> None:
        super().__init__([COMPLETED] * 3)
        self.interruption, self.at = interruption, at

    def send(self, request: Request) -> Reply:
        if self.sent + 1 == self.at:
            self.interruption.request()
        return super().send(request)


def test_an_interruption_records_the_call_in_flight_and_starts_no_other(tmp_path: Path) -> None:
    stop_asked = Interruption()
    session = InterruptedAt(stop_asked, at=2)
    stop, sent, records = run(tmp_path, session, interruption=stop_asked)
    assert stop is not None and (stop.reason, stop.seq, sent) == ("interrupted", 3, 2)
    kinds = [(r["type"], r.get("seq")) for r in records if r["type"] != "header"]
    assert kinds == [("reserve", 1), ("outcome", 1), ("reserve", 2), ("outcome", 2),
                     ("stop", 3)]
    assert "calls 1-2 recorded" in records[-1]["detail"]


def test_an_interruption_before_the_first_call_sends_nothing(tmp_path: Path) -> None:
    stop_asked = Interruption()
    stop_asked.request()
    stop, sent, records = run(tmp_path, [COMPLETED] * 3, interruption=stop_asked)
    assert stop is not None and (stop.reason, stop.seq, sent) == ("interrupted", 1, 0)
    assert [r["type"] for r in records] == ["stop"]


class Hangs(Replies):
    """Never answers call 2 by itself: a second interruption must end the wait."""

    def __init__(self, interruption: Interruption) -> None:
        super().__init__([COMPLETED] * 3)
        self.interruption = interruption
        self.release = threading.Event()

    def send(self, request: Request) -> Reply:
        if self.sent == 1:
            self.sent += 1
            self.interruption.request()
            self.interruption.request()  # the second Ctrl-C
            self.release.wait(120)  # a bound on a failure: a collector that waits fails
            raise RuntimeError("no answer")
        return super().send(request)


def test_a_second_interruption_abandons_the_call_in_flight(tmp_path: Path) -> None:
    stop_asked = Interruption()
    session = Hangs(stop_asked)
    try:
        stop, _, records = run(tmp_path, session, interruption=stop_asked)
    finally:
        session.release.set()
    assert stop is not None and (stop.reason, stop.seq, stop.abandoned) == ("interrupted", 2, True)
    kinds = [(r["type"], r.get("seq")) for r in records]
    assert kinds == [("reserve", 1), ("outcome", 1), ("reserve", 2), ("stop", 2)]
    assert "abandoned" not in records[-1]  # said, not recorded


def test_progress_that_cannot_be_printed_stops_nothing(tmp_path: Path) -> None:
    def closed_pipe(progress: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    stop, sent, records = run(tmp_path, [COMPLETED] * 3, on_progress=closed_pipe)
    assert stop is None and sent == 3 and records[-1]["type"] == "end"


class Bodies(Replies):
    """Hands each body to `on_body` before answering, as fragbench's transport does."""

    on_body = None

    def send(self, request: Request) -> Reply:
        assert self.on_body is not None, "the collector sets on_body before each call"
        self.on_body(f"body {self.sent + 1}", 200)
        return super().send(request)


def test_each_body_is_journaled_before_its_outcome(tmp_path: Path) -> None:
    stop, sent, records = run(tmp_path, Bodies([COMPLETED] * 3))
    assert stop is None and sent == 3
    received = [(r["type"], r["seq"], r.get("raw")) for r in records
                if r["type"] in ("received", "outcome")]
    assert received[:2] == [("received", 1, "body 1"), ("outcome", 1, None)]
    assert [r[0] for r in received] == ["received", "outcome"] * 3


class Retries(Bodies):
    """Hands call 2 two bodies (a 500, then an answer), as a backend that retries on its own
    HTTP client would; then answers, or raises what the retry left."""

    def __init__(self, script: list[tuple[str, str, str | None]], then_raise: bool) -> None:
        super().__init__(script)
        self.then_raise = then_raise

    def send(self, request: Request) -> Reply:
        if self.sent == 1:
            assert self.on_body is not None
            self.on_body('{"error": "overloaded"}', 500)
            if self.then_raise:
                self.on_body('{"error": "overloaded again"}', 500)
                self.sent += 1
                raise BackendFailure("http_error", "HTTP 500 from the API", http_status=500)
        return super().send(request)


@pytest.mark.parametrize("then_raise", [False, True], ids=["then-answers", "then-fails"])
def test_a_backend_that_retries_is_a_technical_failure_counted_per_request(
        tmp_path: Path, then_raise: bool) -> None:
    """Two bodies for one call: every body is kept (what the retry paid for), the journal
    reads back, the call is counted at twice its reservation, and the series stops there
    whatever the session returned: no answer makes a retry good."""
    stop, _sent, records = run(tmp_path, Retries([COMPLETED] * 3, then_raise),
                              reserved=Decimal("0.5"))
    assert stop is not None and (stop.reason, stop.seq) == ("technical_failure", 2)
    bodies = [r["raw"] for r in records if r["type"] == "received" and r["seq"] == 2]
    assert len(bodies) == 2 and bodies[0] == '{"error": "overloaded"}'
    [outcome] = [r for r in records if r["type"] == "outcome" and r["seq"] == 2]
    assert outcome["failure"] == "second_request" and outcome["never_sent"] is False
    assert Decimal(outcome["counted_usd"]) == Decimal(1)  # 2 x 0.5, each request billable
    assert "2 requests for one call" in outcome["cost_unknown"]
    assert not [r for r in records if r["type"] == "outcome" and r["seq"] == 3]

class Full:
    """A journal whose disk filled before call 2's body: the append of a `received` fails."""

    def __init__(self, journal: Journal, error: OSError) -> None:
        self.journal, self.redactor, self.path = journal, journal.redactor, journal.path
        self.error = error

    def append(self, record: dict[str, Any]) -> None:
        if record["type"] == "received" and record["seq"] == 2:
            raise self.error
        self.journal.append(record)


@pytest.mark.parametrize("error", ["errno", "message only"])
def test_a_body_that_cannot_be_journaled_stops_the_series_and_is_kept(tmp_path: Path,
                                                                      error: str) -> None:
    path = tmp_path / "journal.jsonl"
    why = "No space left on device" if error == "errno" else f"short write to {path}"
    exc = OSError(28, why, str(path)) if error == "errno" else OSError(why)
    contract = Contract(model="m", output_ceiling=10**6, usage_fields=frozenset(COST_FIELDS))
    backend = BackendConfig(name="m", plugin="scripted", params={"model": "m"},
                            pricing=PRICING, contract=contract)
    calls = [planned(i) for i in range(3)]
    journal = Journal(tmp_path / "journal.jsonl")
    session = Bodies([COMPLETED] * 3)
    stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session, backend,
                   Full(journal, exc), None)  # type: ignore[arg-type]
    journal.close()
    assert stop is not None and (stop.reason, stop.seq, session.sent) == ("cannot_record", 2, 1)
    assert stop.unrecorded is not None and '"raw": "body 2"' in stop.unrecorded
    assert stop.detail.count(str(path)) == 1 and stop.detail.count(why) == 1  # said once


class _InterruptedWhileReserving(Journal):
    """A journal during whose writing of call `at`'s reservation an interruption arrives (as a
    signal would while the ledger's lock is awaited or the reservation fsync'ed)."""

    def __init__(self, path: Path, interruption: Interruption, at: int) -> None:
        super().__init__(path)
        self.interruption, self.at = interruption, at

    def append(self, record: dict[str, Any]) -> None:
        super().append(record)
        if record["type"] == "reserve" and record["seq"] == self.at:
            self.interruption.request()


def test_an_interruption_while_a_reservation_is_written_sends_nothing_more(
        tmp_path: Path) -> None:
    """No call starts after the interruption, even one whose reservation was being written
    when it came; that call never left, so it is counted at zero and says so."""
    stop_asked = Interruption()
    calls = [planned(i) for i in range(3)]
    backend = BackendConfig(name="m", plugin="scripted", params={"model": "m"}, pricing=PRICING,
                            contract=Contract(model="m", output_ceiling=10**6,
                                              usage_fields=frozenset(COST_FIELDS)))
    journal = _InterruptedWhileReserving(tmp_path / "journal.jsonl", stop_asked, at=2)
    session = Replies([COMPLETED] * 3)
    stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session, backend, journal, None,
                   interruption=stop_asked)
    journal.close()
    records = read_journal(tmp_path / "journal.jsonl")
    assert session.sent == 1
    assert stop is not None and stop.reason == "interrupted" and stop.seq == 2
    second = [r for r in records if r["type"] == "outcome" and r["seq"] == 2]
    assert len(second) == 1 and second[0]["never_sent"] is True
    assert Decimal(second[0]["counted_usd"]) == 0
    assert spent(records) == COST  # call 1 as priced, call 2 released


def test_a_usage_no_request_makes_is_impossible_whatever_the_bounds() -> None:
    """A count beyond any request (10**30 tokens) is never priced, even with no bounds given:
    priced, it would be an amount beyond the money columns' scale."""
    from fragbench.calls.collector import impossible

    huge = Usage(input_tokens=10**30, cached_tokens=0, cache_write_tokens=0, output_tokens=1,
                 reasoning_tokens=0)
    assert impossible(huge, None, None) is not None
    assert impossible(attrs.evolve(huge, input_tokens=1000), None, None) is None


# -- Issue 16, item 3 (review): calls in flight when a thread cannot start, a bug, a budget ----

def test_a_thread_that_cannot_start_is_a_call_never_sent_and_those_in_flight_are_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The third call's thread cannot start (the system's thread limit) with calls 1 and 2 in
    flight: call 3 is recorded never sent and counted at zero, the series stops there as a
    technical failure, and calls 1 and 2, answering only once that start failed, are awaited
    and recorded; the journal reads back and the ledger agrees."""
    session = Held(held={"c0", "c1"})
    real_start = threading.Thread.start
    started: list[str] = []

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("fragbench-call-"):  # the collector's workers only
            started.append(thread.name)
            if len(started) == 3:
                session.gate.set()  # calls 1 and 2 answer: the collector must take them
                raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    budget, ledger, journal, book = billed(tmp_path, Decimal(100))
    calls = [planned(i) for i in range(6)]
    try:
        stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session,
                       concurrent_backend(4), journal, book)
    finally:
        session.gate.set()
        journal.close()
        ledger.close()
    assert stop is not None and (stop.reason, stop.seq) == ("technical_failure", 3)
    assert "no thread could be started to send call 3 (RuntimeError: can't start new thread" \
        in stop.detail and stop.detail.endswith(NEVER_SENT)
    assert len(started) == 3 and sorted(session.sent) == ["c0", "c1"]
    records = read_journal(tmp_path / "journal.jsonl")
    outcomes = {r["seq"]: r for r in records if r["type"] == "outcome"}
    assert sorted(outcomes) == [1, 2, 3]
    assert outcomes[1]["status"] == outcomes[2]["status"] == "completed"
    third = outcomes[3]
    assert (third["status"], third["failure"], third["never_sent"]) == (
        "failed", "not_started", True)
    assert Decimal(third["counted_usd"]) == Decimal(third["cost_usd"]) == 0
    assert not [r for r in records if r["type"] == "reserve" and r["seq"] > 3]
    assert records[-1]["type"] == "stop" and records[-1]["seq"] == 3
    assert [r for r in records if r["type"] == "stop"] == [records[-1]]
    assert spent(records) == 2 * COST
    reread = Ledger(tmp_path / "b.jsonl", budget).load()
    assert reread.series_calls("this") == {"c0": COST, "c1": COST, "c2": Decimal(0)}
    assert reread.spent() == 2 * COST


def test_a_call_whose_thread_runs_although_its_start_failed_is_never_recorded_unsent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Thread.start` raises after the thread began sending (not CPython's way, but nothing
    proves otherwise): the request went out, so the call is not recorded never sent. The
    collector takes it for a bug: it awaits the calls in flight, records their answers (this
    one's too), and raises the error."""
    session = Held()
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        real_start(thread)
        if thread.name == "fragbench-call-2":
            deadline = time.monotonic() + PATIENCE
            while "c1" not in session.sent:  # its request has gone out
                assert time.monotonic() < deadline
                time.sleep(0.001)
            raise RuntimeError("started after all")

    monkeypatch.setattr(threading.Thread, "start", start)
    budget, ledger, journal, book = billed(tmp_path, Decimal(100))
    calls = [planned(i) for i in range(6)]
    try:
        with pytest.raises(RuntimeError, match="started after all"):
            collect(calls, {c.seq: Decimal(1) for c in calls}, session, concurrent_backend(4),
                    journal, book)
    finally:
        journal.close()
        ledger.close()
    records = read_journal(tmp_path / "journal.jsonl")
    outcomes = {r["seq"]: r for r in records if r["type"] == "outcome"}
    assert sorted(outcomes) == [1, 2] and sorted(session.sent) == ["c0", "c1"]
    assert {r["status"] for r in outcomes.values()} == {"completed"}
    assert not [r for r in records if r["type"] in ("stop", "end")]
    assert Ledger(tmp_path / "b.jsonl", budget).load().series_calls("this") == {
        "c0": COST, "c1": COST}


def test_a_bug_while_calls_are_in_flight_records_their_answers_then_is_raised(
        tmp_path: Path) -> None:
    """A bug (here `on_progress` raising other than OSError) at the first answer, with four
    calls in flight: the other three are awaited and recorded before the error is raised; no
    call starts after it, and no stop is recorded (a run cut short)."""
    session = Held(held={"c0", "c1", "c2", "c3"}, together=4)
    session.gate.set()  # the barrier alone: all four in flight before any answers

    def broken(progress: Any) -> None:
        raise ValueError(f"a bug at call {progress.seq}")

    budget, ledger, journal, book = billed(tmp_path, Decimal(100))
    calls = [planned(i) for i in range(8)]
    try:
        with pytest.raises(ValueError, match="a bug at call") as raised:
            collect(calls, {c.seq: Decimal(1) for c in calls}, session, concurrent_backend(4),
                    journal, book, on_progress=broken)
    finally:
        journal.close()
        ledger.close()
    records = read_journal(tmp_path / "journal.jsonl")
    assert sorted(r["seq"] for r in records if r["type"] == "outcome") == [1, 2, 3, 4]
    assert len(raised.value.__notes__) == 3  # each later answer's progress failed too
    assert sorted(r["seq"] for r in records if r["type"] == "reserve") == [1, 2, 3, 4]
    assert not [r for r in records if r["type"] in ("stop", "end")]
    assert Ledger(tmp_path / "b.jsonl", budget).load().series_calls("this") == {
        f"c{i}": COST for i in range(4)}


class CheckWatched(Ledger):
    """A file ledger that opens `checked` when its lock is released the second time after
    call 1's outcome was appended: that is the next start's budget check (nothing else is
    recorded in between while calls 2-4 are held)."""

    def __init__(self, path: Path, budget: Budget) -> None:
        super().__init__(path, budget)
        self.unlocks: int | None = None
        self.checked = threading.Event()

    def append(self, record: dict[str, Any]) -> None:
        super().append(record)
        if record["type"] == "outcome" and record["seq"] == 1:
            self.unlocks = 0

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with super().locked():
            yield
        if self.unlocks is not None:
            self.unlocks += 1
            if self.unlocks == 2:
                self.checked.set()


def test_a_failed_check_with_calls_in_flight_waits_for_them_and_checks_again(
        tmp_path: Path) -> None:
    """Eight calls of 1 USD reserved each under a ceiling of 8; four in flight when another
    series reserves 3.5. Call 5's check fails while calls 2-4 are in flight (each at its
    whole reservation); one call at a time, call 5 would be checked with calls 1-4 recorded
    at their costs (0.015 each) and fit, and so would every later call. The concurrent run
    waits for them, checks again, and completes too; the ledger never shows the ceiling
    crossed."""
    session = Held(held={"c0", "c1", "c2", "c3"}, together=4)
    budget, ledger, journal, book = billed(tmp_path, Decimal(8), CheckWatched)
    assert isinstance(ledger, CheckWatched)

    def meanwhile(call_id: str) -> None:
        if call_id == "c0":  # all four in flight: another series draws on the budget
            other = Ledger(tmp_path / "b.jsonl", budget).open(Redactor())
            try:
                with other.locked():
                    other.append({"type": "reserve", "series_uid": "other", "call_id": "o",
                                  "seq": 1, "reserved_usd": "3.5"})
            finally:
                other.close()
            session.gate.set()  # call 1 answers ...
        else:
            assert ledger.checked.wait(PATIENCE)  # ... the others once call 5 was checked

    session.before_answer = meanwhile
    calls = [planned(i) for i in range(8)]
    try:
        stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session,
                       concurrent_backend(4), journal, book)
    finally:
        ledger.checked.set()
        session.gate.set()
        journal.close()
        ledger.close()
    assert stop is None
    records = read_journal(tmp_path / "journal.jsonl")
    assert records[-1]["type"] == "end" and len(session.sent) == 8
    order = [(r["type"], r["seq"]) for r in records if r["type"] in ("reserve", "outcome")]
    assert order.index(("reserve", 5)) > max(order.index(("outcome", s)) for s in (1, 2, 3, 4))
    assert spent(records) == 8 * COST
    replay_ceiling(tmp_path / "b.jsonl", [Decimal(1)] * 8)


# -- Issue 24, item 11: two stop reasons on one call; the lowest changed call ------------------

class Ordered:
    """A concurrency-safe session that answers its calls in a given order, whatever order they
    were sent in: call `order[i]` answers once the outcome of `order[i - 1]` is in the journal
    (so the collector takes them in exactly that order). `answers`: call_id -> (model, tier)."""

    endpoint = "scripted"
    concurrent = True

    def __init__(self, journal: Path, order: list[str],
                 answers: dict[str, tuple[str, str | None]]) -> None:
        self.journal, self.order, self.answers = journal, order, answers

    def recorded(self, call_id: str) -> bool:
        text = self.journal.read_text(encoding="utf-8") if self.journal.exists() else ""
        return any(json.loads(line).get("call_id") == call_id and '"outcome"' in line
                   for line in text.splitlines() if line.strip())

    def send(self, request: Request) -> Reply:
        at = self.order.index(request.call_id)
        deadline = time.monotonic() + 120  # a bound on a failure, never reached when it holds
        while at and not self.recorded(self.order[at - 1]):
            assert time.monotonic() < deadline, f"{self.order[at - 1]} was never recorded"
            time.sleep(0.01)
        model, tier = self.answers[request.call_id]
        return Reply(status="completed", model=model, service_tier=tier, request_id=None,
                     usage=USAGE, text='{"answer": "", "citations": []}')

    def close(self) -> None:
        return None


def ordered_run(tmp_path: Path, in_flight: int, order: list[str],
                answers: dict[str, tuple[str, str | None]]) -> tuple[Any, list[dict]]:
    """Calls c0..c3 under a contract asking for model "m" on tier "default", `in_flight` at
    once, answered in `order`."""
    from fragbench.experiment.config import Concurrency

    contract = Contract(model="m", output_ceiling=10**6, usage_fields=frozenset(COST_FIELDS),
                        service_tier="default")
    backend = BackendConfig(name="m", plugin="scripted", params={"model": "m"},
                            pricing=PRICING, contract=contract,
                            concurrency=Concurrency(max_in_flight=in_flight))
    calls = [planned(i) for i in range(4)]
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    stop = collect(calls, {c.seq: Decimal(1) for c in calls}, Ordered(path, order, answers),
                   backend, journal, None)
    journal.close()
    return stop, read_journal(path)


@pytest.mark.parametrize("in_flight", [1, 3])
def test_a_call_that_meets_two_stop_reasons_records_the_changed_model(
        tmp_path: Path, in_flight: int) -> None:
    """The module's order, technical failure, changed model, unknown cost: call 2 answers from
    a model other than call 1's *and* on another service tier (an unknown cost). One call at a
    time, call 2's answer meets both at once; with three in flight it arrives first, a dated
    snapshot of the model asked for but on the wrong tier (an unknown cost), and only when
    call 1's answer arrives is it a changed model too. Either way the series records
    changed_model at call 2, as the rules rank them."""
    answers = {"c0": ("m", "default"), "c1": ("m-2026-09-30", "priority"),
               "c2": ("m", "default"), "c3": ("m", "default")}
    order = ["c0", "c1", "c2", "c3"] if in_flight == 1 else ["c1", "c0", "c2", "c3"]
    stop, records = ordered_run(tmp_path, in_flight, order, answers)
    assert stop is not None and (stop.reason, stop.seq) == ("changed_model", 2), stop
    assert stop.detail == "model 'm-2026-09-30' came back after 'm'"
    (recorded,) = [r for r in records if r["type"] == "stop"]
    assert (recorded["reason"], recorded["seq"]) == ("changed_model", 2)
    second = next(r for r in records if r["type"] == "outcome" and r["seq"] == 2)
    assert "service tier 'priority' came back" in second["cost_unknown"]  # both were met


def test_a_changed_model_stop_names_the_lowest_changed_call(tmp_path: Path) -> None:
    """Three in flight; calls 3 then 2 answer (both the same dated snapshot, which agree with
    each other), then call 1 with the bare model: calls 2 and 3 both changed it, and the stop
    names call 2, the one a run one call at a time would have stopped at."""
    answers = {"c0": ("m", "default"), "c1": ("m-2026-09-30", "default"),
               "c2": ("m-2026-09-30", "default"), "c3": ("m", "default")}
    stop, records = ordered_run(tmp_path, 3, ["c2", "c1", "c0", "c3"], answers)
    assert stop is not None and (stop.reason, stop.seq) == ("changed_model", 2), stop
    assert stop.detail == "model 'm-2026-09-30' came back after 'm'"
    # Call 4 started when call 3 was recorded (no stop then), and was awaited and recorded.
    assert [r["seq"] for r in records if r["type"] == "outcome"] == [3, 2, 1, 4]
    assert [(r["reason"], r["seq"]) for r in records if r["type"] == "stop"] == [
        ("changed_model", 2)]


# -- Issue 24, items 1, 2 and 10: the pure rules (the loopback side: test_usage_edges.py) -----

ARABIC = "\u0662\u0660\u0662\u0666\u0660\u0669\u0660\u0663"  # ٢٠٢٦٠٩٠٣
FULL_WIDTH = "\uff12\uff10\uff12\uff16\uff10\uff19\uff10\uff13"  # ２０２６０９０３


def test_model_matches_reads_only_ascii_digits_whatever_the_contract_writes() -> None:
    """The default suffix and a contract's own `\\d` (the Messages API plugin writes
    `-\\d{8}`) both take 0-9 only: model_matches compiles with re.ASCII."""
    from fragbench.calls.collector import model_matches
    from fragbench.interfaces import SNAPSHOT

    assert model_matches("m", "m-2026-09-03") and model_matches("m", "m")
    assert model_matches("m", "m-20260903", r"-\d{8}")
    for digits in (ARABIC, FULL_WIDTH):
        dashed = f"m-{digits[:4]}-{digits[4:6]}-{digits[6:]}"
        assert not model_matches("m", dashed) and not model_matches("m", dashed, SNAPSHOT)
        assert not model_matches("m", f"m-{digits}", r"-\d{8}")
        assert not model_matches("m", f"m-{digits}", r"-\w{8}")


IMPOSSIBLE_BASE = Usage(input_tokens=500, cached_tokens=0, cache_write_tokens=0,
                        output_tokens=321, reasoning_tokens=321, total_tokens=821)


@pytest.mark.parametrize(("fields", "why"), [
    ({"output_tokens": 321, "reasoning_tokens": 322}, "more than the 321 output tokens"),
    ({"output_tokens": None, "reasoning_tokens": 1201}, "output ceiling of 1200"),
    ({"output_tokens": 1201, "reasoning_tokens": 0}, "output ceiling of 1200"),
    ({"total_tokens": 820}, "not the 500 input plus 321 output"),
    ({"total_tokens": 822}, "not the 500 input plus 321 output"),
    ({"reasoning_tokens": -1}, "a negative count"),
    ({"total_tokens": -1}, "a negative count"),
    ({"total_tokens": 10**12 + 1}, "more than any request makes"),
])
def test_impossible_names_each_usage_no_request_produces(fields: dict[str, Any], why: str
                                                         ) -> None:
    """Reasoning is part of the output (and of its ceiling); a total is input plus output; no
    count is negative. Reasoning equal to the output, at the ceiling, and a total that adds up
    are possible."""
    from fragbench.calls.collector import impossible

    assert impossible(IMPOSSIBLE_BASE, 2000, 1200) is None
    at_ceiling = attrs.evolve(IMPOSSIBLE_BASE, output_tokens=1200, reasoning_tokens=1200,
                              total_tokens=1700)
    assert impossible(at_ceiling, 2000, 1200) is None
    assert impossible(attrs.evolve(IMPOSSIBLE_BASE, total_tokens=None), 2000, 1200) is None
    said = impossible(attrs.evolve(IMPOSSIBLE_BASE, **fields), 2000, 1200)
    assert said is not None and why in said, said


def responses_raw(usage: dict[str, Any]) -> str:
    return json.dumps({"object": "response", "status": "completed", "usage": usage})


class WithBody(Replies):
    """Answers every request with `usage` (as the reader made it) and `raw` (the body kept)."""

    def __init__(self, usage: Usage, raw: str) -> None:
        super().__init__([("completed", "m", None)] * 3)
        self.usage, self.raw = usage, raw

    def send(self, request: Request) -> Reply:
        return attrs.evolve(super().send(request), usage=self.usage, raw=self.raw)


def test_a_responses_body_s_total_is_checked_though_the_reader_left_it_out(tmp_path: Path
                                                                           ) -> None:
    """The built-in reader takes no total_tokens; the core reads it from the kept Responses
    body: 1,000 + 100 reported as 1,200 is impossible (counted at the reservation), 1,100 is
    priced."""
    body = {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1200,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}
    stop, sent, records = run(tmp_path / "wrong", WithBody(USAGE, responses_raw(body)))
    assert stop is not None and (stop.reason, stop.seq, sent) == ("unknown_cost", 1, 1)
    assert stop.detail == ("impossible usage: 1200 total tokens reported, not the 1000 input "
                           "plus 100 output tokens")
    (outcome,) = [r for r in records if r["type"] == "outcome"]
    assert Decimal(outcome["counted_usd"]) == Decimal(1) and "total_tokens" not in \
        outcome["usage"]  # the journal keeps the reader's usage
    stop, sent, _ = run(tmp_path / "right",
                        WithBody(USAGE, responses_raw({**body, "total_tokens": 1100})))
    assert stop is None and sent == 3


@pytest.mark.parametrize(("value", "said"), [
    (100.0, "usage.output_tokens is 100.0, not a whole number"),
    ("100", 'usage.output_tokens is "100", not a whole number'),
    ([1] * 50, "usage.output_tokens is [" + "1, " * 12 + "..., not a whole number"),  # cut
    ("absent", "the usage lacks output_tokens (usage.output_tokens), which the backend's "
               "contract declares its provider reports (Contract.usage_fields: input_tokens, "
               "cached_tokens, cache_write_tokens, output_tokens); a server that has no such "
               "count needs a backend whose contract leaves it out (docs/adding-a-backend.md)"),
])
def test_a_field_with_no_count_is_said_with_its_place(tmp_path: Path, value: Any, said: str
                                                      ) -> None:
    """The reader read None (`whole`); the line says what the body holds there, cut short."""
    body: dict[str, Any] = {"input_tokens": 1000, "input_tokens_details": {
        "cached_tokens": 0, "cache_write_tokens": 0}}
    if value != "absent":
        body["output_tokens"] = value
    stop, sent, records = run(tmp_path, WithBody(attrs.evolve(USAGE, output_tokens=None),
                                                 responses_raw(body)))
    assert stop is not None and (stop.reason, sent) == ("unknown_cost", 1)
    assert stop.detail == said
    (outcome,) = [r for r in records if r["type"] == "outcome"]
    assert outcome["cost_unknown"] == said and Decimal(outcome["counted_usd"]) == Decimal(1)


def test_lacking_names_places_only_for_a_body_it_can_read() -> None:
    """For another API's body (no places) a gap is named in the core's terms, absent or no
    whole number alike; a field the contract leaves out is no gap; a usage with a count for
    every declared field has none."""
    from fragbench.calls.collector import lacking
    from fragbench.transport import usage_places

    gap = attrs.evolve(USAGE, cache_write_tokens=None, output_tokens=None)
    other = lacking(gap, frozenset(COST_FIELDS), usage_places('{"object": "chat.completion"}'))
    assert other is not None and other.startswith(
        "the usage has no whole number for cache_write_tokens, output_tokens, which")
    assert lacking(gap, frozenset({"input_tokens", "cached_tokens"}), None) is None
    assert lacking(USAGE, frozenset(COST_FIELDS), None) is None
    assert usage_places("not json") is None and usage_places(None) is None
