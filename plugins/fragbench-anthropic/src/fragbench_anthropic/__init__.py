"""fragbench backend `anthropic`: the Anthropic Messages API through the official SDK.

For a second provider's series (protocol 1.0, "Portée"/"Limits"): its own experiment config,
model, pricing table and budget, frozen and recorded apart from the OpenAI series.

- Exactly one HTTP request per call: the client is built with `max_retries=0` (the SDK retries
  twice by default, with no idempotency key, so a retry could be billed twice), redirects are
  never followed, and `timeout_seconds` bounds the whole call (`fragbench.transport`).
- Each call sends only its own instructions (`system`) and input (one user message), with the
  experiment's JSON schema as `output_config.format`; no tools, no cache_control, no
  conversation. `service_tier="standard_only"` is always sent: the frozen prices are the
  Standard tier's, and a response that does not echo `usage.service_tier == "standard"` leaves
  its cost unknown (the contract's tier), so the series stops.
- The key comes from ANTHROPIC_API_KEY, passed explicitly: given one credential, the SDK
  consults no other (no ANTHROPIC_AUTH_TOKEN, no profile or credentials file on disk, no
  workload-identity federation). ANTHROPIC_CUSTOM_HEADERS, which the SDK would add to every
  request whatever the key, refuses the session. OpenTelemetry spans are turned off, so no
  prompt or answer leaves through a tracer.
- The endpoint is ANTHROPIC_BASE_URL when set, else the config's optional `base_url`, else
  https://api.anthropic.com (no `/v1`: the SDK adds it); either must be a plain http(s) URL
  (no user-info, query or fragment), checked with the key's shape before anything is sent
  (`check_environment`, which `open` runs first).
- No proxy from the environment (HTTP_PROXY, ALL_PROXY, ... are never read); the optional
  `proxy` parameter (`http://host:port`) names one, frozen in the plan.
- Only the response body is kept, never a header; the request ID is read from `request-id`.
- Usage, in the core's terms (`fragbench.interfaces.Usage`): the Messages API reports
  `input_tokens` without the cache, so the total input is input + cache-creation + cache-read
  tokens; cache-read tokens are `cached_tokens`, cache-creation tokens `cache_write_tokens`.
  A field that is absent leaves what depends on it unknown (None), never zero.
- `stop_reason`: end_turn and stop_sequence answer (`completed`); max_tokens and
  model_context_window_exceeded are `incomplete` (the reason kept); refusal is a `completed`
  reply with its refusal set; anything else (tool_use, pause_turn, a reason fragbench does not
  know, none at all) is a status the collector treats as a technical failure.
- The SDK (and httpx2) is imported when a session opens, so `fragbench --help` never pays for it.
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

ENV_URL = "ANTHROPIC_BASE_URL"
ENV_KEY = "ANTHROPIC_API_KEY"
DEFAULT_URL = "https://api.anthropic.com"
TIER_SENT = "standard_only"
SNAPSHOT = r"-\d{8}"
"""How the Messages API names a dated snapshot of an alias: claude-haiku-4-5-20251001."""
TIER_ECHOED = "standard"
"""What `usage.service_tier` says of a request served on the Standard tier."""

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "max_tokens": int,
    "timeout_seconds": (int, float),
}
OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "effort": str,
    "thinking": str,
    "thinking_budget_tokens": int,
    "base_url": str,
    "proxy": str,
}
EFFORTS = ("low", "medium", "high", "xhigh", "max")
"""`output_config.effort` as the SDK types it; not every model accepts it (the API answers 400,
a technical failure at the first call)."""
THINKING = ("disabled", "adaptive", "enabled")
"""`thinking.type`; "enabled" takes `thinking_budget_tokens` (at least 1,024, below
max_tokens: thinking tokens are output tokens, inside the same ceiling). Left out, the model's
default applies, which depends on the model: a frozen series should say it."""

ANSWERED = {"end_turn": "completed", "stop_sequence": "completed", "refusal": "completed",
            "max_tokens": "incomplete", "model_context_window_exceeded": "incomplete"}
NOT_ANSWERED = ("tool_use", "pause_turn")
"""Stop reasons that are no answer to this request: kept as the status, which the collector
treats as a technical failure. A stop reason outside both tables is `unknown_stop_reason`."""


def usage_from(body: dict[str, Any]) -> Usage | None:
    """The usage block in the core's terms; None where the body has none."""
    blocks = usage_blocks(body, "output_tokens_details")
    if blocks is None:
        return None
    usage, details = blocks
    uncached = whole(usage.get("input_tokens"))
    written = whole(usage.get("cache_creation_input_tokens"))
    read = whole(usage.get("cache_read_input_tokens"))
    parts = (uncached, written, read)
    return Usage(
        input_tokens=sum(p for p in parts if p is not None) if None not in parts else None,
        cached_tokens=read,
        cache_write_tokens=written,
        output_tokens=whole(usage.get("output_tokens")),
        reasoning_tokens=whole(details.get("thinking_tokens")),
    )


def _refusal(body: dict[str, Any], text: str | None) -> str:
    """What the refusal said: its text if the model wrote any, else the API's explanation,
    else the stop reason itself."""
    details = body.get("stop_details")
    explanation = details.get("explanation") if isinstance(details, dict) else None
    if text:
        return text
    return text_or_none(explanation) or "refusal"


