"""Backend `anthropic`: the real anthropic SDK, in the real command, against a loopback
Messages-API server.

Every run checks what the server received (one request per call, never a retry), what was
recorded, and that neither the key nor the account header the server sends is written or
printed anywhere (series folder, ledger store, output).
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
from fragbench_anthropic import DEFAULT_URL, AnthropicBackend, reply_from, session
from support.cli import error_lines, refreeze, run_cli

from fragbench.budget.ledger import ledger_path
from fragbench.experiment.config import load_experiment
from fragbench.experiment.plan import verify
from fragbench.experiment.requests import canonical_json
from fragbench.interfaces import COST_FIELDS, BackendFailure
from fragbench.testing import check_backend
from fragbench.testing.loopback import ANTHROPIC_ACCOUNT, Server, http_error, ok
from fragbench.transport import Route

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
EXPERIMENT = ROOT / "experiments" / "protocol-1.0-anthropic"
# Shaped like real credentials, written in two parts so that no literal in the repository looks
# like a committed key.
KEY = "sk-ant-" + "api03-CANARYcanary0123456789abcdefXYZ"
TOKEN = "sk-ant-" + "oat01-TOKENtoken0123456789abcdef"
SECRETS = (KEY, TOKEN, ANTHROPIC_ACCOUNT[1], "Bearer ")
MODEL = "claude-haiku-4-5-20251001"
# USD per million tokens, as frozen in the experiment's pricing table.
INPUT, CACHE_READ, CACHE_WRITE, OUTPUT = (Fraction(1), Fraction(1, 10), Fraction(5, 4),
                                          Fraction(5))


@pytest.fixture(autouse=True)
def clean_env(fragbench_ledger_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ledger store of this test's own (the test kit's), and no ANTHROPIC_* setting from
    outside."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    return fragbench_ledger_dir


@pytest.fixture
def server(messages_server: Server) -> Server:
    """The test kit's loopback Messages-API server."""
    return messages_server


