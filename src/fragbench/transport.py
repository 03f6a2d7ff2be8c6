"""What every HTTP backend needs to keep the core's promises, whatever SDK it wraps.

The openai and anthropic SDKs share one HTTP client library (httpx2); the pieces below serve
both, and any backend built on either:

- `no_redirects(client_class, timeout, proxy=None)`: the SDK's HTTP client on fragbench's own
  transport (`fragbench.http.wire`): a new connection for every request (`Connection: close`, never
  reused), redirects never followed (one call is one request: a followed 307/308 would send it
  twice, a 301/302/303 turn it into a GET), a response that may not be this call's (bytes after
  the body, a length that does not match) refused, the body bounded after decompression, the
  whole-call deadline on every socket operation, no proxy from the environment (only the
  config's `proxy`), certificates as httpx2 verifies them.
- `SDKSession`: the session of a backend built on either SDK: one request per call, the body
  handed to `on_body` (the collector records it) before anything parses it, then parsed
  bounded (`fragbench.http.bounded_json`: depth, repeated keys) and read by the backend; every way
  it can fail a BackendFailure with `never_sent` only where that is proven.
- `within`: the outer safety net of the deadline (a worker thread abandoned past it).
- `connection_failure`: what is known about a request that failed before a response came back.
- `check_types`, `check_base_url`, `check_proxy`: the parameter checks every backend starts with
  (`check_params`); `route` and `describe`: the checks `open` and `check_environment` share
  (the endpoint from the environment or the config, the key, the custom-headers variable, the
  proxy, the certificates), sending nothing.
- `public_url`, `endpoint`, `key_from_env`, `refuse_env_headers`, `usage_blocks`, `whole`,
  `clean`, `text_or_none`: small pieces the backends' readers and sessions share.

Nothing here imports an SDK, httpx2, h11 or ssl at module level: backends import this module
when they register, and `fragbench --help` must stay fast.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import SplitResult, urlsplit, urlunsplit

import attrs

from fragbench.errors import FragbenchError
from fragbench.http import bounded_json, limits
from fragbench.http.bounded_json import BodyError, loads
from fragbench.interfaces import BackendFailure, Reply, Request
from fragbench.toml_types import type_mismatch

if TYPE_CHECKING:
    from fragbench.http.wire import Exchange

T = TypeVar("T")
"""What `within`'s `work` returns, and so `within` too."""

MAY_BE_BILLED = limits.MAY_BE_BILLED
"""The words a BackendFailure's message ends with when the request may have reached the server
(the reservation stays counted)."""
NEVER_SENT = "the request never left this machine and nothing was billed"
"""The words a BackendFailure's message ends with when `never_sent` is proven."""

MAX_BODY_BYTES = limits.MAX_BODY_BYTES
"""The default bound on a response body, after decompression: 4 MiB, about a thousand times a
protocol answer. `SDKSession.max_body_bytes` is set from the frozen plan before the first call;
a larger body is a technical failure (`too_large`), its first bytes kept."""
MAX_TIMEOUT_SECONDS = 3600
"""The largest `timeout_seconds` accepted: an hour for one call is already far beyond any
answer worth waiting for; more (1e12, inf) is a typo that would hold a series forever."""
MAX_OUTPUT_TOKENS = 1_000_000
"""The largest output-token limit accepted (`max_output_tokens`, `max_tokens`,
`thinking_budget_tokens`): several times any model's output limit today, so no real setting is
refused, while an extra zero or three (1e9, 1e12) is caught before the plan is frozen."""
MAXIMA: dict[str, float] = {"timeout_seconds": MAX_TIMEOUT_SECONDS,
                            "max_output_tokens": MAX_OUTPUT_TOKENS,
                            "max_tokens": MAX_OUTPUT_TOKENS,
                            "thinking_budget_tokens": MAX_OUTPUT_TOKENS}
"""check_types' upper bounds, by parameter name, for every backend that uses it."""
DEADLINE_GRACE = 5.0
"""How long past the deadline `within` still waits, counted from when its wait ended: the
transport stops itself at the deadline, and a process stopped and resumed past it must be
given time to read what had already arrived."""
KEY_SHAPE = re.compile(r"[\x21-\x7e]+")
"""A key is printable ASCII with no space: anything else (a line break inside it, a character
pasted from a document) cannot go in an HTTP header as is."""


class PastDeadline(Exception):
    """The worker did not finish the request in time."""


