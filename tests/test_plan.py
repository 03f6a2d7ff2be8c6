"""The frozen plan: what it holds, and that a run refuses when anything drifts from it."""

from __future__ import annotations

import itertools
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import ROOT, error_lines, refreeze, run_cli

from fragbench import text
from fragbench.config import load_experiment
from fragbench.errors import PlanMismatch
from fragbench.plan import build_plan, verify
from fragbench.requests import request_text
from fragbench.run import run


def test_committed_plan_matches_the_code_and_files() -> None:
    frozen, calls, _ = verify(load_experiment(ROOT / "experiments" / "protocol-1.0"))
    assert len(calls) == 72 and len(frozen["schedule"]) == 72
    assert frozen["stopwords"] == {k: list(v) for k, v in text.STOPWORDS.items()}
    assert frozen["tokenization"] == text.TOKENIZATION_RULE
    roles = sorted(f["role"] for f in frozen["files"])
    assert roles == ["config", "corpus", "corpus", "corpus", "prompt", "prompt", "schema"]
    params = frozen["backends"]["openai"]["params"]
    assert params == {"model": "gpt-6-astra", "reasoning_effort": "medium",
                      "max_output_tokens": 1200, "service_tier": "default", "store": False,
                      "timeout_seconds": 600}


def test_schedule_alternates_and_rotates_deterministically() -> None:
    experiment = load_experiment(ROOT / "experiments" / "protocol-1.0")
    plan = build_plan(experiment)
    schedule = plan["schedule"]
    assert len({c["id"] for c in schedule}) == 72
    blocks = [schedule[i:i + 4] for i in range(0, 72, 4)]
    openers = []
    for block in blocks:
        assert len({(c["case"], c["lang"], c["rep"]) for c in block}) == 1
        assert {(c["variant"], c["mode"]) for c in block} == {
            ("A", "retrieval"), ("A", "full"), ("B", "retrieval"), ("B", "full")}
        openers.append((block[0]["variant"], block[0]["mode"]))
    assert all(a != b for a, b in itertools.pairwise(openers))
    assert len(set(openers)) == 4
    assert build_plan(experiment)["schedule"] == schedule  # no randomness


def test_requests_supply_the_selection_or_the_whole_passage() -> None:
    experiment = load_experiment(ROOT / "experiments" / "protocol-1.0")
    _, calls, table = verify(experiment)
    cases = {c.id: c for c in experiment.cases}
    for call in calls:
        case = cases[call.case]
        if call.mode == "full":
            assert call.supplied_ids == case.variants[call.variant]
        else:
            chosen = table.filter(
                (table["case"] == call.case) & (table["lang"] == call.lang)
                & (table["variant"] == call.variant) & (table["chunk_size"] == 3)
                & (table["top_k"] == 1) & table["selected"])
            assert list(call.supplied_ids) == chosen["fact_ids"].to_list()[0]
        for fid in case.fact_ids:
            sentence = case.langs[call.lang].facts[fid]
            assert (sentence in call.request.input) == (fid in call.supplied_ids)
        assert case.langs[call.lang].source in call.request.input


def test_plan_shows_72_calls_that_fit_the_balance() -> None:
    result = run_cli("plan", "experiments/protocol-1.0")
    assert result.returncode == 0, result.stderr
    assert "72 calls" in result.stdout
    assert "balance 9.58208 USD" in result.stdout and "a new series fits" in result.stdout
    assert "is current" in result.stdout
    total = Decimal(result.stdout.split("total reservation ")[1].split(" USD")[0])
    assert Decimal("0") < total <= Decimal("9.58208")
    # The reservation rule, recomputed by hand for one call: bytes + 1024 framing tokens at the
    # cache-write rate, plus 1200 output tokens at the output rate.
    experiment = load_experiment(ROOT / "experiments" / "protocol-1.0")
    plan = build_plan(experiment)
    first = plan["schedule"][0]
    _, calls, _ = verify(experiment)
    nbytes = len(request_text(calls[0].request).encode("utf-8"))
    assert first["request_bytes"] == nbytes
    expected = (Decimal(nbytes + 1024) * Decimal("12.50") + 1200 * Decimal(50)) / 1_000_000
    assert Decimal(first["reserved_usd"]) == expected


