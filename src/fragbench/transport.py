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
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from fragbench.errors import FragbenchError
from fragbench.interfaces import BackendFailure

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