def test_the_fault_suite(server: Server, tmp_path: Path) -> None:
    """The kit's fault suite, the same for every backend, with the committed parameters, the
    server named by the `base_url` parameter. (Named by ANTHROPIC_BASE_URL, the kit's default,
    the same suite with the same parameters is tests/plugins_kit/test_fault_suite.py's: run
    once, there.)"""
    params = {"model": MODEL, "max_tokens": 1200, "thinking": "disabled",
              "timeout_seconds": 600}
    assert params == load_experiment(EXPERIMENT).backends["anthropic"].params
    ran = check_backend(AnthropicBackend(), params, server, via="params", tmp_path=tmp_path)
    assert "every call answered" in ran and "a connection refused at call 1" in ran
    assert sum(n.startswith("a usage without") for n in ran) >= 2  # input and output at least


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The experiment with the protocol's prompts, schema and corpus, laid out as in the
    repository, for tests that change its config."""
    for name in ("experiments/protocol-1.0-anthropic", "experiments/protocol-1.0", "corpus"):
        shutil.copytree(ROOT / name, tmp_path / name)
    return tmp_path / "experiments" / "protocol-1.0-anthropic"


def collect(out: Path, env: dict[str, str], experiment: Path = EXPERIMENT,
            series: str = "anthropic-test") -> tuple[Any, Path]:
    """`fragbench run` of the series, then: no secret printed or written."""
    result = run_cli("run", str(experiment), "--series", series, "--backend", "anthropic",
                     "--out", str(out), env=env)
    assert "Traceback" not in result.stderr, result.stderr
    assert_no_secret(result, [out, Path(os.environ["FRAGBENCH_LEDGER_DIR"])])
    return result, out / "protocol-1.0-anthropic" / series


def assert_no_secret(result: Any, roots: list[Path]) -> None:
    for secret in SECRETS:
        assert secret not in result.stdout and secret not in result.stderr, secret
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                for secret in SECRETS:
                    assert secret.encode() not in data, (secret, path)


def env_for(server: Server, **extra: str) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.base_url, **extra}


def calls_of(series_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(series_dir / "calls.parquet").sort("seq")


def cost_of(usage: dict[str, Any]) -> Fraction:
    """By hand from the body's own fields: the Messages API's input_tokens excludes the cache."""
    return (usage["input_tokens"] * INPUT + usage["cache_read_input_tokens"] * CACHE_READ
            + usage["cache_creation_input_tokens"] * CACHE_WRITE
            + usage["output_tokens"] * OUTPUT) / 1_000_000


def sent_cost(row: dict[str, Any]) -> Fraction:
    """The cost of a call by hand, from the usage in the body the server sent."""
    return cost_of(json.loads(row["raw_response"])["usage"])


def test_a_full_series_sends_72_requests_exactly_as_frozen(tmp_path: Path,
                                                           server: Server) -> None:
    result, series_dir = collect(tmp_path, env_for(server))
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72

    exp = load_experiment(EXPERIMENT)
    frozen, calls, _ = verify(exp)
    schema = json.loads((ROOT / "experiments/protocol-1.0/schema.json").read_text("utf-8"))
    for request, call, planned in zip(server.requests, calls, frozen["schedule"], strict=True):
        body, headers = request["body"], {k.lower(): v for k, v in request["headers"].items()}
        assert request["method"] == "POST" and request["path"] == "/v1/messages"
        assert headers["x-stainless-retry-count"] == "0"
        assert KEY in headers.get("x-api-key", "") + headers.get("authorization", "")
        assert set(body) == {"model", "max_tokens", "system", "messages", "output_config",
                             "service_tier", "thinking"}
        assert body["model"] == MODEL and body["max_tokens"] == 1200
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
        assert body["service_tier"] == "standard_only"
        assert body["thinking"] == {"type": "disabled"}
        assert body["system"] == exp.prompts[call.lang].instructions
        assert [m["role"] for m in body["messages"]] == ["user"]
        digest = hashlib.sha256(canonical_json({
            "instructions": body["system"], "input": body["messages"][0]["content"],
            "schema_name": "cited_answer", "schema": body["output_config"]["format"]["schema"],
        }).encode()).hexdigest()
        assert digest == planned["request_sha256"]

    table = calls_of(series_dir)
    assert table["status"].to_list() == ["completed"] * 72
    assert table["parsed"].all() and table["model"].unique().to_list() == [MODEL]
    assert table["service_tier"].unique().to_list() == ["standard"]
    assert table["request_id"].to_list() == [f"req_{n:04d}" for n in range(1, 73)]
    # Each request's usage differs, so a cost attributed to the wrong call shows.
    expected = [sent_cost(row) for row in table.iter_rows(named=True)]
    assert len(set(expected)) == 72
    assert [Fraction(c) for c in table["cost_usd"].to_list()] == expected  # exact Decimals
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert Fraction(status["spent_usd"]) == sum(expected)
    info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
    assert info["endpoint"].rstrip("/") == server.base_url and info["budget"] == (
        "protocol-1.0-anthropic")
    # Its own ledger; the OpenAI series' budget is untouched.
    assert ledger_path("protocol-1.0-anthropic").exists()
    assert not ledger_path("protocol-1.0-openai").exists()


def test_usage_is_read_as_the_core_total_and_priced_by_hand(tmp_path: Path,
                                                            server: Server) -> None:
    usage = {"input_tokens": 1000, "cache_creation_input_tokens": 200,
             "cache_read_input_tokens": 300, "output_tokens": 400, "service_tier": "standard",
             "output_tokens_details": {"thinking_tokens": 150}}
    server.script[0] = ok(usage=usage)
    result, series_dir = collect(tmp_path, env_for(server))
    assert result.returncode == 0, result.stderr
    row = calls_of(series_dir).row(0, named=True)
    # The core's input_tokens is the total: 1000 uncached + 200 written + 300 read.
    assert (row["input_tokens"], row["cached_tokens"], row["cache_write_tokens"],
            row["output_tokens"], row["reasoning_tokens"]) == (1500, 300, 200, 400, 150)
    # 1000 x 1 + 300 x 0.10 + 200 x 1.25 + 400 x 5 = 3280 USD per million tokens.
    assert Fraction(row["cost_usd"]) == Fraction(3280, 1_000_000)


@pytest.mark.parametrize(("stop_reason", "status", "reason"), [
    ("max_tokens", "incomplete", "max_tokens"),
    ("model_context_window_exceeded", "incomplete", "model_context_window_exceeded"),
    ("stop_sequence", "completed", None),
])
def test_answers_cut_short_are_kept_and_collection_goes_on(
        tmp_path: Path, server: Server, stop_reason: str, status: str,
        reason: str | None) -> None:
    server.script[5] = ok(stop_reason=stop_reason, text='{"answer": "cut sh')
    result, series_dir = collect(tmp_path, env_for(server))
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    row = calls_of(series_dir).row(5, named=True)
    assert (row["status"], row["incomplete_reason"], row["stop_reason"]) == (status, reason,
                                                                             None)
    assert row["text"] == '{"answer": "cut sh' and row["parsed"] is False
    assert Fraction(row["cost_usd"]) == sent_cost(row)


def test_a_refusal_is_recorded_as_such_and_collection_goes_on(tmp_path: Path,
                                                              server: Server) -> None:
    server.script[5] = ok(refusal="I can’t help with that.")
    result, series_dir = collect(tmp_path, env_for(server))
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    row = calls_of(series_dir).row(5, named=True)
    assert row["status"] == "completed" and row["refusal"] == "I can’t help with that."
    assert row["text"] is None and row["parsed"] is False
    assert Fraction(row["cost_usd"]) == sent_cost(row)


STOPS: dict[str, tuple[Any, str, str]] = {
    # name: (action for call 6, stop reason, what the stop line says)
    "tool_use": (ok(stop_reason="tool_use"), "technical_failure", "'tool_use'"),
    "pause_turn": (ok(stop_reason="pause_turn"), "technical_failure", "'pause_turn'"),
    "unknown stop reason": (ok(stop_reason="expired"), "technical_failure",
                            "stop_reason 'expired' is not one fragbench knows"),
    "no stop reason": (ok(stop_reason=None), "technical_failure", "stop_reason None"),
    "overloaded, retry asked": (http_error(529, "Overloaded", {"x-should-retry": "true"}),
                                "technical_failure", "HTTP 529"),
    "priority tier": (ok(service_tier="priority"), "unknown_cost", "'priority' came back"),
    "no cache-read count": (ok(usage={"input_tokens": 10, "cache_creation_input_tokens": 0,
                                      "output_tokens": 5, "service_tier": "standard"}),
                            "unknown_cost", "has no whole number for input_tokens, cached_tokens"),
    "another model": (ok(model="claude-haiku-4-5-20261201"), "changed_model",
                      "claude-haiku-4-5-20261201"),
}


@pytest.mark.parametrize("name", list(STOPS))
def test_the_series_stops_at_the_first_failure(tmp_path: Path, server: Server,
                                               name: str) -> None:
    action, reason, says = STOPS[name]
    server.script[5] = action
    result, series_dir = collect(tmp_path, env_for(server))
    assert result.returncode == 3, result.stderr
    assert "stopped at call 6" in result.stderr and reason in result.stderr
    assert says in result.stderr
    assert len(server.requests) == 6  # one request per call, never a retry, nothing after
    assert all(r["method"] == "POST" for r in server.requests)
    table = calls_of(series_dir)
    assert table["status"][:5].to_list() == ["completed"] * 5
    assert table["status"][6:].to_list() == ["not_sent"] * 66
    assert table["stop_reason"][5] == reason


def test_a_missing_key_is_refused_in_one_line_and_nothing_is_spent(
        tmp_path: Path, server: Server, clean_env: Path) -> None:
    result = run_cli("run", str(EXPERIMENT), "--series", "anthropic-test", "--backend",
                     "anthropic", "--out", str(tmp_path),
                     env={"ANTHROPIC_BASE_URL": server.base_url})
    assert result.returncode == 4
    assert error_lines(result.stderr) == ["fragbench: ANTHROPIC_API_KEY is not set: export "
                                          "your Anthropic key in the environment and run "
                                          "again (nothing was sent or spent)."]
    assert len(server.requests) == 0
    assert not (tmp_path / "protocol-1.0-anthropic").exists()
    assert not any(clean_env.iterdir())  # no ledger: nothing was reserved


def test_no_other_credential_is_ever_used(tmp_path: Path, server: Server,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A profile that does not exist would make the SDK's credential chain raise, were it
    # consulted at all; an auth token in the environment is never sent in the key's place.
    monkeypatch.setenv("ANTHROPIC_PROFILE", "no-such-profile")
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "config"))
    alone = run_cli("run", str(EXPERIMENT), "--series", "anthropic-test", "--backend",
                    "anthropic", "--out", str(tmp_path / "alone"),
                    env={"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_AUTH_TOKEN": TOKEN})
    assert alone.returncode == 4 and "ANTHROPIC_API_KEY is not set" in alone.stderr
    assert len(server.requests) == 0

    opened = session({"model": MODEL, "max_tokens": 10, "timeout_seconds": 5},
                     Route(url=DEFAULT_URL, public=DEFAULT_URL, proxy=None, key=KEY,
                           key_env="ANTHROPIC_API_KEY"))
    try:
        assert opened.client.credentials is None and opened.client.auth_token is None
    finally:
        opened.close()

    server.script[1] = http_error(500)  # two calls are enough
    result, _ = collect(tmp_path / "both", env_for(server, ANTHROPIC_AUTH_TOKEN=TOKEN))
    assert result.returncode == 3
    for request in server.requests:
        sent = json.dumps(request["headers"])
        assert KEY in sent and TOKEN not in sent


def test_custom_headers_from_the_environment_are_refused(tmp_path: Path,
                                                         server: Server) -> None:
    result = run_cli("run", str(EXPERIMENT), "--series", "anthropic-test", "--backend",
                     "anthropic", "--out", str(tmp_path),
                     env=env_for(server, ANTHROPIC_CUSTOM_HEADERS="x-api-key: other"))
    assert result.returncode == 4 and len(server.requests) == 0
    (line,) = error_lines(result.stderr)
    assert line.startswith("fragbench: ANTHROPIC_CUSTOM_HEADERS is set")


def test_the_environment_base_url_overrides_the_config(copy: Path, tmp_path: Path,
                                                       server: Server) -> None:
    with Server("messages") as configured:
        refreeze(copy, 'thinking = "disabled"\n',
                 f'thinking = "disabled"\nbase_url = "{configured.base_url}"\n')
        configured.script[0] = http_error(500)
        server.script[0] = http_error(500)
        via_env, series = collect(tmp_path / "env", env_for(server), copy)
        assert via_env.returncode == 3
        assert len(server.requests) == 1 and len(configured.requests) == 0
        via_config, series = collect(tmp_path / "config", {"ANTHROPIC_API_KEY": KEY}, copy)
        assert via_config.returncode == 3
        assert len(server.requests) == 1 and len(configured.requests) == 1
        info = json.loads((series / "series.json").read_text(encoding="utf-8"))
        assert info["endpoint"].rstrip("/") == configured.base_url


def test_the_contract_declares_the_model_ceiling_all_usage_fields_and_the_tier() -> None:
    params = {"model": MODEL, "max_tokens": 1200, "timeout_seconds": 600}
    contract = AnthropicBackend().contract(params)
    assert (contract.model, contract.output_ceiling, contract.service_tier) == (
        MODEL, 1200, "standard")
    assert contract.usage_fields == frozenset(COST_FIELDS) and not contract.problems()


@pytest.mark.parametrize(("change", "says"), [
    ({"model": None}, "model is missing"),
    ({"max_tokens": "1200"},
     "max_tokens is a string (\"1200\"); write a whole number: max_tokens = 1200"),
    ({"max_tokens": True}, "max_tokens is a boolean (true); write a whole number"),
    ({"max_tokens": 0}, "max_tokens must be positive, not 0"),
    ({"model": " "}, "model is empty"),
    ({"temperature": 0.5}, "unknown parameter(s) temperature"),
    ({"effort": "extreme"}, "effort must be one of low, medium, high, xhigh, max"),
    ({"thinking": "on"}, "thinking must be one of disabled, adaptive, enabled"),
    ({"thinking": "enabled"}, "thinking_budget_tokens goes with"),
    ({"thinking_budget_tokens": 2048}, "thinking_budget_tokens goes with"),
    ({"thinking": "enabled", "thinking_budget_tokens": 1200}, "below max_tokens"),
    ({"thinking": "enabled", "thinking_budget_tokens": 512}, "at least 1024"),
])
def test_unusable_parameters_are_refused_in_one_sentence(change: dict[str, Any],
                                                         says: str) -> None:
    params = {"model": MODEL, "max_tokens": 1200, "timeout_seconds": 600} | change
    params = {k: v for k, v in params.items() if v is not None}
    with pytest.raises(ValueError) as raised:
        AnthropicBackend().check_params(params)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_thinking_and_effort_go_out_as_the_api_names_them() -> None:
    from fragbench_anthropic import arguments

    from fragbench.interfaces import Request

    request = Request(call_id="c", lang="en", instructions="i", input="u", schema_name="s",
                      schema={"type": "object"}, question="q", supplied=())
    params = {"model": MODEL, "max_tokens": 4000, "timeout_seconds": 1, "effort": "low",
              "thinking": "enabled", "thinking_budget_tokens": 2048}
    AnthropicBackend().check_params(params)
    args = arguments(params, request)
    assert args["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert args["output_config"] == {"format": {"type": "json_schema",
                                                "schema": {"type": "object"}},
                                     "effort": "low"}
    assert "thinking" not in arguments({"model": MODEL, "max_tokens": 5}, request)


def message(**fields: Any) -> dict[str, Any]:
    body = {"type": "message", "model": MODEL, "stop_reason": "end_turn",
            "content": [{"type": "thinking", "thinking": "hm"},
                        {"type": "text", "text": '{"answer": '},
                        {"type": "text", "text": '"x", "citations": []}'}],
            "usage": {"input_tokens": 5, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 7,
                      "service_tier": "standard"}}
    return body | fields


@pytest.mark.parametrize(("stop_reason", "status", "incomplete"), [
    ("end_turn", "completed", None), ("stop_sequence", "completed", None),
    ("max_tokens", "incomplete", "max_tokens"),
    ("model_context_window_exceeded", "incomplete", "model_context_window_exceeded"),
    ("tool_use", "tool_use", None), ("pause_turn", "pause_turn", None),
    ("expired", "unknown_stop_reason", None), (None, "unknown_stop_reason", None),
])
def test_stop_reasons_map_to_statuses(stop_reason: str | None, status: str,
                                      incomplete: str | None) -> None:
    reply = reply_from(message(stop_reason=stop_reason), "{}", "req_1")
    assert (reply.status, reply.incomplete_reason) == (status, incomplete)
    assert reply.text == '{"answer": "x", "citations": []}'  # text blocks only, joined
    assert reply.refusal is None and reply.service_tier == "standard"


def test_a_refusal_without_text_says_why() -> None:
    body = message(stop_reason="refusal", content=[],
                   stop_details={"type": "refusal", "explanation": "Policy."})
    assert reply_from(body, "{}", None).refusal == "Policy."
    assert reply_from(message(stop_reason="refusal", content=[]), "{}", None).refusal == (
        "refusal")


@pytest.mark.parametrize("usage", [
    {"input_tokens": 5, "cache_read_input_tokens": 0, "output_tokens": 7},
    {"input_tokens": 5, "cache_creation_input_tokens": True, "cache_read_input_tokens": 0,
     "output_tokens": 7},
])
def test_an_absent_or_malformed_cache_count_leaves_the_total_unknown(
        usage: dict[str, Any]) -> None:
    reply = reply_from(message(usage=usage), "{}", None)
    assert reply.usage is not None
    assert reply.usage.input_tokens is None and reply.usage.cache_write_tokens is None
    assert reply.usage.output_tokens == 7


@pytest.mark.parametrize("body", [{"type": "error", "error": {}}, [], {"type": "message"}])
def test_a_body_that_is_no_message_is_a_technical_failure(body: Any) -> None:
    with pytest.raises(BackendFailure) as raised:
        reply_from(body, json.dumps(body), "req_9")
    assert raised.value.kind == "bad_body" and raised.value.request_id == "req_9"
