"""What every HTTP backend needs to keep the core's promises, whatever SDK it wraps.

The openai and anthropic SDKs share one HTTP client library (httpx2), so the pieces below serve
both, and any backend built on either:

- `within`: a deadline for the whole request (connect, send, wait, read the entire body). The
  SDKs' own timeouts bound each phase and each read separately, so a server trickling its body
  could keep a call alive indefinitely. The request runs in a daemon worker thread and the call
  is abandoned at the deadline: an abandoned read never holds the process at exit.
- `no_redirects`: the SDK's default HTTP client, never following a redirect. Following one
  would send the call a second request (307/308) or turn it into another one (a GET after
  301/302/303): one call is one request.
- `connection_failure`: what is known about a request that failed before an HTTP status came
  back. Only a failure to open the connection (connect or TLS handshake) or a URL scheme the
  client cannot speak proves that the request never left this machine (`never_sent=True`,
  nothing billed); anything later means the server may have received and billed it.
- `public_url`: an endpoint as it may be recorded: no user-info, no query.
- `endpoint`: the environment's base URL first, then the config's, as the SDKs do.
- `refuse_env_headers`: an SDK that adds headers from the environment (`OPENAI_CUSTOM_HEADERS`,
  `ANTHROPIC_CUSTOM_HEADERS`) would send something the frozen plan does not show, possibly a
  credential replacing the one the backend passes: such a session is refused, not opened.
- `SDKSession`: the session of a backend built on either SDK: one request per call through
  `with_raw_response`, its body read inside the deadline, every way it can fail turned into
  the BackendFailure the collector expects, the body parsed as JSON and handed to the
  backend's reader; `whole` and `clean` are what such readers share (counts that are integers
  or unknown, text that can be written as UTF-8).
- `check_types`: the parameter checks every backend starts with (required, optional, unknown,
  empty, positive).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from fragbench.errors import FragbenchError
from fragbench.interfaces import BackendFailure, Reply, Request

T = TypeVar("T")

MAY_BE_BILLED = "the server may have received and billed it"
NEVER_SENT = "the request never left this machine and nothing was billed"


class PastDeadline(Exception):
    """The worker did not finish the request in time."""


def within(seconds: float, work: Callable[[], T], name: str = "fragbench-request") -> T:
    """Run `work` in a daemon thread and wait for it at most `seconds`.

    The caller returns at the deadline whatever the socket is doing. The abandoned thread keeps
    its connection until its own per-read timeout, the server closing, or the process exiting.
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
    if not done.wait(seconds):
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


def no_redirects(client_class: type, timeout: float) -> Any:
    """An instance of the SDK's default HTTP client class (its limits and timeouts) that never
    follows a redirect. The SDK may set `follow_redirects` per request, which would override a
    client-wide setting; overriding `send`, through which every request goes, holds whatever
    the SDK passes."""

    class NoRedirects(client_class):  # type: ignore[misc, valid-type]
        def send(self, request: Any, **kwargs: Any) -> Any:
            kwargs["follow_redirects"] = False
            return super().send(request, **kwargs)

    return NoRedirects(timeout=timeout, follow_redirects=False)


def endpoint(env_var: str, params: dict[str, Any]) -> str | None:
    """`env_var` when set, else the config's `base_url`, else None (the SDK's default). The
    environment comes first, as it does for the SDKs, so that a test or a user can point any
    series at another server without editing a frozen config."""
    return os.environ.get(env_var) or params.get("base_url") or None


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


def connection_failure(exc: BaseException, env_var: str) -> BackendFailure:
    """A BackendFailure for an SDK connection error, never_sent only where that is proven."""
    import httpx2

    cause = exc.__cause__
    root = innermost(exc)
    detail = type(root).__name__ if root is not exc else "no detail"
    # Both are raised before a byte of HTTP is written: ConnectError only while opening the
    # connection (TCP connect, TLS handshake), UnsupportedProtocol before any connection.
    # Redirects are never followed, so neither can come from a second hop after a first request
    # went out.
    if isinstance(cause, httpx2.UnsupportedProtocol):
        return BackendFailure("connection", "the endpoint's URL scheme is neither http nor "
                              f"https (check {env_var} or the config's base_url); {NEVER_SENT}",
                              never_sent=True)
    if isinstance(cause, httpx2.ConnectError):
        what = "connection refused" if isinstance(root, ConnectionRefusedError) else \
            "the connection could not be opened"
        return BackendFailure("connection", f"{what} ({detail}); {NEVER_SENT}", never_sent=True)
    return BackendFailure("connection", f"connection error ({detail}); {MAY_BE_BILLED}")


def refuse_env_headers(env_var: str) -> None:
    """Refuse a session while `env_var` (an SDK's custom-headers variable) is set: its headers
    would go out with every call, unrecorded, and may replace the key the backend passes."""
    if os.environ.get(env_var):
        raise FragbenchError(f"{env_var} is set: its headers would be sent with every call, "
                             "unrecorded, and could replace the key; unset it and run again "
                             "(nothing was sent or spent).")


def key_from_env(env_var: str, provider: str, headers_var: str, unset: str | None = None
                 ) -> str:
    """The key from `env_var`, passed to the SDK explicitly (never stored credentials), or one
    line refusing the session: unset (`unset`, what follows the variable's name in that line,
    says what to do when exporting the provider's key is not the whole story), or shorter than
    MIN_SECRET, which the redactor cannot tell from ordinary words and so could not keep out of
    what is written (a server may echo it in an error body). `headers_var`, the SDK's
    custom-headers variable, is refused too (refuse_env_headers)."""
    from fragbench.redact import MIN_SECRET

    key = os.environ.get(env_var, "").strip()
    if not key:
        unset = unset or f" is not set: export your {provider} key in the environment"
        raise FragbenchError(f"{env_var}{unset} and run again (nothing was sent or spent).")
    if len(key) < MIN_SECRET:
        raise FragbenchError(f"{env_var} is shorter than {MIN_SECRET} characters, too short to "
                             "be kept out of what fragbench writes; use a longer key and run "
                             "again (nothing was sent or spent).")
    refuse_env_headers(headers_var)
    return key


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


