"""Built-in backend `openai`: the OpenAI Responses API through the official SDK.

- Exactly one HTTP request per call: the client is built with `max_retries=0` (the SDK retries
  twice by default, with no idempotency key, so a retry could be billed twice), redirects are
  never followed (a 3xx is a technical failure, `http_error`), and `timeout_seconds` bounds
  the whole call; see `fragbench.transport` for these and for what a failed request says
  about billing (`never_sent` only where the request provably never left this machine).
- Each call sends only its own instructions and input: no `previous_response_id`, no
  conversation, `store=False`, `tools=[]`.
- The key comes from OPENAI_API_KEY. The endpoint is OPENAI_BASE_URL when set, else the
  config's optional `base_url` (an OpenAI-compatible server that speaks the Responses API),
  else the SDK's default; it is recorded without any user-info or query part.
- Only the response body is kept, never a header: headers can carry account identifiers
  (`openai-organization`, `openai-project`) and a redirect's `location` can carry anything. The
  request ID is read from `x-request-id`.
- The SDK (and httpx2, its HTTP client) is imported when a session opens, so `fragbench --help`
  never pays for it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from fragbench.errors import FragbenchError
from fragbench.hookspecs import hookimpl
from fragbench.interfaces import COST_FIELDS, BackendFailure, Contract, Reply, Request, Usage
from fragbench.transport import (
    MAY_BE_BILLED,
    PastDeadline,
    connection_failure,
    endpoint,
    no_redirects,
    public_url,
    within,
)

ENV_URL = "OPENAI_BASE_URL"

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "reasoning_effort": str,
    "max_output_tokens": int,
    "service_tier": str,
    "store": bool,
    "timeout_seconds": (int, float),
}
OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "base_url": str,
}
"""`base_url` points the series at an OpenAI-compatible server that speaks the Responses API;
OPENAI_BASE_URL, when set, takes precedence over it, as the SDK's own default does."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_from(body: dict[str, Any]) -> Usage | None:
    """Read the usage block; a field that is absent or not an integer is None (unknown)."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return None
    inp = usage.get("input_tokens_details")
    out = usage.get("output_tokens_details")
    inp = inp if isinstance(inp, dict) else {}
    out = out if isinstance(out, dict) else {}
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        cached_tokens=_int(inp.get("cached_tokens")),
        cache_write_tokens=_int(inp.get("cache_write_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        reasoning_tokens=_int(out.get("reasoning_tokens")),
    )


def _clean(text: str) -> str:
    """Lone surrogates (from JSON escapes such as \\ud83d) become U+FFFD in the parsed text; the
    raw body keeps them as sent."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def reply_from(body: Any, raw: str, request_id: str | None) -> Reply:
    """A Reply from a parsed Responses API body; BackendFailure if it is no Response."""
    if not isinstance(body, dict) or body.get("object") != "response" or not isinstance(
        body.get("status"), str
    ):
        raise BackendFailure("bad_body", "the body is not a Responses API response object",
                             raw=raw, request_id=request_id)
    texts: list[str] = []
    refusals: list[str] = []
    for item in body.get("output") or []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                refusals.append(part["refusal"])
    incomplete = body.get("incomplete_details")
    error = body.get("error")
    return Reply(
        status=body["status"],
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        service_tier=body.get("service_tier") if isinstance(body.get("service_tier"), str)
        else None,
        request_id=request_id,
        usage=usage_from(body),
        text=_clean("".join(texts)) if texts else None,
        refusal=_clean("\n".join(refusals)) if refusals else None,
        incomplete_reason=incomplete.get("reason") if isinstance(incomplete, dict) else None,
        error=json.dumps(error, ensure_ascii=False) if error else None,
        raw=raw,
    )


