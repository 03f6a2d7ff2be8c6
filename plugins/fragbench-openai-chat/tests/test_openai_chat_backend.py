"""Backend `openai-chat`: the real openai SDK's Chat Completions, in the real command, against
a loopback server.

The experiment as committed targets a keyless local server at a zero price; the tests that
need a key or a price change a copy of it and freeze that copy again. Every run checks what
the server received (one request per call, never a retry) and that no key, nor the account
header the server sends, is written or printed anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from fragbench_openai_chat import OpenAIChatBackend, arguments, reply_from
from support.cli import error_lines, run_cli

from fragbench.experiment.config import load_experiment
from fragbench.experiment.plan import verify
from fragbench.experiment.requests import canonical_json
from fragbench.interfaces import BackendFailure, Request
from fragbench.testing import check_backend
from fragbench.testing.loopback import OPENAI_ACCOUNT, Server, http_error, ok, redirect

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
EXPERIMENT = ROOT / "experiments" / "protocol-1.0-openai-chat"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# Shaped like an OpenAI key, written in two parts so that no literal in the repository looks like
# a committed key.
KEY = "sk-proj-" + "CHATcanary0123456789abcdefXYZ"
SERVER_KEY = "vllm-CANARY-0123456789abcdef"
ORG = "org-AbCdEfGhIjKlMnOpQrStUvWx"
SECRETS = (KEY, SERVER_KEY, ORG, OPENAI_ACCOUNT[1], "Bearer ")


@pytest.fixture(autouse=True)
def ledger_dir(fragbench_ledger_dir: Path) -> Path:
    """A ledger store of this test's own (the test kit's; the suite's autouse fixture in
    tests/conftest.py does not reach a plugin's tests)."""
    return fragbench_ledger_dir


@pytest.fixture
def server(chat_server: Server) -> Server:
    """The test kit's loopback Chat Completions server."""
    return chat_server


PARAMS = {"model": MODEL, "max_tokens": 1200, "timeout_seconds": 600}


def test_the_fault_suite(server: Server, tmp_path: Path) -> None:
    """The kit's fault suite, the same for every backend: the committed parameters for a
    server that takes a key, named by the `base_url` parameter. (The committed parameters as
    they are, a server that takes no key named by OPENAI_BASE_URL, are
    tests/plugins_kit/test_fault_suite.py's: that suite runs once, there.)"""
    committed = load_experiment(EXPERIMENT).backends["openai-chat"].params
    params = committed | {"key_env": "TEST_CHAT_API_KEY"}
    ran = check_backend(OpenAIChatBackend(), params, server, key_env="TEST_CHAT_API_KEY",
                        via="params", tmp_path=tmp_path)
    assert "every call answered" in ran and "a connection refused at call 1" in ran
    assert "the key echoed in other forms at call 2" in ran  # the scenarios a key adds


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    """A copy of the experiment with the protocol's files, laid out as in the repository."""
    for name in ("experiments/protocol-1.0-openai-chat", "experiments/protocol-1.0", "corpus"):
        shutil.copytree(ROOT / name, tmp_path / "copy" / name)
    return tmp_path / "copy" / "experiments" / "protocol-1.0-openai-chat"


