"""A loopback HTTP server that speaks three model APIs, with scriptable faults.

The real SDKs (openai, anthropic: both on httpx2, which plain `respx` does not intercept) talk
to a real server on 127.0.0.1, so what is tested is what runs: the SDK's retries, redirects,
timeouts and parsing included. One `Server` serves one API shape:

| shape | path | bodies | `base_url` |
|---|---|---|---|
| `responses` | `POST /v1/responses` | Responses `response` | `http://127.0.0.1:PORT/v1` |
| `chat` | `POST /v1/chat/completions` | `chat.completion` | `http://127.0.0.1:PORT/v1` |
| `messages` | `POST /v1/messages` | Anthropic `message` | `http://127.0.0.1:PORT` |

`base_url` is what each SDK expects for its `base_url` argument or environment variable: the
openai SDK appends `responses` or `chat/completions` to a base that ends in `/v1`; the anthropic
SDK appends `/v1/messages` to the bare host.

Every request is recorded (`server.requests`: method, path, headers with lower-case names, JSON
body, and `connection`, the number of the connection it came on, 0-based in the order they
were opened), whatever its method or path, so that a test can count them: a client that
follows a redirect with a GET sends a request too, and a client that reuses a connection shows
two requests with one `connection`. A request to a path other than the shape's is
recorded and answered 404 (a misconfigured `base_url` shows at once, not as a mysterious parse
error).

Request number N (0-based, in arrival order) is answered by `server.script[N]` when set, else
by `server.default` (`ok()`). The actions work for every shape:

- `ok(**options)`: a valid body. Options shared by every shape: `text` (default: a structured
  answer citing the first supplied sentence, `answer_for`), `model` (default: the requested
  model, as a dated snapshot `-2026-09-30` for the OpenAI shapes, as asked for Messages),
  `usage` (a raw usage dict, a `fragbench.interfaces.Usage` in the core's terms mapped to the
  shape's fields with None fields left out, a callable of the request number giving either, or
  `"omit"`), `refusal`, `service_tier`. Shape options: `status`, `incomplete_reason`,
  `error_message` (responses); `finish_reason` (chat); `stop_reason` (messages). The neutral
  forms of "incomplete", "refused" and "a status nobody knows" are `Shape.incomplete()`,
  `Shape.refused(text)` and `Shape.unknown_status()`.
- `http_error(code, message, headers=None)`, `raw(code, text, content_type)`,
  `json_body(code, value)`, `sleep(seconds)`, `redirect(code, location)`,
  `trickle(total_seconds, pieces)`, `drop()`.
- Hostile bytes (what a broken server or a middlebox can write): `edited(change, **options)`
  (a valid answer whose JSON text passes through `change` before it is sent: a repeated key,
  a field nested 500 deep), `followed_by(action, data)` (more bytes on the connection after
  the response: `second_response(...)` is a whole second response), `lying_length(delta,
  **options)` (a Content-Length `delta` bytes off the body's), `gzipped(**options)` (a valid
  answer, gzip-encoded), `gzip_bomb(size)` (a small gzip body that decompresses to `size`
  bytes), `raw_bytes(code, data, headers)` (a body given as bytes, with whatever headers,
  e.g. `content-encoding: gzip` on a body that is not).

Every answer carries a request ID header (`x-request-id`, or `request-id` for Messages) and an
account header (`openai-organization`, `anthropic-organization-id`) whose value must never be
written: only bodies are kept.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from fragbench.interfaces import COST_FIELDS, Usage

API_SHAPES = ("responses", "chat", "messages")
SNAPSHOT = "-2026-09-30"
"""The date suffix the OpenAI shapes add to the requested model, as the API answers a model
alias with a dated snapshot of it."""

OPENAI_ACCOUNT = ("openai-organization", "org-SECRETACCOUNT123")
ANTHROPIC_ACCOUNT = ("anthropic-organization-id", "9f2c41d7-account-5e1b-8a36-c0ffee5ecre7")


# -- What a client asked ------------------------------------------------------------------------

def _text_of(value: Any) -> str:
    """The text of a content value: a string, or a list of parts (`{"type": "text", "text"}`,
    `{"type": "input_text", "text"}`, or input items holding `content` of their own)."""
    if isinstance(value, str):
        return value
    parts: list[str] = []
    if isinstance(value, list):
        for item in value:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict):
                if isinstance(item.get("text"), str):
                    parts.append(item["text"])
                elif "content" in item:
                    parts.append(_text_of(item["content"]))
    return "\n".join(parts)


def user_text(body: Any) -> str:
    """The user's text in a request body of any shape: Responses `input`; Chat Completions and
    Messages, the content of the last message (a string or a list of text parts)."""
    if not isinstance(body, dict):
        return ""
    if "input" in body:
        return _text_of(body["input"])
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        return _text_of(messages[-1].get("content"))
    return ""


def supplied_lines(body: Any) -> list[tuple[str, str]]:
    """The supplied sentences, `[ID] text` lines of the user's text, as (ID, text)."""
    found = []
    for line in user_text(body).splitlines():
        if line.startswith("[") and "] " in line:
            fid, _, text = line[1:].partition("] ")
            found.append((fid, text))
    return found


