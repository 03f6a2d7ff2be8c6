"""The collector: one loop for every backend, calls started in the frozen order.

Before each call starts: everything still planned, this call included, must fit in the
balance, which is the budget's ledger brought up to date with what any other run appended,
under the ledger's lock so that two runs on one budget take turns. The calls in flight are in
that balance at their whole reservations until their outcomes are written; so a check that
fails while calls of this series are in flight starts nothing and is made again each time one
of them is recorded (its cost, below its reservation, may free enough), and the series stops
with `budget` only when the check fails with none of its calls in flight: where a run one call
at a time would have stopped, given the same answers and the same other runs. Then the
reservation is written and fsync'ed (ledger, then series journal), the request goes out once
(no retry), and the outcome is written and fsync'ed the same way. A journal write that fails
(a full disk) stops the series at once: nothing more is sent, a call already sent stays
counted at its reservation, and calls still in flight are not awaited (their answers could
not be written: they stay counted at their reservations). A ledger that cannot be written
while the journal can (its server down, restarted, or silent past its bound,
`fragbench.budget.ledger_pg.ledger_timeout`; its file's disk full) is not a full disk: nothing more
is sent, the calls in flight are awaited within their deadline and their bodies and outcomes
journaled (answers paid for are kept), the ledger counting each of them at its whole
reservation (their outcomes cannot reach it: `fragbench ledger show` lists them as open
reservations), and the series stops as cannot_record. Nothing reconnects to the ledger on its
own: once it can be written again, `fragbench ledger settle SERIES_DIR` appends those
outcomes from the chain-checked journal (`fragbench.budget.ledger.settle`); until then they stay
open, over-counting the budget, never under-counting it. A call whose thread cannot be started
(`Thread.start` raises: the system's thread limit) was never sent: it is recorded so (counted
at zero, `never_sent`), and the series stops there as a technical failure, the calls in flight
awaited and recorded as at any stop. An unexpected exception (a bug in fragbench, or in a
callback such as `on_progress`) also awaits and records the calls in flight (a second
interruption abandons the wait; a write that fails gives up the rest, counted at their
reservations), then is raised again, with no stop record (the journal reads as a run cut
short, which `fragbench measure` derives).

Calls in flight (`max_in_flight = N` in the backend's table; protocol 1.0 has 1): up to N
calls are sent at once, each from a thread of its own, started in the frozen order and paced
under the backend's `requests_per_minute` and `tokens_per_minute` (`fragbench.calls.pacing`). Their
outcomes are recorded as they come back, in any order (the journal's reader takes them so).
At the first stop reason (any of those below, or an interruption) no call starts; the calls
in flight are awaited, each within its backend's deadline, and recorded as any other; then
the series records one stop: the one of the lowest seq among every stop reason met, ties on
one call going technical failure, changed model, unknown cost, budget, interruption. So the
stop is the one a one-at-a-time run would have met first, whatever order the answers came
back in; calls after it that were already in flight are recorded too.

Stop rules (protocol 1.0, "Arrêt au premier échec technique, changement de modèle ou coût
inconnu"; no automatic retry or resume):
- technical failure: a BackendFailure (HTTP error, connection error, timeout, a body that is not
  a response), any other error of the backend, or any status other than completed and
  incomplete (failed, cancelled, queued, in_progress, or one we do not know): the series stops
  there;
- changed model: the first response's model must be the requested one or a dated snapshot of
  it (the contract's snapshot suffix, `name-YYYY-MM-DD` by default); a later response whose
  model differs from the first one's is recorded, then the series stops. With calls in
  flight, "first" is the response of the lowest seq (not the first to arrive);
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
request; the calls in flight are awaited, within their backend's deadline, and recorded as any
other; then the series stops with reason `interrupted`, at the first call not sent (unless a
call of a lower seq met another stop reason). A second request abandons the wait: the calls
still in flight stay counted at their reservations with no outcome, and the stop names the
first of them. Progress reports are best effort: an OSError from `on_progress` (a closed
terminal or pipe) is ignored and changes nothing that is recorded.

Record first, then look: a session that offers `on_body` (`fragbench.transport.SDKSession`)
hands each response's body, as it arrived, to the collector before anything parses it; the
collector journals it (`received`: call_id, seq, http_status, raw) and fsyncs it. With one
call in flight `on_body` is set before each call (plugin API 1.0); with more, it is set once
and tells the calls apart by the sending thread, which a session promises by declaring
`concurrent = True` (`concurrency_problem`). If that write
fails the series stops as cannot_record, and the body is printed instead. A session that hands
over more than one body for one call sent more than one request (a retry, on a client of the
backend's own): every body is journaled, the call is a technical failure (`second_request`)
counted at its reservation once per body, and the series stops.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs

from fragbench.budget.ledger import LEDGER_FIELDS, Ledger
from fragbench.budget.money import Budget, UnknownCost, balance, cost, usd
from fragbench.calls.interruption import Interruption
from fragbench.calls.pacing import Pacer
from fragbench.columns import ANSWERED
from fragbench.errors import FragbenchError
from fragbench.experiment.config import BackendConfig
from fragbench.experiment.plan import PlannedCall
from fragbench.interfaces import COST_FIELDS, SNAPSHOT, BackendFailure, Reply, Session, Usage
from fragbench.series.journal import Journal
from fragbench.transport import NEVER_SENT, RESPONSES_USAGE, Absent, shown, usage_places, whole


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


class _LedgerLost(Exception):
    """The budget's ledger cannot be written (or read, or its lock taken): nothing more may
    start, but the journal still takes what the calls in flight bring back."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


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
    done: int | None = None
    """How many calls have their outcome recorded, this one included (with calls in flight,
    outcomes come in any order: `seq` says which call, `done` how far the series is)."""


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
    the backend's contract). Matched with re.ASCII: a contract's `\\d` (the Messages API's
    `-\\d{8}`) takes only 0-9, never another script's digits (`-٢٠٢٦٠٩٠٣`), which no provider
    writes in a snapshot's date."""
    return re.fullmatch(re.escape(requested) + f"({snapshot})?", returned,
                        re.ASCII) is not None


