"""The collector: one loop for every backend, calls one at a time in the frozen order.

Before each call: everything still planned, this call included, must fit in the balance, which
is recomputed from the budget's ledger and the journals on disk (never from memory), under a
lock on the ledger so that two runs on one budget take turns. Then the reservation is written
and fsync'ed (ledger, then series journal), the request goes out once (no retry), and the
outcome is written and fsync'ed the same way.

Stop rules (protocol 1.0, "Arrêt au premier échec technique, changement de modèle ou coût
inconnu"; no automatic retry or resume):
- technical failure: a BackendFailure (HTTP error, connection error, timeout, a body that is not
  a response), any other error of the backend, or any status other than completed and
  incomplete (failed, cancelled, queued, in_progress, or one we do not know): the series stops
  there;
- changed model: the first response's model must be the requested one or a dated snapshot of
  it (`name-YYYY-MM-DD`); a later response whose model differs from the first one's is recorded,
  then the series stops;
- unknown cost: no usage or a usage field missing, a service tier echoed back other than the
  one asked, a model outside the frozen pricing table, an input beyond its short-context limit,
  or a cost above the call's reservation: recorded, then the series stops.
An `incomplete` response, a refusal and an unparseable answer are recorded and collection goes
on. A call with no known cost (every technical failure, every unknown cost) stays counted at its
whole reservation, or more when its usage at the frozen rates shows more.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from fragbench.budget import UnknownCost, balance, cost, usd
from fragbench.config import BackendConfig, Budget
from fragbench.interfaces import BackendFailure, Reply, Session
from fragbench.journal import Journal, budget_spent
from fragbench.plan import PlannedCall

ANSWERED_STATUSES = {"completed", "incomplete"}
SNAPSHOT = r"-\d{4}-\d{2}-\d{2}"


@attrs.frozen
class Stop:
    reason: str
    """technical_failure, changed_model, unknown_cost or budget."""
    detail: str
    call_id: str
    seq: int


@attrs.frozen
class Progress:
    seq: int
    total: int
    call_id: str
    status: str
    spent: Decimal
    """Counted by this series so far."""
    budget_used: Decimal | None
    """Prior spend plus every series drawing on the budget; None if unpriced."""
    ceiling: Decimal | None


@attrs.frozen
class BudgetBook:
    """Where a priced series' spend is counted: its budget's ledger (shared by every series
    drawing on it, whatever their --out) and the journals under the outputs root."""

    budget: Budget
    ledger: Journal
    root: Path
    series: str
    series_uid: str

    def spent(self) -> Decimal:
        return budget_spent(self.ledger.path, self.root, self.budget.id)

    def record(self, record: dict[str, Any]) -> None:
        self.ledger.append({**record, "series": self.series, "series_uid": self.series_uid})


def model_matches(requested: str, returned: str) -> bool:
    return re.fullmatch(re.escape(requested) + f"({SNAPSHOT})?", returned) is not None


def _usage_doc(reply: Reply) -> dict[str, Any] | None:
    return attrs.asdict(reply.usage) if reply.usage is not None else None


def _priced(reply: Reply, backend: BackendConfig, reserved: Decimal
            ) -> tuple[Decimal | None, str | None, Decimal]:
    """(cost or None, why the cost is unknown or None, what the budget counts).

    An unknown cost counts at least the whole reservation, and more when the usage priced at
    the frozen rates already shows more (another tier, a long input): never less than the
    evidence.
    """
    pricing = backend.pricing
    if pricing is None:
        return Decimal(0), None, Decimal(0)
    try:
        at_rates = cost(reply.usage, pricing, check_context=False)
    except UnknownCost as exc:
        return None, str(exc), reserved
    unknown = None
    asked_tier = backend.params.get("service_tier")
    if asked_tier is not None and reply.service_tier != asked_tier:
        unknown = f"service tier {reply.service_tier!r} came back, {asked_tier!r} was asked"
    elif reply.model is None or not any(model_matches(m, reply.model) for m in pricing.models):
        unknown = f"model {reply.model!r} has no price in the frozen table"
    else:
        try:
            cost(reply.usage, pricing)
        except UnknownCost as exc:
            unknown = str(exc)
    if unknown is not None:
        return None, unknown, max(reserved, at_rates)
    if at_rates > reserved:
        return at_rates, (f"cost {usd(at_rates)} USD exceeds the call's reservation of "
                          f"{usd(reserved)} USD"), at_rates
    return at_rates, None, at_rates


def _progress(call: PlannedCall, total: int, status: str, spent_here: Decimal,
              book: BudgetBook | None) -> Progress:
    if book is None:
        return Progress(call.seq, total, call.id, status, spent_here, None, None)
    return Progress(call.seq, total, call.id, status, spent_here,
                    book.budget.prior_spend_usd + book.spent(), book.budget.ceiling_usd)


def collect(
    calls: list[PlannedCall],
    reservations: dict[int, Decimal],
    session: Session,
    backend: BackendConfig,
    journal: Journal,
    book: BudgetBook | None,
    on_progress: Callable[[Progress], None] = lambda p: None,
) -> Stop | None:
    """Run the calls; return why the series stopped, or None when every call went."""
    expected_model = backend.params.get("model")
    first_model: str | None = None
    spent_here = Decimal(0)

    def record(entry: dict[str, Any]) -> None:
        if book is not None:  # the ledger first: a crash in between over-counts, never under
            book.record(entry)
        journal.append(entry)

    def stop_here(stop: Stop) -> Stop:
        stop = attrs.evolve(stop, detail=journal.redact(stop.detail))  # it is printed too
        journal.append({"type": "stop", **attrs.asdict(stop)})
        return stop

    for index, call in enumerate(calls):
        reserved = reservations[call.seq]
        reserve = {"type": "reserve", "call_id": call.id, "seq": call.seq,
                   "reserved_usd": usd(reserved)}
        if book is None:
            record(reserve)
        else:
            with book.ledger.locked():
                still_planned = sum((reservations[c.seq] for c in calls[index:]), Decimal(0))
                available = balance(book.budget, book.spent())
                if still_planned > available:
                    return stop_here(Stop(
                        "budget", f"the {len(calls) - index} calls still planned reserve "
                        f"{usd(still_planned)} USD, the balance is {usd(available)} USD",
                        call.id, call.seq))
                record(reserve)
        try:
            reply = session.send(call.request)
        except Exception as exc:  # any failure to get a usable response is technical
            failure = exc if isinstance(exc, BackendFailure) else BackendFailure(
                "unexpected", f"the backend failed ({type(exc).__name__})")
            record({
                "type": "outcome", "call_id": call.id, "seq": call.seq, "status": "failed",
                "failure": failure.kind, "http_status": failure.http_status,
                "error": failure.message, "request_id": failure.request_id,
                "cost_usd": None, "counted_usd": usd(reserved),
                "cost_unknown": "no usable response: counted at its reservation",
                "raw": failure.raw,
            })
            spent_here += reserved
            on_progress(_progress(call, len(calls), "failed", spent_here, book))
            return stop_here(Stop("technical_failure", failure.message, call.id, call.seq))

        amount, unknown, counted = _priced(reply, backend, reserved)
        if reply.status not in ANSWERED_STATUSES and backend.pricing is not None:
            # Not finished (or failed on the way): its usage may not be its final bill.
            amount, unknown = None, f"status {reply.status!r}: the usage may not be final"
            counted = max(counted, reserved)
        record({
            "type": "outcome", "call_id": call.id, "seq": call.seq, "status": reply.status,
            "model": reply.model, "service_tier": reply.service_tier,
            "request_id": reply.request_id, "usage": _usage_doc(reply),
            "cost_usd": None if amount is None else usd(amount), "counted_usd": usd(counted),
            "cost_unknown": unknown, "text": reply.text, "refusal": reply.refusal,
            "incomplete_reason": reply.incomplete_reason, "error": reply.error,
            "raw": reply.raw,
        })
        spent_here += counted
        on_progress(_progress(call, len(calls), reply.status, spent_here, book))

        stop = None
        if reply.status not in ANSWERED_STATUSES:
            stop = Stop("technical_failure", f"the response has status {reply.status!r}"
                        + (f" ({reply.error})" if reply.error else ""), call.id, call.seq)
        elif first_model is None and expected_model is not None and (
            reply.model is None or not model_matches(expected_model, reply.model)
        ):
            stop = Stop("changed_model", f"model {reply.model!r} came back, "
                        f"{expected_model!r} was asked", call.id, call.seq)
        elif first_model is not None and reply.model != first_model:
            stop = Stop("changed_model", f"model {reply.model!r} came back after "
                        f"{first_model!r}", call.id, call.seq)
        elif unknown is not None:
            stop = Stop("unknown_cost", unknown, call.id, call.seq)
        if first_model is None:
            first_model = reply.model
        if stop is not None:
            return stop_here(stop)
    journal.append({"type": "end"})
    return None
