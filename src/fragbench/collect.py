"""The collector: one loop for every backend, calls one at a time in the frozen order.

Before each call: everything still planned, this call included, must fit in the balance, which
is the budget's ledger brought up to date with what any other run appended, under the ledger's
lock so that two runs on one budget take turns. Then the reservation is written and fsync'ed
(ledger, then series journal), the request goes out once (no retry), and the outcome is written
and fsync'ed the same way. A write that fails (a full disk) stops the series at once: nothing
more is sent, and a call already sent stays counted at its reservation.

Stop rules (protocol 1.0, "Arrêt au premier échec technique, changement de modèle ou coût
inconnu"; no automatic retry or resume):
- technical failure: a BackendFailure (HTTP error, connection error, timeout, a body that is not
  a response), any other error of the backend, or any status other than completed and
  incomplete (failed, cancelled, queued, in_progress, or one we do not know): the series stops
  there;
- changed model: the first response's model must be the requested one or a dated snapshot of
  it (the contract's snapshot suffix, `name-YYYY-MM-DD` by default); a later response whose
  model differs from the first one's is recorded, then the series stops;
- unknown cost: no usage or a usage field missing (of those the backend's contract declares),
  a usage the request could not produce (more output tokens than the contract's output
  ceiling, more input tokens than its byte bound plus the framing tokens), a service tier
  echoed back other than the contract's, a model outside the frozen pricing table, an input
  beyond its short-context limit, or a cost above the call's reservation: recorded (the
  reported figures kept for a person to read), then the series stops.
An `incomplete` response, a refusal and an unparseable answer are recorded and collection goes
on. A call with no known cost (every technical failure, every unknown cost) stays counted at its
whole reservation, or more when a possible usage at the frozen rates shows more (another service
tier); an impossible usage is never priced. A request that provably never left the machine
(`BackendFailure.never_sent`) is counted at zero.

Interrupted (an `Interruption` requested: a signal in the CLI): no call starts after the
request; the call in flight is awaited, within its backend's deadline, and recorded as any
other; then the series stops with reason `interrupted`, at the first call not sent. A second
request abandons the wait: that call stays counted at its reservation with no outcome, and the
stop names it. Progress reports are best effort: an OSError from `on_progress` (a closed
terminal or pipe) is ignored and changes nothing that is recorded.

Record first, then look: a session that offers `on_body` (`fragbench.transport.SDKSession`)
hands each response's body, as it arrived, to the collector before anything parses it; the
collector journals it (`received`: call_id, seq, http_status, raw) and fsyncs it. If that write
fails the series stops as cannot_record, and the body is printed instead. A session that hands
over more than one body for one call sent more than one request (a retry, on a client of the
backend's own): every body is journaled, the call is a technical failure (`second_request`)
counted at its reservation once per body, and the series stops.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs

from fragbench.budget import UnknownCost, balance, cost, usd
from fragbench.columns import ANSWERED
from fragbench.config import BackendConfig, Budget
from fragbench.errors import FragbenchError
from fragbench.interfaces import SNAPSHOT, BackendFailure, Reply, Session, Usage
from fragbench.interruption import Interruption
from fragbench.journal import Journal
from fragbench.ledger import Ledger
from fragbench.plan import PlannedCall
from fragbench.transport import NEVER_SENT


@attrs.frozen
class Stop:
    reason: str
    """technical_failure, changed_model, unknown_cost, budget, interrupted (a signal, or the
    caller's `Interruption`), or cannot_record (a write to the journal or the ledger failed,
    e.g. a full disk)."""
    detail: str
    call_id: str
    seq: int
    """The call it stopped at: the first call not sent, or the call whose wait was abandoned."""
    unrecorded: str | None = None
    """An outcome that was paid for but could not be written (redacted JSON): printed instead,
    so that it is not lost."""
    abandoned: bool = False
    """The call `seq` was left in flight (a second interruption): it has a reservation and no
    outcome, and its session may still be using its connection. Not recorded."""


NOT_RECORDED = ("unrecorded", "abandoned")
"""Stop fields that are said, never written in the `stop` record."""

POLL_SECONDS = 0.1
"""How often the wait for a call in flight looks at the interruption (a signal does not end
the wait itself: its handler only sets a flag)."""


class _Abandoned(Exception):
    """A second interruption gave up the wait for the call in flight."""


class _NotRecorded(Exception):
    """A response body arrived and could not be journaled."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


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