def _usage_doc(reply: Reply) -> dict[str, Any] | None:
    """The usage as the journal keeps it; `total_tokens` only where the reader took one."""
    if reply.usage is None:
        return None
    return attrs.asdict(reply.usage, filter=lambda a, v: a.name != "total_tokens"
                        or v is not None)


MAX_REPORTED_TOKENS = 10**12
"""No request reports more tokens of any kind than this (the largest contexts are under 10**8)."""


def impossible(usage: Usage | None, input_bound: int | None, max_output: int | None
               ) -> str | None:
    """Why the reported usage cannot be this request's, or None.

    In the core's terms (`fragbench.interfaces.Usage`, whichever API the backend reads):
    reasoning is part of the output, so reasoning tokens above the output tokens, or above the
    output ceiling (`max_output`, reasoning included), cannot be; a total (`total_tokens`,
    where reported) must be input plus output; and no count is negative or beyond what any
    request makes. A negative cost field is left to `fragbench.budget.money.cost` (an unknown cost
    too)."""
    if usage is None:
        return None
    for name in ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens",
                 "reasoning_tokens", "total_tokens"):
        value = getattr(usage, name)
        if value is not None and value > MAX_REPORTED_TOKENS:
            # Whatever the bounds given: a count no request makes, which priced would write
            # an amount beyond the money columns' scale (a journal its reader refuses).
            return f"{value} {name.replace('_', ' ')} reported, more than any request makes"
    for name in ("reasoning_tokens", "total_tokens"):  # unpriced, so not cost()'s to check
        value = getattr(usage, name)
        if value is not None and value < 0:
            return f"{value} {name.replace('_', ' ')} reported, a negative count"
    output, reasoning = usage.output_tokens, usage.reasoning_tokens
    if max_output is not None:
        for name, value in (("output", output), ("reasoning", reasoning)):
            if value is not None and value > max_output:
                return (f"{value} {name} tokens reported, more than the request's output "
                        f"ceiling of {max_output} (reasoning included)")
    if reasoning is not None and output is not None and reasoning > output:
        return (f"{reasoning} reasoning tokens reported, more than the {output} output tokens "
                "they are part of")
    if usage.total_tokens is not None and usage.input_tokens is not None \
            and output is not None and usage.total_tokens != usage.input_tokens + output:
        return (f"{usage.total_tokens} total tokens reported, not the {usage.input_tokens} "
                f"input plus {output} output tokens")
    if input_bound is not None:
        for name in ("input_tokens", "cached_tokens", "cache_write_tokens"):
            value = getattr(usage, name)
            if value is not None and value > input_bound:
                return (f"{value} {name.replace('_', ' ')} reported, more than the request's "
                        f"bound of {input_bound} (its UTF-8 bytes plus framing)")
    return None


def _with_total(usage: Usage | None, places: dict[str, Any] | None) -> Usage | None:
    """`usage`, with the total a Responses API body reports when the reader did not take it
    (`fragbench.transport.usage_places`): checked, never priced."""
    if usage is None or usage.total_tokens is not None or places is None:
        return usage
    total = whole(places[RESPONSES_USAGE["total_tokens"]])
    return usage if total is None else attrs.evolve(usage, total_tokens=total)


def lacking(usage: Usage | None, fields: frozenset[str], places: dict[str, Any] | None
            ) -> str | None:
    """Why a declared usage field (`fields`, the contract's usage_fields) has no count, in
    words that say where it was looked for, or None when every one has a count. `places`
    (`fragbench.transport.usage_places`) names, for a Responses API body, the place of each
    field and what is there: a value that is no whole number is shown (`usage.output_tokens
    is 180.0, not a whole number`); a field that is absent is named with its place and how a
    backend's contract declares the fields its provider reports."""
    if usage is None:
        return None  # cost() says it: the response carries no usage
    gaps = [f for f in COST_FIELDS if f in fields and getattr(usage, f) is None]
    if not gaps:
        return None
    said, absent = [], []
    for name in gaps:
        place = RESPONSES_USAGE[name] if places is not None else None
        value = Absent if place is None or places is None else places[place]
        if value is Absent:
            absent.append(f"{name} ({place})" if place else name)
        elif whole(value) is None:
            said.append(f"{place} is {shown(value)}, not a whole number")
        else:  # a whole number the backend's reader did not take: its reader's business
            said.append(f"the backend read no {name} from {place} ({shown(value)})")
    if absent:
        # Without places (another API's body) the reader may have met a count of the wrong
        # type as well as none: both read as None.
        what = "lacks" if places is not None else "has no whole number for"
        said.append(f"the usage {what} {', '.join(absent)}, which the backend's contract "
                    "declares its provider reports (Contract.usage_fields: "
                    f"{', '.join(f for f in COST_FIELDS if f in fields)}); a server that has "
                    "no such count needs a backend whose contract leaves it out "
                    "(docs/adding-a-backend.md)")
    return "; ".join(said)


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
    places = usage_places(reply.raw)
    why = impossible(_with_total(reply.usage, places), input_bound, contract.output_ceiling)
    if why is not None:
        return None, f"impossible usage: {why}", reserved
    gap = lacking(reply.usage, contract.usage_fields, places)
    if gap is not None:
        return None, gap, reserved
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


