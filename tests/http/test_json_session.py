"""`fragbench.transport.JSONSession` on its own, against the kit's loopback server (Chat
Completions shape, at its `/v1` base URL): the promises a backend on it relies on, each seen
from the server's side (what arrived, how many requests) and from the session's.

- the body is handed to `on_body` before `read` sees it, and a body over `max_body_bytes` is
  `too_large`, its first bytes handed on and kept;
- a redirect is an `http_error`, never followed (one request);
- a builder (`path`, `headers`, `body`) that raises is `bad_request`, `never_sent`, and no
  request reaches the server; so is a path that is not absolute or would change the host the
  key is sent to;
- a backend's own `Content-Type`, in any case, is the one sent: never two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from fragbench.interfaces import BackendFailure, Reply, Request
from fragbench.testing import samples
from fragbench.testing.loopback import Server, raw, redirect
from fragbench.transport import NEVER_SENT, JSONSession

KEY = "jsk-test-key-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[Server]:
    with Server("chat") as running:
        yield running


@pytest.fixture
def request_() -> Request:
    return samples.calls()[0].request


def read_chat(body: Any, text: str, request_id: str | None) -> Reply:
    return Reply(status="completed", model=body["model"], service_tier=None,
                 request_id=request_id, usage=None,
                 text=body["choices"][0]["message"]["content"], raw=text)


def session(server: Server, *, base: str | None = None,
            path: Callable[[Request], str] = lambda r: "/chat/completions",
            headers: Mapping[str, str] | Callable[[Request], Mapping[str, str]] | None = None,
            body: Callable[[Request], Any] | None = None,
            read: Callable[[Any, str, str | None], Reply] = read_chat) -> JSONSession:
    return JSONSession(
        base or server.base_url, path=path,
        headers={"authorization": f"Bearer {KEY}"} if headers is None else headers,
        body=body or (lambda r: {"model": "m-1", "max_tokens": 50,
                                 "messages": [{"role": "user", "content": r.input}]}),
        read=read, timeout=30.0, env_var="TEST_BASE_URL", request_id_header="x-request-id",
        what="chat completion")


def test_on_body_gets_the_body_before_read(server: Server, request_: Request) -> None:
    order: list[tuple[str, str]] = []

    def reading(body: Any, text: str, request_id: str | None) -> Reply:
        order.append(("read", text))
        return read_chat(body, text, request_id)

    json_session = session(server, read=reading)
    json_session.on_body = lambda text, status: order.append(("on_body", f"{status} {text}"))
    reply = json_session.send(request_)
    assert [step for step, _ in order] == ["on_body", "read"]
    assert order[0][1] == f"200 {order[1][1]}" and reply.raw == order[1][1]
    assert reply.text and reply.model == "m-1-2026-09-30"
    assert len(server.requests) == 1


def test_a_body_over_max_body_bytes_is_too_large(server: Server, request_: Request) -> None:
    server.script[0] = raw(200, '{"padding": "' + "x" * 5000 + '"}')
    handed: list[str] = []
    json_session = session(server)
    json_session.max_body_bytes = 1024
    json_session.on_body = lambda text, status: handed.append(text)
    with pytest.raises(BackendFailure) as failure:
        json_session.send(request_)
    assert failure.value.kind == "too_large" and not failure.value.never_sent
    assert failure.value.raw is not None and len(failure.value.raw) == 1024
    assert handed == [failure.value.raw]  # its first bytes recorded, then refused


def test_a_redirect_is_an_http_error_not_followed(server: Server, request_: Request) -> None:
    server.script[0] = redirect(307, server.url)
    with pytest.raises(BackendFailure) as failure:
        session(server).send(request_)
    assert failure.value.kind == "http_error" and failure.value.http_status == 307
    assert "a redirect, not followed" in failure.value.message
    assert [r["method"] for r in server.requests] == ["POST"]  # one request, never a second


def broken(request: Request) -> Any:
    raise KeyError("the builder's own mistake")


@pytest.mark.parametrize("builder", ["path", "headers", "body"])
def test_a_builder_that_raises_sends_nothing(server: Server, request_: Request,
                                             builder: str) -> None:
    with pytest.raises(BackendFailure) as failure:
        session(server, **{builder: broken}).send(request_)
    assert failure.value.kind == "bad_request" and failure.value.never_sent
    assert "could not be built (KeyError)" in failure.value.message
    assert failure.value.message.endswith(NEVER_SENT)
    assert server.requests == []


@pytest.mark.parametrize("at_origin", [True, False], ids=["base-url-origin", "base-url-v1"])
@pytest.mark.parametrize("path", ["@evil.example/v1/chat/completions", "chat/completions",
                                  ".evil.example/v1/chat/completions",
                                  "//evil.example/v1/chat/completions"])
def test_a_path_that_could_leave_the_base_url_is_refused(server: Server, request_: Request,
                                                         path: str, at_origin: bool) -> None:
    """The key goes with the request: `base_url + path` must name the base URL's scheme, host
    and port, whatever `path` holds, and the path must start with one "/"; a base URL with no
    path of its own (`http://host:port`) is where `@evil` would become the host."""
    base = server.origin if at_origin else server.base_url
    with pytest.raises(BackendFailure) as failure:
        session(server, base=base, path=lambda r: path).send(request_)
    assert failure.value.kind == "bad_request" and failure.value.never_sent
    assert failure.value.message.endswith(NEVER_SENT)
    assert "evil" not in failure.value.message and KEY not in failure.value.message
    assert server.requests == []


def test_an_absolute_path_after_a_bare_origin_is_sent(server: Server,
                                                      request_: Request) -> None:
    session(server, base=server.origin, path=lambda r: "/v1/chat/completions").send(request_)
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions"]


@pytest.mark.parametrize("given", ["Content-Type", "content-type", "CONTENT-TYPE"])
def test_the_backends_content_type_is_the_only_one(server: Server, request_: Request,
                                                   given: str) -> None:
    headers = {"authorization": f"Bearer {KEY}", given: "application/json; charset=utf-8"}
    session(server, headers=headers).send(request_)
    [received] = server.requests
    types = [value for name, value in received["header_lines"]
             if name.lower() == "content-type"]
    assert types == ["application/json; charset=utf-8"]


def test_content_type_defaults_to_json(server: Server, request_: Request) -> None:
    session(server).send(request_)
    [received] = server.requests
    assert [value for name, value in received["header_lines"]
            if name.lower() == "content-type"] == ["application/json"]
    assert received["headers"]["authorization"] == f"Bearer {KEY}"
