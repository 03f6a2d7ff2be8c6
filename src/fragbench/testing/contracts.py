"""The backend fault suite a plugin author calls from a test: `check_backend(backend, params,
server)` runs the real collector through the backend's own session against the loopback server,
once per scenario, the same scenarios for every backend of every API shape (see its docstring),
failing with an AssertionError that names the promise that broke. The checks of chunkers and
scorers are in `fragbench.testing.retrieval_checks`.

A plain function, not a fixture, so that a plugin's own test decides what it passes in (its
parameters, its server) and reads as what it checks.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import socket
import tempfile
import time
import unicodedata
import uuid
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any

import attrs

from fragbench.testing import samples
from fragbench.testing.loopback import (
    Action,
    Server,
    drop,
    edited,
    followed_by,
    gzip_bomb,
    gzipped,
    http_error,
    json_body,
    lying_length,
    ok,
    raw,
    raw_bytes,
    redirect,
    second_response,
    sleep,
    trickle,
)
from fragbench.testing.promises import declared_api, fail, plugin_name

if TYPE_CHECKING:

    from fragbench.budget.money import Pricing
    from fragbench.interfaces import Contract, Reply, Usage

FAKE_KEY = "fbkit-canary-7Q2xZ9LmW4vB8nR1-do-not-write"
"""The key check_backend puts in the environment: no real provider's shape, so that only the
environment-based redaction can find it, and never a key that could spend money."""



# -- Backends -----------------------------------------------------------------------------------

ONE_REQUEST = "one request per call, never a retry"
NO_REDIRECT = "redirects are not followed"
COST = "usage maps to cost"
STOPS = "the stop rules"
NO_SECRET = "no secret written"
CONTRACT = "its declared contract"
DEADLINE = "the timeout bounds the whole request"
READS = "the answer read as sent"
OWN_CONNECTION = "each call on a connection of its own"
DOUBTFUL = "a response that may not be this call's is no answer"
ONE_READING = "a body with a repeated key is no response"
RECORD_FIRST = "the body recorded first, then parsed bounded"
SAYS_WHY = "a failure says what happened"

KIT_MAX_BODY = 1 << 20
"""The body bound the kit sets (`session.max_body_bytes`, as `fragbench run` sets it from the
frozen plan's `max_response_bytes`) on a session that has one."""
BOMB_SIZE = 64 << 20
"""What the kit's gzip bomb decompresses to (from about 64 KiB on the wire)."""
LINE_BOUND = 4 * KIT_MAX_BODY
"""The longest journal line a bounded body may make (a bomb unbounded makes a 64 MiB one)."""

FAST_RETRY = {"retry-after-ms": "1"}
"""Sent with the error faults: an SDK that retries does so at once, so that a backend that
retries fails its check fast instead of after the SDK's back-off."""

SHORT_TIMEOUT = 0.5
"""The timeout the timeout faults run with (the server takes 5 s), on the first call only: the
stop itself shows the timeout held, so no wall-clock assertion is needed, and a loaded machine
cannot fail it."""
LONG_TIMEOUT = 10.0
"""Every other scenario's timeout: a backend that hangs fails in seconds, not 600."""
RETRY_GRACE = 1.0
"""How long a timeout scenario waits before counting requests: an SDK that retries after a
timeout does so from the abandoned request's thread, after about half a second."""


@attrs.frozen
class _Ran:
    stop: Any
    records: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    seen: list[Any]
    """What the session returned or raised, call by call (before the core redacts anything)."""
    printed: str
    endpoint: str

    def outcome(self, seq: int) -> dict[str, Any]:
        return next(r for r in self.records if r.get("type") == "outcome" and r["seq"] == seq)

    def reserved(self, seq: int) -> str:
        return str(next(r["reserved_usd"] for r in self.records
                        if r.get("type") == "reserve" and r["seq"] == seq))


class _Recorder:
    """The backend's session, with what it returns and raises kept for the secret check.

    `on_body` and `max_body_bytes` are the session's own, read and set through this wrapper:
    the collector hands its `on_body` to whatever it is given, so the suite sees whether the
    session records each body first (a session without them is given one it never calls,
    and fails the check that every body was recorded)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.endpoint = session.endpoint
        self.seen: list[Any] = []

    @property
    def on_body(self) -> Any:
        """The session's `on_body` (None when it has none)."""
        return getattr(self.session, "on_body", None)

    @on_body.setter
    def on_body(self, value: Any) -> None:
        self.session.on_body = value

    @property
    def max_body_bytes(self) -> Any:
        """The session's `max_body_bytes` (None when it has none)."""
        return getattr(self.session, "max_body_bytes", None)

    @max_body_bytes.setter
    def max_body_bytes(self, value: Any) -> None:
        self.session.max_body_bytes = value

    def send(self, request: Any) -> Reply:
        try:
            reply: Reply = self.session.send(request)
        except Exception as exc:
            self.seen.append(exc)
            raise
        self.seen.append(reply)
        return reply

    def close(self) -> None:
        self.session.close()


@contextlib.contextmanager
def _environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """Work inside `folder`: a backend that writes a file where it stands writes it where the
    secret check looks."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def default_pricing(contract: Contract) -> Pricing:
    """Protocol 1.0's frozen prices (10 input, 1 cached, 12.50 cache write, 50 output, USD per
    million tokens) for the contract's model: what check_backend prices with unless given a
    table. Distinct rates, so that a field read into the wrong place changes the cost."""
    from fragbench.budget.money import Pricing

    return Pricing(models=(contract.model,), input=Decimal("10"), cached_input=Decimal("1"),
                   cache_write=Decimal("12.50"), output=Decimal("50"), per_tokens=1_000_000,
                   max_input_tokens=272_000, read_on="2026-10-08", tier="fragbench.testing")


class _Suite:
    """The fault suite for one backend against one loopback server (check_backend's body)."""

    def __init__(self, backend: Any, params: dict[str, Any], server: Server, pricing: Pricing,
                 contract: Contract, key_env: str | None, url_env: str | None, via: str,
                 url_param: str, timeout_param: str | None, root: Path) -> None:
        from fragbench.budget.money import Budget
        from fragbench.experiment.config import BackendConfig

        self.backend, self.params, self.server = backend, params, server
        self.shape = server.shape
        self.pricing, self.contract = pricing, contract
        self.key_env, self.url_env, self.via = key_env, url_env, via
        self.url_param, self.timeout_param, self.root = url_param, timeout_param, root
        self.who = plugin_name("backend", backend)
        self.config = BackendConfig(name=str(getattr(backend, "name", "backend")),
                                    plugin=str(getattr(backend, "name", "backend")),
                                    params=params, pricing=pricing, contract=contract)
        self.budget = Budget(id="fragbench-testing", ceiling_usd=Decimal("1000"),
                             prior_spend_usd=Decimal("0"), framing_tokens=1024)
        self.calls = samples.calls()
        self.ran: list[str] = []
        self.echoes: dict[bytes, str | None] = {}
        """`_echoed(content, FAKE_KEY)` by the sha256 of a file's content: every scenario
        reads every file under the folder again (earlier scenarios' included), and a file
        unchanged since an earlier reading gives the same answer."""

    # The usage the server reports, in the core's terms ---------------------------------------

    def usage(self, number: int) -> Usage:
        """Different for every request (a cost given to the wrong call shows), inside the
        contract's output ceiling (a usage above it is impossible, never priced)."""
        from fragbench.interfaces import Usage

        output = min(300 + number, self.contract.output_ceiling)
        declared = self.contract.usage_fields
        # A field the contract leaves out is one the provider has no concept of: its server
        # reports none (the scenario `unknown_costs` checks what happens when it does).
        return Usage(input_tokens=400 + number,
                     cached_tokens=100 if "cached_tokens" in declared else None,
                     cache_write_tokens=50 if "cache_write_tokens" in declared else None,
                     output_tokens=output, reasoning_tokens=min(200, output))

    def expected_cost(self, number: int) -> Decimal:
        """What the frozen pricing says the usage of request `number` costs: a field the
        contract does not declare is priced as zero, as the core prices it."""
        from fragbench.budget.money import cost

        return cost(self.usage(number), self.pricing, usage_fields=self.contract.usage_fields)

    def options(self, **options: Any) -> dict[str, Any]:
        """`ok()` options for a valid answer with the kit's usage (and the contract's tier,
        when it has one)."""
        base: dict[str, Any] = {"usage": self.usage}
        if self.contract.service_tier is not None:
            base["service_tier"] = self.contract.service_tier
        return {**base, **options}

    def answer(self, **options: Any) -> Action:
        """A valid answer with the kit's usage (`options`)."""
        return ok(**self.options(**options))

    # Running one scenario ---------------------------------------------------------------------

    def secrets(self, ran_requests: list[dict[str, Any]]) -> set[str]:
        found = {FAKE_KEY} if self.key_env else set()
        found.add(self.shape.account_header[1])
        for request in ran_requests:
            for name, value in request["headers"].items():
                if name in ("authorization", "x-api-key", "api-key", "proxy-authorization") \
                        or FAKE_KEY in value:
                    found.add(value)
                    token = value.split(" ", 1)[-1]
                    if len(token) >= 8:
                        found.add(token)
        return found

    def run(self, name: str, script: dict[int, Action] | None = None, *,
            timeout: float = LONG_TIMEOUT, grace: float = 0.0, target: str | None = None,
            echoes_key: bool = False) -> _Ran:
        """One collector run over the kit's calls, the server scripted with `script`; then the
        checks every scenario shares (methods, paths, retry header, secrets)."""
        from fragbench.budget.ledger import Ledger
        from fragbench.budget.money import reservation
        from fragbench.calls.collector import BudgetBook, collect
        from fragbench.experiment.requests import request_text
        from fragbench.redact import Redactor, secrets_in_env
        from fragbench.series.journal import Journal, read_journal

        self.ran.append(name)
        server = self.server
        server.reset()
        server.default = self.answer()
        server.script.update(script or {})
        folder = self.root / f"{len(self.ran):02d}"
        folder.mkdir()
        params = dict(self.params)
        if self.timeout_param is not None:
            params[self.timeout_param] = timeout
        url = target or server.base_url
        env: dict[str, str | None] = {}
        if self.key_env:
            env[self.key_env] = FAKE_KEY
        if self.url_env:
            env[self.url_env] = url if self.via == "env" else None
        if self.via == "params":
            params[self.url_param] = url
        # What `fragbench.experiment.plan.call_reservation` and `run` compute, for the kit's calls.
        reservations, bounds = {}, {}
        for call in self.calls:
            size = len(request_text(call.request).encode("utf-8"))
            reservations[call.seq] = reservation(size, self.pricing,
                                                 self.contract.output_ceiling,
                                                 self.budget.framing_tokens)
            bounds[call.seq] = size + self.budget.framing_tokens
        printed = io.StringIO()
        with _environment(env), _inside(self.root), contextlib.redirect_stdout(printed), \
                contextlib.redirect_stderr(printed):
            session = self.open(name, params)
            if hasattr(session, "max_body_bytes"):
                session.max_body_bytes = KIT_MAX_BODY  # as `run` does, from the plan
            recorder = _Recorder(session)
            redactor = Redactor(secrets_in_env())
            journal = Journal(folder / "journal.jsonl", redactor)
            ledger = Ledger(folder / "ledger" / f"{self.budget.id}.jsonl", self.budget).load()
            try:
                where = str(session.endpoint)
                expected_at = url.split("//", 1)[-1].split("/", 1)[0]
                if expected_at not in where:
                    raise fail(self.who, "points where it is told", f"{name}: its session's "
                                f"endpoint is {where!r}, not the loopback server at {url} "
                                f"(nothing was sent); it reads its base URL from "
                                f"{self.url_env if self.via == 'env' else self.url_param}?")
                ledger.open(redactor)
                book = BudgetBook(budget=self.budget, ledger=ledger, series=f"kit-{name}",
                                  series_uid=uuid.uuid4().hex)
                try:
                    stop = collect(self.calls, reservations, recorder, self.config, journal,
                                   book, input_bounds=bounds)
                except AssertionError:
                    raise
                except Exception as exc:  # what the backend returned broke the collector
                    raise fail(self.who, RECORD_FIRST, f"{name}: the collector failed with "
                                f"{type(exc).__name__}: {exc}; what the server sent was not "
                                "recorded as an outcome") from exc
            finally:
                journal.close()
                ledger.close()
                try:
                    recorder.close()
                except Exception as exc:
                    raise fail(self.who, "session.close() returns", f"{name}: it raised "
                                f"{type(exc).__name__}: {exc}") from exc
        if grace:
            time.sleep(grace)
        with server.lock:
            requests = list(server.requests)
        self.one_body_a_call(name, folder / "journal.jsonl", requests)
        ran = _Ran(stop, read_journal(folder / "journal.jsonl"), requests, recorder.seen,
                   printed.getvalue(), where)
        self.shared_checks(name, ran, echoes_key)
        return ran

    def one_body_a_call(self, name: str, journal: Path, requests: list[Any]) -> None:
        """At most one `received` body a call: a second is a second request for the call (a
        retry; the collector keeps every body and stops the series, `second_request`), said
        here as the promise it breaks."""
        bodies: dict[int, int] = {}
        for line in journal.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("type") == "received":
                    bodies[record["seq"]] = bodies.get(record["seq"], 0) + 1
        for seq, count in sorted(bodies.items()):
            if count > 1:
                raise fail(self.who, ONE_REQUEST, f"{name}: the session handed {count} "
                            f"bodies to on_body for call {seq}, and the server received "
                            f"{len(requests)} requests for {len(self.calls)} calls: one call "
                            "is one request, never a retry")

    def open(self, name: str, params: dict[str, Any]) -> Any:
        try:
            return self.backend.open(params)
        except Exception as exc:
            raise fail(self.who, "open(params) gives a session", f"{name}: open() raised "
                        f"{type(exc).__name__}: {exc}") from exc

    def shared_checks(self, name: str, ran: _Ran, echoes_key: bool) -> None:
        self.recorded_first(name, ran)
        for number, request in enumerate(ran.requests):
            if request["method"] != "POST":
                raise fail(self.who, NO_REDIRECT, f"{name}: request {number + 1} is a "
                            f"{request['method']} {request['path']}: a redirect was followed")
            if not self.shape.matches(request["path"].split("?")[0]):
                raise fail(self.who, "points where it is told", f"{name}: request "
                            f"{number + 1} went to {request['path']}, the {self.shape.name} "
                            f"API is at {self.shape.path} (base URL {self.server.base_url})")
            retry = request["headers"].get("x-stainless-retry-count")
            if retry not in (None, "0"):
                raise fail(self.who, ONE_REQUEST, f"{name}: request {number + 1} says it is "
                            f"retry number {retry}")
        secrets = self.secrets(ran.requests)
        for path in sorted(self.root.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                for secret in secrets:
                    if secret.encode() in data or secret.lower().encode() in data.lower():
                        raise fail(self.who, NO_SECRET, f"{name}: {_shown(secret)} is in "
                                    f"{path.relative_to(self.root)}" + _hint(self.key_env))
                if self.key_env:
                    digest = hashlib.sha256(data).digest()
                    if digest not in self.echoes:
                        self.echoes[digest] = _echoed(data.decode("utf-8", "replace"), FAKE_KEY)
                    form = self.echoes[digest]
                    if form:
                        raise fail(self.who, NO_SECRET, f"{name}: the fake key, {form}, is in "
                                    f"{path.relative_to(self.root)}" + _hint(self.key_env))
        if self.key_env and (form := _echoed(ran.printed, FAKE_KEY)):
            raise fail(self.who, NO_SECRET, f"{name}: the fake key, {form}, was printed")
        for secret in secrets:
            if secret in ran.printed:
                raise fail(self.who, NO_SECRET, f"{name}: {_shown(secret)} was printed")
            if secret in ran.endpoint:
                raise fail(self.who, NO_SECRET, f"{name}: {_shown(secret)} is in the "
                            "session's endpoint, which is recorded")
            if echoes_key:
                continue  # the server sent it back in the body: the core redacts it on disk
            for item in ran.seen:
                if secret in _texts(item):
                    raise fail(self.who, NO_SECRET, f"{name}: {_shown(secret)} is in what "
                                f"the session returned ({type(item).__name__}), though the "
                                "server never sent it")

    def recorded_first(self, name: str, ran: _Ran) -> None:
        """Every body that came back was handed to `on_body` before the session read it: the
        journal holds a `received` record of the call before its outcome, for every answer
        (an outcome the session returned a Reply for) and every failure that kept a body
        (`raw`), but a timeout or a broken connection (a body cut short, which nothing parses:
        its first bytes are kept in the outcome). A session that parses first, and so records
        nothing when parsing fails, or that never calls `on_body`, fails here."""
        received: set[int] = set()
        for record in ran.records:
            if record.get("type") == "received":
                received.add(record["seq"])
            elif record.get("type") == "outcome" and record["seq"] not in received and (
                    "failure" not in record or (record.get("raw") is not None and record.get(
                        "failure") not in ("timeout", "connection"))):
                what = "an answer" if "failure" not in record else \
                    f"a failure ({record.get('failure')}) that kept a body"
                raise fail(self.who, RECORD_FIRST, f"{name}: call {record['seq']} is "
                            f"recorded as {what}, with no `received` record of its body "
                            "before it: the session must hand every body to its `on_body` "
                            "(text, status), as it arrived, before parsing it "
                            "(fragbench.transport.SDKSession, JSONSession)")

    # What a scenario's outcome must be -----------------------------------------------------

    def failure_text(self, ran: _Ran, seq: int) -> str:
        item = ran.seen[seq - 1] if len(ran.seen) >= seq else None
        if isinstance(item, Exception):
            return f" (the session raised {type(item).__name__}: {item})"
        return ""

    def answered_as_planned(self, name: str, ran: _Ran, seqs: range | list[int]) -> None:
        """Calls `seqs` answered normally: completed, the answer as sent, the cost the frozen
        pricing gives the usage the server reported."""
        for seq in seqs:
            outcome = ran.outcome(seq)
            if outcome.get("status") != "completed":
                raise fail(self.who, STOPS, f"{name}: call {seq}, a normal answer, is "
                            f"recorded as {outcome.get('status')!r}, not 'completed'"
                            f"{self.failure_text(ran, seq)}")
            self.cost_is(name, ran, seq)
            sent = self.shape.default_answer(ran.requests[seq - 1])
            if outcome.get("text") != sent:
                raise fail(self.who, READS, f"{name}: call {seq}'s answer is recorded as "
                            f"{outcome.get('text')!r}; the server sent {sent!r}")

    def cost_is(self, name: str, ran: _Ran, seq: int) -> None:
        outcome = ran.outcome(seq)
        expected = self.expected_cost(seq - 1)
        got = outcome.get("cost_usd")
        if got is None or Decimal(got) != expected:
            why = outcome.get("cost_unknown")
            raise fail(self.who, COST, f"{name}: call {seq} is recorded at "
                        f"{got if got is not None else 'an unknown cost'}"
                        f"{f' ({why})' if why else ''}; the usage the server reported, "
                        f"{self.usage(seq - 1)}, costs {expected} USD at the frozen pricing "
                        f"(fields priced: {', '.join(sorted(self.contract.usage_fields))})")

    def stopped(self, name: str, ran: _Ran, seq: int, reason: str, promise: str,
                requests: int | None = None) -> dict[str, Any]:
        """The series stopped at call `seq` for `reason`, the server got exactly `requests`
        (default: one per call up to `seq`), and the stopped call counts its reservation."""
        requests = seq if requests is None else requests
        went = sum(1 for r in ran.records if r.get("type") == "outcome")
        # More requests than expected is a retry (or a followed redirect) when some call had
        # more than one, or the series stopped where it should; otherwise the series went on
        # past the fault, which the stop check below names.
        if len(ran.requests) != requests and (len(ran.requests) > went or (
                ran.stop is not None and ran.stop.seq == seq)):
            raise fail(self.who, promise if promise != STOPS else ONE_REQUEST,
                        f"{name}: the server received {len(ran.requests)} requests, "
                        f"{requests} expected (one per call up to call {seq})")
        stop = ran.stop
        if stop is None or stop.reason != reason or stop.seq != seq:
            got = "no stop: every call went" if stop is None else \
                f"{stop.reason} at call {stop.seq} ({stop.detail})"
            raise fail(self.who, promise, f"{name}: the series must stop at call {seq} as "
                        f"{reason}; got {got}{self.failure_text(ran, seq)}")
        self.answered_as_planned(name, ran, range(1, seq))
        return ran.outcome(seq)

    def counted_at_reservation(self, name: str, ran: _Ran, seq: int) -> None:
        outcome = ran.outcome(seq)
        if outcome.get("never_sent"):
            raise fail(self.who, STOPS, f"{name}: call {seq} claims it never left the "
                        "machine, but the server received it: it must stay counted (only a "
                        "connection that could not be opened proves nothing was sent)")
        if outcome.get("counted_usd") != ran.reserved(seq) or outcome.get("cost_usd"):
            raise fail(self.who, COST, f"{name}: call {seq} is counted at "
                        f"{outcome.get('counted_usd')} (cost {outcome.get('cost_usd')}), not "
                        f"at its whole reservation {ran.reserved(seq)}")

    def all_sent(self, name: str, ran: _Ran, lead: str) -> None:
        """The series went to its end (`lead` opens the failure's words), one request a call."""
        if ran.stop is not None:
            raise fail(self.who, STOPS, f"{name}: {lead}the series stopped at call "
                        f"{ran.stop.seq} as {ran.stop.reason} ({ran.stop.detail})"
                        f"{self.failure_text(ran, ran.stop.seq)}")
        if len(ran.requests) != len(self.calls):
            raise fail(self.who, ONE_REQUEST, f"{name}: the server received "
                        f"{len(ran.requests)} requests for {len(self.calls)} calls")

    def went_on(self, name: str, ran: _Ran, seq: int, what: str) -> dict[str, Any]:
        self.all_sent(name, ran, f"{what} is recorded and collection goes on; ")
        others = [s for s in range(1, len(self.calls) + 1) if s != seq]
        self.answered_as_planned(name, ran, others)
        self.cost_is(name, ran, seq)
        return ran.outcome(seq)

    # The scenarios ----------------------------------------------------------------------------

    def scenarios(self) -> None:
        self.refuses_without_key()
        self.clean_series()
        self.http_errors()
        self.redirects()
        self.bad_bodies()
        self.broken_connections()
        self.timeouts()
        self.model_changes()
        self.answers_kept()
        self.unknown_costs()
        self.doubtful_responses()
        self.repeated_keys()
        self.record_first()
        self.echoed_key()

    def refuses_without_key(self) -> None:
        """open() with no key in the environment refuses (a FragbenchError) and sends
        nothing."""
        from fragbench.errors import FragbenchError

        if not self.key_env:
            return
        self.ran.append("no key")
        self.server.reset()
        params = dict(self.params)
        if self.timeout_param is not None:
            params[self.timeout_param] = LONG_TIMEOUT
        env: dict[str, str | None] = {self.key_env: None}
        if self.url_env:
            env[self.url_env] = self.server.base_url if self.via == "env" else None
        if self.via == "params":
            params[self.url_param] = self.server.base_url
        with _environment(env), _inside(self.root):
            try:
                session = self.backend.open(params)
            except FragbenchError:
                session = None
            except Exception as exc:
                raise fail(self.who, "refuses without a key", f"with {self.key_env} unset, "
                            f"open() raised {type(exc).__name__}, not a FragbenchError (one "
                            "line for the user, exit 4)") from exc
        if session is not None:
            session.close()
            raise fail(self.who, "refuses without a key", f"with {self.key_env} unset, "
                        "open() gave a session; it must raise a FragbenchError saying to set "
                        "the key (nothing sent)")
        if self.server.requests:
            raise fail(self.who, "refuses without a key", "open() without a key sent a "
                        "request")

    def clean_series(self) -> None:
        name = "every call answered"
        ran = self.run(name)
        self.all_sent(name, ran, "")
        self.answered_as_planned(name, ran, range(1, len(self.calls) + 1))
        connections = [r.get("connection") for r in ran.requests]
        if len(set(connections)) != len(connections):
            raise fail(self.who, OWN_CONNECTION, f"{name}: the {len(connections)} requests "
                        f"came on connections {connections}: a connection kept alive from one "
                        "call to the next lets a second response written after one answer be "
                        "read as the next call's (build the SDK client with fragbench.transport"
                        ".no_redirects)")
        where = f"the path {self.shape.path}" if "{model}" in self.shape.path else \
            f"the body's {self.shape.model_key}"
        for number, request in enumerate(ran.requests):
            model = self.shape.model_of(request)
            if model != self.contract.model:
                raise fail(self.who, CONTRACT, f"{name}: request {number + 1} asks for model "
                            f"{model!r} (read from {where}), the contract declares "
                            f"{self.contract.model!r}")
            limits = self.shape.limits_of(request)
            # Every limit the request sets must be the ceiling: a server applies whichever it
            # prefers (vLLM takes max_completion_tokens over max_tokens).
            if not limits or set(limits.values()) != {self.contract.output_ceiling}:
                raise fail(self.who, CONTRACT, f"{name}: request {number + 1} sets "
                            f"{limits or 'no output limit'} ({' or '.join(self.shape.limit_keys)}"
                            f"); the contract's output ceiling is {self.contract.output_ceiling}")
            if self.key_env and not any(FAKE_KEY in v for v in request["headers"].values()):
                raise fail(self.who, "reads its key from the environment", f"{name}: the "
                            f"key put in {self.key_env} was not sent with request {number + 1}")

    def http_errors(self) -> None:
        faults = {
            "HTTP 500 at call 2": http_error(500, "upstream failed", FAST_RETRY),
            "HTTP 429 with x-should-retry at call 2": http_error(
                429, "Rate limit reached", {**FAST_RETRY, "x-should-retry": "true"}),
        }
        for name, action in faults.items():
            ran = self.run(name, {1: action})
            # A retry shows as more requests than calls (ONE_REQUEST); an error taken for an
            # answer, as a series that did not stop (STOPS).
            self.stopped(name, ran, 2, "technical_failure", STOPS)
            self.counted_at_reservation(name, ran, 2)
        name = "HTTP 401 naming the key at call 2"
        ran = self.run(name, {1: http_error(401, f"Incorrect API key provided: {FAKE_KEY}")},
                       echoes_key=True)
        self.stopped(name, ran, 2, "technical_failure", STOPS)

    def redirects(self) -> None:
        for code in (307, 302):
            name = f"HTTP {code} redirect back to the endpoint at call 2"
            ran = self.run(name, {1: redirect(code, self.server.url_for(self.contract.model))})
            self.stopped(name, ran, 2, "technical_failure", NO_REDIRECT)
            self.counted_at_reservation(name, ran, 2)

    def bad_bodies(self) -> None:
        faults = {
            "a body that is not JSON at call 2": raw(200, "<html>upstream error</html>",
                                                     "text/html"),
            "JSON that is no response at call 2": json_body(200, {"hello": "world"}),
            "an unknown status at call 2": self.answer(**self.shape.unknown_status()),
        }
        for name, action in faults.items():
            ran = self.run(name, {1: action})
            self.stopped(name, ran, 2, "technical_failure", STOPS)
            self.counted_at_reservation(name, ran, 2)

    def broken_connections(self) -> None:
        name = "a connection dropped at call 2"
        ran = self.run(name, {1: drop()})
        self.stopped(name, ran, 2, "technical_failure", ONE_REQUEST)
        self.counted_at_reservation(name, ran, 2)
        name = "a connection refused at call 1"
        target = f"http://127.0.0.1:{_free_port()}{self.shape.suffix}"
        ran = self.run(name, target=target)
        outcome = self.stopped(name, ran, 1, "technical_failure", STOPS, requests=0)
        if not outcome.get("never_sent") or outcome.get("counted_usd") != "0":
            raise fail(self.who, COST, f"{name}: a connection that could not be opened "
                        "proves the request never left: the failure must say so "
                        "(BackendFailure(never_sent=True); fragbench.transport."
                        "connection_failure), and the call is counted at 0; it is counted at "
                        f"{outcome.get('counted_usd')}")

    def timeouts(self) -> None:
        if self.timeout_param is None:
            return
        # At call 1: no call that must succeed ever runs under the short timeout, which a
        # loaded machine could exceed.
        name = f"no answer for 5 s at call 1 (timeout {SHORT_TIMEOUT:g} s)"
        ran = self.run(name, {0: sleep(5)}, timeout=SHORT_TIMEOUT, grace=RETRY_GRACE)
        self.stopped(name, ran, 1, "technical_failure", ONE_REQUEST)
        self.counted_at_reservation(name, ran, 1)
        name = f"a body trickling over 5 s at call 1 (timeout {SHORT_TIMEOUT:g} s)"
        ran = self.run(name, {0: trickle(5, 50)}, timeout=SHORT_TIMEOUT)
        self.stopped(name, ran, 1, "technical_failure", DEADLINE)
        self.counted_at_reservation(name, ran, 1)

    def model_changes(self) -> None:
        name = "another model at call 1"
        ran = self.run(name, {0: self.answer(model="kit-other-model")})
        outcome = self.stopped(name, ran, 1, "changed_model", STOPS)
        if outcome.get("model") != "kit-other-model":
            raise fail(self.who, STOPS, f"{name}: the model that came back is recorded as "
                        f"{outcome.get('model')!r}, the server said 'kit-other-model'")
        name = "another snapshot at call 2"
        later = f"{self.contract.model}-2031-01-01"
        ran = self.run(name, {1: self.answer(model=later)})
        self.stopped(name, ran, 2, "changed_model", STOPS)

    def answers_kept(self) -> None:
        name = "an answer cut at the output limit at call 2"
        ran = self.run(name, {1: self.answer(**self.shape.incomplete())})
        outcome = self.went_on(name, ran, 2, "an incomplete answer")
        if outcome.get("status") != "incomplete":
            raise fail(self.who, STOPS, f"{name}: call 2 is recorded as "
                        f"{outcome.get('status')!r}, not 'incomplete'")
        name = "a refusal at call 2"
        ran = self.run(name, {1: self.answer(**self.shape.refused("I can’t help with that."))})
        outcome = self.went_on(name, ran, 2, "a refusal")
        if not outcome.get("refusal") or outcome.get("status") not in ("completed",
                                                                       "incomplete"):
            raise fail(self.who, STOPS, f"{name}: call 2 is recorded with status "
                        f"{outcome.get('status')!r} and refusal {outcome.get('refusal')!r}; a "
                        "refusal is an answer (completed or incomplete) whose `refusal` says so")

    def unknown_costs(self) -> None:
        from fragbench.interfaces import COST_FIELDS

        faults: dict[str, Action] = {"no usage at call 2": self.answer(usage="omit")}
        for field in COST_FIELDS:
            if field in self.shape.omitted_when_zero and field in self.contract.usage_fields:
                continue  # absent means zero in this API: no way to say "unknown" by absence
            if field in self.contract.usage_fields and field in self.shape.fields:
                def lacking(number: int, field: str = field) -> Usage:
                    return attrs.evolve(self.usage(number), **{field: None})
                faults[f"a usage without {field} at call 2"] = self.answer(usage=lacking)
            elif field in self.shape.fields:
                # Reported although the contract says the provider has no such concept: the
                # contract is wrong for this server, and pricing it as zero could under-count.
                def undeclared(number: int, field: str = field) -> Usage:
                    return attrs.evolve(self.usage(number), **{field: 40})
                faults[f"a usage reporting {field}, which the contract leaves out, at call "
                       "2"] = self.answer(usage=undeclared)

        def too_long(number: int) -> Usage:
            return attrs.evolve(self.usage(number),
                                output_tokens=self.contract.output_ceiling + 1,
                                reasoning_tokens=0)
        faults["more output tokens than the ceiling at call 2"] = self.answer(usage=too_long)
        tier = self.contract.service_tier
        other = "priority" if tier != "priority" else "flex"
        if self.shape.reports_tier:
            # Another tier than the contract's, or any tier when the contract names none.
            faults[f"service tier {other!r} at call 2"] = self.answer(service_tier=other)
        for name, action in faults.items():
            ran = self.run(name, {1: action})
            self.stopped(name, ran, 2, "unknown_cost", COST)
            self.counted_at_reservation(name, ran, 2)


    # Hostile bytes: items 1-3 and 9 of issue 14 -------------------------------------------

    def stopped_counted(self, name: str, ran: _Ran, promise: str) -> dict[str, Any]:
        """Stopped at call 2 as a technical failure, counted at its reservation, the body the
        server sent kept (`raw`, in its outcome or in what was recorded on receipt)."""
        outcome = self.stopped(name, ran, 2, "technical_failure", promise)
        self.counted_at_reservation(name, ran, 2)
        return outcome

    def kept(self, ran: _Ran, seq: int) -> str:
        """Every body recorded for call `seq` (its outcome's raw and any `received` record)."""
        return "\n".join(str(r.get("raw")) for r in ran.records
                         if r.get("seq") == seq and r.get("raw") is not None)

    def doubtful_responses(self) -> None:
        """Item 1: bytes after the body (a second response), a length that does not match."""
        faults = {
            "a second response written after response 2 on its connection": followed_by(
                self.answer(), second_response()),
            "a Content-Length 40 bytes longer than the body at call 2": lying_length(
                40, **self.options()),
            "a Content-Length 40 bytes shorter than the body at call 2": lying_length(
                -40, **self.options()),
        }
        for name, action in faults.items():
            self.stopped_counted(name, self.run(name, {1: action}), DOUBTFUL)

    def repeated_keys(self) -> None:
        """Item 2: a body with two `usage` objects, or two `model` keys, is no response: the
        first usage here would price many times the second (the kit's own)."""
        from fragbench.interfaces import Usage

        dearer = self.shape.usage_body(Usage(input_tokens=7000, cached_tokens=0,
                                             cache_write_tokens=0, output_tokens=1000,
                                             reasoning_tokens=0), self.contract.service_tier)
        faults = {
            "a repeated usage at call 2": (self.shape.usage_key, edited(
                lambda text: json.dumps({self.shape.usage_key: dearer})[:-1] + ", " + text[1:],
                **self.options())),
            "a repeated model at call 2": (self.shape.answer_model_key, edited(
                lambda text: json.dumps({self.shape.answer_model_key: "kit-other-model"})[:-1]
                + ", " + text[1:], **self.options())),
        }
        for name, (key, action) in faults.items():
            self.stopped_counted(name, ran := self.run(name, {1: action}), ONE_READING)
            if self.kept(ran, 2).count(f'"{key}"') < 2:
                raise fail(self.who, ONE_READING, f"{name}: the body is not kept as it came "
                            f"(both {key!r} keys); the outcome's raw is "
                            f"{self.kept(ran, 2)[:200]!r}")

    def record_first(self) -> None:
        """Item 3: a field nested 500 deep, a lone surrogate in the answer, a gzip bomb, a body
        that says gzip and is not, and an answer sent gzip-encoded (which must work)."""
        name = "a field nested 500 deep at call 2"
        ran = self.run(name, {1: edited(lambda text: text[:-1] + ', "deep": ' + "[" * 500
                                        + "]" * 500 + "}", **self.options())})
        self.stopped_counted(name, ran, RECORD_FIRST)
        if "[" * 500 not in self.kept(ran, 2):
            raise fail(self.who, RECORD_FIRST, f"{name}: the body is not kept as it came")

        name = "a lone surrogate (\\ud83d) in the answer at call 2"
        ran = self.run(name, {1: edited(lambda text: text.replace(
            "See the cited sentence.", "See \\ud83d the cited sentence."), **self.options())})
        outcome = self.went_on_with(name, ran, 2, "an answer holding a lone surrogate")
        text = str(outcome.get("text"))
        if "the cited sentence" not in text or re.search("[\ud800-\udfff]", text):
            raise fail(self.who, RECORD_FIRST, f"{name}: the answer is recorded as "
                        f"{text[:120]!r}: it must be kept, the surrogate made writable (U+FFFD "
                        "or an escape)")

        name = f"a gzip bomb ({BOMB_SIZE >> 20} MiB once decompressed) at call 2"
        ran = self.run(name, {1: gzip_bomb(BOMB_SIZE)})
        self.stopped_counted(name, ran, RECORD_FIRST)
        longest = max(len(line) for line in (self.root / f"{len(self.ran):02d}" /
                                             "journal.jsonl").read_bytes().splitlines())
        if longest > LINE_BOUND:
            raise fail(self.who, RECORD_FIRST, f"{name}: a journal line of {longest} bytes: "
                        "the body must be bounded after decompression (session.max_body_bytes, "
                        f"set to {KIT_MAX_BODY} here) before it is recorded")
        if self.kept(ran, 2).count(" ") < 1024:
            raise fail(self.who, RECORD_FIRST, f"{name}: its first bytes (spaces) are not "
                        "kept")

        name = "a body that claims gzip encoding and is not, at call 2"
        ran = self.run(name, {1: raw_bytes(200, b'{"answer": "plain JSON"}',
                                           {"content-encoding": "gzip"})})
        outcome = self.stopped_counted(name, ran, SAYS_WHY)
        if "gzip" not in str(outcome.get("error")):
            raise fail(self.who, SAYS_WHY, f"{name}: the failure reads "
                        f"{outcome.get('error')!r}; it should say the body is not gzip")

        name = "answers sent gzip-encoded at every call"
        ran = self.run(name, {n: gzipped(**self.options()) for n in range(len(self.calls))})
        self.all_sent(name, ran, "")
        self.answered_as_planned(name, ran, range(1, len(self.calls) + 1))

    def went_on_with(self, name: str, ran: _Ran, seq: int, what: str) -> dict[str, Any]:
        """`went_on`, and every journal line is valid UTF-8 JSON (readable again)."""
        outcome = self.went_on(name, ran, seq, what)
        path = self.root / f"{len(self.ran):02d}" / "journal.jsonl"
        try:
            for line in path.read_bytes().decode("utf-8").splitlines():
                json.loads(line)
        except ValueError as exc:
            raise fail(self.who, RECORD_FIRST, f"{name}: the journal cannot be read back "
                        f"({exc})") from None
        return outcome

    def echoed_key(self) -> None:
        """Item 9: the key sent back split by a line break, joined with zero-width spaces,
        base64- and percent-encoded, and its halves in those forms: no file or line holds any
        of them (the shared secret check looks for every form)."""
        if not self.key_env:
            return
        name = "the key echoed in other forms at call 2"
        echo = " | ".join(_echo_forms(FAKE_KEY))
        ran = self.run(name, {1: self.answer(text=f"Your key, as received: {echo}")},
                       echoes_key=True)
        self.went_on_with(name, ran, 2, "an answer echoing the key")

def _shown(secret: str) -> str:
    return "the fake key" if secret == FAKE_KEY else f"the secret {secret[:6]}…"


def _hint(key_env: str | None) -> str:
    from fragbench.redact import SECRET_ENV

    if key_env and not SECRET_ENV.search(key_env):
        return (f" (fragbench redacts the values of variables named *_API_KEY, *_TOKEN, ...: "
                f"{key_env} is not one)")
    return ""


def _percent(text: str) -> str:
    return "".join(f"%{b:02X}" for b in text.encode())


def _b64(text: str) -> list[str]:
    data = text.encode()
    return [base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()]


def _echo_forms(key: str) -> list[str]:
    """The forms a server can send a key back in (issue 14, item 9): split by a line break,
    joined with zero-width spaces, base64 (standard and URL-safe), percent-encoded; and each
    half of it in those forms."""
    half = len(key) // 2
    forms = [key[:half] + "\n" + key[half:]]
    for part in (key, key[:half], key[half:]):
        forms += ["\u200b".join(part), _percent(part), *_b64(part)]
    return forms


_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})|\\+([nrt/])|%([0-9a-fA-F]{2})")
_NOT_ASCII = re.compile(r"[^\x00-\x7f]+")
"""Where a format character (Cf) can be: none is ASCII."""


