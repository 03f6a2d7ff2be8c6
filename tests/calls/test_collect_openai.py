"""Collection from the Responses API: the real openai SDK against a real loopback server.

Every scenario checks how many requests the server received (never a retry), where the series
stopped, that every earlier answer is intact on disk, that the ledger is exact, and that the
canary key and the account identifier the server sends appear in no byte written or printed.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import refreeze, run_cli
from support.series import ORG, PROJECT, calls_of, collect
from support.suite import CANARY_KEY

from fragbench.budget.ledger import ledger_path
from fragbench.experiment.config import load_experiment
from fragbench.experiment.plan import verify
from fragbench.experiment.requests import canonical_json
from fragbench.series import folder
from fragbench.series.journal import read_journal
from fragbench.testing.loopback import (
    Server,
    default_usage,
    drop,
    http_error,
    json_body,
    ok,
    raw,
    sleep,
)

pytestmark = pytest.mark.slow


def expected_cost(number: int) -> Fraction:
    u = default_usage(number)
    cached = u["input_tokens_details"]["cached_tokens"]
    write = u["input_tokens_details"]["cache_write_tokens"]
    return (Fraction(u["input_tokens"] - cached - write) * 10 + cached * 1
            + Fraction(write) * Fraction(25, 2) + u["output_tokens"] * 50) / 1_000_000


def test_clean_run_sends_72_requests_exactly_as_frozen(experiment: Path, server: Server) -> None:
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72

    exp = load_experiment(experiment)
    frozen, calls, _ = verify(exp)
    schema = json.loads((experiment / "schema.json").read_text(encoding="utf-8"))
    for request, call, planned in zip(server.requests, calls, frozen["schedule"], strict=True):
        body = request["body"]
        assert request["path"] == "/v1/responses"
        assert request["headers"].get("x-stainless-retry-count") == "0"
        assert set(body) == {"model", "instructions", "input", "reasoning", "max_output_tokens",
                             "service_tier", "store", "tools", "text"}
        assert body["model"] == "gpt-6-astra"
        assert body["reasoning"] == {"effort": "medium"}
        assert body["max_output_tokens"] == 1200
        assert body["service_tier"] == "default"
        assert body["store"] is False and body["tools"] == []
        assert body["text"] == {"format": {"type": "json_schema", "name": "cited_answer",
                                           "schema": schema, "strict": True}}
        assert body["instructions"] == exp.prompts[call.lang].instructions
        digest = hashlib.sha256(canonical_json({
            "instructions": body["instructions"], "input": body["input"],
            "schema_name": body["text"]["format"]["name"],
            "schema": body["text"]["format"]["schema"]}).encode()).hexdigest()
        assert digest == planned["request_sha256"]
        shown = [line[1:].split("]")[0] for line in body["input"].splitlines()
                 if line.startswith("[")]
        assert shown == planned["supplied_ids"]
        case = next(c for c in exp.cases if c.id == call.case)
        if call.mode == "full":
            assert shown == list(case.variants[call.variant])

    calls_table = calls_of(series_dir)
    assert calls_table["status"].to_list() == ["completed"] * 72
    assert calls_table["model"].unique().to_list() == ["gpt-6-astra-2026-09-30"]
    assert calls_table["request_id"].to_list() == [f"req_{n:04d}" for n in range(1, 73)]
    total = sum((expected_cost(n) for n in range(72)), Fraction(0))
    for n, cost in enumerate(calls_table["cost_usd"].to_list()):
        assert Fraction(cost) == expected_cost(n)  # exact: the column is a Decimal
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert Fraction(Decimal(status["spent_usd"])) == total  # exact
    reported = Decimal(result.stdout.split("spent ")[1].split(" USD")[0])
    assert abs(Fraction(reported) - total) < Fraction(1, 10**9)
    info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
    assert info["endpoint"] == server.base_url + "/"
    assert info["is_model"] is True


def test_each_body_is_journaled_once_and_read_from_its_received_record(
        experiment: Path, server: Server) -> None:
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    records = read_journal(series_dir / "journal.jsonl")
    bodies = {r["seq"]: r["raw"] for r in records if r["type"] == "received"}
    outcomes = [r for r in records if r["type"] == "outcome"]
    assert len(bodies) == len(outcomes) == 72
    assert not [r["seq"] for r in outcomes if "raw" in r]  # written once, in `received`
    journal = (series_dir / "journal.jsonl").read_text(encoding="utf-8")
    assert all(journal.count(json.dumps(body)[1:-1]) == 1 for body in bodies.values())
    calls_table = calls_of(series_dir)
    assert calls_table["raw_response"].to_list() == [bodies[n] for n in range(1, 73)]
    assert all(json.loads(body)["id"] for body in calls_table["raw_response"])
    # A journal from before the rule repeats each body in its outcome: it reads the same.
    plan = json.loads((series_dir / "plan.json").read_text(encoding="utf-8"))
    before = [{**r, "raw": bodies[r["seq"]]} if r["type"] == "outcome" else r for r in records]
    old = folder.calls_table(plan, info := folder.read_json(series_dir / "series.json"), before)
    assert old.equals(folder.calls_table(plan, info, records))
    assert old.sort("seq")["raw_response"].to_list() == calls_table["raw_response"].to_list()
    # Consumed (as `derive_tables` builds it): the same table, and no record keeps a body.
    consumed = folder.calls_table(plan, info, before, consume=True)
    assert consumed.equals(old)
    assert not [r["seq"] for r in before if "raw" in r or "text" in r]


STOPS: dict[str, tuple[Any, str, bool | Fraction]] = {
    # name: (action for request 5, i.e. call 6; stop reason; True when call 6's cost is known,
    # False when it is counted at its reservation, or the amount it is counted at)
    "http 500": (http_error(500), "technical_failure", False),
    "http 429": (http_error(429, "Rate limit reached"), "technical_failure", False),
    "http 401": (http_error(401, f"Incorrect API key provided: {CANARY_KEY}"),
                 "technical_failure", False),
    "http 403 naming the account": (
        http_error(403, f"Project `{PROJECT}` in organization {ORG} has no access"),
        "technical_failure", False),
    "malformed response": (json_body(200, {"object": "response", "status": "completed",
                                           "output": 5}), "technical_failure", False),
    # A response that did not finish may not be billed at its usage: counted at reservation.
    "unknown status": (ok(status="expired"), "technical_failure", False),
    "dropped connection": (drop(), "technical_failure", False),
    "body not JSON": (raw(200, "<html>upstream error</html>", "text/html"),
                      "technical_failure", False),
    "JSON that is no response": (json_body(200, {"hello": "world"}), "technical_failure", False),
    "status failed": (ok(status="failed"), "technical_failure", False),
    "status failed naming the account": (
        ok(status="failed", error_message=f"quota of {ORG} in {PROJECT} exhausted"),
        "technical_failure", False),
    "status queued": (ok(status="queued"), "technical_failure", False),
    "status in_progress": (ok(status="in_progress"), "technical_failure", False),
    "status cancelled": (ok(status="cancelled"), "technical_failure", False),
    "missing usage": (ok(usage="omit"), "unknown_cost", False),
    "usage field missing": (ok(usage={"input_tokens": 10, "output_tokens": 5,
                                      "input_tokens_details": {"cached_tokens": 0},
                                      "output_tokens_details": {"reasoning_tokens": 0},
                                      "total_tokens": 15}), "unknown_cost", False),
    "other service tier": (ok(service_tier="priority"), "unknown_cost", False),
    # A usage the request could not produce is never priced: counted at the reservation,
    # never at 10^12 tokens' worth, so that it cannot lock the budget for ever.
    "input beyond the request's bound": (ok(usage={
        "input_tokens": 300_000, "input_tokens_details": {"cached_tokens": 0,
                                                          "cache_write_tokens": 0},
        "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 300_010}), "unknown_cost", False),
    "a trillion input tokens": (ok(usage={
        "input_tokens": 10**12, "input_tokens_details": {"cached_tokens": 0,
                                                         "cache_write_tokens": 0},
        "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10**12 + 10}), "unknown_cost", False),
    "more output than max_output_tokens": (ok(usage={
        "input_tokens": 500, "input_tokens_details": {"cached_tokens": 0,
                                                      "cache_write_tokens": 0},
        "output_tokens": 1201, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 1701}), "unknown_cost", False),
    "changed model": (ok(model="gpt-6-astra-2026-11-15"), "changed_model", True),
}


@pytest.mark.parametrize("name", list(STOPS))
def test_series_stops_at_the_first_failure(experiment: Path, server: Server, name: str) -> None:
    action, reason, cost_known = STOPS[name]
    server.script[5] = action
    result, series_dir = collect(experiment, server)
    assert result.returncode != 0
    assert "stopped at call 6" in result.stderr and reason in result.stderr
    assert len(server.requests) == 6  # never a retry, nothing after the stop
    assert all(r["headers"].get("x-stainless-retry-count") == "0" for r in server.requests)

    calls = calls_of(series_dir)
    assert calls["status"][:5].to_list() == ["completed"] * 5
    assert calls["parsed"][:5].to_list() == [True] * 5
    assert calls["status"][6:].to_list() == ["not_sent"] * 66
    assert calls["stop_reason"].to_list()[5] == reason
    assert calls["stop_reason"].null_count() == 71
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "stopped" and status["stop"]["seq"] == 6

    # The ledger: five known costs, then call 6 at its cost if known, else its reservation.
    sixth = calls.row(5, named=True)
    expected = sum((expected_cost(n) for n in range(5)), Fraction(0))
    if cost_known is True:
        assert Fraction(sixth["cost_usd"]) == expected_cost(5)
        expected += expected_cost(5)
    elif isinstance(cost_known, Fraction):
        assert sixth["cost_usd"] is None
        assert Fraction(sixth["counted_usd"]) == cost_known
        expected += cost_known
    else:
        assert sixth["cost_usd"] is None and sixth["counted_usd"] == sixth["reserved_usd"]
        journal = [json.loads(line) for line in
                   (series_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()]
        expected += Fraction(Decimal(next(r["reserved_usd"] for r in journal
                                          if r["type"] == "reserve" and r["seq"] == 6)))
    assert Fraction(Decimal(status["spent_usd"])) == expected
    # Cells with nothing sent show nothing known: null, never zero.
    usage = pl.read_parquet(series_dir / "usage.parquet").filter(pl.col("calls_sent") == 0)
    assert usage.height > 0
    for column in ("input_tokens", "cost_usd", "counted_usd"):
        assert usage[column].null_count() == usage.height

    # A stopped series is final.
    again, _ = collect(experiment, server)
    assert again.returncode != 0 and "is final" in again.stderr and "new series name" in \
        again.stderr
    assert len(server.requests) == 6


def test_timeout_stops_and_keeps_the_reservation(experiment: Path, server: Server) -> None:
    refreeze(experiment, "timeout_seconds = 600", "timeout_seconds = 1")
    server.script[2] = sleep(3)
    result, series_dir = collect(experiment, server)
    assert result.returncode != 0 and "timed out" in result.stderr
    assert len(server.requests) == 3
    calls = calls_of(series_dir)
    assert calls["failure"][2] == "timeout" and calls["counted_usd"][2] == calls["reserved_usd"][2]


def test_first_response_of_another_model_stops_at_once(experiment: Path, server: Server) -> None:
    server.script[0] = ok(model="gpt-5-mini")
    result, series_dir = collect(experiment, server)
    assert result.returncode != 0 and "changed_model" in result.stderr
    assert len(server.requests) == 1
    assert calls_of(series_dir)["model"][0] == "gpt-5-mini"  # recorded, then stopped


@pytest.mark.parametrize("name", ["incomplete", "refusal", "unparseable", "lone surrogate"])
def test_incomplete_refused_and_unparseable_answers_are_kept_and_collection_goes_on(
        experiment: Path, server: Server, name: str) -> None:
    server.script[5] = {
        "incomplete": ok(status="incomplete", incomplete_reason="max_output_tokens", text=""),
        "refusal": ok(refusal="I can’t help with that."),
        "unparseable": ok(text='{"answer": "cut sh'),
        "lone surrogate": ok(text='{"answer": "cut \ud83d", "citations": []}'),
    }[name]
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    row = calls_of(series_dir).row(5, named=True)
    assert row["stop_reason"] is None
    if name == "lone surrogate":  # kept, as U+FFFD in the parsed text; nothing crashes
        assert row["parsed"] is True and row["answer"] == "cut \ufffd"
        return
    assert row["parsed"] is False
    assert Fraction(row["cost_usd"]) == expected_cost(5)
    if name == "incomplete":
        assert row["status"] == "incomplete" and row["incomplete_reason"] == "max_output_tokens"
    elif name == "refusal":
        assert row["status"] == "completed" and row["refusal"] == "I can’t help with that."
    else:
        assert row["text"] == '{"answer": "cut sh' and "not JSON" in row["parse_error"]


def test_a_new_series_counts_what_the_stopped_one_spent(experiment: Path,
                                                        server: Server) -> None:
    server.script[3] = http_error(500)
    first, first_dir = collect(experiment, server)
    assert first.returncode != 0
    spent_first = Decimal(json.loads((first_dir / "status.json").read_text())["spent_usd"])
    server.script.clear()
    second, second_dir = collect(experiment, server, series="openai-2")
    assert second.returncode == 0, second.stderr
    first_line = next(line for line in second.stderr.splitlines() if line.startswith("call 1/"))
    used = Decimal(first_line.split("budget used ")[1].split(" of")[0])
    spent_second_call1 = calls_of(second_dir)["cost_usd"][0]  # a Decimal, exact
    assert used == Decimal("0.41792") + spent_first + spent_second_call1


def test_the_budget_follows_its_id_not_the_outputs_folder(experiment: Path,
                                                                  server: Server) -> None:
    # Room for one plan (6.54 USD) but not for the first series' spend on top of a second.
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "7.5"')
    first, _ = collect(experiment, server)
    assert first.returncode == 0, first.stderr
    elsewhere = experiment.parent.parent / "elsewhere"
    second = run_cli("run", str(experiment), "--series", "openai-2", "--backend", "openai",
                     "--out", str(elsewhere),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert second.returncode != 0 and "nothing was sent" in second.stderr
    assert len(server.requests) == 72 and not elsewhere.exists()
    ledger = ledger_path("protocol-1.0-openai")
    assert sum(1 for line in ledger.read_text().splitlines() if '"reserve"' in line) == 72