class OpenAISession:
    def __init__(self, params: dict[str, Any], api_key: str) -> None:
        import openai  # heavy: only when a series actually opens

        self._openai = openai
        self.params = params
        self.timeout = float(params["timeout_seconds"])
        self.abandoned = False
        self.client = openai.OpenAI(api_key=api_key, max_retries=0, timeout=self.timeout,
                                    base_url=endpoint(ENV_URL, params),
                                    http_client=no_redirects(openai.DefaultHttpxClient,
                                                             self.timeout))
        self.endpoint = public_url(str(self.client.base_url), ENV_URL)

    def _post(self, request: Request) -> tuple[str, int, str | None]:
        """The one HTTP request, body read to its end: (body text, status, request ID)."""
        p = self.params
        raw = self.client.responses.with_raw_response.create(
            model=p["model"],
            instructions=request.instructions,
            input=request.input,
            reasoning={"effort": p["reasoning_effort"]},
            max_output_tokens=p["max_output_tokens"],
            service_tier=p["service_tier"],
            store=p["store"],
            tools=[],
            text={"format": {"type": "json_schema", "name": request.schema_name,
                             "schema": request.schema, "strict": True}},
        )
        # Read here, inside the deadline, whatever the SDK may have left unread.
        return (raw.http_response.text, raw.http_response.status_code,
                raw.headers.get("x-request-id"))

    def send(self, request: Request) -> Reply:
        openai = self._openai
        try:
            text, http_status, request_id = within(self.timeout, lambda: self._post(request),
                                                   "fragbench-openai-request")
        except (PastDeadline, openai.APITimeoutError) as exc:
            self.abandoned = isinstance(exc, PastDeadline)
            raise BackendFailure("timeout", f"the request timed out after {self.timeout:g} s; "
                                 f"{MAY_BE_BILLED}") from None
        except openai.APIConnectionError as exc:
            raise connection_failure(exc, ENV_URL) from None
        except openai.APIStatusError as exc:
            code = exc.status_code
            if 300 <= code < 400:
                # Following it would send the call a second request (307/308) or turn it into
                # another one (a GET after 301/302/303): one call is one request.
                message = (f"HTTP {code} from the API: a redirect, not followed; "
                           f"{MAY_BE_BILLED}")
            else:
                message = f"HTTP {code} from the API"
            raise BackendFailure("http_error", message, http_status=code,
                                 raw=exc.response.text, request_id=exc.request_id) from None
        except Exception as exc:  # the SDK's boundary: a body it cannot read, etc.
            raise BackendFailure("bad_response", f"the response could not be read "
                                 f"({type(exc).__name__})") from None
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            raise BackendFailure("bad_body", "the body is not JSON", raw=text,
                                 http_status=http_status, request_id=request_id) from None
        try:
            return reply_from(body, text, request_id)
        except BackendFailure:
            raise
        except Exception as exc:  # a Response-shaped body with the wrong types inside
            raise BackendFailure("bad_body", f"the body is not a readable Responses API "
                                 f"response ({type(exc).__name__})", raw=text,
                                 request_id=request_id) from None

    def close(self) -> None:
        # An abandoned worker may still be inside a socket call: closing its socket from this
        # thread would free the descriptor's number while that call can still use it. Its
        # connection ends with the worker (its own read timeout, the server, or the exit).
        if not self.abandoned:
            self.client.close()


class OpenAIBackend:
    name = "openai"
    is_model = True
    label = "OpenAI Responses API"

    def check_params(self, params: dict[str, Any]) -> None:
        for key, kind in REQUIRED.items():
            if key not in params:
                raise ValueError(f"{key} is missing")
            value = params[key]
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise ValueError(f"{key} has the wrong type ({type(value).__name__})")
        for key, kind in OPTIONAL.items():
            if key in params and not isinstance(params[key], kind):
                raise ValueError(f"{key} has the wrong type ({type(params[key]).__name__})")
        extra = sorted(set(params) - set(REQUIRED) - set(OPTIONAL))
        if extra:
            raise ValueError(f"unknown parameter(s) {', '.join(extra)}")
        if params["max_output_tokens"] < 1 or params["timeout_seconds"] <= 0:
            raise ValueError("max_output_tokens and timeout_seconds must be positive")

    def contract(self, params: dict[str, Any]) -> Contract:
        return Contract(model=params["model"], output_ceiling=params["max_output_tokens"],
                        usage_fields=frozenset(COST_FIELDS),
                        service_tier=params["service_tier"])

    def open(self, params: dict[str, Any]) -> OpenAISession:
        key = os.environ.get("OPENAI_API_KEY", "").strip()
        if not key:
            raise FragbenchError("OPENAI_API_KEY is not set: export your OpenAI key in the "
                                 "environment and run again (nothing was sent or spent).")
        return OpenAISession(params, key)


@hookimpl
def register_backends(register: Any) -> None:
    register(OpenAIBackend())