def within(seconds: float, work: Callable[[], T], name: str = "fragbench-request",
           grace: float = 0.0) -> T:
    """Run `work` in a daemon thread and wait for it at most `seconds`, then `grace` more
    counted from when that wait ended (a process stopped meanwhile gets its grace after it
    resumes).

    The caller returns at the deadline whatever the socket is doing. The abandoned thread
    keeps its connection until its own deadline, the server closing, or the process exiting.
    """
    results: list[T] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            results.append(work())
        except BaseException as exc:  # handed to the caller, which decides what it means
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(seconds) and not (grace > 0 and done.wait(grace)):
        raise PastDeadline
    if errors:
        raise errors[0]
    return results[0]


def innermost(exc: BaseException) -> BaseException:
    """The first error of a chain, for its name. httpcore2 keeps the OSError it wraps only as
    its argument, not as its cause, so an argument that is an exception is followed too."""
    while True:
        inner = exc.__cause__
        if inner is None and exc.args and isinstance(exc.args[0], BaseException):
            inner = exc.args[0]
        if inner is None:
            return exc
        exc = inner


# -- The HTTP client -----------------------------------------------------------------------------

def no_redirects(client_class: type, timeout: float, proxy: str | None = None) -> Any:
    """An instance of the SDK's HTTP client class on fragbench's transport
    (`fragbench.http.wire.WireTransport`: the module docstring), which never follows a redirect.
    `proxy`: the config's `proxy` (`http://host:port`, checked by `check_proxy`), or None for
    none; the environment's proxy variables are never read (`trust_env=False`). The SDK may set
    `follow_redirects` per request, which would override a client-wide setting; overriding
    `send`, through which every request goes, holds whatever the SDK passes."""
    wire = _wire(timeout, proxy)

    class NoRedirects(client_class):  # type: ignore[misc]
        def send(self, request: Any, **kwargs: Any) -> Any:
            kwargs["follow_redirects"] = False
            return super().send(request, **kwargs)

    client = NoRedirects(timeout=timeout, follow_redirects=False, transport=wire,
                         trust_env=False)
    client.wire = wire
    return client


def _wire(timeout: float, proxy: str | None) -> Any:
    """fragbench's transport (`fragbench.http.wire.WireTransport`), through the config's `proxy`
    (checked by `check_proxy`) or none."""
    from fragbench.http.wire import WireTransport

    address = check_proxy(proxy) if proxy else None
    return WireTransport(timeout, proxy=address, proxy_url=proxy.rstrip("/") if proxy else None,
                         max_body=MAX_BODY_BYTES)


# -- Endpoints, keys, proxies ---------------------------------------------------------------------

def public_url(url: str, env_var: str) -> str:
    """The URL without user-info or query part: what may be recorded and printed."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host  # an IPv6 address keeps its brackets
    try:
        port = parts.port
    except ValueError:
        raise FragbenchError(f"the endpoint {urlunsplit((parts.scheme, host, parts.path, '', ''))}"
                             f" has an invalid port; check {env_var} or the config's base_url "
                             "(nothing was sent).") from None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_base_url(url: str, name: str = "base_url") -> None:
    """ValueError unless `url` is a plain http(s) URL: a scheme, a host, a valid port, and no
    user-info, query or fragment. A config's base URL is frozen in the plan, which is committed
    and printed; an environment's would be sent as the SDK reads it (a query string corrupts
    the request's path, `user:pass@` replaces the key with Basic auth). The value is never
    quoted: it may hold a credential. `name` is what the message calls it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{name} is not an http:// or https:// URL (a scheme, then the host)")
    if not parts.hostname:
        raise ValueError(f"{name} names no host")
    _port(parts, name)
    if parts.username is not None or parts.password is not None or parts.query \
            or parts.fragment or "?" in url or "#" in url:
        raise ValueError(f"{name} must hold no user name, password, query or fragment (it is "
                         "sent as the request's path and recorded); put a key in the "
                         "environment")