def answer_for(body: Any) -> str:
    """A plausible structured answer: cite the first supplied sentence's first words."""
    lines = supplied_lines(body)
    citations = []
    if lines:
        fid, text = lines[0]
        citations.append({"id": fid, "extract": " ".join(text.split()[:5])})
    return json.dumps({"answer": "See the cited sentence.", "citations": citations})


# -- Bodies -------------------------------------------------------------------------------------

def default_usage(number: int) -> dict[str, Any]:
    """The Responses shape's default usage: different for every request, so that a cost
    attributed to the wrong call shows. (`Shape.default_usage` gives it for every shape, in
    the core's terms.)"""
    return RESPONSES.usage_body(RESPONSES.default_usage(number))


def response_body(text: str, *, model: str = "gpt-6-astra-2026-09-30", status: str = "completed",
                  service_tier: str = "default", usage: Any = None,
                  refusal: str | None = None, incomplete_reason: str | None = None,
                  error_message: str = "The model failed.", number: int = 0) -> dict[str, Any]:
    """A Responses API `response` object (what the SDK parses, even under strict validation)."""
    content: list[dict[str, Any]] = []
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    elif text:
        content.append({"type": "output_text", "text": text, "annotations": []})
    body: dict[str, Any] = {
        "id": f"resp_{number:04d}", "object": "response", "created_at": 1_780_000_000 + number,
        "status": status, "model": model, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "error": None,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "service_tier": service_tier,
        "output": [{"type": "message", "id": f"msg_{number:04d}", "role": "assistant",
                    "status": "completed", "content": content}],
        "usage": RESPONSES.resolve_usage(usage, number, None),
    }
    if usage == "omit":
        del body["usage"]
    if status == "failed":
        body["error"] = {"code": "server_error", "message": error_message}
    return body


def chat_body(text: str, *, model: str = "gpt-6-astra-2026-09-30", finish_reason: str = "stop",
              service_tier: str | None = None, usage: Any = None,
              refusal: str | None = None, number: int = 0) -> dict[str, Any]:
    """A Chat Completions `chat.completion` object. A refusal leaves `content` null and fills
    `message.refusal`, as the API does."""
    body: dict[str, Any] = {
        "id": f"chatcmpl-{number:04d}", "object": "chat.completion",
        "created": 1_780_000_000 + number, "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason, "logprobs": None,
                     "message": {"role": "assistant",
                                 "content": None if refusal is not None else text,
                                 "refusal": refusal, "annotations": []}}],
        "usage": CHAT.resolve_usage(usage, number, None),
        "service_tier": service_tier, "system_fingerprint": "fp_loopback",
    }
    if usage == "omit":
        del body["usage"]
    return body


def message_body(text: str, *, model: str = "claude-loopback-1", stop_reason: str = "end_turn",
                 service_tier: str = "standard", usage: Any = None,
                 refusal: str | None = None, number: int = 0) -> dict[str, Any]:
    """An Anthropic Messages `message` object. The service tier is reported inside `usage`.
    A refusal is `stop_reason: "refusal"` with the refusal's text as the content, as the API
    answers when a classifier stops the model."""
    if refusal is not None:
        text, stop_reason = refusal, "refusal"
    body: dict[str, Any] = {
        "id": f"msg_{number:04d}", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": stop_reason, "stop_sequence": None,
        "usage": MESSAGES.resolve_usage(usage, number, service_tier),
    }
    if usage == "omit":
        del body["usage"]
    return body