LEDGER_FIELDS = ("type", "call_id", "seq", "reserved_usd", "status", "cost_usd", "counted_usd")


@attrs.frozen
class BudgetBook:
    """Where a priced series' spend is counted: its budget's ledger, shared by every series
    drawing on it wherever their folders are."""

    budget: Budget
    ledger: Ledger
    series: str
    series_uid: str

    def spent(self) -> Decimal:
        return self.ledger.spent()

    def record(self, record: dict[str, Any]) -> None:
        with self.ledger.locked():
            self.append_locked(record)

    def append_locked(self, record: dict[str, Any]) -> None:
        """Accounting fields only: the ledger never holds an answer or a body."""
        self.ledger.append({k: record[k] for k in LEDGER_FIELDS if k in record}
                           | {"series": self.series, "series_uid": self.series_uid})


def model_matches(requested: str, returned: str, snapshot: str = SNAPSHOT) -> bool:
    """`returned` is `requested` or a dated snapshot of it (`snapshot`: the suffix pattern of
    the backend's contract)."""
    return re.fullmatch(re.escape(requested) + f"({snapshot})?", returned) is not None


def _usage_doc(reply: Reply) -> dict[str, Any] | None:
    return attrs.asdict(reply.usage) if reply.usage is not None else None


MAX_REPORTED_TOKENS = 10**12
"""No request reports more tokens of any kind than this (the largest contexts are under 10**8)."""


def impossible(usage: Usage | None, input_bound: int | None, max_output: int | None
               ) -> str | None:
    """Why the reported usage cannot be this request's, or None."""
    if usage is None:
        return None
    for name in ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens",
                 "reasoning_tokens"):
        value = getattr(usage, name)
        if value is not None and value > MAX_REPORTED_TOKENS:
            # Whatever the bounds given: a count no request makes, which priced would write
            # an amount beyond the money columns' scale (a journal its reader refuses).
            return f"{value} {name.replace('_', ' ')} reported, more than any request makes"
    if max_output is not None and usage.output_tokens is not None \
            and usage.output_tokens > max_output:
        return (f"{usage.output_tokens} output tokens reported, more than the request's "
                f"output ceiling of {max_output}")
    if input_bound is not None:
        for name in ("input_tokens", "cached_tokens", "cache_write_tokens"):
            value = getattr(usage, name)
            if value is not None and value > input_bound:
                return (f"{value} {name.replace('_', ' ')} reported, more than the request's "
                        f"bound of {input_bound} (its UTF-8 bytes plus framing)")
    return None


