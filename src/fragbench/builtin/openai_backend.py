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
from typing import Any

from fragbench.hookspecs import hookimpl
from fragbench.interfaces import COST_FIELDS, BackendFailure, Contract, Reply, Request, Usage
from fragbench.transport import (
    SDKSession,
    check_types,
    clean,
    endpoint,
    key_from_env,
    no_redirects,
    usage_blocks,
    whole,
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


def usage_from(body: dict[str, Any]) -> Usage | None:
    """Read the usage block; a field that is absent or not an integer is None (unknown)."""
    blocks = usage_blocks(body, "input_tokens_details", "output_tokens_details")
    if blocks is None:
        return None
    usage, inp, out = blocks
    return Usage(
        input_tokens=whole(usage.get("input_tokens")),
        cached_tokens=whole(inp.get("cached_tokens")),
        cache_write_tokens=whole(inp.get("cache_write_tokens")),
        output_tokens=whole(usage.get("output_tokens")),
        reasoning_tokens=whole(out.get("reasoning_tokens")),
    )


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
        text=clean("".join(texts)) if texts else None,
        refusal=clean("\n".join(refusals)) if refusals else None,
        incomplete_reason=incomplete.get("reason") if isinstance(incomplete, dict) else None,
        error=json.dumps(error, ensure_ascii=False) if error else None,
        raw=raw,
    )


class OpenAISession(SDKSession):
    """The Responses API on the shared SDK session (`fragbench.transport.SDKSession`): one
    request per call within the deadline, every failure a BackendFailure."""

    def __init__(self, params: dict[str, Any], api_key: str) -> None:
        import openai  # heavy: only when a series actually opens

        self.params = params
        timeout = float(params["timeout_seconds"])
        client = openai.OpenAI(api_key=api_key, max_retries=0, timeout=timeout,
                               base_url=endpoint(ENV_URL, params),
                               http_client=no_redirects(openai.DefaultHttpxClient, timeout))
        super().__init__(openai, client, timeout=timeout, env_var=ENV_URL,
                         request_id_header="x-request-id", post=self._post, read=reply_from,
                         what="Responses API response")

    def _post(self, request: Request) -> Any:
        """The one HTTP request, through `self.client` as it is when the call goes out."""
        p = self.params
        return self.client.responses.with_raw_response.create(
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


class OpenAIBackend:
    name = "openai"
    is_model = True
    label = "OpenAI Responses API"

    def check_params(self, params: dict[str, Any]) -> None:
        check_types(params, REQUIRED, OPTIONAL, positive=("max_output_tokens",
                                                          "timeout_seconds"))

    def contract(self, params: dict[str, Any]) -> Contract:
        return Contract(model=params["model"], output_ceiling=params["max_output_tokens"],
                        usage_fields=frozenset(COST_FIELDS),
                        service_tier=params["service_tier"])

    def open(self, params: dict[str, Any]) -> OpenAISession:
        return OpenAISession(params, key_from_env("OPENAI_API_KEY", "OpenAI",
                                                  "OPENAI_CUSTOM_HEADERS"))


@hookimpl
def register_backends(register: Any) -> None:
    register(OpenAIBackend())