class Shape:
    """One API: its path, its bodies, its usage fields, and its neutral fault forms.

    The usage mapping is the point of the backend fault suite's cost check: the kit scripts a
    usage in the core's terms (`fragbench.interfaces.Usage`: input tokens *including* cached
    and cache-write tokens), writes it as this API reports it, and expects the backend to read
    it back to the same core figures, so that the cost is what the frozen pricing says.
    """

    name: str
    path: str
    suffix: str
    """What `base_url` adds to `http://127.0.0.1:PORT`."""
    fields: frozenset[str]
    """The core's cost fields this API can report (`fragbench.interfaces.COST_FIELDS`)."""
    default_fields: frozenset[str]
    """Those its default bodies carry (what the API reports without being asked more)."""
    limit_keys: tuple[str, ...]
    """Request fields that carry the output-token limit."""
    key_env: str
    url_env: str
    request_id_header: str
    account_header: tuple[str, str]
    default_model: str

    def incomplete(self) -> dict[str, Any]:
        """`ok()` options for an answer cut at the output limit (collection goes on)."""
        raise NotImplementedError

    def unknown_status(self) -> dict[str, Any]:
        """`ok()` options for a status or stop reason the core does not know (the series
        stops)."""
        raise NotImplementedError

    def refused(self, text: str) -> dict[str, Any]:
        """`ok()` options for a refusal (recorded; collection goes on)."""
        return {"refusal": text}

    def default_usage(self, number: int) -> Usage:
        """Different for every request; fields this API lacks are None."""
        return Usage(
            input_tokens=400 + number,
            cached_tokens=100 if "cached_tokens" in self.default_fields else None,
            cache_write_tokens=50 if "cache_write_tokens" in self.default_fields else None,
            output_tokens=300 + number,
            reasoning_tokens=200 if self.reports_reasoning else None,
        )

    reports_reasoning: bool = True

    def usage_body(self, usage: Usage, service_tier: str | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def resolve_usage(self, usage: Any, number: int, service_tier: str | None) -> Any:
        """The `usage` value of a body from an `ok(usage=...)` option."""
        if callable(usage):
            usage = usage(number)
        if usage is None:
            usage = self.default_usage(number)
        if isinstance(usage, Usage):
            return self.usage_body(usage, service_tier)
        return usage

    def body(self, text: str, *, number: int, request: Any, **options: Any) -> dict[str, Any]:
        raise NotImplementedError

    def echo_model(self, request: Any) -> str:
        """The model a well-behaved server answers with: the one asked for (dated snapshot for
        the OpenAI shapes); the shape's default when the request names none."""
        model = request.get("model") if isinstance(request, dict) else None
        if not isinstance(model, str) or not model:
            return self.default_model
        return model + SNAPSHOT if self.name in ("responses", "chat") else model

    def error_body(self, message: str, kind: str = "server_error") -> dict[str, Any]:
        return {"error": {"message": message, "type": kind}}


def _drop_none(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


class _Responses(Shape):
    name, path, suffix = "responses", "/v1/responses", "/v1"
    fields = default_fields = frozenset(COST_FIELDS)
    limit_keys = ("max_output_tokens",)
    key_env, url_env = "OPENAI_API_KEY", "OPENAI_BASE_URL"
    request_id_header, account_header = "x-request-id", OPENAI_ACCOUNT
    default_model = "gpt-6-astra-2026-09-30"

    def incomplete(self) -> dict[str, Any]:
        return {"status": "incomplete", "incomplete_reason": "max_output_tokens", "text": ""}

    def unknown_status(self) -> dict[str, Any]:
        return {"status": "expired"}

    def usage_body(self, usage: Usage, service_tier: str | None = None) -> dict[str, Any]:
        total = None
        if usage.input_tokens is not None and usage.output_tokens is not None:
            total = usage.input_tokens + usage.output_tokens
        return _drop_none({
            "input_tokens": usage.input_tokens,
            "input_tokens_details": _drop_none({"cached_tokens": usage.cached_tokens,
                                                "cache_write_tokens": usage.cache_write_tokens}),
            "output_tokens": usage.output_tokens,
            "output_tokens_details": _drop_none({"reasoning_tokens": usage.reasoning_tokens}),
            "total_tokens": total,
        })

    def body(self, text: str, *, number: int, request: Any, **options: Any) -> dict[str, Any]:
        options.setdefault("model", self.echo_model(request))
        return response_body(text, number=number, **options)


class _Chat(Shape):
    name, path, suffix = "chat", "/v1/chat/completions", "/v1"
    fields = frozenset(COST_FIELDS)
    default_fields = frozenset({"input_tokens", "output_tokens"})
    """Chat Completions can report cached prompt tokens and cache writes
    (`prompt_tokens_details`, as the openai SDK reads it); the default body, like an
    OpenAI-compatible local server's, carries neither, and names no service tier."""
    limit_keys = ("max_completion_tokens", "max_tokens")
    key_env, url_env = "OPENAI_API_KEY", "OPENAI_BASE_URL"
    request_id_header, account_header = "x-request-id", OPENAI_ACCOUNT
    default_model = "gpt-6-astra-2026-09-30"

    def incomplete(self) -> dict[str, Any]:
        return {"finish_reason": "length"}

    def unknown_status(self) -> dict[str, Any]:
        return {"finish_reason": "expired"}

    def usage_body(self, usage: Usage, service_tier: str | None = None) -> dict[str, Any]:
        total = None
        if usage.input_tokens is not None and usage.output_tokens is not None:
            total = usage.input_tokens + usage.output_tokens
        return _drop_none({
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": total,
            "prompt_tokens_details": _drop_none({"cached_tokens": usage.cached_tokens,
                                                 "cache_write_tokens": usage.cache_write_tokens}),
            "completion_tokens_details": _drop_none({"reasoning_tokens":
                                                     usage.reasoning_tokens}),
        })

    def body(self, text: str, *, number: int, request: Any, **options: Any) -> dict[str, Any]:
        options.setdefault("model", self.echo_model(request))
        return chat_body(text, number=number, **options)


class _Messages(Shape):
    name, path, suffix = "messages", "/v1/messages", ""
    fields = default_fields = frozenset(COST_FIELDS)
    limit_keys = ("max_tokens",)
    key_env, url_env = "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"
    request_id_header, account_header = "request-id", ANTHROPIC_ACCOUNT
    default_model = "claude-loopback-1"

    def incomplete(self) -> dict[str, Any]:
        return {"stop_reason": "max_tokens"}

    def unknown_status(self) -> dict[str, Any]:
        return {"stop_reason": "expired"}
    reports_reasoning = False
    """Extended thinking is billed inside output_tokens, with no count of its own."""

    def usage_body(self, usage: Usage, service_tier: str | None = None) -> dict[str, Any]:
        """The Messages API reports `input_tokens` *without* the cache: the core's total less
        the cache reads and writes (a None part counts as zero there, and is left out)."""
        uncached = None
        if usage.input_tokens is not None:
            uncached = (usage.input_tokens - (usage.cached_tokens or 0)
                        - (usage.cache_write_tokens or 0))
        return _drop_none({
            "input_tokens": uncached,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "output_tokens": usage.output_tokens,
            "service_tier": service_tier if service_tier is not None else "standard",
        })

    def body(self, text: str, *, number: int, request: Any, **options: Any) -> dict[str, Any]:
        options.setdefault("model", self.echo_model(request))
        return message_body(text, number=number, **options)

    def error_body(self, message: str, kind: str = "api_error") -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}


RESPONSES: Shape = _Responses()
CHAT: Shape = _Chat()
MESSAGES: Shape = _Messages()
SHAPES: dict[str, Shape] = {s.name: s for s in (RESPONSES, CHAT, MESSAGES)}


# -- Actions ------------------------------------------------------------------------------------

Action = Callable[["Handler", int, dict[str, Any]], None]


def ok(**options: Any) -> Action:
    """A valid answer in the server's shape (options: the module docstring)."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        given = dict(options)  # the action may answer many requests: never consume it
        text = given.pop("text") if "text" in given else answer_for(body)
        handler.send_json(200, handler.server.shape.body(text, number=number, request=body,
                                                         **given))
    return act


def http_error(code: int, message: str = "error", headers: dict[str, str] | None = None
               ) -> Action:
    """An HTTP error with the shape's error body; `headers` such as `x-should-retry: true`
    (which makes both SDKs retry any status, unless retries are off)."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.send_json(code, handler.server.shape.error_body(message), headers)
    return act


def raw(code: int, text: str, content_type: str = "application/json") -> Action:
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        data = text.encode()
        handler.send_response(code)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return act


def json_body(code: int, value: Any) -> Action:
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.send_json(code, value)
    return act


def sleep(seconds: float) -> Action:
    """Answer validly after `seconds`: a client with a shorter timeout has gone by then."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        time.sleep(seconds)
        handler.send_json(200, handler.server.shape.body(answer_for(body), number=number,
                                                         request=body))
    return act


def redirect(code: int, location: str) -> Action:
    """A 3xx pointing elsewhere: a client that follows it sends a second request for one call."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        data = json.dumps(handler.server.shape.error_body("moved", "redirect")).encode()
        handler.send_response(code)
        handler.send_header("location", location)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return act


def trickle(total_seconds: float, pieces: int) -> Action:
    """A valid response whose body arrives in `pieces` parts spread over `total_seconds`.

    Each pause is short, so no single read waits long: only a deadline on the whole request
    stops the client before the end. Once the client has gone the writes fail; the handler then
    stops quietly instead of printing a traceback into the test's output.
    """
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        answer = handler.server.shape.body(answer_for(body), number=number, request=body)
        data = json.dumps(answer).encode()
        size = -(-len(data) // pieces)
        try:
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            for start in range(0, len(data), size):
                time.sleep(total_seconds / pieces)
                handler.wfile.write(data[start:start + size])
                handler.wfile.flush()
        except OSError:  # BrokenPipeError, ConnectionResetError: the client gave up
            handler.close_connection = True
    return act


def drop() -> Action:
    """Read the request, then close the connection without a response."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.close_connection = True
        handler.connection.shutdown(2)
    return act


def _answer(handler: Handler, number: int, body: dict[str, Any], options: dict[str, Any]
            ) -> bytes:
    """The JSON text of a valid answer in the server's shape (`ok`'s options)."""
    given = dict(options)
    text = given.pop("text") if "text" in given else answer_for(body)
    return json.dumps(handler.server.shape.body(text, number=number, request=body, **given)
                      ).encode()


def _send_bytes(handler: Handler, code: int, data: bytes, headers: dict[str, str] | None = None,
                length: int | None = None) -> None:
    """Status, the shape's request-ID header, `headers`, a Content-Length (`length`, or the
    body's), then `data` as it is."""
    handler.send_response(code)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data) if length is None else length))
    handler.send_header(handler.server.shape.request_id_header,
                        f"req_{len(handler.server.requests):04d}")
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    try:
        handler.wfile.write(data)
        handler.wfile.flush()
    except OSError:  # the client saw enough and went: what a hostile server expects
        handler.close_connection = True


