"""The public API-shape kit (`fragbench.testing.loopback.Shape`) on a shape fragbench does not
ship: the Gemini-style shape and backend of docs/adding-a-backend.md (loaded from the doc's
text), and that backend with one mistake of a new author planted at a time. Each mistake is
caught by `check_backend` through the public shape, with a message naming the promise broken:
a retry of an HTTP 500, an HTTP error taken for a completed answer, `thoughtsTokenCount` or
`cachedContentTokenCount` ignored, a redirect followed (a session on urllib, which follows a
302 as a GET), a session with no `on_body` or one that hands the body on only after parsing
it. Before any of them: a backend declaring no supported `api_version` is refused first.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
from support.walkthrough import ROOT, blocks

from fragbench.interfaces import BackendFailure, Reply, Request, Usage
from fragbench.testing import check_backend
from fragbench.testing.loopback import Received, Server, Shape
from fragbench.transport import connection_failure, public_url

DOC = ROOT / "docs" / "adding-a-backend.md"
PARAMS = {"model": "mini-g-1", "max_output_tokens": 300, "timeout_seconds": 30}


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, ModuleType]]:
    """The doc's backend module and shape module, written from its text and imported."""
    where = tmp_path_factory.mktemp("mini-gemini")
    for block in blocks(DOC, "## A second example"):
        if block.file and block.file.endswith(("fragbench_mini_gemini/__init__.py",
                                               "generate_content.py")):
            name = Path(block.file).name
            target = where / ("fragbench_mini_gemini.py" if name == "__init__.py" else name)
            target.write_text(block.text, encoding="utf-8")
    sys.path.insert(0, str(where))
    try:
        yield (importlib.import_module("fragbench_mini_gemini"),
               importlib.import_module("generate_content"))
    finally:
        sys.path.remove(str(where))
        for name in ("fragbench_mini_gemini", "generate_content"):
            sys.modules.pop(name, None)


def run_kit(backend: Any, shape: Shape, tmp_path: Path) -> list[str]:
    with Server(shape) as server:
        return check_backend(backend, PARAMS, server, tmp_path=tmp_path)


def caught(backend: Any, shape: Shape, tmp_path: Path, promise: str, scenario: str) -> str:
    """check_backend fails naming `promise` in `scenario`; the message."""
    with pytest.raises(AssertionError) as failure:
        run_kit(backend, shape, tmp_path)
    message = str(failure.value)
    assert f"({promise})" in message and scenario in message, message
    return message


# -- The public shape ---------------------------------------------------------------------------

def test_a_shape_of_your_own_reads_requests_through_its_accessors(doc: Any) -> None:
    shape = doc[1].GenerateContent()
    request = Received(method="POST", path="/v1beta/models/mini%2Fg-1:generateContent?alt=x",
                       headers={}, connection=0,
                       body={"model": "not-this-one", "contents": [{"parts": [
                           {"text": "Q?\n[K1] The office opens at 9:00."}]}],
                             "generationConfig": {"maxOutputTokens": 77}})
    assert shape.model_of(request) == "mini/g-1"  # from the path, never the body's `model`
    assert shape.limits_of(request) == {"generationConfig.maxOutputTokens": 77}
    assert json.loads(shape.default_answer(request))["citations"][0]["id"] == "K1"
    assert shape.matches("/v1beta/models/m:generateContent")
    assert not shape.matches("/v1beta/models/m:streamGenerateContent")
    assert not shape.matches("/v1beta/models/a/b:generateContent")


def test_a_server_of_your_shape_answers_its_path_only(doc: Any) -> None:
    shape = doc[1].GenerateContent()
    with Server(shape) as server:
        assert server.api == "generate-content" and server.base_url == server.origin
        good = urllib.request.Request(server.url_for("mini-g-1"), method="POST", data=json.dumps(
            {"contents": [{"parts": [{"text": "[K2] It closes at 17:30."}]}]}).encode())
        with urllib.request.urlopen(good, timeout=30) as response:
            body = json.loads(response.read())
        assert body["modelVersion"] == "mini-g-1"
        assert body["usageMetadata"] == {"promptTokenCount": 400, "cachedContentTokenCount": 100,
                                         "candidatesTokenCount": 100, "thoughtsTokenCount": 200}
        text = body["candidates"][0]["content"]["parts"][0]["text"]
        assert json.loads(text)["citations"][0]["id"] == "K2"
        with pytest.raises(urllib.error.HTTPError) as wrong:
            urllib.request.urlopen(urllib.request.Request(server.origin + "/v1/responses",
                                                          data=b"{}"), timeout=30)
        assert wrong.value.code == 404
        assert [r["path"] for r in server.requests] == [
            "/v1beta/models/mini-g-1:generateContent", "/v1/responses"]


