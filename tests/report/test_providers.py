"""Two providers' series side by side: only when both are complete (protocol 1.0, Limits: a
second provider's series, absent or partial, is never presented as a comparison).

Each provider's series is real: the OpenAI series through the Responses backend, the other
through the `openai-chat` plugin's own frozen config, each against a loopback server of its API.
"""

from __future__ import annotations

import importlib.metadata
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.series import loopback_series
from support.suite import ROOT

from fragbench.testing.loopback import Server, http_error

pytestmark = pytest.mark.slow

CHAT = "protocol-1.0-openai-chat"


def chat_series(workspace: Path, name: str, script: dict | None = None) -> Path:
    experiment = workspace / "experiments" / CHAT
    with Server("chat") as server:
        server.script.update(script or {})  # request number, from 0
        run_cli("run", str(experiment), "--series", name, "--backend", "openai-chat",
                "--out", str(workspace / "outputs"), env={"OPENAI_BASE_URL": server.base_url})
    return workspace / "outputs" / CHAT / name


def test_two_providers_are_compared_only_when_both_series_are_complete(
        workspace: Path, experiment: Path, server: Server, tmp_path: Path) -> None:
    openai = loopback_series(experiment, server, "openai")
    stopped = chat_series(workspace, "chat-stopped", {4: http_error(500)})
    out = tmp_path / "cmp.parquet"
    for a, b in ((openai, stopped), (stopped, openai)):
        refused = run_cli("compare", str(a), str(b), "--out", str(out))
        assert refused.returncode == 4 and refused.stdout == ""
        assert error_lines(refused.stderr) == [
            "fragbench: chat-stopped (openai-chat) is stopped: series of two providers are "
            "compared only when both are complete (protocol 1.0, Limits); read each series' own "
            "report instead."]
        assert not out.exists()  # nothing presented, nothing written

    complete = chat_series(workspace, "chat")
    shown = run_cli("compare", str(openai), str(complete), "--out", str(out))
    assert shown.returncode == 0, shown.stderr
    table = pl.read_parquet(out)
    # The same instructions, inputs and schema: every cell is compared.
    assert table.height == 72 and table["compared"].all()


def test_a_stopped_series_of_one_provider_is_still_compared_with_a_warning(
        extractive: Path, workspace: Path) -> None:
    """The guard is about providers: a model series beside the offline baseline keeps the
    warnings it had (test_report_compare), and so do two series of one provider."""
    stopped = chat_series(workspace, "chat-stopped", {4: http_error(500)})
    complete = chat_series(workspace, "chat")
    for a, b in ((extractive, stopped), (complete, stopped)):
        shown = run_cli("compare", str(a), str(b))
        assert shown.returncode == 0, shown.stderr
        warnings = [ln for ln in shown.stdout.splitlines() if ln.startswith("WARNING")]
        assert any(ln.startswith("WARNING: series B, chat-stopped, is stopped at call 5")
                   for ln in warnings), warnings


def test_plan_shows_each_provider_series_its_own_reservations_and_budget() -> None:
    shown = run_cli("plan", "experiments/protocol-1.0-anthropic")
    assert shown.returncode == 0, shown.stderr
    assert "budget protocol-1.0-anthropic: ceiling 2 - prior 0" in shown.stdout
    assert "experiment.json is current" in shown.stdout
    doc = json.loads(run_cli("plan", "experiments/protocol-1.0-anthropic", "--json").stdout)
    plan, review = doc["plan"], doc["review"]
    assert review["backend"] == "anthropic" and review["budget"]["id"] == "protocol-1.0-anthropic"
    # Its own rates, by hand for the first call: every byte plus 1,024 framing tokens at the
    # cache-write rate (1.25), and max_tokens (1,200) at the output rate (5), per million.
    first = plan["schedule"][0]
    expected = (Decimal(first["request_bytes"] + 1024) * Decimal("1.25") + 1200 * 5) / 10**6
    assert Decimal(review["reserved_usd"][0]) == expected
    assert len(review["reserved_usd"]) == 72
    # Its SDK and plugin are frozen with it; the protocol's plan records neither.
    assert plan["packages"]["anthropic"] == importlib.metadata.version("anthropic")
    [entry] = [p for p in plan["plugins"] if (p["kind"], p["name"]) == ("backend", "anthropic")]
    assert (entry["origin"], entry["version"]) == ("fragbench-anthropic", "0.1.0")
    assert list(entry["code_sha256"]) == ["fragbench_anthropic/__init__.py"]  # its code, too

    chat = json.loads(run_cli("plan", "experiments/protocol-1.0-openai-chat", "--json").stdout)
    assert chat["review"]["budget"]["id"] == "protocol-1.0-openai-chat"
    assert set(chat["review"]["reserved_usd"]) == {"0"} and chat["review"]["budget"]["fits"]
    assert chat["review"]["frozen_plan"]["current"] is True


@pytest.mark.parametrize("name", ["protocol-1.0-anthropic", "protocol-1.0-openai-chat"])
def test_every_request_is_the_protocols_own_under_a_budget_of_its_own(name: str) -> None:
    """The same corpus, instructions, inputs and schema as the OpenAI series, request for
    request (their frozen hashes agree), and none of its money."""
    ours, protocol = (json.loads((ROOT / "experiments" / n / "experiment.json")
                                 .read_text(encoding="utf-8"))
                      for n in (name, "protocol-1.0"))
    assert ours["parameters"] == protocol["parameters"]
    assert [c["request_sha256"] for c in ours["schedule"]] == [
        c["request_sha256"] for c in protocol["schedule"]]
    assert ours["budget"]["id"] == name != protocol["budget"]["id"]
