"""fragbench backend `openai-chat`: Chat Completions through the official openai SDK.

For OpenAI-compatible servers (vLLM, llama.cpp server, Ollama, LM Studio) and anything else
that speaks `POST /v1/chat/completions`, in a series of its own (its own config, pricing table
and budget).

- Exactly one HTTP request per call: `max_retries=0`, redirects never followed, and
  `timeout_seconds` bounding the whole call (`fragbench.transport`).
- Each call is two messages, `system` (the instructions) and `user` (the input), with the
  experiment's JSON schema as a strict `response_format`; no tools, no conversation. The output
  limit goes out as `max_tokens`, the name these servers accept; the contract declares it as
  the series' output ceiling. `temperature`, `seed`, `reasoning_effort` and `service_tier` go
  out only when the config sets them.
- The key comes from the environment variable the config's `key_env` names (OPENAI_API_KEY by
  default), and it must be a name the redactor treats as secret (`*_API_KEY`, `*_TOKEN`, ...),
  so that its value is never written or printed. `key_env = ""` is a server that takes no key:
  the SDK cannot be built without one, so the fixed placeholder `no-key` is sent
  (`Authorization: Bearer no-key`, which such servers ignore), never a key found in the
  environment. OPENAI_ORG_ID and OPENAI_PROJECT_ID, which the SDK would send as headers, are
  not sent (a third-party server has no use for an OpenAI account's identifiers), and
  OPENAI_CUSTOM_HEADERS refuses the session.
- The endpoint is OPENAI_BASE_URL when set, else the config's `base_url`, else
  https://api.openai.com/v1; either must be a plain http(s) URL (no user-info, query or
  fragment), checked with the key's shape before anything is sent (`check_environment`, which
  `open` runs first).
- No proxy from the environment (HTTP_PROXY, ALL_PROXY, ... are never read); the optional
  `proxy` parameter (`http://host:port`) names one, frozen in the plan.
- Usage: `prompt_tokens` is the total input, `completion_tokens` the output (reasoning
  included), `prompt_tokens_details.cached_tokens` the cached part. Servers rarely report the
  latter, so the contract declares cached tokens only with `reports_cached_tokens = true`; an
  undeclared field is priced as zero. Cache writes have no concept here.
- `finish_reason`: stop answers (`completed`); length and content_filter are `incomplete` (the
  reason kept); a `message.refusal` is kept as the refusal; tool_calls, function_call or any
  other reason is a status the collector treats as a technical failure.
- Only the response body is kept, never a header; the request ID is read from `x-request-id`.
"""

from __future__ import annotations

import re
from typing import Any

from fragbench.hookspecs import hookimpl
from fragbench.interfaces import BackendFailure, Contract, Reply, Request, Usage
from fragbench.redact import SECRET_ENV
from fragbench.transport import (
    Route,
    SDKSession,
    check_types,
    clean,
    describe,
    key_from_env,
    no_redirects,
    refuse_env_headers,
    route,
    text_or_none,
    usage_blocks,
    whole,
)

ENV_URL = "OPENAI_BASE_URL"
DEFAULT_URL = "https://api.openai.com/v1"
NO_KEY = "no-key"
"""Sent in place of a key to a server that takes none (`key_env = ""`)."""

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "max_tokens": int,
    "timeout_seconds": (int, float),
}
OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "base_url": str,
    "key_env": str,
    "temperature": (int, float),
    "seed": int,
    "reasoning_effort": str,
    "service_tier": str,
    "reports_cached_tokens": bool,
    "proxy": str,
}
SENT_IF_SET = ("temperature", "seed", "reasoning_effort", "service_tier")

FINISHED = {"stop": ("completed", None), "length": ("incomplete", "length"),
            "content_filter": ("incomplete", "content_filter")}
NOT_ANSWERED = ("tool_calls", "function_call")
"""Finish reasons that are no answer to this request: kept as the status (a technical failure
for the collector). A reason outside both is `unknown_finish_reason`."""


def usage_from(body: dict[str, Any]) -> Usage | None:
    """The usage block in the core's terms; None where the body has none."""
    blocks = usage_blocks(body, "prompt_tokens_details", "completion_tokens_details")
    if blocks is None:
        return None
    usage, prompt, completion = blocks
    return Usage(
        input_tokens=whole(usage.get("prompt_tokens")),
        cached_tokens=whole(prompt.get("cached_tokens")),
        # Never declared (most servers have no such concept): a server that reports cache
        # writes anyway (OpenAI itself) makes the cost unknown rather than priced as input.
        cache_write_tokens=whole(prompt.get("cache_write_tokens")),
        output_tokens=whole(usage.get("completion_tokens")),
        reasoning_tokens=whole(completion.get("reasoning_tokens")),
    )