def reply_from(body: Any, raw: str, request_id: str | None) -> Reply:
    """A Reply from a parsed Messages API body; BackendFailure if it is no message."""
    if not isinstance(body, dict) or body.get("type") != "message" or not isinstance(
        body.get("content"), list
    ):
        raise BackendFailure("bad_body", "the body is not a Messages API message",
                             raw=raw, request_id=request_id)
    texts = [block["text"] for block in body["content"] if isinstance(block, dict)
             and block.get("type") == "text" and isinstance(block.get("text"), str)]
    text = clean("".join(texts)) if texts else None
    reason = body.get("stop_reason")
    error = None
    if reason in ANSWERED:
        status = ANSWERED[reason]
    elif reason in NOT_ANSWERED:
        status = reason
    else:
        status = "unknown_stop_reason"
        error = clean(f"stop_reason {repr(reason)[:80]} is not one fragbench knows")
    refusal = _refusal(body, text) if reason == "refusal" else None
    usage = body.get("usage")
    return Reply(
        status=status,
        model=text_or_none(body.get("model")),
        service_tier=text_or_none(usage.get("service_tier")) if isinstance(usage, dict)
        else None,
        request_id=request_id,
        usage=usage_from(body),
        # A refusal's words are its refusal, not an answer to parse.
        text=None if refusal is not None else text,
        refusal=refusal,
        incomplete_reason=reason if status == "incomplete" else None,
        error=error,
        raw=raw,
    )


def arguments(params: dict[str, Any], request: Request) -> dict[str, Any]:
    """The keyword arguments of `messages.create` for one call: all it depends on is the
    frozen parameters and the planned request."""
    output_config: dict[str, Any] = {"format": {"type": "json_schema",
                                                "schema": request.schema}}
    if "effort" in params:
        output_config["effort"] = params["effort"]
    args: dict[str, Any] = {
        "model": params["model"],
        "max_tokens": params["max_tokens"],
        "system": request.instructions,
        "messages": [{"role": "user", "content": request.input}],
        "output_config": output_config,
        "service_tier": TIER_SENT,
    }
    thinking = params.get("thinking")
    if thinking == "enabled":
        args["thinking"] = {"type": "enabled",
                            "budget_tokens": params["thinking_budget_tokens"]}
    elif thinking is not None:
        args["thinking"] = {"type": thinking}
    return args


def session(params: dict[str, Any], where: Route) -> SDKSession:
    """A session on the Messages API with these (checked) parameters, to where `route`
    checked, with its key."""
    import anthropic  # heavy: only when a series actually opens

    timeout = float(params["timeout_seconds"])
    # Every credential-bearing argument is explicit: with `api_key` given, the SDK reads no
    # credential from the environment or disk; with `base_url` given, no profile chooses the
    # host.
    client = anthropic.Anthropic(
        api_key=where.key, base_url=where.url, max_retries=0,
        timeout=timeout, open_telemetry=False,
        http_client=no_redirects(anthropic.DefaultHttpxClient, timeout, where.proxy))
    return SDKSession(
        anthropic, client, timeout=timeout, env_var=ENV_URL, request_id_header="request-id",
        post=lambda request: client.messages.with_raw_response.create(
            **arguments(params, request)),
        read=reply_from, what="Messages API message")


class AnthropicBackend:
    name = "anthropic"
    api_version = "1.0"
    is_model = True
    label = "Anthropic Messages API"
    packages = ("anthropic",)
    """Frozen in the plan with the core's packages: the SDK version is part of the record."""

    def check_params(self, params: dict[str, Any]) -> None:
        check_types(params, REQUIRED, OPTIONAL, positive=("max_tokens", "timeout_seconds"))
        if params.get("effort", EFFORTS[0]) not in EFFORTS:
            raise ValueError(f"effort must be one of {', '.join(EFFORTS)}")
        thinking = params.get("thinking")
        if thinking is not None and thinking not in THINKING:
            raise ValueError(f"thinking must be one of {', '.join(THINKING)}")
        budget = params.get("thinking_budget_tokens")
        if (thinking == "enabled") != (budget is not None):
            raise ValueError('thinking_budget_tokens goes with thinking = "enabled", and only '
                             "with it")
        if budget is not None and not 1024 <= budget < params["max_tokens"]:
            raise ValueError("thinking_budget_tokens must be at least 1024 and below max_tokens")

    def contract(self, params: dict[str, Any]) -> Contract:
        # The Messages API reports all four usage fields (cache ones as 0 when nothing was
        # cached) and echoes the tier in usage.service_tier.
        return Contract(model=params["model"], output_ceiling=params["max_tokens"],
                        usage_fields=frozenset(COST_FIELDS), service_tier=TIER_ECHOED,
                        snapshot=SNAPSHOT)

    def route(self, params: dict[str, Any]) -> Route:
        return route(params, url_env=ENV_URL, default_url=DEFAULT_URL, key_env=ENV_KEY,
                     key=lambda: key_from_env(ENV_KEY, "Anthropic", "ANTHROPIC_CUSTOM_HEADERS"))

    def check_environment(self, params: dict[str, Any]) -> str:
        """Where calls would go, in one line, or a FragbenchError saying why they cannot;
        sends nothing (`fragbench.transport.route`)."""
        return describe(self.route(params))

    def open(self, params: dict[str, Any]) -> SDKSession:
        return session(params, self.route(params))


@hookimpl
def register_backends(register: Any) -> None:
    register(AnthropicBackend())
