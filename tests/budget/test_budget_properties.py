"""Property tests of the budget arithmetic: whatever the plan and the usages, the recorded spend
never passes the ceiling while the rules hold (usage within the reservation's bounds)."""

from __future__ import annotations

import json
import tempfile
from decimal import Decimal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from support.collector import PRICING, planned

from fragbench.budget.ledger import Ledger
from fragbench.budget.money import Budget, UnknownCost, balance, cost, reservation
from fragbench.calls.collector import BudgetBook, collect
from fragbench.experiment.config import BackendConfig
from fragbench.experiment.plan import PlannedCall
from fragbench.interfaces import COST_FIELDS, BackendFailure, Contract, Reply, Request, Usage
from fragbench.redact import Redactor
from fragbench.series.journal import Journal, read_journal, spent

FRAMING = 1024

usages = st.builds(
    lambda inp, cached_share, write_share, out: (inp, cached_share, write_share, out),
    st.integers(0, 10_000), st.floats(0, 1), st.floats(0, 1), st.integers(0, 10_000),
)


@st.composite
def scenario(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 12))
    max_out = draw(st.integers(1, 2000))
    sizes = draw(st.lists(st.integers(1, 6000), min_size=n, max_size=n))
    outcomes = draw(st.lists(st.sampled_from(["ok", "ok", "ok", "failure", "no_usage"]),
                             min_size=n, max_size=n))
    fractions = draw(st.lists(usages, min_size=n, max_size=n))
    ceiling = Decimal(draw(st.integers(0, 2_000_000))) / 1_000_000
    prior = ceiling * Decimal(draw(st.integers(0, 100))) / 100
    other = Decimal(draw(st.integers(0, 500_000))) / 1_000_000
    return {"max_out": max_out, "sizes": sizes, "outcomes": outcomes, "usages": fractions,
            "ceiling": ceiling, "prior": prior, "other": other}