def clean(text: str) -> str:
    """Lone surrogates (from JSON escapes such as \\ud83d) become U+FFFD in the parsed text,
    so that it can be written as UTF-8; the raw body keeps them as sent."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def check_types(params: dict[str, Any], required: dict[str, type | tuple[type, ...]],
                optional: dict[str, type | tuple[type, ...]],
                positive: tuple[str, ...] = ()) -> None:
    """ValueError, one sentence, for a missing, mistyped, empty (a blank string) or unknown
    parameter, or one of `positive` that is not above zero. A bool is accepted only where
    bool is the type (TOML `true` is no number). A `base_url` must pass `check_base_url`."""
    for key in required:
        if key not in params:
            raise ValueError(f"{key} is missing")
    for key, value in params.items():
        kind = required.get(key, optional.get(key))
        if kind is None:
            extra = sorted(set(params) - set(required) - set(optional))
            raise ValueError(f"unknown parameter(s) {', '.join(extra)}")
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise ValueError(f"{key} has the wrong type ({type(value).__name__})")
        if key in required and isinstance(value, str) and not value.strip():
            raise ValueError(f"{key} is empty")
        if key in positive and value <= 0:
            raise ValueError(f"{key} must be positive, not {value}")
    if "base_url" in params:
        check_base_url(params["base_url"])


def check_base_url(url: str) -> None:
    """ValueError unless `url` is a plain http(s) URL: a config's base URL is frozen in the
    plan, which is committed, and printed by `plan`, so it must hold no credentials (user-info,
    a query, a fragment); a key belongs in the environment."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url {url!r} is not an http or https URL")
    if parts.username is not None or parts.password is not None or parts.query \
            or parts.fragment:
        raise ValueError("base_url must hold no user name, password, query or fragment (it is "
                         "frozen in the plan and printed); put a key in the environment")


class SDKSession:
    """A session (`fragbench.interfaces.Session`) over an SDK built on httpx2 (openai,
    anthropic: the same exception classes under the same names): one request per call, within
    a deadline on the whole call, every way it can fail turned into the BackendFailure the
    collector expects, the body parsed as JSON and handed to the backend's reader.

    The backend supplies the client it built (`max_retries=0`, `no_redirects`), `post(request)`
    that sends the call through the SDK's `with_raw_response` (nothing parsed into the SDK's
    models), and `read(body, text, request_id)` that makes the Reply, raising BackendFailure
    (or anything else, for a body of the right shape with the wrong types inside) when the body
    is no `what`.

    `abandoned` is set once a request was left running at the deadline: the client then stays
    open at `close`, since the abandoned worker may still be inside a socket call, and closing
    that socket from another thread would free its descriptor's number while the call can
    still use it. Its connection ends with the worker (its own read timeout, the server, or the
    exit).
    """

    def __init__(self, sdk: Any, client: Any, *, timeout: float, env_var: str,
                 request_id_header: str, post: Callable[[Request], Any],
                 read: Callable[[Any, str, str | None], Reply], what: str) -> None:
        self.sdk, self.client, self.timeout, self.env_var = sdk, client, timeout, env_var
        self.request_id_header, self.post, self.read, self.what = (request_id_header, post,
                                                                   read, what)
        self.endpoint = public_url(str(client.base_url), env_var)
        self.abandoned = False

    def _exchange(self, request: Request) -> tuple[str, int, str | None]:
        raw = self.post(request)
        # Read here, inside the deadline, whatever the SDK may have left unread.
        response = raw.http_response
        return response.text, response.status_code, response.headers.get(self.request_id_header)

    def send(self, request: Request) -> Reply:
        sdk = self.sdk
        try:
            text, status, request_id = within(self.timeout, lambda: self._exchange(request))
        except (PastDeadline, sdk.APITimeoutError) as exc:
            self.abandoned = isinstance(exc, PastDeadline)
            raise BackendFailure("timeout", f"the request timed out after {self.timeout:g} s; "
                                 f"{MAY_BE_BILLED}") from None
        except sdk.APIConnectionError as exc:
            raise connection_failure(exc, self.env_var) from None
        except sdk.APIStatusError as exc:
            code = exc.status_code
            # A redirect is never followed: that would send the call a second request (307,
            # 308) or turn it into another one (a GET after 301/302/303).
            note = f": a redirect, not followed; {MAY_BE_BILLED}" if 300 <= code < 400 else ""
            raise BackendFailure("http_error", f"HTTP {code} from the API{note}",
                                 http_status=code, raw=exc.response.text,
                                 request_id=exc.response.headers.get(self.request_id_header)
                                 ) from None
        except Exception as exc:  # the SDK's boundary: a body it cannot read, etc.
            raise BackendFailure("bad_response", f"the response could not be read "
                                 f"({type(exc).__name__})") from None
        try:
            body = json.loads(text)
        except (ValueError, RecursionError):
            raise BackendFailure("bad_body", "the body is not JSON", raw=text,
                                 http_status=status, request_id=request_id) from None
        try:
            return self.read(body, text, request_id)
        except BackendFailure:
            raise
        except Exception as exc:
            raise BackendFailure("bad_body", f"the body is not a readable {self.what} "
                                 f"({type(exc).__name__})", raw=text,
                                 request_id=request_id) from None

    def close(self) -> None:
        if not self.abandoned:
            self.client.close()