def reply_from(body: Any, raw: str, request_id: str | None) -> Reply:
    """A Reply from a parsed Chat Completions body; BackendFailure if it is no completion."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("object") != "chat.completion" or not (
        isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
        and isinstance(choices[0].get("message"), dict)
    ):
        raise BackendFailure("bad_body", "the body is not a Chat Completions object with one "
                             "choice", raw=raw, request_id=request_id)
    choice = choices[0]
    message = choice["message"]
    content, refusal = message.get("content"), message.get("refusal")
    reason = choice.get("finish_reason")
    error = None
    if reason in FINISHED:
        status, incomplete = FINISHED[reason]
    elif reason in NOT_ANSWERED:
        status, incomplete = reason, None
    else:
        status, incomplete = "unknown_finish_reason", None
        error = clean(f"finish_reason {repr(reason)[:80]} is not one fragbench knows")
    return Reply(
        status=status,
        model=text_or_none(body.get("model")),
        service_tier=text_or_none(body.get("service_tier")),
        request_id=request_id,
        usage=usage_from(body),
        text=clean(content) if isinstance(content, str) and content else None,
        refusal=clean(refusal) if isinstance(refusal, str) and refusal else None,
        incomplete_reason=incomplete,
        error=error,
        raw=raw,
    )


def arguments(params: dict[str, Any], request: Request) -> dict[str, Any]:
    """The keyword arguments of `chat.completions.create` for one call."""
    return {
        "model": params["model"],
        "messages": [{"role": "system", "content": request.instructions},
                     {"role": "user", "content": request.input}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": request.schema_name, "schema": request.schema, "strict": True}},
        "max_tokens": params["max_tokens"],
        **{k: params[k] for k in SENT_IF_SET if k in params},
    }


def session(params: dict[str, Any], where: Route) -> SDKSession:
    """A session on a Chat Completions server with these (checked) parameters, to where
    `route` checked, with its key (or the placeholder for a server that takes none)."""
    import openai  # heavy: only when a series actually opens

    timeout = float(params["timeout_seconds"])
    client = openai.OpenAI(
        api_key=where.key or NO_KEY, max_retries=0, timeout=timeout, base_url=where.url,
        # Omitted, not merely unset: the SDK would otherwise fill them from OPENAI_ORG_ID and
        # OPENAI_PROJECT_ID.
        default_headers={"OpenAI-Organization": openai.Omit(),  # type: ignore[dict-item]
                         "OpenAI-Project": openai.Omit()},
        http_client=no_redirects(openai.DefaultHttpxClient, timeout, where.proxy))
    return SDKSession(
        openai, client, timeout=timeout, env_var=ENV_URL, request_id_header="x-request-id",
        post=lambda request: client.chat.completions.with_raw_response.create(
            **arguments(params, request)),
        read=reply_from, what="Chat Completions object")


class OpenAIChatBackend:
    name = "openai-chat"
    api_version = "1.0"
    is_model = True
    label = "Chat Completions (OpenAI-compatible server)"
    packages = ("openai",)

    def check_params(self, params: dict[str, Any]) -> None:
        check_types(params, REQUIRED, OPTIONAL, positive=("max_tokens", "timeout_seconds"))
        key_env = params.get("key_env", "OPENAI_API_KEY")
        if key_env and not (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env)
                            and SECRET_ENV.search(key_env)):
            raise ValueError(f"key_env {key_env!r} must be an environment variable name ending "
                             "like a secret's (_API_KEY, _TOKEN, _SECRET), so that its value is "
                             'redacted, or "" for a server that takes no key')
        if "temperature" in params and not 0 <= params["temperature"] <= 2:
            raise ValueError("temperature must be between 0 and 2")

    def contract(self, params: dict[str, Any]) -> Contract:
        fields = {"input_tokens", "output_tokens"}
        if params.get("reports_cached_tokens", False):
            fields.add("cached_tokens")
        return Contract(model=params["model"], output_ceiling=params["max_tokens"],
                        usage_fields=frozenset(fields),
                        service_tier=params.get("service_tier"))

    def route(self, params: dict[str, Any]) -> Route:
        key_env = params.get("key_env", "OPENAI_API_KEY")
        if not key_env:  # a server that takes no key: the placeholder, never a key found
            def key() -> str:
                refuse_env_headers("OPENAI_CUSTOM_HEADERS")
                return NO_KEY
        else:
            def key() -> str:
                return key_from_env(
                    key_env, "server's", "OPENAI_CUSTOM_HEADERS",
                    " is not set (the config's key_env): export the server's key in the "
                    'environment, or set key_env = "" for a server that takes none,')
        return route(params, url_env=ENV_URL, default_url=DEFAULT_URL, key=key,
                     key_env=key_env or None)

    def check_environment(self, params: dict[str, Any]) -> str:
        """Where calls would go, in one line, or a FragbenchError saying why they cannot;
        sends nothing (`fragbench.transport.route`)."""
        return describe(self.route(params))

    def open(self, params: dict[str, Any]) -> SDKSession:
        return session(params, self.route(params))


@hookimpl
def register_backends(register: Any) -> None:
    register(OpenAIChatBackend())
