"""A loopback HTTP server that speaks any model API described as a `Shape`, with scriptable
faults; three shapes are built in.

The real SDKs (openai, anthropic: both on httpx2, which plain `respx` does not intercept) talk
to a real server on 127.0.0.1, so what is tested is what runs: the SDK's retries, redirects,
timeouts and parsing included. One `Server` serves one API shape: a built-in one by name,

| shape | path | bodies | `base_url` |
|---|---|---|---|
| `responses` | `POST /v1/responses` | Responses `response` | `http://127.0.0.1:PORT/v1` |
| `chat` | `POST /v1/chat/completions` | `chat.completion` | `http://127.0.0.1:PORT/v1` |
| `messages` | `POST /v1/messages` | Anthropic `message` | `http://127.0.0.1:PORT` |

`base_url` is what each SDK expects for its `base_url` argument or environment variable: the
openai SDK appends `responses` or `chat/completions` to a base that ends in `/v1`; the anthropic
SDK appends `/v1/messages` to the bare host.

or one of your own: `Server(MyShape())`, where `MyShape` subclasses `Shape` to say where a
request holds the model (its path, `/v1beta/models/{model}:generateContent`, or a body field),
the output limit (body fields, dotted: `generationConfig.maxOutputTokens`) and the user's text;
how a valid answer, its usage (in the core's terms mapped to the API's fields), an error and
the neutral faults (cut at the limit, refused, a status nobody knows) are written; its key and
URL variables, request-ID and account headers, base-URL suffix, and the cost fields it can
report and reports by default (`Shape`'s docstring; docs/testing-kit.md has an example). The
backend fault suite (`fragbench.testing.check_backend`) reads every request and writes every
answer through the shape, so a shape of your own runs the whole suite.

Every request is recorded (`server.requests`, each a `Received`: a dict of method, path,
headers with lower-case names, `header_lines` (every header as sent, duplicates kept), JSON
body, and `connection`, the number of the connection it came on, 0-based in the order they
were opened), whatever its method or path, so that a test can count them: a client that
follows a redirect with a GET sends a request too, and a client that reuses a connection shows
two requests with one `connection`. A request to a path other than the shape's is recorded
and answered 404 (a misconfigured `base_url` shows at once, not as a mysterious parse error).

Request number N (0-based, in arrival order) is answered by `server.script[N]` when set, else
by `server.default` (`ok()`). The actions work for every shape:

- `ok(**options)`: a valid body. Options shared by every shape: `text` (default: a structured
  answer citing the first supplied sentence of the shape's `user_text`), `model` (default: the
  requested model plus the shape's `snapshot`: a dated `-2026-09-30` for the OpenAI shapes),
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
account header (`openai-organization`, `anthropic-organization-id`; a shape's `account_header`)
whose value must never be written: only bodies are kept.

Imports nothing heavy (no Polars, no SDK): the kit's pytest plugin loads it in every run.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from fragbench.interfaces import COST_FIELDS, Usage

API_SHAPES = ("responses", "chat", "messages")
"""The names of the built-in API shapes (`Server(name)`)."""
SNAPSHOT = "-2026-09-30"
"""The date suffix the OpenAI shapes add to the requested model, as the API answers a model
alias with a dated snapshot of it."""

OPENAI_ACCOUNT = ("openai-organization", "org-SECRETACCOUNT123")
"""The account header the OpenAI shapes send with every response: an account id that must
never be written or printed (the fault suite looks for it)."""
ANTHROPIC_ACCOUNT = ("anthropic-organization-id", "9f2c41d7-account-5e1b-8a36-c0ffee5ecre7")
"""The account header the Messages shape sends with every response (as OPENAI_ACCOUNT)."""


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
    return lines_in(user_text(body))


def lines_in(text: str) -> list[tuple[str, str]]:
    """The `[ID] text` lines of a user text, as (ID, text)."""
    found = []
    for line in text.splitlines():
        if line.startswith("[") and "] " in line:
            fid, _, rest = line[1:].partition("] ")
            found.append((fid, rest))
    return found


def answer_for(body: Any) -> str:
    """A plausible structured answer to a request body of a built-in shape (`answer_citing`
    its user text)."""
    return answer_citing(user_text(body))


def answer_citing(text: str) -> str:
    """A plausible structured answer to a user text: cite the first supplied sentence's first
    words."""
    lines = lines_in(text)
    citations = []
    if lines:
        fid, sentence = lines[0]
        citations.append({"id": fid, "extract": " ".join(sentence.split()[:5])})
    return json.dumps({"answer": "See the cited sentence.", "citations": citations})


# -- Bodies -------------------------------------------------------------------------------------

USAGE_CYCLE = 200
"""How many requests in a row get a usage of their own (`Shape.default_usage`)."""


def default_usage(number: int) -> dict[str, Any]:
    """The Responses shape's default usage: different for each of USAGE_CYCLE neighbouring
    requests, so that a cost attributed to the wrong call shows. (`Shape.default_usage` gives
    it for every shape, in the core's terms.)"""
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


class Received(dict[str, Any]):
    """One request as the server received it (an entry of `server.requests`): a dict with
    `method`, `path` (with any query), `headers` (names in lower case), `header_lines` (every
    header as it came, `(name, value)` in order, names as the client spelled them: a header
    sent twice shows twice), `body` (the JSON body, `{}` when it was none) and `connection`
    (the number of the connection it came on). A dict,
    so that `request["body"]` reads as before; a type of its own, so that a Shape can tell it
    from a bare JSON body."""

    @classmethod
    def of_body(cls, body: Any, path: str = "") -> Received:
        """A request known only by its JSON body (what `Shape.body` is given by a caller that
        has no recorded request)."""
        return cls(method="POST", path=path, headers={}, header_lines=[], body=body,
                   connection=None)


_MISSING = object()


def field_at(value: Any, dotted: str) -> Any:
    """The value at a dotted path (`generationConfig.maxOutputTokens`) in nested JSON objects,
    or `_MISSING` where any step is absent or not an object. Each step is one dict look-up:
    nothing is walked recursively."""
    for step in dotted.split("."):
        if not isinstance(value, dict) or step not in value:
            return _MISSING
        value = value[step]
    return value


class Shape:
    """An API shape: everything the loopback server and the backend fault suite need to know
    about one model API. Subclass it (set the attributes, write the methods marked "write
    this"), then `Server(MyShape())` serves it and `check_backend(backend, params, server)`
    runs every scenario through it. The three built-in shapes (`RESPONSES`, `CHAT`,
    `MESSAGES`) are written this way.

    The usage mapping is the point of the fault suite's cost check: the kit scripts a usage in
    the core's terms (`fragbench.interfaces.Usage`: input tokens *including* cached and
    cache-write tokens, output tokens *including* reasoning ones), the shape writes it as its
    API reports it (`usage_body`), and the backend must read it back to the same core figures,
    so that the cost is what the frozen pricing says.

    Where a request says things (the suite checks every request through these, never
    assuming a key of its own): the model asked for (`model_of`: the `{model}` segment of
    `path`, else the body field `model_key`), the output-token limits (`limits_of`: the body
    fields `limit_keys`), the user's text (`user_text`, which the default answer cites).
    Field names are dotted paths into nested JSON objects (`generationConfig.maxOutputTokens`).
    """

    # -- What the API is (set these) ----------------------------------------------------------
    name: str
    """Its name, in messages and the server's thread name."""
    path: str
    """The request path. It may hold `{model}`, the model asked for (percent-encoded), as in
    `/v1beta/models/{model}:generateContent`; any other request path is answered 404."""
    suffix: str = ""
    """What the backend's base URL adds to `http://127.0.0.1:PORT` (`Server.base_url`)."""
    key_env: str
    """The variable the API's key is read from (check_backend's default `key_env`)."""
    url_env: str
    """The variable the base URL is read from (check_backend's default `url_env`)."""
    request_id_header: str = "x-request-id"
    """The response header carrying the request ID (every answer sends one)."""
    account_header: tuple[str, str] = ("x-loopback-account", "acct-SECRETLOOPBACK4821")
    """A response header naming the account (name, value): the value must never be written."""
    default_model: str = "loopback-model"
    """The model an answer names when the request names none."""
    snapshot: str = ""
    """What an answer adds to the model asked for (the OpenAI shapes answer an alias with a
    dated snapshot, `-2026-09-30`)."""

    # -- Where a request says things ---------------------------------------------------------
    model_key: str | None = "model"
    """The body field holding the model asked for; None when only the path holds it."""
    limit_keys: tuple[str, ...] = ()
    """The body fields that can carry the output-token limit: every one a request sets must be
    the contract's ceiling, and it must set at least one."""

    # -- What an answer says ------------------------------------------------------------------
    usage_key: str = "usage"
    """The top-level key of an answer holding its usage (the suite repeats it in one
    scenario: a body with two usages is no response)."""
    answer_model_key: str = "model"
    """The top-level key of an answer naming its model (repeated the same way)."""
    fields: frozenset[str] = frozenset()
    """The core's cost fields this API can report (`fragbench.interfaces.COST_FIELDS`)."""
    default_fields: frozenset[str] = frozenset()
    """Those its default bodies carry (what the API reports without being asked more)."""
    omitted_when_zero: frozenset[str] = frozenset()
    """Cost fields the API leaves out when they are zero (Gemini's `cachedContentTokenCount`
    when nothing was read from a cache): a backend reads them absent as zero, so the suite's
    "a usage without FIELD" scenario, which needs absent to mean unknown, is not run for
    them."""
    reports_reasoning: bool = True
    """Whether the API counts reasoning tokens apart (the default usage then has some)."""
    reports_tier: bool = True
    """Whether an answer can name the service tier it was served on. When False, the suite's
    "another service tier" scenario is not run, and a contract naming a tier is refused."""

    # -- Reading a request (override when the defaults do not fit) ----------------------------
    def matches(self, path: str) -> bool:
        """Whether a request path (its query left out) is this API's."""
        return self._pattern().fullmatch(path) is not None

    def path_for(self, model: str) -> str:
        """The request path for `model` (`path` with `{model}` filled in)."""
        return self.path.replace("{model}", quote(model, safe=""))

    def _pattern(self) -> re.Pattern[str]:
        before, marker, after = self.path.partition("{model}")
        middle = "(?P<model>[^/]+?)" if marker else ""
        return re.compile(re.escape(before) + middle + re.escape(after))

    def model_of(self, request: Received) -> str | None:
        """The model a request asks for: the `{model}` segment of its path when `path` has
        one, else the body's `model_key` field; None when it names none (or not as a
        string)."""
        if "{model}" in self.path:
            found = self._pattern().fullmatch(urlsplit(str(request.get("path", ""))).path)
            if found:
                return unquote(found["model"])
        if self.model_key is None:
            return None
        model = field_at(request.get("body"), self.model_key)
        return model if isinstance(model, str) else None

    def limits_of(self, request: Received) -> dict[str, Any]:
        """The output-token limits a request sets: `limit_keys` field -> value."""
        body = request.get("body")
        found = {key: field_at(body, key) for key in self.limit_keys}
        return {key: value for key, value in found.items() if value is not _MISSING}

    def user_text(self, request: Received) -> str:
        """The user's text in a request (the default answer cites its first `[ID] sentence`
        line). The default reads Responses `input` or the last message's `content`
        (`user_text`); a shape whose requests put it elsewhere overrides this."""
        return user_text(request.get("body"))

    # -- Writing answers (write these) --------------------------------------------------------
    def answer_body(self, text: str, *, number: int, model: str, usage: dict[str, Any] | None,
                    **options: Any) -> dict[str, Any]:
        """Write this: a valid answer body. `text` is the answer, `model` the model it names,
        `usage` the usage object as `usage_body` wrote it (or as a test gave it raw), None to
        leave it out; `number` the request's number (for IDs). `options` are the other `ok()`
        options: `refusal`, `service_tier`, and the shape's own (a stop reason...)."""
        raise NotImplementedError

    def usage_body(self, usage: Usage, service_tier: str | None = None) -> dict[str, Any]:
        """Write this: `usage`, in the core's terms, as the API reports it. A None field is
        left out (the suite's "a usage without FIELD" scenarios); `service_tier` is the
        answer's, for an API that reports it inside the usage."""
        raise NotImplementedError

    def incomplete(self) -> dict[str, Any]:
        """Write this: `ok()` options for an answer cut at the output limit (the backend
        records it `incomplete`; collection goes on)."""
        raise NotImplementedError

    def unknown_status(self) -> dict[str, Any]:
        """Write this: `ok()` options for a status or stop reason the core does not know (the
        backend passes it on; the series stops)."""
        raise NotImplementedError

    def refused(self, text: str) -> dict[str, Any]:
        """`ok()` options for a refusal (the backend records it with a `refusal`; collection
        goes on). Default: the `refusal` option."""
        return {"refusal": text}

    def error_body(self, message: str, kind: str = "server_error") -> dict[str, Any]:
        """The body of an HTTP error (`http_error`, a 404 for a wrong path, a redirect's)."""
        return {"error": {"message": message, "type": kind}}

    # -- Given (what the server and the suite call) -------------------------------------------
    def default_usage(self, number: int, limit: int | None = None) -> Usage:
        """Different for each of USAGE_CYCLE neighbouring requests (a cost attributed to the
        wrong call shows), then the same again: input `400 + number % USAGE_CYCLE`, output
        `300 + number % USAGE_CYCLE`, never above the request's own output limit (`limit`,
        when it sets one), so that a series of any number of calls stays within the bounds
        its plan reserved for (a count that kept growing would cross any ceiling of tokens
        after enough requests, and a correct client stops there). Fields this API lacks are
        None."""
        step = number % USAGE_CYCLE
        output = 300 + step if limit is None else min(300 + step, limit)
        return Usage(
            input_tokens=400 + step,
            cached_tokens=100 if "cached_tokens" in self.default_fields else None,
            cache_write_tokens=50 if "cache_write_tokens" in self.default_fields else None,
            output_tokens=output,
            reasoning_tokens=(min(200, output) if self.reports_reasoning else None),
        )

    def resolve_usage(self, usage: Any, number: int, service_tier: str | None,
                      limit: int | None = None) -> Any:
        """The usage object of an answer from an `ok(usage=...)` option: a `Usage` (or a
        callable of the request number giving one, or None for `default_usage` under the
        request's output `limit`) written by `usage_body`; a raw value as it is; None for
        `"omit"`."""
        if callable(usage):
            usage = usage(number)
        if usage is None:
            usage = self.default_usage(number, limit)
        if isinstance(usage, Usage):
            return self.usage_body(usage, service_tier)
        return None if usage == "omit" else usage

    def echo_model(self, request: Any) -> str:
        """The model a well-behaved server answers with: the one asked for plus `snapshot`;
        `default_model` when the request names none. `request`: a `Received`, or a JSON body
        alone."""
        if not isinstance(request, Received):
            request = Received.of_body(request)
        model = self.model_of(request)
        return model + self.snapshot if model else self.default_model

    def default_answer(self, request: Received) -> str:
        """The answer `ok()` sends unless given a `text`: a JSON answer citing the first
        supplied sentence of the request's user text."""
        return answer_citing(self.user_text(request))

    def body(self, text: str, *, number: int, request: Any, **options: Any) -> dict[str, Any]:
        """A valid answer to `request` (a `Received`, or a JSON body alone) with `ok()`'s
        options: `model` defaults to `echo_model`, `usage` is resolved (`resolve_usage`),
        then `answer_body` writes it."""
        options.setdefault("model", self.echo_model(request))
        received = request if isinstance(request, Received) else Received.of_body(request)
        limits = [v for v in self.limits_of(received).values()
                  if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        usage = self.resolve_usage(options.pop("usage", None), number,
                                   options.get("service_tier"), min(limits, default=None))
        return self.answer_body(text, number=number, usage=usage, **options)


def _drop_none(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


def _with_usage(usage: dict[str, Any] | None) -> Any:
    """The body functions' `usage` argument: the usage object, or "omit"."""
    return "omit" if usage is None else usage


class _Responses(Shape):
    name, path, suffix = "responses", "/v1/responses", "/v1"
    fields = default_fields = frozenset(COST_FIELDS)
    limit_keys = ("max_output_tokens",)
    key_env, url_env = "OPENAI_API_KEY", "OPENAI_BASE_URL"
    request_id_header, account_header = "x-request-id", OPENAI_ACCOUNT
    default_model, snapshot = "gpt-6-astra-2026-09-30", SNAPSHOT

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

    def answer_body(self, text: str, *, number: int, model: str, usage: dict[str, Any] | None,
                    **options: Any) -> dict[str, Any]:
        return response_body(text, number=number, model=model, usage=_with_usage(usage),
                             **options)


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
    default_model, snapshot = "gpt-6-astra-2026-09-30", SNAPSHOT

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

    def answer_body(self, text: str, *, number: int, model: str, usage: dict[str, Any] | None,
                    **options: Any) -> dict[str, Any]:
        return chat_body(text, number=number, model=model, usage=_with_usage(usage), **options)


class _Messages(Shape):
    name, path, suffix = "messages", "/v1/messages", ""
    fields = default_fields = frozenset(COST_FIELDS)
    limit_keys = ("max_tokens",)
    key_env, url_env = "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"
    request_id_header, account_header = "request-id", ANTHROPIC_ACCOUNT
    default_model = "claude-loopback-1"
    reports_reasoning = False
    """Extended thinking is billed inside output_tokens, with no count of its own."""

    def incomplete(self) -> dict[str, Any]:
        return {"stop_reason": "max_tokens"}

    def unknown_status(self) -> dict[str, Any]:
        return {"stop_reason": "expired"}

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

    def answer_body(self, text: str, *, number: int, model: str, usage: dict[str, Any] | None,
                    **options: Any) -> dict[str, Any]:
        return message_body(text, number=number, model=model, usage=_with_usage(usage),
                            **options)

    def error_body(self, message: str, kind: str = "api_error") -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}


RESPONSES: Shape = _Responses()
"""The OpenAI Responses API shape (`POST /v1/responses`)."""
CHAT: Shape = _Chat()
"""The Chat Completions shape (`POST /v1/chat/completions`)."""
MESSAGES: Shape = _Messages()
"""The Anthropic Messages API shape (`POST /v1/messages`)."""
SHAPES: dict[str, Shape] = {s.name: s for s in (RESPONSES, CHAT, MESSAGES)}
"""The built-in shapes by name (`Server(name)`)."""


# -- Actions ------------------------------------------------------------------------------------

Action = Callable[["Handler", int, dict[str, Any]], None]
"""How a server answers one request: called with the handler (write the answer through it),
the request's number (0-based) and its JSON body (`{}` when not JSON). The functions below
make them; `Server.script` and `Server.default` hold them."""


def ok(**options: Any) -> Action:
    """A valid answer in the server's shape (options: the module docstring)."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.send_json(200, _valid(handler, number, body, options))
    return act


def _valid(handler: Handler, number: int, body: Any, options: dict[str, Any]
           ) -> dict[str, Any]:
    """A valid answer in the server's shape to the request being answered (`ok`'s options)."""
    shape = handler.server.shape
    request = getattr(handler, "received", None) or Received.of_body(body)
    given = dict(options)  # the action may answer many requests: never consume it
    text = given.pop("text") if "text" in given else shape.default_answer(request)
    return shape.body(text, number=number, request=request, **given)


def http_error(code: int, message: str = "error", headers: dict[str, str] | None = None
               ) -> Action:
    """An HTTP error with the shape's error body; `headers` such as `x-should-retry: true`
    (which makes both SDKs retry any status, unless retries are off)."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.send_json(code, handler.server.shape.error_body(message), headers)
    return act


def raw(code: int, text: str, content_type: str = "application/json") -> Action:
    """`text` as the body, with status `code` and `content_type`: any body, valid or not."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        data = text.encode()
        handler.send_response(code)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return act


def json_body(code: int, value: Any) -> Action:
    """`value` as a JSON body with status `code` (and the shape's usual headers)."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        handler.send_json(code, value)
    return act


def sleep(seconds: float) -> Action:
    """Answer validly after `seconds`: a client with a shorter timeout has gone by then."""
    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        time.sleep(seconds)
        handler.send_json(200, _valid(handler, number, body, {}))
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
        answer = _valid(handler, number, body, {})
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
    return json.dumps(_valid(handler, number, body, options)).encode()


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
    """The request handler of every loopback server: records each request
    (`Server.requests`), then answers it with its scripted `Action`, which receives this
    handler and writes through `send_json` or the base class's `send_response`,
    `send_header`, `end_headers` and `wfile`."""

    server: Server
    """The server this request came to (its shape, script and records)."""
    protocol_version = "HTTP/1.1"
    """Answers are HTTP/1.1, so that a connection may carry more than one request."""
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds the
    # body until the client's delayed ACK, about 40 ms a call spent waiting in the kernel.
    disable_nagle_algorithm = True
    """TCP_NODELAY on every connection (above)."""

    def log_message(self, *args: Any) -> None:
        """Silent: the server logs nothing to stderr (a test's output stays its own)."""
        return None

    def setup(self) -> None:
        """Number the connection as it is accepted (`Received.connection`)."""
        super().setup()
        self.connection_number = next(self.server.connections)

    def send_json(self, code: int, value: Any, headers: dict[str, str] | None = None) -> None:
        """Answer with `value` as JSON and status `code`, with the shape's request-id and
        account headers, then `headers`."""
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
        """Record the request, then answer it with its scripted action (every HTTP method
        comes here); a path the shape does not serve gets a 404."""
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
            self.received = Received(method=self.command, path=self.path,
                                     headers={k.lower(): v for k, v in self.headers.items()},
                                     header_lines=list(self.headers.items()),
                                     body=body, connection=self.connection_number)
            server.requests.append(self.received)
            action = server.script.get(number, server.default)
        if not server.shape.matches(urlsplit(self.path).path):
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
    `start()` / `stop()`). `api`: a built-in shape's name (`responses`, `chat`, `messages`)
    or a `Shape` (an API of your own: the module docstring).

    `requests`: every request received. `script`: request number -> action. `default`: the
    action for any other request. `errors`: what handlers raised (a client that gave up breaks
    the pipe: expected in fault tests, kept here rather than printed into the test's output).
    """

    daemon_threads = True
    """Handler threads never keep the test process alive."""
    request_queue_size = 128
    """The listen backlog: socketserver's default of 5 resets connections when a client
    opens 32 or more at once (and fragbench, never retrying, stops at the first reset)."""

    def __init__(self, api: str | Shape = "responses") -> None:
        if isinstance(api, Shape):
            shape = api
        elif api in SHAPES:
            shape = SHAPES[api]
        else:
            raise ValueError(f"unknown API shape {api!r}; the shapes are {', '.join(SHAPES)}, "
                             "or a fragbench.testing.loopback.Shape of your own")
        super().__init__(("127.0.0.1", 0), Handler)  # listens with request_queue_size
        self.shape = shape
        """The API shape it speaks."""
        self.api = shape.name
        """The shape's name (`responses`, `chat`, `messages`, or your shape's)."""
        self.requests: list[Received] = []
        """Every request received, in arrival order (its method, path, headers, body and
        connection number)."""
        self.script: dict[int, Action] = {}
        """Request number (0-based) -> the action that answers it."""
        self.default: Action = ok()
        """The action for a request the script does not name: a valid answer (`ok()`)."""
        self.lock = threading.Lock()
        """Held while a request is recorded and its action looked up: take it to read
        `requests` or change `script` while a client may be sending."""
        self.connections = itertools.count()
        """Numbers the connections as they are accepted (`requests[i]["connection"]`)."""
        # Polled every 50 ms rather than the default 500: `stop` waits for the next poll, and
        # a test suite stops one server per test.
        self.thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True,
                                       name=f"fragbench-loopback-{shape.name}")
        """The thread that serves requests (`start`, `stop`)."""
        self.errors: list[str] = []
        """What handlers raised, as repr strings (`handle_error`)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Kept for inspection instead of printed: the command under test runs in this process
        and its stderr is what the tests read."""
        self.errors.append(repr(sys.exc_info()[1]))

    @property
    def port(self) -> int:
        """The port it listens on, on 127.0.0.1 (chosen free by the system)."""
        port: int = self.server_address[1]
        return port

    @property
    def origin(self) -> str:
        """`http://127.0.0.1:PORT`, no path."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What the shape's SDK takes as its base URL (the module docstring's table)."""
        return self.origin + self.shape.suffix

    @property
    def url(self) -> str:
        """The full URL of the shape's endpoint (where a redirect back here points); for a
        path holding `{model}`, the shape's `default_model`'s (`url_for`)."""
        return self.url_for(self.shape.default_model)

    def url_for(self, model: str) -> str:
        """The full URL of the shape's endpoint for `model`."""
        return self.origin + self.shape.path_for(model)

    def reset(self) -> None:
        """Forget what was received and scripted: a fresh server, on the same port."""
        with self.lock:
            self.requests.clear()
            self.script.clear()
            self.default = ok()
            self.errors.clear()

    def start(self) -> Server:
        """Start serving in a daemon thread; return the server."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self.shutdown()
        self.server_close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