def _visible(match: re.Match[str]) -> str:
    return "".join(c for c in match.group() if unicodedata.category(c) != "Cf")


def _decoded(text: str) -> str:
    """`text` with every escape decoded (`\\uXXXX`, `\\n`, at any depth of backslashes,
    and percent-escapes) and every invisible character dropped (white space, Cf), repeated
    until nothing changes (a percent-escape inside a JSON string)."""
    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return chr(int(match.group(1), 16))
        if match.group(2):
            return {"n": "\n", "r": "\r", "t": "\t", "/": "/"}[match.group(2)]
        return chr(int(match.group(3), 16))
    for _ in range(4):
        again = _ESCAPE.sub(one, text)
        if again == text:
            break
        text = again
    # str.split() cuts at exactly the characters str.isspace() is true of; the Cf test then
    # runs on the non-ASCII stretches only (a character at a time over a whole journal is
    # most of the suite's time).
    return _NOT_ASCII.sub(_visible, "".join(text.split()))


def _echoed(text: str, key: str) -> str | None:
    """Which form of `key` (or of a half of it) `text` holds, in words, or None: the kit's own
    reading, independent of fragbench's redactor."""
    plain = _decoded(text)
    lower = plain.lower()
    half = len(key) // 2
    for label, part in (("whole", key), ("its first half", key[:half]),
                        ("its second half", key[half:])):
        if part.lower() in lower:
            return f"{label}, split, joined or escaped"
        for form in _b64(part):
            if form.rstrip("=") in plain:
                return f"{label}, base64-encoded"
    return None