def edit(experiment: Path, *changes: tuple[str, str]) -> None:
    """Change the copy's config, then freeze its plan again."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    config.write_text(text, encoding="utf-8")
    frozen = run_cli("freeze", str(experiment))
    assert frozen.returncode == 0, frozen.stderr


PRICED = (('input = "0"', 'input = "0.50"'), ('output = "0"', 'output = "1.50"'),
          ('ceiling_usd = "0"', 'ceiling_usd = "1"'))
"""USD per million tokens: input 0.50, output 1.50 (and a ceiling to spend them from)."""


def run(out: Path, env: dict[str, str], experiment: Path = EXPERIMENT,
        series: str = "chat-test") -> tuple[Any, Path]:
    """`fragbench run`, with OPENAI_API_KEY and OPENAI_ORG_ID set in the environment as a
    developer's shell would have them: neither may reach the server unless asked for."""
    env = {"OPENAI_API_KEY": KEY, "OPENAI_ORG_ID": ORG, **env}
    result = run_cli("run", str(experiment), "--series", series, "--backend", "openai-chat",
                     "--out", str(out), env=env)
    assert "Traceback" not in result.stderr, result.stderr
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr, secret
    for root in (out, Path(os.environ["FRAGBENCH_LEDGER_DIR"])):
        for path in root.rglob("*"):
            if path.is_file():
                assert not any(s.encode() in path.read_bytes() for s in SECRETS), path
    return result, out / experiment.name / series