def edited(change: Callable[[str], str | bytes], **options: Any) -> Action:
    """A valid answer (`ok`'s options) whose JSON text passes through `change` before it goes
    out, with a Content-Length that matches what is sent."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        changed = change(_answer(handler, number, body, options).decode())
        _send_bytes(handler, 200, changed.encode() if isinstance(changed, str) else changed)
    return act


def second_response(text: str = "a second answer", code: int = 200) -> bytes:
    """The bytes of a whole HTTP/1.1 response, as a server or a middlebox could write after
    the one a client asked for."""
    body = json.dumps({"note": text}).encode()
    return (f"HTTP/1.1 {code} OK\r\ncontent-type: application/json\r\ncontent-length: "
            f"{len(body)}\r\n\r\n").encode() + body


def followed_by(action: Action, data: bytes) -> Action:
    """`action`, then `data` written on the same connection, before it closes."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        action(handler, number, body)
        try:
            handler.wfile.write(data)
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True
    return act


def lying_length(delta: int, **options: Any) -> Action:
    """A valid answer whose Content-Length says `delta` bytes more (or, negative, fewer) than
    the body sent; the connection is closed after it."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        data = _answer(handler, number, body, options)
        handler.close_connection = True
        _send_bytes(handler, 200, data, length=len(data) + delta)
    return act


def gzipped(**options: Any) -> Action:
    """A valid answer (`ok`'s options), sent gzip-encoded."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        data = packer.compress(_answer(handler, number, body, options)) + packer.flush()
        _send_bytes(handler, 200, data, {"content-encoding": "gzip"})
    return act


_BOMBS: dict[int, bytes] = {}


def gzip_bomb(size: int) -> Action:
    """A gzip body of about 1 KiB per MiB that decompresses to `size` spaces (it is
    built once per size, in pieces, never whole in memory)."""
    if size not in _BOMBS:
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        piece, parts = b" " * (1 << 20), []
        for start in range(0, size, len(piece)):
            parts.append(packer.compress(piece[:size - start]))
        _BOMBS[size] = b"".join(parts) + packer.flush()
    data = _BOMBS[size]

    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        _send_bytes(handler, 200, data, {"content-encoding": "gzip"})
    return act


def raw_bytes(code: int, data: bytes, headers: dict[str, str] | None = None) -> Action:
    """`data` as the body, as it is, with `headers` (e.g. `content-encoding: gzip` on a body
    that is not gzip)."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        _send_bytes(handler, code, data, headers)
    return act


# -- The server ---------------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds the
    # body until the client's delayed ACK, about 40 ms a call spent waiting in the kernel.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        return None

    def setup(self) -> None:
        super().setup()
        self.connection_number = next(self.server.connections)

    def send_json(self, code: int, value: Any, headers: dict[str, str] | None = None) -> None:
        shape = self.server.shape
        data = json.dumps(value).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header(shape.request_id_header, f"req_{len(self.server.requests):04d}")
        self.send_header(*shape.account_header)
        for name, header_value in (headers or {}).items():
            self.send_header(name, header_value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        payload = self.rfile.read(length)
        try:
            body = json.loads(payload)
        except ValueError:
            body = {}
        server = self.server
        with server.lock:
            number = len(server.requests)
            # Header names in lower case: the SDKs spell them differently (x-api-key,
            # X-Stainless-Retry-Count), and HTTP does not care.
            server.requests.append({"method": self.command, "path": self.path,
                                    "headers": {k.lower(): v for k, v in self.headers.items()},
                                    "body": body, "connection": self.connection_number})
            action = server.script.get(number, server.default)
        if urlsplit(self.path).path != server.shape.path:
            self.send_json(404, server.shape.error_body(
                f"no route {self.path}: this loopback server speaks the {server.api} API at "
                f"{server.shape.path} (base_url {server.base_url})", "not_found"))
            return
        action(self, number, body)

    def __getattr__(self, name: str) -> Any:
        # The base class answers a method it has no do_<METHOD> for with 501 and records
        # nothing; every method (a GET after a 302, a PUT, ...) is a request and must be
        # counted, so each one goes through do_POST's recording and the script.
        if name.startswith("do_"):
            return self.do_POST
        raise AttributeError(name)


class Server(ThreadingHTTPServer):
    """The loopback server of one API shape; start it with `with Server(api) as server:` (or
    `start()` / `stop()`).

    `requests`: every request received. `script`: request number -> action. `default`: the
    action for any other request. `errors`: what handlers raised (a client that gave up breaks
    the pipe: expected in fault tests, kept here rather than printed into the test's output).
    """

    daemon_threads = True

    def __init__(self, api: str = "responses") -> None:
        if api not in SHAPES:
            raise ValueError(f"unknown API shape {api!r}; the shapes are {', '.join(SHAPES)}")
        super().__init__(("127.0.0.1", 0), Handler)
        self.api = api
        self.shape = SHAPES[api]
        self.requests: list[dict[str, Any]] = []
        self.script: dict[int, Action] = {}
        self.default: Action = ok()
        self.lock = threading.Lock()
        self.connections = itertools.count()
        """Numbers the connections as they are accepted (`requests[i]["connection"]`)."""
        # Polled every 50 ms rather than the default 500: `stop` waits for the next poll, and
        # a test suite stops one server per test.
        self.thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True,
                                       name=f"fragbench-loopback-{api}")
        self.errors: list[str] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Kept for inspection instead of printed: the command under test runs in this process
        and its stderr is what the tests read."""
        self.errors.append(repr(sys.exc_info()[1]))

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What the shape's SDK takes as its base URL (the module docstring's table)."""
        return self.origin + self.shape.suffix

    @property
    def url(self) -> str:
        """The full URL of the shape's endpoint (where a redirect back here points)."""
        return self.origin + self.shape.path

    def reset(self) -> None:
        """Forget what was received and scripted: a fresh server, on the same port."""
        with self.lock:
            self.requests.clear()
            self.script.clear()
            self.default = ok()
            self.errors.clear()

    def start(self) -> Server:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