class ScriptedSession:
    """A backend session that replies from a script, within the reservation's bounds."""

    endpoint = "scripted"

    def __init__(self, script: dict, calls: list[PlannedCall]) -> None:
        self.script, self.calls, self.sent = script, calls, 0

    def send(self, request: Request) -> Reply:
        i = self.sent
        self.sent += 1
        outcome = self.script["outcomes"][i]
        if outcome == "failure":
            raise BackendFailure("timeout", "scripted timeout")
        inp_share, cached_share, write_share, out = self.script["usages"][i]
        bound = self.script["sizes"][i] + FRAMING
        inp = min(inp_share, bound)
        cached = int(inp * cached_share)
        write = int((inp - cached) * write_share)
        usage = None if outcome == "no_usage" else Usage(
            inp, cached, write, min(out, self.script["max_out"]), 0)
        return Reply(status="completed", model="m", service_tier=None, request_id=None,
                     usage=usage, text='{"answer": "", "citations": []}')

    def close(self) -> None:
        return None


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_spend_never_passes_the_ceiling(script: dict) -> None:
    budget = Budget(id="b", ceiling_usd=script["ceiling"], prior_spend_usd=script["prior"],
                    framing_tokens=FRAMING)
    contract = Contract(model="m", output_ceiling=script["max_out"],
                        usage_fields=frozenset(COST_FIELDS))
    backend = BackendConfig(name="m", plugin="scripted", params={"model": "m"}, pricing=PRICING,
                            contract=contract)
    calls = [planned(i) for i in range(len(script["sizes"]))]
    reservations = {c.seq: reservation(size, PRICING, script["max_out"], FRAMING)
                    for c, size in zip(calls, script["sizes"], strict=True)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "b.jsonl"
        ledger = Ledger(path, budget).open(Redactor())
        # Another series drawing on the same budget already spent something (maybe too much).
        with ledger.locked():
            ledger.append({"type": "reserve", "series_uid": "other", "call_id": "o", "seq": 1,
                           "reserved_usd": str(script["other"])})
        start_balance = balance(budget, ledger.spent())
        (root / "this").mkdir()
        journal = Journal(root / "this" / "journal.jsonl")
        journal.append({"type": "header", "budget": "b", "series_uid": "this"})
        book = BudgetBook(budget=budget, ledger=ledger, series="this", series_uid="this")
        session = ScriptedSession(script, calls)
        stop = collect(calls, reservations, session, backend, journal, book)
        journal.close()
        ledger.close()
        records = read_journal(root / "this" / "journal.jsonl")
        here = spent(records)
        reread = Ledger(path, budget).load()  # from scratch, as the next run reads it
        assert reread.spent() == script["other"] + here
        if start_balance < 0:
            assert session.sent == 0  # nothing goes once the ceiling is already crossed
        else:
            assert budget.prior_spend_usd + reread.spent() <= budget.ceiling_usd
        # The ledger and the series journal agree on this series.
        ledger_records = [json.loads(line) for line in path.read_text().splitlines() if line]
        assert spent([r for r in ledger_records if r.get("series_uid") == "this"]) == here
        # The ledger is exact: known costs, plus whole reservations where the cost is unknown.
        expected = Decimal(0)
        for r in records:
            if r["type"] == "outcome":
                known = r["cost_usd"]
                expected += Decimal(known) if known is not None else Decimal(
                    next(x["reserved_usd"] for x in records
                         if x["type"] == "reserve" and x["call_id"] == r["call_id"]))
        assert here == expected
        if stop is not None and stop.reason == "budget":
            assert not any(r["type"] == "reserve" and r["call_id"] == stop.call_id
                           for r in records)
        if stop is None:
            assert session.sent == len(calls)


@settings(max_examples=500)
@given(st.integers(1, 100_000), st.integers(1, 4000), st.floats(0, 1), st.floats(0, 1),
       st.floats(0, 1), st.floats(0, 1))
def test_a_usage_within_bounds_never_costs_more_than_its_reservation(
        nbytes: int, max_out: int, a: float, b: float, c: float, d: float) -> None:
    inp = int((nbytes + FRAMING) * a)
    cached = int(inp * b)
    write = int((inp - cached) * c)
    usage = Usage(inp, cached, write, int(max_out * d), 0)
    try:
        amount = cost(usage, PRICING)
    except UnknownCost:
        assert inp > PRICING.max_input_tokens
        return
    assert 0 <= amount <= reservation(nbytes, PRICING, max_out, FRAMING)


def test_cost_formula_on_a_known_usage() -> None:
    usage = Usage(input_tokens=1000, cached_tokens=200, cache_write_tokens=100,
                  output_tokens=500, reasoning_tokens=300)
    # (1000 - 200 - 100) x 10 + 200 x 1 + 100 x 12.5 + 500 x 50 = 33,450 per million.
    assert cost(usage, PRICING) == Decimal("0.03345")


# Issue 24, item 11: the reservation's input-side rate, by a test of its own (protocol 1.0's
# cache-write rate is its highest, so its plan alone cannot tell "the highest" from "the
# cache-write rate" or "the input rate").
@given(st.sampled_from(["0", "1", "5", "10", "12.50", "30"]),
       st.sampled_from([None, "0", "1", "5", "10", "12.50", "30"]),
       st.sampled_from([None, "0", "1", "5", "10", "12.50", "30"]),
       st.integers(0, 10**6), st.integers(1, 10**4))
def test_the_reservation_prices_every_input_byte_at_the_highest_input_side_rate(
        uncached: str, cached: str | None, write: str | None, nbytes: int, ceiling: int) -> None:
    import attrs

    pricing = attrs.evolve(PRICING, input=Decimal(uncached),
                           cached_input=None if cached is None else Decimal(cached),
                           cache_write=None if write is None else Decimal(write))
    highest = max(Decimal(r) for r in (uncached, cached, write) if r is not None)
    assert pricing.highest_input_rate == highest
    by_hand = (Decimal(nbytes + FRAMING) * highest + ceiling * pricing.output) / 1_000_000
    assert reservation(nbytes, pricing, ceiling, FRAMING) == by_hand
    # However the input is split between uncached, cached and cache-write tokens, it costs
    # no more than the reservation: what the highest rate is for.
    for rate in (pricing.input, pricing.cached_input, pricing.cache_write):
        if rate is not None:
            assert Decimal(nbytes + FRAMING) * rate <= Decimal(nbytes + FRAMING) * highest