def _texts(item: Any) -> str:
    """Every string a Reply or an exception carries, joined (what the secret check reads)."""
    if attrs.has(type(item)):
        values = [str(v) for v in attrs.asdict(item).values() if v is not None]
    else:
        values = [str(item)] + [str(v) for v in vars(item).values() if v is not None] \
            if hasattr(item, "__dict__") else [str(item)]
    return "\n".join(values)


def check_backend(backend: Any, params: Mapping[str, Any], server: Server, *,
                  pricing: Pricing | None = None,
                  key_env: str | EllipsisType | None = ...,
                  url_env: str | EllipsisType | None = ...,
                  via: str = "env", url_param: str = "base_url",
                  timeout_param: str | None = "timeout_seconds",
                  tmp_path: Path | None = None) -> list[str]:
    """Run the fault suite: the real collector (`fragbench.calls.collector.collect`, with a journal
    and a budget ledger in a temporary folder) sends the kit's four planned calls through the
    backend's own session to `server`, a loopback server of the backend's API shape, once per
    scenario. Returns the names of the scenarios run; raises AssertionError naming the promise
    that broke and the scenario.

    How the backend is pointed at the server: `via="env"` (default) sets `url_env` to
    `server.base_url`; `via="params"` sets `params[url_param]` instead (and unsets `url_env`,
    which the shipped backends read first). `key_env` receives a fake key (`FAKE_KEY`).
    `key_env` and `url_env` default to the shape's (`OPENAI_API_KEY`/`OPENAI_BASE_URL`, or
    `ANTHROPIC_API_KEY`/`ANTHROPIC_BASE_URL`); `key_env=None` for a backend that needs no key.
    Every scenario runs with `params[timeout_param]` set: 10 s, or 0.5 s where the timeout is
    what is tested (`timeout_param=None` for a backend without one skips those, and sets none).
    `pricing` defaults to `default_pricing(contract)`.

    Checked first, before anything else: the backend declares an `api_version` this fragbench
    supports (promise "declares the plugin API it is written for", as every check of the kit).
    Then, before any scenario: `check_params(params)` accepts the params and
    `contract(params)` is a valid `fragbench.interfaces.Contract`; with no key, `open` refuses
    with a FragbenchError and sends nothing. Then, with its session pointing at the server
    (checked before anything is sent):

    - every call answered: one POST per call to the shape's path, asking for the contract's
      model and output ceiling, with the key; each answer recorded as `completed`, its text as
      sent, and its cost what the frozen pricing gives the usage the server reported (the
      kit's usages differ call by call and use every field, in the API's own terms: e.g. the
      Messages API's `input_tokens` excludes the cache, the core's includes it);
    - one request per call, never a retry: HTTP 500 and HTTP 429 with `x-should-retry: true`
      (which both SDKs otherwise retry), a dropped connection, a timeout: exactly one request
      for the failed call, the series stopped there as a technical failure, the call counted
      at its reservation; a request never says it is a retry (`x-stainless-retry-count`);
    - redirects (307, 302 back to the endpoint) not followed: one request, a technical failure;
    - the timeout bounds the whole request: a body trickling over 5 s stops a 0.5 s timeout;
    - a connection refused: no request, a technical failure that says it was never sent
      (counted at 0);
    - a body that is not JSON, JSON that is no response, a status the core does not know: a
      technical failure;
    - the stop rules: another model at call 1, another snapshot at call 2: `changed_model`; an
      answer cut at the output limit is recorded `incomplete` and a refusal with its `refusal`,
      and collection goes on;
    - usage maps to cost: no usage, a usage lacking any field the contract declares, more
      output than the ceiling, another service tier (when the contract has one): the call's
      cost is unknown, counted at its reservation, and the series stops (`unknown_cost`);
    - no secret written: the fake key, the Authorization (or x-api-key) header's value and the
      account header the server sends appear in no file under the folder (the collector's
      journal and ledger, and anything the backend writes where it stands: the check runs
      inside the folder), in nothing printed, in the session's endpoint, nor in any Reply or
      failure the session returns (but where the server itself echoed the key).

    `tmp_path`: the folder to work in (pytest's `tmp_path`); a temporary one, removed after,
    when None. Takes a few seconds: most of it the two timeout scenarios.
    """
    from fragbench.interfaces import Contract

    # First, as every check of the kit: a plugin the registry would refuse at start-up is
    # refused here before any scenario runs (promise "declares the plugin API it is written
    # for").
    who = declared_api("backend", backend)
    if via not in ("env", "params"):
        raise ValueError(f"via must be 'env' or 'params', not {via!r}")
    shape = server.shape
    key = shape.key_env if key_env is ... else key_env
    url = shape.url_env if url_env is ... else url_env
    if via == "env" and not url:
        raise ValueError("via='env' needs url_env, the variable the backend reads its base "
                         "URL from")
    params = dict(params)
    checked = dict(params)
    if timeout_param is not None:
        checked[timeout_param] = LONG_TIMEOUT
    if via == "params":
        checked[url_param] = server.base_url
    try:
        backend.check_params(dict(checked))
    except ValueError as exc:
        raise fail(who, "check_params accepts valid params", f"check_params refused "
                    f"{checked}: {exc}") from exc
    try:
        contract = backend.contract(dict(checked))
    except Exception as exc:
        raise fail(who, CONTRACT, f"contract(params) raised {type(exc).__name__}: "
                    f"{exc}") from exc
    if not isinstance(contract, Contract):
        raise fail(who, CONTRACT, f"contract(params) returned {type(contract).__name__}, not "
                    "a fragbench.interfaces.Contract")
    problems = contract.problems()
    if contract.service_tier is not None and not shape.reports_tier:
        problems.append(f"it names the service tier {contract.service_tier!r}, but the "
                        f"{shape.name} API never reports one: every call's cost would be "
                        "unknown")
    if problems:
        raise fail(who, CONTRACT, "; ".join(problems))
    with contextlib.ExitStack() as stack:
        if tmp_path is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="fragbench-testing-")))
        else:  # a folder of its own: a test may run the suite more than once
            root = Path(tempfile.mkdtemp(prefix="fragbench-check-backend-", dir=tmp_path))
        suite = _Suite(backend, params, server, pricing or default_pricing(contract), contract,
                       key, url, via, url_param, timeout_param, root)
        suite.scenarios()
        return suite.ran


__all__ = ["FAKE_KEY", "check_backend", "default_pricing"]