def _priced(reply: Reply, backend: BackendConfig, reserved: Decimal, input_bound: int | None
            ) -> tuple[Decimal | None, str | None, Decimal]:
    """(cost or None, why the cost is unknown or None, what the budget counts).

    An unknown cost counts at least the whole reservation, and more when a possible usage
    priced at the frozen rates already shows more (another tier): never less than the
    evidence. An impossible usage is evidence of nothing: counted at the reservation, which
    bounds anything the request could have cost at the frozen rates.
    """
    pricing = backend.pricing
    if pricing is None:
        return Decimal(0), None, Decimal(0)
    contract = backend.contract
    assert contract is not None  # the config sets one for every priced backend
    why = impossible(reply.usage, input_bound, contract.output_ceiling)
    if why is not None:
        return None, f"impossible usage: {why}", reserved
    try:
        at_rates = cost(reply.usage, pricing, check_context=False,
                        usage_fields=contract.usage_fields)
    except UnknownCost as exc:
        return None, str(exc), reserved
    unknown = None
    asked_tier = contract.service_tier
    if asked_tier is not None and reply.service_tier != asked_tier:
        unknown = f"service tier {reply.service_tier!r} came back, {asked_tier!r} was asked"
    elif asked_tier is None and reply.service_tier is not None:
        # The contract names no tier (the provider reports none); a response that names one
        # may have been served, and billed, on a tier the frozen prices are not for.
        unknown = (f"service tier {reply.service_tier!r} came back, and the backend's contract "
                   "names none: state the tier in the config")
    elif reply.model is None or not any(model_matches(m, reply.model, contract.snapshot)
                                        for m in pricing.models):
        unknown = f"model {reply.model!r} has no price in the frozen table"
    else:
        try:
            cost(reply.usage, pricing, usage_fields=contract.usage_fields)
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
    input_bounds: dict[int, int] | None = None,
    interruption: Interruption | None = None,
    notice: Callable[[str], None] = lambda line: None,
) -> Stop | None:
    """Run the calls; return why the series stopped, or None when every call went.

    `input_bounds` (seq -> the request's UTF-8 bytes plus the framing tokens) bounds the input
    tokens a call can report; a usage above it is impossible. `interruption`, when requested,
    stops the series (module docstring); `notice` receives one line when a request arrives
    while a call is in flight (what is awaited, and how to abandon it).
    """
    state = _Collection(calls, reservations, session, backend, journal, book, on_progress,
                        input_bounds or {}, interruption or Interruption(), notice)
    try:
        return state.run()
    except (OSError, FragbenchError) as exc:  # a full disk, a ledger that became unusable
        return state.cannot_record(exc)
    except _NotRecorded as exc:  # a body that arrived and could not be journaled
        return state.cannot_record(exc.cause)