def test_a_contract_naming_a_tier_the_api_never_reports_is_refused(doc: Any,
                                                                    tmp_path: Path) -> None:
    module, shapes = doc

    class Tiered(module.MiniGemini):
        def contract(self, params: dict[str, Any]) -> Any:
            return attrs.evolve(super().contract(params), service_tier="standard")

    message = caught(Tiered(), shapes.GenerateContent(), tmp_path, "its declared contract",
                     "never reports one")
    assert "generate-content API" in message


@pytest.mark.parametrize("version", [None, "2.0"])
def test_a_backend_not_declaring_a_supported_api_fails_before_any_scenario(
        doc: Any, tmp_path: Path, version: str | None) -> None:
    class Undeclared(doc[0].MiniGemini):
        api_version = version

    with Server(doc[1].GenerateContent()) as server:
        with pytest.raises(AssertionError) as failure:
            check_backend(Undeclared(), PARAMS, server, tmp_path=tmp_path)
        assert not server.requests  # refused before anything was sent
    message = str(failure.value)
    assert message.startswith("backend 'mini-gemini' breaks its contract (declares the plugin "
                              "API it is written for)"), message
    assert ("declares no api_version" if version is None else "plugin API 2.0") in message
    assert not list(tmp_path.iterdir())  # no scenario ran: none has a folder


def test_the_docs_backend_passes_the_whole_suite(doc: Any, tmp_path: Path) -> None:
    """The unplanted base: every failure below is its one planted mistake."""
    ran = run_kit(doc[0].MiniGemini(), doc[1].GenerateContent(), tmp_path)
    assert "every call answered" in ran and "HTTP 302 redirect back to the endpoint at call 2" \
        in ran and "a repeated usage at call 2" in ran
    assert "a usage without cached_tokens at call 2" not in ran  # omitted_when_zero
    assert not any(name.startswith("service tier") for name in ran)  # reports_tier = False


# -- Planted mistakes ---------------------------------------------------------------------------

def planted(module: ModuleType, send: Any = None, read: Any = None) -> Any:
    """The doc's backend whose session's `send` is wrapped by `send(session_send, request)`,
    or whose `read` is replaced."""

    class Planted(module.MiniGemini):
        def open(self, params: dict[str, Any]) -> Any:
            session = super().open(params)
            if send is not None:
                inner = session.send
                session.send = lambda request: send(inner, request)
            if read is not None:
                session.read = read
            return session

    return Planted()


def test_a_retry_of_an_http_500_is_caught(doc: Any, tmp_path: Path) -> None:
    def retrying(inner: Any, request: Request) -> Reply:
        try:
            reply: Reply = inner(request)
        except BackendFailure as exc:
            if exc.http_status is None or exc.http_status < 500:
                raise
            reply = inner(request)
        return reply

    message = caught(planted(doc[0], send=retrying), doc[1].GenerateContent(), tmp_path,
                     "one request per call, never a retry", "HTTP 500 at call 2")
    assert "2 bodies to on_body for call 2, and the server received 3 requests" in message


def test_an_http_error_taken_for_an_answer_is_caught(doc: Any, tmp_path: Path) -> None:
    def swallowing(inner: Any, request: Request) -> Reply:
        try:
            reply: Reply = inner(request)
        except BackendFailure as exc:
            if exc.http_status is None:
                raise
            return Reply(status="completed", model=PARAMS["model"], service_tier=None,
                         request_id=None, usage=Usage(0, 0, None, 0, None), text="",
                         raw=exc.raw)
        return reply

    message = caught(planted(doc[0], send=swallowing), doc[1].GenerateContent(), tmp_path,
                     "the stop rules", "HTTP 500 at call 2")
    assert "must stop at call 2 as technical_failure; got no stop" in message


@pytest.mark.parametrize("ignored", ["thoughtsTokenCount", "cachedContentTokenCount"])
def test_usage_misread_is_caught(doc: Any, tmp_path: Path, ignored: str) -> None:
    module = doc[0]

    def misread(body: Any, text: str, request_id: str | None) -> Reply:
        meta = dict(body.get("usageMetadata") or {})
        meta.pop(ignored, None)  # as if the author never heard of it
        return module.read({**body, "usageMetadata": meta}, text, request_id)

    message = caught(planted(module, read=misread), doc[1].GenerateContent(), tmp_path,
                     "usage maps to cost", "every call answered")
    assert re.search(r"call 1 is recorded at [0-9.]+;", message), message


