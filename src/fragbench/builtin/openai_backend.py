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
  else https://api.openai.com/v1; either must be a plain http(s) URL (no user-info, query or
  fragment), checked with the key's shape before anything is sent (`check_environment`, which
  `open` runs first).
- No proxy from the environment (HTTP_PROXY, ALL_PROXY, ... are never read); the optional
  `proxy` parameter (`http://host:port`) names one, frozen in the plan.
- Only the response body is kept, never a header: headers can carry account identifiers
  (`openai-organization`, `openai-project`) and a redirect's `location` can carry anything. The
  request ID is read from `x-request-id`.
- The SDK (and httpx2, its HTTP client) is imported when a session opens, so `fragbench --help`
  never pays for it.
"""

from __future__ import annotations

from typing import Any

from fragbench.hookspecs import hookimpl
from fragbench.interfaces import COST_FIELDS, BackendFailure, Contract, Reply, Request, Usage
from fragbench.transport import (
    Route,
    SDKSession,
    check_types,
    clean,
    describe,
    key_from_env,
    no_redirects,
    route,
    text_or_none,
    usage_blocks,
    whole,
)

ENV_URL = "OPENAI_BASE_URL"
ENV_KEY = "OPENAI_API_KEY"
DEFAULT_URL = "https://api.openai.com/v1"

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
    "proxy": str,
}
"""`base_url` points the series at an OpenAI-compatible server that speaks the Responses API;
OPENAI_BASE_URL, when set, takes precedence over it, as the SDK's own default does. `proxy`
(`http://host:port`) sends every call through that HTTP proxy (a CONNECT tunnel for an https
endpoint); without it no proxy is used, whatever the environment says."""


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
    return Reply(
        status=clean(body["status"]),
        model=text_or_none(body.get("model")),
        service_tier=text_or_none(body.get("service_tier")),
        request_id=request_id,
        usage=usage_from(body),
        text=clean("".join(texts)) if texts else None,
        refusal=clean("\n".join(refusals)) if refusals else None,
        incomplete_reason=text_or_none(incomplete.get("reason"))
        if isinstance(incomplete, dict) else None,
        error=error_text(body.get("error")),
        raw=raw,
    )


def error_text(error: Any) -> str | None:
    """The body's `error` in words: its `code` and `message` when they are strings, read
    without walking the object (the raw body keeps all of it)."""
    if not error:
        return None
    if isinstance(error, dict):
        said = [text_or_none(error.get(k)) for k in ("code", "message")]
        return ": ".join(s for s in said if s) or "the response reports an error"
    return text_or_none(error) or "the response reports an error"


class OpenAISession(SDKSession):
    """The Responses API on the shared SDK session (`fragbench.transport.SDKSession`): one
    request per call within the deadline, every failure a BackendFailure."""

    def __init__(self, params: dict[str, Any], where: Route) -> None:
        import openai  # heavy: only when a series actually opens

        self.params = params
        timeout = float(params["timeout_seconds"])
        client = openai.OpenAI(api_key=where.key, max_retries=0, timeout=timeout,
                               base_url=where.url,
                               http_client=no_redirects(openai.DefaultHttpxClient, timeout,
                                                        where.proxy))
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
    api_version = "1.0"
    is_model = True
    label = "OpenAI Responses API"

    def check_params(self, params: dict[str, Any]) -> None:
        check_types(params, REQUIRED, OPTIONAL, positive=("max_output_tokens",
                                                          "timeout_seconds"))

    def contract(self, params: dict[str, Any]) -> Contract:
        return Contract(model=params["model"], output_ceiling=params["max_output_tokens"],
                        usage_fields=frozenset(COST_FIELDS),
                        service_tier=params["service_tier"])

    def route(self, params: dict[str, Any]) -> Route:
        return route(params, url_env=ENV_URL, default_url=DEFAULT_URL, key_env=ENV_KEY,
                     key=lambda: key_from_env(ENV_KEY, "OpenAI", "OPENAI_CUSTOM_HEADERS"))

    def check_environment(self, params: dict[str, Any]) -> str:
        """Where calls would go, in one line, or a FragbenchError saying why they cannot;
        sends nothing (`fragbench.transport.route`)."""
        return describe(self.route(params))

    def open(self, params: dict[str, Any]) -> OpenAISession:
        return OpenAISession(params, self.route(params))


@hookimpl
def register_backends(register: Any) -> None:
    register(OpenAIBackend())
