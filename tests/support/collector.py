"""The collector driven in process: a plan of calls, pricing, a scripted backend that answers
when the test says, the calls in flight."""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

from fragbench.budget.ledger import Ledger
from fragbench.budget.money import Budget, Pricing
from fragbench.calls.collector import BudgetBook
from fragbench.experiment.config import BackendConfig, Concurrency
from fragbench.experiment.plan import PlannedCall
from fragbench.interfaces import COST_FIELDS, Contract, Reply, Request, Usage
from fragbench.redact import Redactor
from fragbench.series.journal import Journal
from fragbench.testing.loopback import Action, Handler
from support.cli import refreeze
from support.suite import PATIENCE

PRICING = Pricing(models=("m",), input=Decimal(10), cached_input=Decimal(1),
                  cache_write=Decimal("12.50"), output=Decimal(50), per_tokens=1_000_000,
                  max_input_tokens=272_000, read_on="2026-10-08", tier="test")


def planned(i: int) -> PlannedCall:
    request = Request(call_id=f"c{i}", lang="en", instructions="", input="", schema_name="s",
                      schema={}, question="", supplied=())
    return PlannedCall(seq=i + 1, id=f"c{i}", case="x", lang="en", variant="A", mode="full",
                       rep=1, supplied_ids=(), request=request)


# (1000 x 10 + 100 x 50) USD per million tokens, by hand.
COST = Decimal("0.015")


class Held:
    """A concurrency-safe session: calls named in `held` wait for their gate (or all at once
    at a barrier first, `together`), then each answers COMPLETED at COST."""

    endpoint = "scripted"
    concurrent = True

    def __init__(self, held: set[str] = frozenset(), together: int = 0) -> None:
        self.held, self.gate = held, threading.Event()
        self.barrier = threading.Barrier(together, timeout=PATIENCE) if together else None
        self.lock = threading.Lock()
        self.sent: list[str] = []
        self.before_answer: Any = None
        """Called with the call id of each held call, after the barrier."""

    def send(self, request: Request) -> Reply:
        with self.lock:
            self.sent.append(request.call_id)
        if request.call_id in self.held:
            if self.barrier is not None:
                self.barrier.wait()
            if self.before_answer is not None:
                self.before_answer(request.call_id)
            assert self.gate.wait(PATIENCE)
        return Reply(status="completed", model="m", service_tier=None, request_id=None,
                     usage=USAGE, text='{"answer": "", "citations": []}')

    def close(self) -> None:
        return None


USAGE = Usage(input_tokens=1000, cached_tokens=0, cache_write_tokens=0, output_tokens=100,
              reasoning_tokens=0)


def billed(tmp_path: Path, ceiling: Decimal, ledger_class: type[Ledger] = Ledger
           ) -> tuple[Budget, Ledger, Journal, BudgetBook]:
    budget = Budget(id="b", ceiling_usd=ceiling, prior_spend_usd=Decimal(0), framing_tokens=0)
    ledger = ledger_class(tmp_path / "b.jsonl", budget).open(Redactor())
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append({"type": "header", "budget": "b", "series_uid": "this"})
    return budget, ledger, journal, BudgetBook(budget, ledger, "this", "this")


def concurrent_backend(n: int) -> BackendConfig:

    contract = Contract(model="m", output_ceiling=10**6, usage_fields=frozenset(COST_FIELDS))
    return BackendConfig(name="m", plugin="scripted", params={"model": "m"}, pricing=PRICING,
                         contract=contract, concurrency=Concurrency(max_in_flight=n))


def replay_ceiling(path: Path, planned_here: list[Decimal]) -> None:
    """At every record of the ledger, spend plus open reservations is within the ceiling; at
    every reservation of this series, with what it still plans after that call too."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    room = Decimal(records[0]["ceiling_usd"]) - Decimal(records[0]["prior_spend_usd"])
    open_: dict[tuple[str, str], Decimal] = {}
    settled = Decimal(0)
    for r in records[1:]:
        key = (r["series_uid"], r["call_id"])
        if r["type"] == "reserve":
            open_[key] = Decimal(r["reserved_usd"])
        elif r["type"] == "outcome":
            open_.pop(key)
            settled += Decimal(r["counted_usd"])
        total = settled + sum(open_.values(), Decimal(0))
        assert total <= room, r
        if r["type"] == "reserve" and r["series_uid"] == "this":
            assert total + sum(planned_here[r["seq"]:], Decimal(0)) <= room, r


IN_FLIGHT = 8


def after(gate: threading.Event, action: Action) -> Action:
    """`action`, once the test opens `gate`."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        gate.wait(PATIENCE)
        try:
            action(handler, number, body)
        except OSError:  # the client abandoned the call and exited: expected in those tests
            handler.close_connection = True
    return act


def with_in_flight(experiment: Path, n: int = IN_FLIGHT, extra: str = "") -> Path:
    refreeze(experiment, 'plugin = "openai"\n', f'plugin = "openai"\nmax_in_flight = {n}\n{extra}')
    return experiment