def concurrency_problem(session: Any, backend: BackendConfig) -> str | None:
    """Why `session` cannot have `backend`'s calls in flight at once, or None.

    Above one call in flight the session must declare `concurrent = True`, which promises:
    `send` may be called from several threads at once, and `on_body`, when the session has
    it, is read at each call and called from the thread that called `send`, before `send`
    returns (the collector sets it once, and tells the calls apart by their thread).
    `fragbench.transport.SDKSession` and `JSONSession` keep both promises. A session written
    for one call at a time (API 1.0, which sets `on_body` before each call) keeps working at
    `max_in_flight = 1`."""
    if backend.concurrency.max_in_flight > 1 and getattr(session, "concurrent", False) is not True:
        return (f"backends.{backend.name}.max_in_flight is {backend.concurrency.max_in_flight}, "
                f"but the session of backend plugin {backend.plugin!r} does not declare "
                "`concurrent = True` (send callable from several threads, on_body called in "
                "the sending thread): set max_in_flight = 1, or use a backend whose session "
                "declares it (docs/plugins.md, 'Calls in flight')")
    return None


def token_bounds(calls: list[PlannedCall], input_bounds: dict[int, int],
                 backend: BackendConfig) -> dict[int, int]:
    """Each call's token bound, what `tokens_per_minute` counts: its input bound (UTF-8 bytes
    plus framing tokens) plus the contract's output ceiling."""
    ceiling = backend.contract.output_ceiling if backend.contract is not None else 0
    return {c.seq: input_bounds.get(c.seq, 0) + ceiling for c in calls}


def pacing_problem(calls: list[PlannedCall], input_bounds: dict[int, int],
                   backend: BackendConfig) -> str | None:
    """Why the plan's calls cannot be paced under `backend`'s tokens_per_minute, or None: a
    call that alone bounds more tokens than a minute allows could never start."""
    limit = backend.concurrency.tokens_per_minute
    if limit is None:
        return None
    for seq, tokens in token_bounds(calls, input_bounds, backend).items():
        if tokens > limit:
            return (f"backends.{backend.name}.tokens_per_minute is {limit}, but call {seq} "
                    f"alone bounds {tokens} tokens (its input bytes and framing tokens plus "
                    "the output ceiling): raise the limit to what the provider allows, or "
                    "lower the output ceiling")
    return None


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
    pacer: Pacer | None = None,
) -> Stop | None:
    """Run the calls; return why the series stopped, or None when every call went.

    `input_bounds` (seq -> the request's UTF-8 bytes plus the framing tokens) bounds the input
    tokens a call can report; a usage above it is impossible. `interruption`, when requested,
    stops the series (module docstring); `notice` receives one line when a request arrives
    while calls are in flight (what is awaited, and how to abandon it). `pacer` spaces the
    starts (default: one built from the backend's requests_per_minute and tokens_per_minute).

    ValueError, before anything is written, for a session that cannot take the backend's
    max_in_flight (`concurrency_problem`) or calls that no pacing lets start
    (`pacing_problem`): `fragbench run` refuses both first, in one line.
    """
    bounds = input_bounds or {}
    problem = concurrency_problem(session, backend) or pacing_problem(calls, bounds, backend)
    if problem is not None:
        raise ValueError(problem)
    limits = backend.concurrency
    if pacer is None and (limits.requests_per_minute or limits.tokens_per_minute):
        pacer = Pacer(limits.requests_per_minute, limits.tokens_per_minute)
    state = _Collection(calls, reservations, session, backend, journal, book, on_progress,
                        bounds, interruption or Interruption(), notice, pacer)
    try:
        try:
            return state.run()
        except _LedgerLost as exc:  # the journal can still keep the answers in flight
            # Inside the outer try, not a sibling clause: whatever escapes the wait for the
            # calls in flight (a worker's KeyboardInterrupt, a bug while recording) is then
            # salvaged or given up below, so that no call is left listening once the caller
            # closes the journal.
            return state.without_ledger(exc.cause)
    except (OSError, FragbenchError) as exc:  # a full disk
        return state.cannot_record(exc)
    except _NotRecorded as exc:  # a body that arrived and could not be journaled
        return state.cannot_record(exc.cause)
    except Exception as exc:  # a bug: the answers in flight are still recorded, then it is said
        try:
            state.salvage(exc)
        finally:
            state.give_up_all()  # none left, unless the wait itself was cut short
        raise
    except BaseException:  # KeyboardInterrupt, SystemExit: not waited on
        # The journal is closed after this: no body may be written to it from a thread.
        state.give_up_all()
        raise