class _Collection:
    def __init__(self, calls: list[PlannedCall], reservations: dict[int, Decimal],
                 session: Session, backend: BackendConfig, journal: Journal,
                 book: BudgetBook | None, on_progress: Callable[[Progress], None],
                 input_bounds: dict[int, int], interruption: Interruption,
                 notice: Callable[[str], None]) -> None:
        self.calls, self.reservations, self.session = calls, reservations, session
        self.backend, self.journal, self.book = backend, journal, book
        self.on_progress, self.input_bounds = on_progress, input_bounds
        self.interruption, self.notice = interruption, notice
        self.receiving = threading.Lock()
        """Held while a `received` record is written from the thread the session calls back
        in, and while the collector stops listening, so that no late write follows."""
        self.listening: PlannedCall | None = None
        """The call whose body may still be journaled: only while the collector waits for it."""
        self.unreceived: tuple[dict[str, Any], BaseException] | None = None
        self.bodies = 0
        """How many bodies the session handed `on_body` for the call in flight: more than one
        is a retry (each may be billed), whatever the session then returns."""
        self.snapshot = backend.contract.snapshot if backend.contract is not None else SNAPSHOT
        self.spent_here = Decimal(0)
        self.current: PlannedCall | None = None
        self.pending: dict[str, Any] | None = None
        """An outcome received and not yet on disk."""

    def record(self, entry: dict[str, Any]) -> None:
        """Two durable writes, ordered so that a crash between them errs on the safe side.

        A reservation goes to the ledger first: a crash before the journal's copy over-counts
        a call that was never sent, never under-counts one that was. An outcome counted at no
        more than its reservation (every outcome of a run, whose usages are checked against
        the request's bounds) goes to the journal first: a crash before the ledger's copy
        keeps the answer that was paid for, and the ledger still counts the call at its whole
        reservation. An outcome counted above it goes to the ledger first, like a reservation.
        """
        counted = entry.get("counted_usd")
        above = counted is not None and Decimal(counted) > self.reservations[entry["seq"]]
        if entry["type"] == "outcome" and not above:
            self.journal.append(entry)
            self.pending = None  # on disk: nothing left to print if the ledger then fails
            if self.book is not None:
                self.book.record(entry)
            return
        if self.book is not None:
            self.book.record(entry)
        self.journal.append(entry)

    def stop_here(self, stop: Stop) -> Stop:
        stop = attrs.evolve(stop, detail=self.journal.redactor.text(stop.detail))  # printed too
        self.journal.append({"type": "stop", **attrs.asdict(stop, filter=lambda a, v:
                                                               a.name not in NOT_RECORDED)})
        return stop

    def cannot_record(self, exc: BaseException) -> Stop:
        self.give_up()
        call = self.current or self.calls[0]
        if isinstance(exc, OSError) and exc.filename and exc.strerror:
            cause = f"cannot write {exc.filename} ({exc.strerror})"
        elif isinstance(exc, OSError):
            cause = f"cannot write ({exc.strerror or exc})"
        elif isinstance(exc, FragbenchError):
            cause = str(exc).rstrip(".")
        else:
            cause = f"cannot record ({type(exc).__name__}: {exc})"
        detail = (f"{cause}; nothing more was sent, and a call already sent stays counted at "
                  "its reservation")
        unrecorded = None
        if self.pending is not None:
            unrecorded = json.dumps(self.journal.redactor.value(self.pending), ensure_ascii=True)
        stop = Stop("cannot_record", self.journal.redactor.text(detail), call.id, call.seq,
                    unrecorded)
        with contextlib.suppress(OSError):  # the disk may still refuse; the stop is printed
            self.journal.append({"type": "stop", "reason": stop.reason, "detail": stop.detail,
                                 "call_id": stop.call_id, "seq": stop.seq})
        return stop

    def progress(self, call: PlannedCall, status: str) -> None:
        # Printed as it came: whoever prints it redacts it (the CLI's reporter), as it redacts
        # every line it prints. Best effort: a closed terminal or pipe stops no collection.
        with contextlib.suppress(OSError):
            self.on_progress(_progress(call, len(self.calls), status, self.spent_here,
                                       self.book))

    # The call in flight ------------------------------------------------------------------------

    def receiver(self, call: PlannedCall) -> Callable[[str, int], None]:
        """The session's `on_body` for `call`: journal the body as it arrived (redacted,
        fsync'ed) before anything parses it. A write that fails is remembered, since the
        session turns whatever its callback raises into a failure of its own."""
        def received(raw: str, http_status: int) -> None:
            with self.receiving:
                if self.listening is not call:  # a body after its call was given up
                    return
                self.bodies += 1  # every body is kept: a second one is what a retry paid for
                record = {"type": "received", "call_id": call.id, "seq": call.seq,
                          "http_status": http_status, "raw": raw}
                try:
                    self.journal.append(record)
                except BaseException as exc:
                    self.unreceived = (record, exc)
                    raise
        return received

    def give_up(self) -> None:
        """No `received` record is written from now on (until the next call is sent): a
        session may call back after it returned (a worker left running at its deadline), and
        the journal may be closing."""
        with self.receiving:
            self.listening = None

    def send(self, call: PlannedCall) -> Reply:
        """The session's answer to `call`, sent from a thread of its own, so that the wait
        here can look at the interruption; _Abandoned when a second request gives it up."""
        if hasattr(self.session, "on_body"):
            self.session.on_body = self.receiver(call)
        self.unreceived = None
        with self.receiving:
            self.listening = call
            self.bodies = 0
        outcome: list[tuple[bool, Any]] = []
        done = threading.Event()

        def work() -> None:
            try:
                outcome.append((True, self.session.send(call.request)))
            except BaseException as exc:  # handed to the collector, which decides
                outcome.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=work, name=f"fragbench-call-{call.seq}", daemon=True).start()
        told = False
        while not done.wait(POLL_SECONDS):
            interruption = self.interruption
            if interruption.abandon:
                self.give_up()
                raise _Abandoned
            if interruption.requested and not told:
                told = True
                timeout = getattr(self.session, "timeout", None)
                deadline = f" (its deadline: {timeout:g} s)" if isinstance(
                    timeout, int | float) else ""
                with contextlib.suppress(OSError):  # said best effort, as progress is
                    self.notice(f"{interruption.name}: no new call will start; waiting for "
                                f"the answer to call {call.seq}/{len(self.calls)}, already "
                                f"sent and paid for, to record it{deadline}; "
                                f"{interruption.again} to abandon it (it then stays counted "
                                "at its reservation)")
        self.give_up()
        if self.unreceived is not None:
            self.pending, cause = self.unreceived
            raise _NotRecorded(cause)
        succeeded, value = outcome[0]
        if succeeded:
            return value  # type: ignore[no-any-return]
        raise value

    def interrupted(self, index: int) -> Stop:
        """The stop before call `index` (0-based), which no interruption lets start."""
        call = self.calls[index]
        kept = (f"calls 1-{index} recorded" if index > 1 else
                "call 1 recorded" if index == 1 else "no call was sent")
        return self.stop_here(Stop(
            "interrupted", f"{self.interruption.name} received: no call started after it "
            f"({kept})", call.id, call.seq))

    def abandoned(self, call: PlannedCall) -> Stop:
        return self.stop_here(Stop(
            "interrupted", f"{self.interruption.name} received twice: the wait for call "
            f"{call.seq}'s answer was abandoned; it stays counted at its reservation",
            call.id, call.seq, abandoned=True))

    def run(self) -> Stop | None:
        contract = self.backend.contract
        expected_model = contract.model if contract is not None else None
        first_model: str | None = None
        calls, book = self.calls, self.book
        for index, call in enumerate(calls):
            self.current = call
            if self.interruption.requested:
                return self.interrupted(index)
            reserved = self.reservations[call.seq]
            reserve = {"type": "reserve", "call_id": call.id, "seq": call.seq,
                       "reserved_usd": usd(reserved)}
            if book is None:
                self.record(reserve)
            else:
                with book.ledger.locked():
                    still_planned = sum((self.reservations[c.seq] for c in calls[index:]),
                                        Decimal(0))
                    available = balance(book.budget, book.spent())
                    if still_planned > available:
                        return self.stop_here(Stop(
                            "budget", f"the {len(calls) - index} calls still planned reserve "
                            f"{usd(still_planned)} USD, the balance is {usd(available)} USD",
                            call.id, call.seq))
                    book.append_locked(reserve)  # under the same lock as the check
                self.journal.append(reserve)
            if self.interruption.requested:
                # Asked while the reservation was written (another run holding the ledger's
                # lock, an fsync): the request has not gone out, and now never will.
                return self.not_sent(index, call)
            try:
                reply = self.send(call)
            except _Abandoned:
                return self.abandoned(call)
            except _NotRecorded:
                raise
            except Exception as exc:  # any failure to get a usable response is technical
                return self.failed(call, reserved, self.retried(exc) if self.bodies > 1 else exc)
            if self.bodies > 1:
                return self.failed(call, reserved, self.retried(reply))
            stop = self.answered(call, reserved, reply, expected_model, first_model)
            if first_model is None:
                first_model = reply.model
            if stop is not None:
                return self.stop_here(stop)
        self.journal.append({"type": "end"})
        return None

    def not_sent(self, index: int, call: PlannedCall) -> Stop:
        """The interrupted stop before `call`, whose reservation is on disk but whose request
        was never sent: its outcome says so and counts it at zero, so that the series is not
        used up by a call that never left (the journal shows only never-sent calls)."""
        self.record({
            "type": "outcome", "call_id": call.id, "seq": call.seq, "status": "failed",
            "failure": "interrupted", "http_status": None,
            "error": f"{self.interruption.name} received before the request was sent; "
                     f"{NEVER_SENT}", "request_id": None, "cost_usd": usd(0),
            "counted_usd": usd(0), "cost_unknown": None, "never_sent": True, "raw": None})
        return self.interrupted(index)

    def retried(self, result: Reply | Exception) -> BackendFailure:
        """The failure a call is when the session handed `on_body` more than one body: the
        backend sent more than one request for it (a retry, each perhaps billed), which no
        answer (`result`, whatever the session returned or raised) can make good."""
        raw = result.raw if isinstance(result, (Reply, BackendFailure)) else None
        return BackendFailure(
            "second_request", f"the backend sent {self.bodies} requests for this one call and "
            f"got {self.bodies} responses (a retry: each may be billed, so the call is counted "
            f"at {self.bodies} times its reservation; every body is in the journal); a backend "
            "sends exactly one request per call", raw=raw)

    def failed(self, call: PlannedCall, reserved: Decimal, exc: Exception) -> Stop:
        failure = exc if isinstance(exc, BackendFailure) else BackendFailure(
            "unexpected", f"the backend failed ({type(exc).__name__})")
        # More bodies than one came back (a retry): each request may have been billed.
        times = max(1, self.bodies)
        counted = Decimal(0) if failure.never_sent else reserved * times
        self.pending = {
            "type": "outcome", "call_id": call.id, "seq": call.seq, "status": "failed",
            "failure": failure.kind, "http_status": failure.http_status,
            "error": failure.message, "request_id": failure.request_id,
            "cost_usd": usd(counted) if failure.never_sent else None,
            "counted_usd": usd(counted),
            "cost_unknown": None if failure.never_sent
            else "no usable response: counted at its reservation" if times == 1
            else f"{times} requests for one call: counted at {times} times its reservation",
            "never_sent": failure.never_sent,
            "raw": failure.raw,
        }
        self.record(self.pending)
        self.pending = None
        self.spent_here += counted
        self.progress(call, "failed")
        return self.stop_here(Stop("technical_failure", failure.message, call.id, call.seq))

    def answered(self, call: PlannedCall, reserved: Decimal, reply: Reply,
                 expected_model: Any, first_model: str | None) -> Stop | None:
        backend = self.backend
        amount, unknown, counted = _priced(reply, backend, reserved,
                                           self.input_bounds.get(call.seq))
        if reply.status not in ANSWERED and backend.pricing is not None:
            # Not finished (or failed on the way): its usage may not be its final bill.
            amount, unknown = None, f"status {reply.status!r}: the usage may not be final"
            counted = max(counted, reserved)
        self.pending = {
            "type": "outcome", "call_id": call.id, "seq": call.seq, "status": reply.status,
            "model": reply.model, "service_tier": reply.service_tier,
            "request_id": reply.request_id, "usage": _usage_doc(reply),
            "cost_usd": None if amount is None else usd(amount), "counted_usd": usd(counted),
            "cost_unknown": unknown, "text": reply.text, "refusal": reply.refusal,
            "incomplete_reason": reply.incomplete_reason, "error": reply.error,
            "raw": reply.raw,
        }
        self.record(self.pending)
        self.pending = None
        self.spent_here += counted
        self.progress(call, reply.status)

        if reply.status not in ANSWERED:
            return Stop("technical_failure", f"the response has status {reply.status!r}"
                        + (f" ({reply.error})" if reply.error else ""), call.id, call.seq)
        if first_model is None and expected_model is not None and (
            reply.model is None or not model_matches(expected_model, reply.model, self.snapshot)
        ):
            return Stop("changed_model", f"model {reply.model!r} came back, "
                        f"{expected_model!r} was asked", call.id, call.seq)
        if first_model is not None and reply.model != first_model:
            return Stop("changed_model", f"model {reply.model!r} came back after "
                        f"{first_model!r}", call.id, call.seq)
        if unknown is not None:
            return Stop("unknown_cost", unknown, call.id, call.seq)
        return None
