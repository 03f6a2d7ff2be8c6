"""The collector's stop rules, in process, on scripted replies.

Protocol 1.0: stop at the first technical failure, changed model or unknown cost; an incomplete
answer is kept and collection goes on; a stop is recorded after the answer that caused it. The
loopback tests (test_collect_openai.py) show the same through the real SDK, but at 10-20 s each
they cannot run once per mutant; these run in milliseconds, so mutation testing of collect.py
can hold the rules to account. Expected outcomes are the protocol's, worked out by hand.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from test_budget_properties import PRICING, planned

from fragbench.budget import UnknownCost, cost
from fragbench.collect import collect
from fragbench.config import BackendConfig
from fragbench.interfaces import COST_FIELDS, BackendFailure, Contract, Reply, Request, Usage
from fragbench.interruption import Interruption
from fragbench.journal import Journal, read_journal, spent

USAGE = Usage(input_tokens=1000, cached_tokens=0, cache_write_tokens=0, output_tokens=100,
              reasoning_tokens=0)
# (1000 x 10 + 100 x 50) USD per million tokens, by hand.
COST = Decimal("0.015")


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
    from fragbench.collect import impossible

    huge = Usage(input_tokens=10**30, cached_tokens=0, cache_write_tokens=0, output_tokens=1,
                 reasoning_tokens=0)
    assert impossible(huge, None, None) is not None
    assert impossible(attrs.evolve(huge, input_tokens=1000), None, None) is None