@attrs.define(eq=False)
class _Flight:
    """One call in flight: sent from a thread of its own."""

    call: PlannedCall
    reserved: Decimal
    listening: bool = True
    """Whether a body for it may still be journaled: until the collector takes its outcome
    (or gives it up). Read and written under `_Collection.lock`."""
    bodies: int = 0
    """How many bodies the session handed `on_body` for this call: more than one is a retry
    (each may be billed), whatever the session then returns."""
    unreceived: tuple[dict[str, Any], BaseException] | None = None
    """A body that arrived and could not be journaled, with the error."""
    journaled: str | None = None
    """The last body journaled for it (a `received` record's raw): its outcome does not write
    it again (`_once`)."""
    result: tuple[bool, Any] | None = None
    """(True, the Reply) or (False, what `send` raised), once `send` returned."""
    began: bool = False
    """Its thread is running and will send the request. Read and written under
    `_Collection.starting`, as `withdrawn` is."""
    withdrawn: bool = False
    """Its thread could not be started (recorded never sent): if it runs after all, it sends
    nothing."""


def _once(raw: str | None, flight: _Flight) -> dict[str, str | None]:
    """An outcome's `raw`: absent when it is the body already journaled for the call (its
    last `received` record, which readers fall back to), so that each body is written and
    fsync'ed once; kept when it differs (a failure's first bytes, a body the session changed)
    or when no body was journaled."""
    return {} if raw is not None and raw == flight.journaled else {"raw": raw}


STOP_RANK = ("technical_failure", "changed_model", "unknown_cost", "budget", "interrupted")
"""Of two stop reasons on one call, the one recorded: the order protocol 1.0's rules are
checked in (a call not sent: budget before interruption, as the check came first)."""


def _first(stops: list[Stop]) -> Stop:
    """The stop of the lowest seq (the order of the frozen plan, whatever order the answers
    came back in): what the series records. Ties on one call go by STOP_RANK."""
    return min(stops, key=lambda s: (s.seq, STOP_RANK.index(s.reason)
                                     if s.reason in STOP_RANK else len(STOP_RANK)))


def _seqs(flights: list[_Flight]) -> str:
    return ", ".join(str(f.call.seq) for f in flights)


def _cause(exc: BaseException) -> str:
    """What could not be recorded, as the stop line says it."""
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"cannot write {exc.filename} ({exc.strerror})"
    if isinstance(exc, OSError):
        return f"cannot write ({exc.strerror or exc})"
    if isinstance(exc, FragbenchError):
        return str(exc).rstrip(".")
    return f"cannot record ({type(exc).__name__}: {exc})"


