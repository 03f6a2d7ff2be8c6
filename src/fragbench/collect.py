"""The collector: one loop for every backend, calls one at a time in the frozen order.

Before each call: everything still planned, this call included, must fit in the balance, which
is recomputed from the journals on disk (never from memory). Then the reservation is written and
fsync'ed, the request goes out once (no retry), and the outcome is written and fsync'ed.

Stop rules (protocol 1.0, "Arrêt au premier échec technique, changement de modèle ou coût
inconnu"; no automatic retry or resume):
- technical failure: a BackendFailure (HTTP error, connection error, timeout, a body that is not
  a response) or a status of failed, cancelled, queued or in_progress: the series stops there;
- changed model: the first response's model must be the requested one or a dated snapshot of
  it (`name-YYYY-MM-DD`); a later response whose model differs from the first one's is recorded,
  then the series stops;
- unknown cost: no usage or a usage field missing, a service tier echoed back other than the
  one asked, a model outside the frozen pricing table, an input beyond its short-context limit,
  or a cost above the call's reservation: recorded, then the series stops.
An `incomplete` response, a refusal and an unparseable answer are recorded and collection goes
on. A call with no known cost (every technical failure, every unknown cost) stays counted at its
whole reservation.
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

FAILED_STATUSES = {"failed", "cancelled", "queued", "in_progress"}
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
    """Prior spend plus every series drawing on the budget, from the journals; None if unpriced."""
    ceiling: Decimal | None


def model_matches(requested: str, returned: str) -> bool:
    return re.fullmatch(re.escape(requested) + f"({SNAPSHOT})?", returned) is not None


def _usage_doc(reply: Reply) -> dict[str, Any] | None:
    return attrs.asdict(reply.usage) if reply.usage is not None else None


def _priced(reply: Reply, backend: BackendConfig, reserved: Decimal) -> tuple[Decimal | None,
                                                                             str | None]:
    """(cost, None) or (None, why the cost is unknown)."""
    pricing = backend.pricing
    if pricing is None:
        return Decimal(0), None
    asked_tier = backend.params.get("service_tier")
    if asked_tier is not None and reply.service_tier != asked_tier:
        return None, f"service tier {reply.service_tier!r} came back, {asked_tier!r} was asked"
    if reply.model is None or not any(model_matches(m, reply.model) for m in pricing.models):
        return None, f"model {reply.model!r} has no price in the frozen table"
    try:
        amount = cost(reply.usage, pricing)
    except UnknownCost as exc:
        return None, str(exc)
    if amount > reserved:
        return amount, (f"cost {usd(amount)} USD exceeds the call's reservation of "
                        f"{usd(reserved)} USD")
    return amount, None


def _progress(call: PlannedCall, total: int, status: str, spent_here: Decimal,
              budget: Budget | None, root: Path) -> Progress:
    used = None if budget is None else budget.prior_spend_usd + budget_spent(root, budget.id)
    return Progress(call.seq, total, call.id, status, spent_here, used,
                    budget.ceiling_usd if budget else None)


def collect(
    calls: list[PlannedCall],
    reservations: dict[int, Decimal],
    session: Session,
    backend: BackendConfig,
    journal: Journal,
    budget: Budget | None,
    budget_root: Path,
    on_progress: Callable[[Progress], None] = lambda p: None,
) -> Stop | None:
    """Run the calls; return why the series stopped, or None when every call went."""
    expected_model = backend.params.get("model")
    first_model: str | None = None
    spent_here = Decimal(0)
    for index, call in enumerate(calls):
        reserved = reservations[call.seq]
        if budget is not None:
            still_planned = sum((reservations[c.seq] for c in calls[index:]), Decimal(0))
            available = balance(budget, budget_spent(budget_root, budget.id))
            if still_planned > available:
                stop = Stop("budget", f"the {len(calls) - index} calls still planned reserve "
                            f"{usd(still_planned)} USD, the balance is {usd(available)} USD",
                            call.id, call.seq)
                journal.append({"type": "stop", **attrs.asdict(stop)})
                return stop
        journal.append({"type": "reserve", "call_id": call.id, "seq": call.seq,
                        "reserved_usd": usd(reserved)})
        try:
            reply = session.send(call.request)
        except BackendFailure as failure:
            journal.append({
                "type": "outcome", "call_id": call.id, "seq": call.seq, "status": "failed",
                "failure": failure.kind, "http_status": failure.http_status,
                "error": failure.message, "request_id": failure.request_id,
                "cost_usd": None, "cost_unknown": "no usable response: counted at its "
                "reservation", "raw": failure.raw,
            })
            stop = Stop("technical_failure", failure.message, call.id, call.seq)
            journal.append({"type": "stop", **attrs.asdict(stop)})
            spent_here += reserved
            on_progress(_progress(call, len(calls), "failed", spent_here, budget, budget_root))
            return stop

        amount, unknown = _priced(reply, backend, reserved)
        journal.append({
            "type": "outcome", "call_id": call.id, "seq": call.seq, "status": reply.status,
            "model": reply.model, "service_tier": reply.service_tier,
            "request_id": reply.request_id, "usage": _usage_doc(reply),
            "cost_usd": None if amount is None else usd(amount), "cost_unknown": unknown,
            "text": reply.text, "refusal": reply.refusal,
            "incomplete_reason": reply.incomplete_reason, "error": reply.error,
            "raw": reply.raw,
        })
        spent_here += reserved if amount is None else amount
        on_progress(_progress(call, len(calls), reply.status, spent_here, budget, budget_root))

        stop = None
        if reply.status in FAILED_STATUSES:
            stop = Stop("technical_failure", f"the response has status {reply.status}"
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
            journal.append({"type": "stop", **attrs.asdict(stop)})
            return stop
    journal.append({"type": "end"})
    return None