def check_proxy(url: Any) -> tuple[str, int]:
    """(host, port) of a `proxy` parameter, or ValueError: only `http://host:port` (port 80
    when left out), no user-info, path, query or fragment (the proxy is frozen in the plan and
    printed). socks proxies are not supported: the transport speaks HTTP to its proxy (CONNECT
    for https endpoints, the absolute form for http ones). The value is never quoted."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("proxy must be a URL, http://host:port")
    parts = urlsplit(url.strip())
    if parts.scheme.lower().startswith("socks"):
        raise ValueError("proxy: socks proxies are not supported; name an http proxy, "
                         "http://host:port")
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("proxy must be an http:// URL, http://host:port")
    if parts.username is not None or parts.password is not None or parts.query \
            or parts.fragment or parts.path not in ("", "/") or "?" in url or "#" in url:
        raise ValueError("proxy must be http://host:port, with no user name, password, path, "
                         "query or fragment (it is frozen in the plan and printed)")
    return parts.hostname, _port(parts, "proxy") or 80


def _port(parts: SplitResult, name: str) -> int | None:
    """The URL's port (None when left out), or ValueError: not a number from 1 to 65535, or
    a colon with nothing after it."""
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or parts.netloc.endswith(":"):
        raise ValueError(f"{name} has an invalid port (a number from 1 to 65535)")
    return port


def refuse_env_headers(env_var: str) -> None:
    """Refuse a session while `env_var` (an SDK's custom-headers variable) is set: its headers
    would go out with every call, unrecorded, and may replace the key the backend passes."""
    if os.environ.get(env_var):
        raise FragbenchError(f"{env_var} is set: its headers would be sent with every call, "
                             "unrecorded, and could replace the key; unset it and run again "
                             "(nothing was sent or spent).")


def key_from_env(env_var: str, provider: str, headers_var: str | None = None,
                 unset: str | None = None) -> str:
    """The key from `env_var`, passed to the SDK explicitly (never stored credentials), or one
    line refusing the session, never showing the key: unset (`unset`, what follows the
    variable's name in that line, says what to do when exporting the provider's key is not the
    whole story); holding a space, a line break, a control or a non-ASCII character inside it
    (surrounding white space is dropped; anything else cannot go in a header as is, and an
    SDK would fail only once the series had begun); or shorter than MIN_SECRET, which the
    redactor cannot tell from ordinary words and so could not keep out of what is written (a
    server may echo it in an error body). `headers_var`, the SDK's custom-headers variable, is
    refused too (refuse_env_headers); None for a backend on no SDK (`JSONSession`)."""
    from fragbench.redact import MIN_SECRET

    key = os.environ.get(env_var, "").strip()
    if not key:
        unset = unset or f" is not set: export your {provider} key in the environment"
        raise FragbenchError(f"{env_var}{unset} and run again (nothing was sent or spent).")
    if not KEY_SHAPE.fullmatch(key):
        raise FragbenchError(f"{env_var} holds a space, a line break, a control character or "
                             "a non-ASCII character inside the key, which cannot be sent as "
                             "it is: copy the key again and run again (nothing was sent or "
                             "spent).")
    if len(key) < MIN_SECRET:
        raise FragbenchError(f"{env_var} is shorter than {MIN_SECRET} characters, too short to "
                             "be kept out of what fragbench writes; use a longer key and run "
                             "again (nothing was sent or spent).")
    if headers_var is not None:
        refuse_env_headers(headers_var)
    return key


@attrs.frozen
class Route:
    """Where a backend's calls would go, checked (`route`)."""

    url: str
    """The base URL as given (checked: no user-info, query or fragment)."""
    public: str
    """The same, as it may be recorded and printed."""
    proxy: str | None
    """The config's proxy (`http://host:port`), or None."""
    key: str | None
    """The key to send, or None for a backend that sends none."""
    key_env: str | None
    """The environment variable the key came from (named, never shown), or None."""


def route(params: Mapping[str, Any], *, url_env: str, default_url: str,
          key: Callable[[], str] | None, key_env: str | None) -> Route:
    """Everything `open` needs that can be checked without sending anything, in one line each
    (FragbenchError): the endpoint (`url_env` when set, else the config's `base_url`, else
    `default_url`) through `check_base_url`; the proxy (`check_proxy`); for an https endpoint,
    the certificates (SSL_CERT_FILE, SSL_CERT_DIR: `fragbench.http.wire.tls_context`); then the key,
    `key()` (presence and shape: `key_from_env`), unless the backend sends none."""
    from_env = os.environ.get(url_env)
    url = from_env or params.get("base_url") or default_url
    try:
        check_base_url(url, url_env if from_env else "the config's base_url")
    except ValueError as exc:
        fix = "fix or unset it" if from_env else "fix the config"
        raise FragbenchError(f"{exc}; {fix} and run again (nothing was sent or spent).") \
            from None
    proxy = params.get("proxy")
    if proxy is not None:
        try:
            check_proxy(proxy)
        except ValueError as exc:
            raise FragbenchError(f"{exc} (nothing was sent or spent).") from None
    if urlsplit(url).scheme == "https":
        from fragbench.http.wire import tls_context

        tls_context()
    return Route(url=url, public=public_url(url, url_env), proxy=proxy.rstrip("/") if proxy
                 else None, key=key() if key is not None else None, key_env=key_env)


def describe(where: Route) -> str:
    """One line: where calls would go (check_environment's answer)."""
    through = f" through the proxy {where.proxy}" if where.proxy else ""
    key = f"key from {where.key_env}" if where.key_env else "no key"
    return f"{where.public}{through} ({key})"


# -- Reading a body ------------------------------------------------------------------------------

def usage_blocks(body: Any, *details: str) -> tuple[dict[str, Any], ...] | None:
    """A response body's `usage` object and its named detail objects, each `{}` where absent or
    not an object (so that its fields read as unknown, never as zero); None when the body
    carries no usage."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    return (usage, *({} if not isinstance(d := usage.get(k), dict) else d for k in details))


def whole(value: Any) -> int | None:
    """A token count from a response body: an integer, else None (unknown, never guessed; a
    JSON `true` is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


RESPONSES_USAGE: dict[str, str] = {
    "input_tokens": "usage.input_tokens",
    "cached_tokens": "usage.input_tokens_details.cached_tokens",
    "cache_write_tokens": "usage.input_tokens_details.cache_write_tokens",
    "output_tokens": "usage.output_tokens",
    "reasoning_tokens": "usage.output_tokens_details.reasoning_tokens",
    "total_tokens": "usage.total_tokens",
}
"""Where a Responses API body carries each usage field (`fragbench.interfaces.Usage`'s names
are that API's own): the places the core names when a field is missing or no whole number."""


class Absent:
    """What `usage_places` gives for a place the body holds nothing at."""


def usage_places(raw: str | None) -> dict[str, Any] | None:
    """For a Responses API body (a JSON object whose `object` is "response"): each usage
    field's place (`RESPONSES_USAGE`) -> the JSON value there, `Absent` where there is none.
    None for any other body, or one that does not parse (bounded: `fragbench.http.bounded_json`).

    The core reads it where the backend's reader gives it nothing to go on: to say what is
    wrong with a field the reader could not take (`usage.output_tokens is 180.0, not a whole
    number`), and for the total a Responses body reports (`usage.total_tokens`), which the
    built-in reader does not take."""
    if raw is None:
        return None
    try:
        body = loads(raw)
    except BodyError:
        return None
    if not isinstance(body, dict) or body.get("object") != "response":
        return None
    found: dict[str, Any] = {}
    for place in RESPONSES_USAGE.values():
        value: Any = body
        for key in place.split("."):
            value = value.get(key, Absent) if isinstance(value, dict) else Absent
        found[place] = value
    return found


def shown(value: Any, limit: int = 40) -> str:
    """A JSON value from a body as a message may show it: JSON text, ASCII only (escapes for
    the rest), cut to `limit` characters."""
    import json

    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[:limit - 3] + "..."


clean = bounded_json.clean
"""`fragbench.http.bounded_json.clean`, for the backends' readers: lone surrogates (from JSON
escapes such as `\\ud83d`) become U+FFFD in a parsed text, so that it can be written as UTF-8
(the raw body keeps them as sent). Bound here so that backend authors find it with the kit."""


def text_or_none(value: Any) -> str | None:
    """A string field of a body, cleaned (`clean`); None when it is not a string. Every string
    a reader takes from a body goes through here or `clean`: one lone surrogate in a model
    name would otherwise break the calls table."""
    return clean(value) if isinstance(value, str) else None


# -- Parameters -----------------------------------------------------------------------------------

def check_types(params: dict[str, Any], required: dict[str, type | tuple[type, ...]],
                optional: dict[str, type | tuple[type, ...]],
                positive: tuple[str, ...] = (), maxima: Mapping[str, float] | None = None
                ) -> None:
    """ValueError, one sentence, for a missing, mistyped, empty (a blank string) or unknown
    parameter; a number that is not finite (inf, nan); one of `positive` that is not above
    zero; one above its maximum (`maxima`, by default MAXIMA: timeout_seconds at most 3600,
    output-token limits at most 1,000,000). A bool is accepted only where bool is the type
    (TOML `true` is no number). A `base_url` must pass `check_base_url`, a `proxy`
    `check_proxy`."""
    bounds = MAXIMA if maxima is None else maxima
    for key in required:
        if key not in params:
            raise ValueError(f"{key} is missing")
    for key, value in params.items():
        kind = required.get(key, optional.get(key))
        if kind is None:
            from fragbench.suggest import unknown

            extra = sorted(set(params) - set(required) - set(optional))
            raise ValueError("unknown parameter(s) " + "; ".join(
                unknown(k, [*required, *optional]) for k in extra))
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise ValueError(f"{key} {type_mismatch(key, value, kind)}")
        if key in required and isinstance(value, str) and not value.strip():
            raise ValueError(f"{key} is empty")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key} must be a finite number, not {value}")
        if key in positive and value <= 0:
            raise ValueError(f"{key} must be positive, not {value}")
        if key in bounds and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and value > bounds[key]:
            raise ValueError(f"{key} must be at most {bounds[key]:g}, not {value:g}")
    if "base_url" in params:
        check_base_url(params["base_url"])
    if "proxy" in params:
        check_proxy(params["proxy"])


# -- Failures -------------------------------------------------------------------------------------

def connection_failure(exc: BaseException, env_var: str, started: bool | None = None
                       ) -> BackendFailure:
    """A BackendFailure for a connection error (an SDK's, httpx2's, or a plain OSError from a
    client of the backend's own), never_sent only where that is proven: `started` is whether
    fragbench's transport wrote a byte of the request (False proves it never left; None when
    the request did not go through that transport, and then only the error's type can prove
    it: httpx2's ConnectError, or a ConnectionRefusedError at its root, which a TCP connect
    alone raises, before anything is written)."""
    import httpx2

    cause = exc if isinstance(exc, httpx2.HTTPError) else exc.__cause__
    root = innermost(exc)
    ours = isinstance(root, httpx2.HTTPError)  # the transport's own words, not an OSError
    detail = str(root) if ours and str(root) else \
        type(root).__name__ if root is not exc or isinstance(root, OSError) else "no detail"
    refused = isinstance(root, ConnectionRefusedError)  # only a TCP connect raises it
    if isinstance(cause, httpx2.UnsupportedProtocol) and started is not True:
        return BackendFailure("connection", "the endpoint's URL scheme is neither http nor "
                              f"https (check {env_var} or the config's base_url); {NEVER_SENT}",
                              never_sent=True)
    if started is False or (started is None and (refused or isinstance(cause,
                                                                      httpx2.ConnectError))):
        what = "connection refused" if refused else "the connection could not be opened"
        return BackendFailure("connection", f"{what} ({detail}); {NEVER_SENT}", never_sent=True)
    return BackendFailure("connection", f"connection error ({detail}); {MAY_BE_BILLED}")


# -- The session ----------------------------------------------------------------------------------

class _Session:
    """What SDKSession and JSONSession share: `send`, the way every call is made, read and
    classified (their docstrings say what a backend can rely on). A subclass says how one
    request is made (`_call`), whether it went through fragbench's transport (`_on_wire`),
    and which of its errors are a timeout or a failed connection (`_kind`)."""

    on_body: Callable[[str, int], None] | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    concurrent = True
    """`send` may be called from several threads at once (each call has its own exchange,
    connection and worker), and `on_body` is read at each call and called from the thread
    that called `send`, before it returns: a backend on either session may have calls in
    flight (`max_in_flight`, `fragbench.calls.collector.concurrency_problem`)."""

    timeout: float
    env_var: str
    request_id_header: str
    read: Callable[[Any, str, str | None], Reply]
    what: str
    endpoint: str
    proxy: str | None
    abandoned: bool

    def _prepare(self, request: Request) -> Any:
        """What `_call` sends for `request`, built before the clock starts."""
        return request

    def _call(self, exchange: Exchange, prepared: Any) -> Any:
        raise NotImplementedError

    def _on_wire(self) -> bool:
        """Whether the request goes through fragbench's transport (which fills the exchange
        and knows whether a byte was written)."""
        return True

    def _kind(self, error: Exception | None) -> str | None:
        """`timeout`, `connection`, or None for any other error of the client."""
        raise NotImplementedError

    def send(self, request: Request) -> Reply:
        from fragbench.http.wire import Exchange

        prepared = self._prepare(request)
        exchange = Exchange(time.monotonic() + self.timeout, self.max_body_bytes, managed=True)
        error: Exception | None = None
        result: Any = None
        try:
            result = within(self.timeout, lambda: self._call(exchange, prepared),
                            grace=DEADLINE_GRACE)
        except PastDeadline:
            self.abandoned = True
            raise BackendFailure("timeout", f"the request timed out after {self.timeout:g} s; "
                                 f"{MAY_BE_BILLED}") from None
        except Exception as exc:  # the client's; read below with what the transport saw
            error = exc
        # Looked up at each call, not once: a backend may swap its client after the session
        # is built (its own HTTP client gets the body bound only after the fact, and no proof
        # of a request never sent).
        on_wire = self._on_wire()
        if not on_wire:
            _from_sdk(exchange, result, error)
        status = exchange.status
        raw = exchange.text() if status is not None else None
        request_id = (exchange.header(self.request_id_header) or "")[:200] or None
        if self.on_body is not None and status is not None and (
                exchange.complete or exchange.failure is not None):
            self.on_body(raw or "", status)
        if exchange.failure is not None:
            kind, message = exchange.failure
            raise BackendFailure(kind, message, http_status=status, raw=raw,
                                 request_id=request_id)
        if status is None or not exchange.complete:
            raise self._failure(error, exchange, raw, on_wire) from None
        if not 200 <= status < 300:
            # A redirect is never followed: that would send the call a second request (307,
            # 308) or turn it into another one (a GET after 301/302/303).
            note = f": a redirect, not followed; {MAY_BE_BILLED}" if 300 <= status < 400 else ""
            raise BackendFailure("http_error", f"HTTP {status} from the API{note}",
                                 http_status=status, raw=raw, request_id=request_id)
        return self._read(raw or "", exchange.readable(), status, request_id)

    def _failure(self, error: Exception | None, exchange: Exchange, raw: str | None,
                 on_wire: bool) -> BackendFailure:
        """No whole response came back: why, and whether the request provably never left
        (only fragbench's transport can prove it: it knows whether a byte was written)."""
        started = exchange.started if on_wire else None
        kind = self._kind(error)
        if kind == "timeout":
            if started is False:
                return BackendFailure("timeout", f"the connection could not be opened within "
                                      f"{self.timeout:g} s; {NEVER_SENT}", never_sent=True)
            return BackendFailure("timeout", f"the request timed out after {self.timeout:g} s; "
                                  f"{MAY_BE_BILLED}", raw=raw)
        if kind == "connection" and error is not None:
            failure = connection_failure(error, self.env_var, started)
            failure.raw = raw
            return failure
        what = f" ({type(error).__name__})" if error is not None else ""
        return BackendFailure("bad_response", f"the response could not be read{what}",
                              raw=raw, never_sent=started is False)

    def _read(self, text: str, readable: str, status: int, request_id: str | None) -> Reply:
        """`readable` parsed (bounded) and read; `text`, the body with invalid bytes escaped,
        is what is kept as raw."""
        try:
            body = loads(readable)
        except BodyError as exc:
            raise BackendFailure(exc.kind, exc.message, raw=text, http_status=status,
                                 request_id=request_id) from None
        try:
            return self.read(body, text, request_id)
        except BackendFailure:
            raise
        except Exception as exc:
            raise BackendFailure("bad_body", f"the body is not a readable {self.what} "
                                 f"({type(exc).__name__})", raw=text,
                                 request_id=request_id) from None


class SDKSession(_Session):
    """A session (`fragbench.interfaces.Session`) over an SDK built on httpx2 (openai,
    anthropic: the same exception classes under the same names).

    The backend supplies the SDK client it built (`max_retries=0`, `http_client=no_redirects
    (...)`), `post(request)` that sends the call through the SDK's `with_raw_response` (nothing
    parsed into the SDK's models), and `read(body, text, request_id)` that makes the Reply,
    raising BackendFailure (or anything else, for a body of the right shape with the wrong types
    inside) when the body is no `what`. `send` then keeps these promises:

    - one request per call, within `timeout` seconds on the whole call (enforced on every
      socket operation by the transport; `within` is the outer safety net);
    - the body (at most `max_body_bytes`, after decompression) is handed to `on_body(text,
      status)`, when set, as soon as it is in hand and before anything parses it: a normal,
      error, too large or doubtful body alike. `text` is the bytes as UTF-8, any invalid byte
      escaped (`\\xNN`), so that it can always be written. An exception from `on_body`
      propagates out of `send` unchanged (the collector set it, and decides);
    - then, on a 2xx status, the body is parsed as bounded JSON (`fragbench.http.bounded_json`) and
      handed to `read`; anything else is a BackendFailure, the body kept as `raw`. Kinds:
      `timeout`, `connection` (`never_sent` only where proven), `http_error` (any status that
      is not 2xx, a 3xx included: a redirect is never followed), `doubtful_response` (bytes
      after the body, a length that does not match), `too_large`, `bad_encoding` (an encoding
      not decoded, or a body that is not what it claims), `bad_body` (not JSON, nested deeper
      than 64, not the backend's shape), `repeated_key`, `bad_response` (the SDK failed
      otherwise), `second_request` (the SDK tried another request for one call: never sent).

    Attributes the core sets or reads: `on_body` (None: not called), `max_body_bytes`
    (MAX_BODY_BYTES until the core sets it from the frozen plan), `endpoint` (public URL),
    `proxy` (the public proxy URL, or None). `abandoned` is set once a request was left running
    at the outer deadline: the client then stays open at `close`.

    A client not built on `no_redirects` (an HTTP client of the backend's own) still works:
    the body is then read from the SDK's response, whole, and bounded only afterwards; that
    client's connections, proxies and decoding are its own, and the fault suite says so.
    """

    def __init__(self, sdk: Any, client: Any, *, timeout: float, env_var: str,
                 request_id_header: str, post: Callable[[Request], Any],
                 read: Callable[[Any, str, str | None], Reply], what: str) -> None:
        self.sdk, self.client, self.timeout, self.env_var = sdk, client, timeout, env_var
        self.request_id_header, self.post, self.read, self.what = (request_id_header, post,
                                                                   read, what)
        self.endpoint = public_url(str(client.base_url), env_var)
        """The client's base URL as it may be recorded (`public_url`)."""
        self.abandoned = False
        """True once a request was left running past the outer deadline (`within`)."""
        wire = getattr(getattr(client, "_client", None), "wire", None)
        self.proxy = getattr(wire, "proxy_url", None)
        """The config's proxy as recorded (`http://host:port`), or None."""
        if wire is not None and self.endpoint.startswith("https:"):
            wire.tls()  # certificates unreadable: refused here, before any call

    def _call(self, exchange: Exchange, prepared: Any) -> Any:
        from fragbench.http.wire import calling

        with calling(exchange):
            return self.post(prepared)

    def _on_wire(self) -> bool:
        return getattr(getattr(self.client, "_client", None), "wire", None) is not None

    def _kind(self, error: Exception | None) -> str | None:
        if isinstance(error, self.sdk.APITimeoutError):
            return "timeout"
        return "connection" if isinstance(error, self.sdk.APIConnectionError) else None

    def close(self) -> None:
        """Close the SDK client, unless a request was abandoned (it may still use it)."""
        if not self.abandoned:
            self.client.close()


class JSONSession(_Session):
    """A session (`fragbench.interfaces.Session`) for a JSON-over-HTTP API that fragbench ships
    no SDK for: the backend says where a call goes and what it sends, and fragbench's own
    transport (`fragbench.http.wire`) sends it, with every promise of SDKSession (whose docstring
    lists them): one connection per call (`Connection: close`), no redirect followed (a 3xx is
    an `http_error`), a response that may not be this call's refused, the body bounded after
    decompression (`max_body_bytes`), the deadline on every socket operation, `on_body` before
    any parsing, the body parsed bounded then handed to `read`, `never_sent` only where proven,
    no proxy from the environment (only `proxy`, the config's, checked by `check_proxy`), and
    for an https `base_url` the certificates checked here, before any call.

    - `base_url`: the API's base URL (from `route`: checked, the environment's first);
    - `path(request)`: what follows it for this call, e.g.
      `f"/v1beta/models/{quote(model, safe='')}:generateContent"`;
    - `headers`: the request's headers (the key among them, from `key_from_env`), or a
      callable of the request giving them; `content-type: application/json` is added unless
      given (in any case: `Content-Type`). Never logged or recorded: only the response body
      is kept;
    - `body(request)`: the JSON value to send (serialized here, UTF-8);
    - `read(body, text, request_id)`: the Reply from the parsed body, as for SDKSession.

    A builder that raises is a `bad_request` BackendFailure with `never_sent=True`: nothing
    was sent. So is a `path` that does not start with one "/", or a URL built from it whose
    scheme, host or port differ from `base_url`'s (`@host` after the base URL would send the
    key elsewhere). A header the backend gives replaces the default of the same name,
    whatever its case (one `Content-Type`, never two). `close()` has nothing to close (no
    connection outlives its call).
    """

    def __init__(self, base_url: str, *, path: Callable[[Request], str],
                 headers: Mapping[str, str] | Callable[[Request], Mapping[str, str]],
                 body: Callable[[Request], Any], read: Callable[[Any, str, str | None], Reply],
                 timeout: float, env_var: str, request_id_header: str, what: str,
                 proxy: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        """The API's base URL as given, without a trailing slash: `path(request)` follows it."""
        self.path, self.headers, self.body = path, headers, body
        self.read, self.timeout, self.env_var = read, timeout, env_var
        self.request_id_header, self.what = request_id_header, what
        self.endpoint = public_url(base_url, env_var)
        """The base URL without user-info, query or fragment: what may be recorded."""
        self.abandoned = False
        """Set once a request was left running at the outer deadline (`within`)."""
        self.wire = _wire(timeout, proxy)
        """The `fragbench.http.wire.WireTransport` every call goes through."""
        self.proxy = self.wire.proxy_url
        """The config's proxy as a public URL, or None: never one from the environment."""
        if self.endpoint.startswith("https:"):
            self.wire.tls()  # certificates unreadable: refused here, before any call

    def _prepare(self, request: Request) -> Any:
        import json

        import httpx2

        try:
            given = self.headers(request) if callable(self.headers) else self.headers
            # Header names compared as HTTP compares them, without case: a backend's own
            # `Content-Type` replaces the default instead of going out beside it.
            headers = httpx2.Headers(given)
            headers.setdefault("content-type", "application/json")
            data = json.dumps(self.body(request), ensure_ascii=False).encode("utf-8")
            path = self.path(request)
            prepared = httpx2.Request("POST", self.base_url + path, headers=headers,
                                      content=data)
        except Exception as exc:
            raise BackendFailure("bad_request", f"the request could not be built "
                                 f"({type(exc).__name__}); {NEVER_SENT}",
                                 never_sent=True) from None
        # The key goes with every request: a path that is not absolute (`@host`, `.evil`)
        # would make the URL name another host, and one starting `//` names a host to any
        # code that joins URLs; so only a path starting with one "/" whose URL keeps the base
        # URL's scheme, host and port is sent. Neither value is quoted.
        base = httpx2.URL(self.base_url)
        url = prepared.url
        if not path.startswith("/") or path.startswith("//") or (
                url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
            raise BackendFailure("bad_request", "the call's path (the backend's `path`) does "
                                 "not start with one \"/\" or would send the request to "
                                 "another scheme, host or port than the base URL's; "
                                 f"{NEVER_SENT}", never_sent=True)
        return prepared

    def _call(self, exchange: Exchange, prepared: Any) -> Any:
        from fragbench.http.wire import calling

        with calling(exchange):
            return self.wire.handle_request(prepared)

    def _kind(self, error: Exception | None) -> str | None:
        import httpx2

        if isinstance(error, httpx2.TimeoutException):
            return "timeout"
        return "connection" if isinstance(error, httpx2.TransportError) else None

    def close(self) -> None:
        """Nothing to close: no connection outlives its call."""
        return None


def _from_sdk(exchange: Exchange, result: Any, error: Exception | None) -> None:
    """Fill `exchange` from the SDK's own response, for a client not on fragbench's transport:
    the body was read whole by that client; it is bounded here, after the fact."""
    response = getattr(result, "http_response", None) or getattr(error, "response", None)
    if response is None:
        return
    try:
        content = response.content
    except Exception:  # a response the SDK never read
        return
    exchange.status = response.status_code
    exchange.headers = [(k.lower(), v) for k, v in response.headers.items()]
    exchange.body[:] = content[:exchange.max_body]
    exchange.complete = True
    if len(content) > exchange.max_body:
        exchange.fail("too_large", f"the response body is larger than {exchange.max_body} "
                      f"bytes: its first {exchange.max_body} bytes are kept; {MAY_BE_BILLED}")