class _Collection:
    def __init__(self, calls: list[PlannedCall], reservations: dict[int, Decimal],
                 session: Session, backend: BackendConfig, journal: Journal,
                 book: BudgetBook | None, on_progress: Callable[[Progress], None],
                 input_bounds: dict[int, int], interruption: Interruption,
                 notice: Callable[[str], None], pacer: Pacer | None) -> None:
        self.calls, self.reservations, self.session = calls, reservations, session
        self.backend, self.journal, self.book = backend, journal, book
        self.on_progress, self.input_bounds = on_progress, input_bounds
        self.interruption, self.notice, self.pacer = interruption, notice, pacer
        self.in_flight_max = backend.concurrency.max_in_flight
        self.tokens = token_bounds(calls, input_bounds, backend) if pacer is not None else {}
        self.lock = threading.Lock()
        """Held for every journal write (the `received` records come from the threads the
        calls are sent from) and while a call's listening state changes, so that no body is
        journaled after its call was given up."""
        self.flights: dict[int, _Flight] = {}
        """The calls in flight, by seq. Only the collector's own thread reads or changes it."""
        self.starting = threading.Lock()
        """Orders a call's thread beginning to send against a failed start being recorded
        (`_Flight.began`, `withdrawn`): never both."""
        self.short: int | None = None
        """A start's budget check failed with this many calls of this series in flight: none
        starts until fewer are (one was recorded), then the check is made again."""
        self.done: queue.Queue[_Flight] = queue.Queue()
        """Flights whose `send` returned, as they return."""
        self.sending = threading.local()
        """The flight each sending thread carries (`dispatch` finds a body's call by it)."""
        self.snapshot = backend.contract.snapshot if backend.contract is not None else SNAPSHOT
        self.spent_here = Decimal(0)
        self.settled = 0
        """Calls whose outcome is recorded."""
        self.current: PlannedCall | None = None
        self.pending: dict[str, Any] | None = None
        """An outcome received and not yet on disk."""
        self.stops: list[Stop] = []
        """Every stop reason met so far; the series records the first by seq (`_first`)."""
        self.models: dict[int, str | None] = {}
        """The model of every reply, by seq: the one of the lowest seq is "the first"."""
        self.lowest: int | None = None
        """The lowest seq in `models`, kept as replies come (a `min` over them at every reply
        cost a time that grew with the calls answered: 100 s over a 100,000-call series)."""
        self.told = False
        self.ledger_lost: BaseException | None = None
        """Why the budget's ledger cannot be written, once it cannot: from then on outcomes go
        to the journal only, and nothing starts."""
        self.lost_outcome = False
        """The write the ledger refused was the outcome of a call that was sent (`current`,
        journaled with its answer)."""
        self.by_seq = {c.seq: c for c in calls}
        self.still_planned = [Decimal(0)] * (len(calls) + 1)
        """What calls[index:] reserve, by index: summed once, so that a start's check does
        not grow with the series."""
        for i in range(len(calls) - 1, -1, -1):
            self.still_planned[i] = self.still_planned[i + 1] + reservations[calls[i].seq]

    def write(self, record: dict[str, Any]) -> None:
        """One journal record, never at the same time as another thread's."""
        with self.lock:
            self.journal.append(record)

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
            self.write(entry)
            self.pending = None  # on disk: nothing left to print if the ledger then fails
            self.to_ledger(entry)
            return
        try:
            self.to_ledger(entry)
        except _LedgerLost:
            if entry["type"] == "outcome":  # paid for: the journal keeps it all the same
                self.write(entry)
                self.pending = None
            raise
        self.write(entry)

    def to_ledger(self, entry: dict[str, Any]) -> None:
        """The ledger's copy of `entry`, unless the ledger is lost (the call then stays counted
        there at its reservation). _LedgerLost when this write is the one that fails."""
        if self.book is None or self.ledger_lost is not None:
            return
        try:
            self.book.record(entry)
        except (OSError, FragbenchError) as exc:
            self.ledger_lost = exc
            # An outcome of a call that was sent, whose answer is journaled: a call never sent
            # (interrupted at its reservation, its thread not started) has no answer to keep.
            self.lost_outcome = entry["type"] == "outcome" and not entry.get("never_sent")
            raise _LedgerLost(exc) from exc

    def stop_here(self, stop: Stop) -> Stop:
        stop = attrs.evolve(stop, detail=self.journal.redactor.text(stop.detail))  # printed too
        self.write({"type": "stop", **attrs.asdict(stop, filter=lambda a, v:
                                                   a.name not in NOT_RECORDED)})
        return stop

    def without_ledger(self, cause: BaseException) -> Stop:
        """The ledger cannot be written (`cause`) and the journal can: no call starts; the calls
        in flight are awaited within their deadline and recorded in the journal, body and
        outcome (the ledger counts each at its reservation); then the series stops as
        cannot_record, at the call whose ledger write failed. A journal write that fails
        meanwhile ends it as a full disk does (`cannot_record`: the rest not awaited); a
        second interruption abandons the wait (the rest counted at their reservations)."""
        call = self.current or self.calls[0]
        awaited = sorted(self.flights)
        if self.lost_outcome:  # its answer journaled, its outcome refused by the ledger
            awaited = sorted([call.seq, *awaited])
        left: list[_Flight] = []
        try:
            while self.flights:
                self.wait(POLL_SECONDS)
        except _Abandoned:
            left = self.give_up_all()
        except (OSError, FragbenchError) as exc:
            return self.cannot_record(exc)
        except _NotRecorded as exc:
            return self.cannot_record(exc.cause)
        detail = f"{_cause(cause)}; nothing more was sent"
        if left:
            detail += (f"; {self.interruption.name} received twice: the wait for calls "
                       f"{_seqs(left)} was abandoned")
        done = [s for s in awaited if s not in {f.call.seq for f in left}]
        if done:
            them = f"call {done[0]}, in flight, is" if len(done) == 1 else \
                f"the {len(done)} calls in flight ({', '.join(map(str, done))}) are"
            detail += f"; {them} in the journal, answers and all"
        detail += ("; the ledger counts every call whose outcome it lacks at its reservation "
                   "until `fragbench ledger settle` on the series folder, once the ledger can "
                   "be written, gives it their outcomes from the journal")
        stop = Stop("cannot_record", self.journal.redactor.text(detail), call.id, call.seq,
                    abandoned=bool(left))
        self.write_stop(stop)
        return stop

    def write_stop(self, stop: Stop) -> None:
        """The stop record of a series that cannot record everything: best effort (the disk
        may refuse it too; the stop is printed all the same)."""
        with contextlib.suppress(OSError), self.lock:
            self.journal.append({"type": "stop", "reason": stop.reason, "detail": stop.detail,
                                 "call_id": stop.call_id, "seq": stop.seq})

    def cannot_record(self, exc: BaseException) -> Stop:
        """Nothing more can be recorded: no call starts, and the calls still in flight are not
        awaited (their answers could not be written); they stay counted at their
        reservations, and the session is left open under them (`abandoned`)."""
        left = self.give_up_all()
        call = self.current or self.calls[0]
        detail = (f"{_cause(exc)}; nothing more was sent, and a call already sent stays counted at "
                  "its reservation")
        if left:
            detail += (f" (calls {', '.join(str(f.call.seq) for f in left)} were in flight: "
                       "not awaited)")
        unrecorded = None
        if self.pending is not None:
            unrecorded = json.dumps(self.journal.redactor.value(self.pending), ensure_ascii=True)
        stop = Stop("cannot_record", self.journal.redactor.text(detail), call.id, call.seq,
                    unrecorded, abandoned=bool(left))
        self.write_stop(stop)
        return stop

    def progress(self, call: PlannedCall, status: str) -> None:
        # Printed as it came: whoever prints it redacts it (the CLI's reporter), as it redacts
        # every line it prints. Best effort: a closed terminal or pipe stops no collection.
        self.settled += 1
        book = None if self.ledger_lost is not None else self.book  # its totals: unknown now
        with contextlib.suppress(OSError):
            self.on_progress(attrs.evolve(
                _progress(call, len(self.calls), status, self.spent_here, book),
                done=self.settled))

    # The calls in flight ----------------------------------------------------------------------

    def receive(self, flight: _Flight, raw: str, http_status: int) -> None:
        """Journal a body as it arrived (redacted, fsync'ed) before anything parses it. A write
        that fails is remembered, since the session turns whatever its callback raises into a
        failure of its own."""
        call = flight.call
        with self.lock:
            if not flight.listening:  # a body after its call was given up
                return
            flight.bodies += 1  # every body is kept: a second one is what a retry paid for
            record = {"type": "received", "call_id": call.id, "seq": call.seq,
                      "http_status": http_status, "raw": raw}
            try:
                self.journal.append(record)
            except BaseException as exc:
                flight.unreceived = (record, exc)
                raise
            flight.journaled = raw

    def receiver(self, flight: _Flight) -> Callable[[str, int], None]:
        """The session's `on_body` for one call (one call in flight: set before each)."""
        def received(raw: str, http_status: int) -> None:
            self.receive(flight, raw, http_status)
        return received

    def dispatch(self, raw: str, http_status: int) -> None:
        """The session's `on_body` with calls in flight (set once): the body is the call's
        that the calling thread sends (`concurrency_problem` says what a session promises)."""
        flight = getattr(self.sending, "flight", None)
        if flight is None:
            # Not from a thread sending a call: whose body it is cannot be known, so it is
            # refused; the session fails the call with it, counted at its reservation.
            raise RuntimeError("on_body was called outside the thread that sends the call")
        self.receive(flight, raw, http_status)

    def give_up(self, flight: _Flight) -> None:
        """No `received` record is written for `flight` from now on: a session may call back
        after it returned (a worker left running at its deadline), and the journal may be
        closing."""
        with self.lock:
            flight.listening = False

    def give_up_all(self) -> list[_Flight]:
        """Give up every call still in flight; returns them, lowest seq first."""
        left = sorted(self.flights.values(), key=lambda f: f.call.seq)
        for flight in left:
            self.give_up(flight)
        return left

    def start(self, flight: _Flight) -> bool:
        """Send `flight`'s call from a thread of its own, so that the collector can wait for
        any call in flight while it looks at the interruption: True once it is in flight.
        False when its thread cannot be started (the system's thread limit): the call is
        recorded never sent, counted at zero, and the series stops there (technical
        failure)."""
        if self.in_flight_max == 1 and hasattr(self.session, "on_body"):
            self.session.on_body = self.receiver(flight)

        def work() -> None:
            with self.starting:
                if flight.withdrawn:  # recorded never sent: it must stay so
                    return
                flight.began = True
            self.sending.flight = flight
            try:
                flight.result = (True, self.session.send(flight.call.request))
            except BaseException as exc:  # handed to the collector, which decides
                flight.result = (False, exc)
            finally:
                self.done.put(flight)

        call = flight.call
        if self.pacer is not None:
            self.pacer.started(self.tokens.get(call.seq, 0))
        thread = threading.Thread(target=work, name=f"fragbench-call-{call.seq}", daemon=True)
        try:
            thread.start()
        except Exception as exc:  # CPython: no thread was made ("can't start new thread")
            with self.starting:
                flight.withdrawn = not flight.began
            if not flight.withdrawn:
                # It runs although its start failed: not understood, so a bug, raised once
                # the call is awaited and recorded with the others (`salvage`).
                self.flights[call.seq] = flight
                raise
            self.give_up(flight)
            self.stops.append(self.failed(flight, BackendFailure(
                "not_started", f"no thread could be started to send call {call.seq} "
                f"({type(exc).__name__}: {exc}; fewer calls in flight, max_in_flight, need "
                f"fewer threads); {NEVER_SENT}", never_sent=True)))
            return False
        # In flight from here (not before: a call whose thread never ran would be awaited
        # forever). Only this thread takes outcomes, so none comes before this line.
        self.flights[call.seq] = flight
        return True

    def wait(self, seconds: float) -> None:
        """Wait at most `seconds` for a call in flight to return, and record it if one did;
        _Abandoned when a second request gives up the calls in flight."""
        try:
            flight = self.done.get(timeout=max(seconds, 0.0))
        except queue.Empty:
            flight = None
        if flight is not None:
            self.settle(flight)
        interruption = self.interruption
        if not self.flights:
            return
        if interruption.abandon:
            raise _Abandoned
        if interruption.requested and not self.told:
            self.told = True
            self.tell()

    def tell(self) -> None:
        """The line that says what an interruption now waits for, and how to abandon it."""
        interruption = self.interruption
        timeout = getattr(self.session, "timeout", None)
        deadline = f" (its deadline: {timeout:g} s)" if isinstance(timeout, int | float) else ""
        seqs = sorted(self.flights)
        if len(seqs) == 1:
            waiting = (f"waiting for the answer to call {seqs[0]}/{len(self.calls)}, already "
                       f"sent and paid for, to record it{deadline}; {interruption.again} to "
                       "abandon it (it then stays counted at its reservation)")
        else:
            waiting = (f"waiting for the answers to the {len(seqs)} calls in flight "
                       f"({', '.join(map(str, seqs))} of {len(self.calls)}), already sent and "
                       f"paid for, to record them{deadline}; {interruption.again} to abandon "
                       "them (they then stay counted at their reservations)")
        with contextlib.suppress(OSError):  # said best effort, as progress is
            self.notice(f"{interruption.name}: no new call will start; {waiting}")

    def settle(self, flight: _Flight) -> None:
        """Record what came back for `flight` (it has returned) and note any stop it causes."""
        del self.flights[flight.call.seq]
        self.give_up(flight)
        self.current = flight.call
        if flight.unreceived is not None:
            self.pending, cause = flight.unreceived
            raise _NotRecorded(cause)
        assert flight.result is not None
        succeeded, value = flight.result
        if not succeeded and not isinstance(value, Exception):
            raise value  # KeyboardInterrupt, SystemExit: not the backend's to decide
        stop: Stop | None
        if not succeeded:  # any failure to get a usable response is technical
            stop = self.failed(flight, self.retried(flight, value)
                               if flight.bodies > 1 else value)
        elif flight.bodies > 1:
            stop = self.failed(flight, self.retried(flight, value))
        else:
            stop = self.answered(flight, value)
        if stop is not None:
            self.stops.append(stop)

    # The loop ---------------------------------------------------------------------------------

    def run(self) -> Stop | None:
        """Start the calls in the frozen order, at most max_in_flight at once and as fast as
        the pacing allows; at the first stop reason, start none and await the ones in flight;
        then record the first stop by seq (or the end)."""
        if self.in_flight_max > 1 and hasattr(self.session, "on_body"):
            self.session.on_body = self.dispatch
        calls = self.calls
        index = 0  # the next call to start
        try:
            while True:
                while not self.done.empty():  # record what came back before deciding
                    self.settle(self.done.get())
                going = not self.stops and not self.interruption.requested
                room = self.short is None or len(self.flights) < self.short
                if going and room and index < len(calls) \
                        and len(self.flights) < self.in_flight_max:
                    delay = 0.0 if self.pacer is None else self.pacer.delay(
                        self.tokens.get(calls[index].seq, 0))
                    if delay > 0:
                        self.wait(min(delay, POLL_SECONDS))
                        continue
                    if self.begin(index):
                        index += 1
                    continue
                if not self.flights:
                    break
                self.wait(POLL_SECONDS)
        except _Abandoned:
            return self.abandoned()
        stops = list(self.stops)
        if self.interruption.requested and index < len(calls):
            stops.append(self.interrupted(index))
        if stops:
            return self.stop_here(_first(stops))
        self.write({"type": "end"})
        return None

    def begin(self, index: int) -> bool:
        """Reserve call `index` (0-based) and start it: True once it is in flight. False when
        it is not sent: the balance cannot hold everything still planned (with calls of this
        series in flight, a wait for one of them to be recorded, `short`; with none, a
        `budget` stop), an interruption came while its reservation was written, or its
        thread could not be started (both recorded never sent)."""
        call = self.current = self.calls[index]
        book = self.book
        reserved = self.reservations[call.seq]
        reserve = {"type": "reserve", "call_id": call.id, "seq": call.seq,
                   "reserved_usd": usd(reserved)}
        if book is None:
            self.record(reserve)
        else:
            try:
                if not self.reserve_in(book, index, reserve):
                    return False
            except (OSError, FragbenchError) as exc:  # rolled back, or counted high: not sent
                self.ledger_lost = exc
                raise _LedgerLost(exc) from exc
            self.write(reserve)
        if self.interruption.requested:
            # Asked while the reservation was written (another run holding the ledger's
            # lock, an fsync): the request has not gone out, and now never will.
            self.not_sent(call)
            return False
        return self.start(_Flight(call, reserved))

    def reserve_in(self, book: BudgetBook, index: int, reserve: dict[str, Any]) -> bool:
        """Under the ledger's lock: the balance check for call `index`, then its reservation
        (True), or no reservation (False: a wait for a call in flight, `short`, or a `budget`
        stop)."""
        call = self.calls[index]
        with book.ledger.locked():
            # Everything not yet started must fit in the balance; the calls in flight are in
            # the ledger's spent at their whole reservations until their outcomes.
            still_planned = self.still_planned[index]
            available = balance(book.budget, book.spent())
            if still_planned > available:
                if self.flights:
                    # They count at their whole reservations until recorded, and may cost
                    # less: check again once one is (a run one call at a time would check
                    # with every earlier call recorded).
                    self.short = len(self.flights)
                    return False
                self.stops.append(Stop(
                    "budget", f"the {len(self.calls) - index} calls still planned reserve "
                    f"{usd(still_planned)} USD, the balance is {usd(available)} USD",
                    call.id, call.seq))
                return False
            book.append_locked(reserve)  # under the same lock as the check
            self.short = None
        return True

    def interrupted(self, index: int) -> Stop:
        """The stop before call `index` (0-based), which no interruption lets start."""
        call = self.calls[index]
        kept = (f"calls 1-{index} recorded" if index > 1 else
                "call 1 recorded" if index == 1 else "no call was sent")
        return Stop("interrupted", f"{self.interruption.name} received: no call started after "
                    f"it ({kept})", call.id, call.seq)

    def abandoned(self) -> Stop:
        """A second request gave up the calls in flight: they stay counted at their
        reservations, with no outcome; the stop names the first of them."""
        left = self.give_up_all()
        first = left[0].call
        if len(left) == 1:
            detail = (f"{self.interruption.name} received twice: the wait for call "
                      f"{first.seq}'s answer was abandoned; it stays counted at its reservation")
        else:
            detail = (f"{self.interruption.name} received twice: the wait for the answers to "
                      f"calls {', '.join(str(f.call.seq) for f in left)} was abandoned; they "
                      "stay counted at their reservations")
        if self.stops:
            earlier = _first(self.stops)
            detail += f" (the series had stopped at call {earlier.seq}: {earlier.reason})"
        return self.stop_here(Stop("interrupted", detail, first.id, first.seq, abandoned=True))

    def salvage(self, error: Exception) -> None:
        """After an unexpected exception (`error`, a bug): await the calls in flight and record
        each as at any stop, so that no answer paid for is left unrecorded. A second
        interruption, or a write that fails, gives up the rest (they stay counted at their
        reservations). Whatever else went wrong is noted on `error`, which the caller raises
        again; no stop is recorded."""
        while self.flights:
            if self.interruption.abandon:
                left = self.give_up_all()
                error.add_note(f"{self.interruption.name} received twice: calls {_seqs(left)} "
                               "were abandoned in flight; they stay counted at their "
                               "reservations")
                return
            if self.interruption.requested and not self.told:
                self.told = True
                with contextlib.suppress(Exception):  # the error being raised says enough
                    self.tell()
            try:
                flight = self.done.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            try:
                self.settle(flight)
            except _LedgerLost as exc:  # journaled: the ledger counts it at its reservation
                error.add_note(f"the ledger could not be written ({exc.cause}): the calls "
                               "in flight are recorded in the journal only, and the ledger "
                               "counts them at their reservations")
            except (OSError, FragbenchError, _NotRecorded) as exc:
                cause = exc.cause if isinstance(exc, _NotRecorded) else exc
                left = self.give_up_all()
                error.add_note(f"recording call {flight.call.seq}'s answer failed too "
                               f"({type(cause).__name__}: {cause})" + (
                                   f"; calls {_seqs(left)} were given up in flight, counted "
                                   "at their reservations" if left else ""))
                return
            except Exception as exc:  # its outcome may be written: the next one may be too
                self.flights.pop(flight.call.seq, None)
                self.give_up(flight)
                error.add_note(f"recording call {flight.call.seq}'s answer failed too "
                               f"({type(exc).__name__}: {exc})")

    def not_sent(self, call: PlannedCall) -> None:
        """Record `call`, whose reservation is on disk but whose request was never sent: its
        outcome says so and counts it at zero, so that the series is not used up by a call
        that never left (the journal shows only never-sent calls)."""
        self.record({
            "type": "outcome", "call_id": call.id, "seq": call.seq, "status": "failed",
            "failure": "interrupted", "http_status": None,
            "error": f"{self.interruption.name} received before the request was sent; "
                     f"{NEVER_SENT}", "request_id": None, "cost_usd": usd(0),
            "counted_usd": usd(0), "cost_unknown": None, "never_sent": True, "raw": None})

    def retried(self, flight: _Flight, result: Reply | Exception) -> BackendFailure:
        """The failure a call is when the session handed `on_body` more than one body: the
        backend sent more than one request for it (a retry, each perhaps billed), which no
        answer (`result`, whatever the session returned or raised) can make good."""
        raw = result.raw if isinstance(result, (Reply, BackendFailure)) else None
        n = flight.bodies
        return BackendFailure(
            "second_request", f"the backend sent {n} requests for this one call and got {n} "
            f"responses (a retry: each may be billed, so the call is counted at {n} times its "
            "reservation; every body is in the journal); a backend sends exactly one request "
            "per call", raw=raw)

    def failed(self, flight: _Flight, exc: Exception) -> Stop:
        call, reserved = flight.call, flight.reserved
        failure = exc if isinstance(exc, BackendFailure) else BackendFailure(
            "unexpected", f"the backend failed ({type(exc).__name__})")
        # More bodies than one came back (a retry): each request may have been billed.
        times = max(1, flight.bodies)
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
            **_once(failure.raw, flight),
        }
        self.record(self.pending)
        self.pending = None
        self.spent_here += counted
        self.progress(call, "failed")
        return Stop("technical_failure", failure.message, call.id, call.seq)

    def answered(self, flight: _Flight, reply: Reply) -> Stop | None:
        call, reserved, backend = flight.call, flight.reserved, self.backend
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
            **_once(reply.raw, flight),
        }
        self.record(self.pending)
        self.pending = None
        self.spent_here += counted
        self.progress(call, reply.status)

        self.models[call.seq] = reply.model
        self.lowest = call.seq if self.lowest is None else min(self.lowest, call.seq)
        if reply.status not in ANSWERED:
            return Stop("technical_failure", f"the response has status {reply.status!r}"
                        + (f" ({reply.error})" if reply.error else ""), call.id, call.seq)
        changed = self.changed_model(call, reply.model)
        if changed is not None:
            return changed
        if unknown is not None:
            return Stop("unknown_cost", unknown, call.id, call.seq)
        return None

    def changed_model(self, call: PlannedCall, model: str | None) -> Stop | None:
        """The changed-model rule, whatever order the answers come back in: "the first" answer
        is the one of the lowest seq so far; it must be the requested model (or a dated
        snapshot of it), and every other answer its very model. An answer of a lower seq than
        any before it becomes the first: answers already in that differ from it are then the
        changed ones (the lowest of them is noted; only the lowest stop is recorded)."""
        contract = self.backend.contract
        expected = contract.model if contract is not None else None
        lowest = call.seq if self.lowest is None else self.lowest  # set before the call
        if lowest == call.seq:
            if expected is not None and (
                    model is None or not model_matches(expected, model, self.snapshot)):
                return Stop("changed_model", f"model {model!r} came back, {expected!r} was "
                            "asked", call.id, call.seq)
            later = [s for s in sorted(self.models) if s != call.seq and self.models[s] != model]
            if later:
                seq = later[0]
                self.stops.append(Stop("changed_model", f"model {self.models[seq]!r} came back "
                                       f"after {model!r}", self.by_seq[seq].id, seq))
            return None
        first = self.models[lowest]
        if model != first:
            return Stop("changed_model", f"model {model!r} came back after {first!r}", call.id,
                        call.seq)
        return None