def calls_of(series_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(series_dir / "calls.parquet").sort("seq")


def test_a_full_series_against_a_keyless_local_server(tmp_path: Path, server: Server) -> None:
    result, series_dir = run(tmp_path, {"OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 0, result.stderr
    assert "72 of 72 calls sent; spent 0 USD" in result.stdout
    assert len(server.requests) == 72

    exp = load_experiment(EXPERIMENT)
    frozen, calls, _ = verify(exp)
    schema = json.loads((ROOT / "experiments/protocol-1.0/schema.json").read_text("utf-8"))
    for request, call, planned in zip(server.requests, calls, frozen["schedule"], strict=True):
        body = request["body"]
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert request["method"] == "POST" and request["path"] == "/v1/chat/completions"
        assert headers["x-stainless-retry-count"] == "0"
        # The placeholder, never the OpenAI key of the environment; no account identifiers.
        assert headers["authorization"] == "Bearer no-key"
        assert "openai-organization" not in headers and "openai-project" not in headers
        assert set(body) == {"model", "messages", "response_format", "max_tokens",
                             "temperature"}
        assert body["model"] == MODEL and body["max_tokens"] == 1200
        assert body["temperature"] == 0.7
        assert body["response_format"] == {"type": "json_schema", "json_schema": {
            "name": "cited_answer", "schema": schema, "strict": True}}
        system, user = body["messages"]
        assert system == {"role": "system", "content": exp.prompts[call.lang].instructions}
        assert user["role"] == "user"
        digest = hashlib.sha256(canonical_json({
            "instructions": system["content"], "input": user["content"],
            "schema_name": "cited_answer", "schema": schema}).encode()).hexdigest()
        assert digest == planned["request_sha256"]

    table = calls_of(series_dir)
    assert table["status"].to_list() == ["completed"] * 72 and table["parsed"].all()
    assert table["cost_usd"].to_list() == [0] * 72
    assert table["request_id"].to_list() == [f"req_{n:04d}" for n in range(1, 73)]
    info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
    assert info["endpoint"] == server.base_url + "/"
    assert info["budget"] == "protocol-1.0-openai-chat"


@pytest.mark.parametrize(("reports_cached", "expected"), [
    # 1000 prompt tokens of which 400 cached, 100 completion tokens; input 0.50, cached 0.05,
    # output 1.50 per million. Undeclared, a reported cached count shows the contract wrong
    # for this server: the cost is unknown (the series stops) rather than guessed.
    (False, None),
    (True, Fraction(600 * 50 + 400 * 5 + 100 * 150, 100 * 1_000_000)),
])
def test_usage_is_priced_by_hand_with_and_without_cached_tokens(
        experiment: Path, tmp_path: Path, server: Server, reports_cached: bool,
        expected: Fraction | None) -> None:
    changes = (*PRICED, ("reports_cached_tokens = false",
                         f"reports_cached_tokens = {str(reports_cached).lower()}"),
               ('output = "1.50"', 'output = "1.50"\ncached_input = "0.05"'))
    edit(experiment, *changes)
    server.script[0] = ok(usage={"prompt_tokens": 1000, "completion_tokens": 100,
                                 "total_tokens": 1100,
                                 "prompt_tokens_details": {"cached_tokens": 400},
                                 "completion_tokens_details": {"reasoning_tokens": 30}})
    server.script[1] = http_error(500)  # one priced call is enough
    result, series_dir = run(tmp_path, {"OPENAI_BASE_URL": server.base_url}, experiment)
    assert result.returncode == 3
    row = calls_of(series_dir).row(0, named=True)
    assert (row["input_tokens"], row["cached_tokens"], row["cache_write_tokens"],
            row["output_tokens"], row["reasoning_tokens"]) == (1000, 400, None, 100, 30)
    if expected is None:
        assert row["cost_usd"] is None and "cached_tokens" in row["cost_unknown"]
    else:
        assert Fraction(row["cost_usd"]) == expected


def test_a_server_that_reports_no_cache_is_not_an_unknown_cost(
        experiment: Path, tmp_path: Path, server: Server) -> None:
    edit(experiment, *PRICED)
    server.default = ok(usage={"prompt_tokens": 900, "completion_tokens": 200,
                               "total_tokens": 1100})
    result, series_dir = run(tmp_path, {"OPENAI_BASE_URL": server.base_url}, experiment)
    assert result.returncode == 0, result.stderr
    costs = calls_of(series_dir)["cost_usd"].to_list()
    assert {Fraction(c) for c in costs} == {Fraction(900 * 50 + 200 * 150, 100 * 1_000_000)}


@pytest.mark.parametrize(("finish", "options", "status", "reason", "refusal"), [
    ("length", {"finish_reason": "length"}, "incomplete", "length", None),
    ("content_filter", {"finish_reason": "content_filter"}, "incomplete", "content_filter",
     None),
    ("refusal", {"refusal": "I can’t help with that."}, "completed", None,
     "I can’t help with that."),
])
def test_answers_cut_short_or_refused_are_kept_and_collection_goes_on(
        tmp_path: Path, server: Server, finish: str, options: dict[str, Any], status: str,
        reason: str | None, refusal: str | None) -> None:
    server.script[5] = ok(**options)
    result, series_dir = run(tmp_path, {"OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    row = calls_of(series_dir).row(5, named=True)
    assert (row["status"], row["incomplete_reason"], row["refusal"], row["stop_reason"]) == (
        status, reason, refusal, None)


STOPS: dict[str, tuple[Any, str, str]] = {
    "tool_calls": (ok(finish_reason="tool_calls"), "technical_failure", "'tool_calls'"),
    "function_call": (ok(finish_reason="function_call"), "technical_failure",
                      "'function_call'"),
    "unknown finish reason": (ok(finish_reason="expired"), "technical_failure",
                              "finish_reason 'expired' is not one fragbench knows"),
    "server error, retry asked": (http_error(503, "busy", {"x-should-retry": "true"}),
                                  "technical_failure", "HTTP 503"),
    "redirect": (redirect(308, "/v1/chat/completions"), "technical_failure", "not followed"),
    "no completion tokens": (ok(usage={"prompt_tokens": 10, "total_tokens": 10}),
                             "unknown_cost", "has no whole number for output_tokens"),
    "two choices": (ok(), "technical_failure", "one choice"),
    "another model": (ok(model="llama-3-8b"), "changed_model", "'llama-3-8b'"),
}


@pytest.mark.parametrize("name", list(STOPS))
def test_the_series_stops_at_the_first_failure(tmp_path: Path, server: Server,
                                               name: str) -> None:
    action, reason, says = STOPS[name]
    if name == "two choices":
        def action(handler: Any, number: int, body: dict[str, Any]) -> None:
            answer = handler.server.shape.body("{}", number=number, request=body)
            answer["choices"].append(answer["choices"][0])
            handler.send_json(200, answer)
    server.script[5] = action
    result, series_dir = run(tmp_path, {"OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 3, result.stderr
    assert "stopped at call 6" in result.stderr and reason in result.stderr
    assert says in result.stderr
    assert len(server.requests) == 6  # one request per call, never a retry, nothing after
    assert all(r["method"] == "POST" for r in server.requests)
    table = calls_of(series_dir)
    assert table["status"][:5].to_list() == ["completed"] * 5
    assert table["status"][6:].to_list() == ["not_sent"] * 66
    assert table["stop_reason"][5] == reason


def test_a_named_key_is_sent_and_a_missing_one_refused_in_one_line(
        experiment: Path, tmp_path: Path, server: Server, ledger_dir: Path) -> None:
    edit(experiment, ('key_env = ""', 'key_env = "VLLM_API_KEY"'))
    env = {"OPENAI_BASE_URL": server.base_url}
    missing, _ = run(tmp_path / "missing", env, experiment)
    assert missing.returncode == 4 and len(server.requests) == 0
    assert error_lines(missing.stderr) == [
        'fragbench: VLLM_API_KEY is not set (the config\'s key_env): export the server\'s key '
        'in the environment, or set key_env = "" for a server that takes none, and run again '
        '(nothing was sent or spent).']
    assert not (tmp_path / "missing").exists() and not any(ledger_dir.iterdir())

    server.script[2] = http_error(500)
    sent, _ = run(tmp_path / "sent", env | {"VLLM_API_KEY": SERVER_KEY}, experiment)
    assert sent.returncode == 3 and len(server.requests) == 3
    for request in server.requests:
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert headers["authorization"] == f"Bearer {SERVER_KEY}"


def test_the_default_key_is_openai_api_key(experiment: Path, tmp_path: Path,
                                           server: Server) -> None:
    edit(experiment, ('key_env = ""\n', ""))
    missing = run_cli("run", str(experiment), "--series", "chat-test", "--backend",
                      "openai-chat", "--out", str(tmp_path),
                      env={"OPENAI_BASE_URL": server.base_url})
    assert missing.returncode == 4 and len(server.requests) == 0
    (line,) = error_lines(missing.stderr)
    assert line.startswith("fragbench: OPENAI_API_KEY is not set (the config's key_env)")
    server.script[0] = http_error(500)
    result, _ = run(tmp_path, {"OPENAI_BASE_URL": server.base_url}, experiment)
    assert result.returncode == 3
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"


def test_custom_headers_from_the_environment_are_refused(tmp_path: Path,
                                                         server: Server) -> None:
    result, _ = run(tmp_path, {"OPENAI_BASE_URL": server.base_url,
                               "OPENAI_CUSTOM_HEADERS": "Authorization: Bearer other"})
    assert result.returncode == 4 and len(server.requests) == 0
    (line,) = error_lines(result.stderr)
    assert line.startswith("fragbench: OPENAI_CUSTOM_HEADERS is set")


def test_the_environment_base_url_overrides_the_config(experiment: Path, tmp_path: Path,
                                                       server: Server) -> None:
    with Server("chat") as configured:
        edit(experiment, ('base_url = "http://127.0.0.1:8000/v1"',
                          f'base_url = "{configured.base_url}"'))
        configured.script[0] = server.script[0] = http_error(500)
        via_env, _ = run(tmp_path / "env", {"OPENAI_BASE_URL": server.base_url}, experiment)
        assert via_env.returncode == 3
        assert (len(server.requests), len(configured.requests)) == (1, 0)
        via_config, series_dir = run(tmp_path / "config", {}, experiment)
        assert via_config.returncode == 3
        assert (len(server.requests), len(configured.requests)) == (1, 1)
        info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
        assert info["endpoint"] == configured.base_url + "/"


def test_the_contract_declares_max_tokens_as_the_ceiling_and_only_reported_fields() -> None:
    backend = OpenAIChatBackend()
    plain = backend.contract(PARAMS)
    assert (plain.model, plain.output_ceiling, plain.service_tier) == (MODEL, 1200, None)
    assert plain.usage_fields == {"input_tokens", "output_tokens"} and not plain.problems()
    cached = backend.contract(PARAMS | {"reports_cached_tokens": True, "service_tier": "flex"})
    assert cached.usage_fields == {"input_tokens", "cached_tokens", "output_tokens"}
    assert cached.service_tier == "flex"


@pytest.mark.parametrize(("change", "says"), [
    ({"max_output_tokens": 1200}, "unknown parameter(s) max_output_tokens"),
    ({"max_tokens": 1.5}, "max_tokens is a number with a point (1.5); write a whole number"),
    ({"timeout_seconds": 0}, "timeout_seconds must be positive, not 0"),
    ({"key_env": "VLLM_KEY"}, "key_env 'VLLM_KEY' must be an environment variable name"),
    ({"key_env": "MY API_KEY"}, "must be an environment variable name"),
    ({"temperature": 3}, "temperature must be between 0 and 2"),
    ({"seed": "1"}, "seed is a string (\"1\"); write a whole number: seed = 1"),
    ({"reports_cached_tokens": 1},
     "reports_cached_tokens is a whole number (1); write true or false"),
])
def test_unusable_parameters_are_refused_in_one_sentence(change: dict[str, Any],
                                                         says: str) -> None:
    with pytest.raises(ValueError) as raised:
        OpenAIChatBackend().check_params(PARAMS | change)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_optional_parameters_go_out_only_when_set() -> None:
    request = Request(call_id="c", lang="en", instructions="i", input="u", schema_name="s",
                      schema={"type": "object"}, question="q", supplied=())
    params = PARAMS | {"temperature": 0, "seed": 7, "reasoning_effort": "low",
                       "service_tier": "default", "key_env": "", "base_url": "http://x/v1",
                       "reports_cached_tokens": True}
    OpenAIChatBackend().check_params(params)
    args = arguments(params, request)
    assert {k: args[k] for k in ("temperature", "seed", "reasoning_effort", "service_tier")} \
        == {"temperature": 0, "seed": 7, "reasoning_effort": "low", "service_tier": "default"}
    assert set(arguments(PARAMS, request)) == {"model", "messages", "response_format",
                                               "max_tokens"}


def completion(finish: Any = "stop", **message: Any) -> dict[str, Any]:
    return {"object": "chat.completion", "model": MODEL, "service_tier": "default",
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": "{}"} | message}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


@pytest.mark.parametrize(("finish", "status", "incomplete"), [
    ("stop", "completed", None), ("length", "incomplete", "length"),
    ("content_filter", "incomplete", "content_filter"), ("tool_calls", "tool_calls", None),
    ("function_call", "function_call", None), ("expired", "unknown_finish_reason", None),
    (None, "unknown_finish_reason", None),
])
def test_finish_reasons_map_to_statuses(finish: Any, status: str,
                                        incomplete: str | None) -> None:
    reply = reply_from(completion(finish), "{}", "req_1")
    assert (reply.status, reply.incomplete_reason) == (status, incomplete)
    assert reply.text == "{}" and reply.model == MODEL and reply.service_tier == "default"


def test_a_lone_surrogate_becomes_a_replacement_character() -> None:
    reply = reply_from(completion(content='{"answer": "\ud83d"}'), "{}", None)
    assert reply.text == '{"answer": "\ufffd"}'


@pytest.mark.parametrize("body", [
    {"object": "chat.completion.chunk", "choices": [{"message": {}}]},
    {"object": "chat.completion", "choices": []},
    {"object": "chat.completion", "choices": [{"finish_reason": "stop"}]},
    {"object": "response", "status": "completed"},
])
def test_a_body_that_is_no_completion_is_a_technical_failure(body: Any) -> None:
    with pytest.raises(BackendFailure) as raised:
        reply_from(body, json.dumps(body), "req_9")
    assert raised.value.kind == "bad_body" and raised.value.request_id == "req_9"