class PlainUrllibSession:
    """A session on urllib (an HTTP client of the author's own) that records no body: it has
    no `on_body`. It follows a 302, turning the call into a GET, as urllib does by default."""

    def __init__(self, module: ModuleType, params: dict[str, Any]) -> None:
        where = module.MiniGemini().route(params)
        self.url = f"{where.url.rstrip('/')}/v1beta/models/{params['model']}:generateContent"
        self.endpoint = public_url(where.url, module.URL_ENV)
        self.key, self.read, self.env = where.key or "", module.read, module.URL_ENV
        self.params = params
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def received(self, text: str, status: int) -> None:
        """A body came back, before anything parses it: this session keeps nothing."""

    def send(self, request: Request) -> Reply:
        data = json.dumps({"contents": [{"role": "user", "parts": [{"text": request.input}]}],
                           "generationConfig": {"maxOutputTokens":
                                                self.params["max_output_tokens"]}}).encode()
        asked = urllib.request.Request(self.url, data=data, method="POST", headers={
            "content-type": "application/json", "x-goog-api-key": self.key})
        try:
            with self.opener.open(asked, timeout=self.params["timeout_seconds"]) as response:
                text = response.read().decode()
                self.received(text, response.status)
        except urllib.error.HTTPError as exc:
            text = exc.read().decode()
            self.received(text, exc.code)
            raise BackendFailure("http_error", f"HTTP {exc.code}", http_status=exc.code,
                                 raw=text) from None
        except OSError as exc:
            raise connection_failure(exc, self.env) from None
        reply: Reply = self.read(json.loads(text), text, None)
        return reply

    def close(self) -> None:
        return None


class UrllibSession(PlainUrllibSession):
    """The same, handing every body to `on_body` before parsing it, as a session must."""

    on_body: Any = None

    def received(self, text: str, status: int) -> None:
        if self.on_body is not None:
            self.on_body(text, status)


def own_client(module: ModuleType, session: type[PlainUrllibSession]) -> Any:
    class OwnClient(module.MiniGemini):
        def open(self, params: dict[str, Any]) -> PlainUrllibSession:
            return session(module, params)

    return OwnClient()


def test_a_followed_redirect_is_caught(doc: Any, tmp_path: Path) -> None:
    message = caught(own_client(doc[0], UrllibSession), doc[1].GenerateContent(), tmp_path,
                     "redirects are not followed", "HTTP 302 redirect back to the endpoint")
    assert "is a GET /v1beta/models/mini-g-1:generateContent" in message


# -- Bodies not recorded first ------------------------------------------------------------------

RECORD_FIRST = "the body recorded first, then parsed bounded"


def test_a_session_without_on_body_is_caught(doc: Any, tmp_path: Path) -> None:
    message = caught(own_client(doc[0], PlainUrllibSession), doc[1].GenerateContent(),
                     tmp_path, RECORD_FIRST, "every call answered")
    assert "call 1 is recorded as an answer, with no `received` record" in message


class ParsesFirst:
    """The doc's session behind a wrapper that hands a body to the collector's `on_body` only
    once the inner session has parsed and read it: nothing is recorded when that fails."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.endpoint = inner, inner.endpoint
        self.on_body: Any = None
        self.max_body_bytes = inner.max_body_bytes

    def send(self, request: Request) -> Reply:
        bodies: list[tuple[str, int]] = []
        self.inner.on_body = lambda text, status: bodies.append((text, status))
        self.inner.max_body_bytes = self.max_body_bytes
        reply: Reply = self.inner.send(request)  # raises before the body is handed on
        for text, status in bodies:
            self.on_body(text, status)
        return reply

    def close(self) -> None:
        self.inner.close()


def test_a_session_recording_after_parsing_is_caught(doc: Any, tmp_path: Path) -> None:
    module = doc[0]

    class Late(module.MiniGemini):
        def open(self, params: dict[str, Any]) -> ParsesFirst:
            return ParsesFirst(super().open(params))

    message = caught(Late(), doc[1].GenerateContent(), tmp_path, RECORD_FIRST,
                     "HTTP 500 at call 2")
    assert "call 2 is recorded as a failure (http_error) that kept a body, with no " \
        "`received`" in message