def _refused(experiment: Path, workspace: Path, *words: str) -> None:
    result = run_cli("run", str(experiment), "--series", "extractive",
                     "--out", str(workspace / "outputs"))
    assert result.returncode == 4
    assert len(error_lines(result.stderr)) == 1, result.stderr
    for word in words:
        assert word in result.stderr
    assert not (workspace / "outputs").exists()


def test_copy_of_the_experiment_runs(experiment: Path, workspace: Path) -> None:
    # The control for the refusals below: the untouched copy is accepted.
    result = run_cli("run", str(experiment), "--series", "extractive",
                     "--out", str(workspace / "outputs"))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("relative", ["../../corpus/0.2/delay.toml", "prompts/fr.toml",
                                      "schema.json", "config.toml"])
def test_run_refuses_when_one_byte_changes(experiment: Path, workspace: Path,
                                           relative: str) -> None:
    path = experiment / relative
    data = path.read_bytes()
    path.write_bytes(data + b" " if relative.endswith(".json") else data + b"#")
    _refused(experiment, workspace, "experiment.json", "out of date",
             f"{os.path.normpath(experiment / relative)} changed since the plan was frozen")


def test_run_refuses_when_a_sentence_changes(experiment: Path, workspace: Path) -> None:
    path = workspace / "corpus/0.2/hosting.toml"
    path.write_text(path.read_text(encoding="utf-8").replace("30 days", "31 days", 1),
                    encoding="utf-8")
    _refused(experiment, workspace, "out of date", f"{path} changed")


def test_run_refuses_when_a_stopword_list_changes(experiment: Path, workspace: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The stopword lists live in code: change one word, as an edit of text.py would.
    changed = dict(text.STOPWORDS)
    changed["fr"] = (*changed["fr"], "zut")
    monkeypatch.setattr(text, "STOPWORDS", changed)
    with pytest.raises(PlanMismatch, match=r"stopwords\.fr"):
        run(experiment, series="extractive", out=workspace / "outputs")
    assert not (workspace / "outputs").exists()


def test_run_refuses_without_a_frozen_plan(experiment: Path, workspace: Path) -> None:
    (experiment / "experiment.json").unlink()
    _refused(experiment, workspace, "no frozen plan", "fragbench freeze")


def test_run_refuses_a_tampered_schedule(experiment: Path, workspace: Path) -> None:
    path = experiment / "experiment.json"
    plan = json.loads(path.read_text(encoding="utf-8"))
    plan["schedule"][5]["reserved_usd"] = "0.01"
    path.write_text(json.dumps(plan, ensure_ascii=False, indent=2), encoding="utf-8")
    _refused(experiment, workspace, "schedule.5.reserved_usd")


def test_smaller_budget_refuses_with_no_call_made(experiment: Path, workspace: Path,
                                                  server) -> None:  # type: ignore[no-untyped-def]
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "5"')
    planned = run_cli("plan", str(experiment))
    assert "DOES NOT FIT" in planned.stdout
    result = run_cli("run", str(experiment), "--out", str(workspace / "outputs"),
                     env={"OPENAI_API_KEY": "sk-test-budget-0000000000",
                          "OPENAI_BASE_URL": server.base_url})
    assert result.returncode != 0
    assert "reserve" in result.stderr and "nothing was sent" in result.stderr
    assert server.requests == []
    assert not (workspace / "outputs").exists()


def test_missing_key_is_one_line_and_spends_nothing(experiment: Path, workspace: Path,
                                                    server) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("run", str(experiment), "--out", str(workspace / "outputs"),
                     env={"OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 4
    assert error_lines(result.stderr) == [
        "fragbench: OPENAI_API_KEY is not set: export your OpenAI key in the environment and "
        "run again (nothing was sent or spent)."]
    assert server.requests == []
    assert not (workspace / "outputs").exists()
