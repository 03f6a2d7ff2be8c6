"""The frozen plan: what it holds, and that a run refuses when anything drifts from it."""

from __future__ import annotations

import itertools
import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from support.cli import error_lines, refreeze, run_cli
from support.suite import ROOT

from fragbench import text
from fragbench.errors import PlanMismatch, SeriesError
from fragbench.experiment.config import load_experiment
from fragbench.experiment.plan import block_order, build_plan, dumps, verify
from fragbench.experiment.requests import request_text
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


def test_the_committed_plan_holds_a_line_per_call_and_reads_back_whole() -> None:
    """experiment.json (`dumps`): the sections indented, each scheduled call one line of its
    own, in order; the text parses back to the very plan, a string with a newline, a line
    separator or an accent included."""
    path = ROOT / "experiments" / "protocol-1.0" / "experiment.json"
    text_ = path.read_text(encoding="utf-8")
    plan = json.loads(text_)
    assert dumps(plan) == text_
    lines = text_.splitlines()
    at = lines.index('  "schedule": [')
    assert [json.loads(line.strip().rstrip(",")) for line in lines[at + 1:at + 73]] == \
        plan["schedule"]
    assert lines[at + 73] == "  ],"
    assert lines[1] == '  "format": 1,' and lines[-1] == "}"
    odd = {"schedule": [{"q": "a\nb\u2028c", "é": ["x", {"y": None}]}], "z": {"k": [1]}}
    assert json.loads(dumps(odd)) == odd
    assert len(dumps(odd).split("\n")) == 11  # ten lines and the empty after the last newline


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


@pytest.mark.parametrize(("variants", "modes"), [
    (("A", "B"), ("retrieval", "full")), (("A", "B", "C"), ("retrieval", "full")),
    (("A", "B"), ("retrieval", "full", "none")), (("A", "B", "C", "D"), ("retrieval", "full"))])
def test_block_order_is_balanced_and_rotating_as_documented(variants: tuple[str, ...],
                                                            modes: tuple[str, ...]) -> None:
    """`plan.block_order`'s docstring and docs/protocol.md, statement by statement: every
    variant x mode once in a block (balanced); the variants take turns in their order, so no
    two neighbours share one (the block read as a ring, since `schedule` rotates it); the modes
    start in their order and shift by one at each turn of the variants; for A/B x
    retrieval/full the block the docs print."""
    order = block_order(variants, modes)
    nv, nm = len(variants), len(modes)
    assert sorted(order) == sorted(itertools.product(variants, modes))
    assert [v for v, _ in order] == list(variants) * nm
    assert all(a[0] != b[0] for a, b in zip(order, order[1:] + order[:1], strict=True))
    place = [modes.index(m) for _, m in order]
    assert place[:nv] == [i % nm for i in range(nv)]
    assert all(place[i + nv] == (place[i] + 1) % nm for i in range(len(order) - nv))
    if (variants, modes) == (("A", "B"), ("retrieval", "full")):
        shown = ", ".join(f"({v}, {m})" for v, m in order)
        assert shown == "(A, retrieval), (B, full), (A, full), (B, retrieval)"
        protocol = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
        assert "balanced and rotating" in protocol and shown in protocol


def test_the_protocol_schedule_rotates_its_block_by_one_place() -> None:
    """docs/protocol.md: each block of protocol 1.0 is the first one rotated by one more place;
    over four blocks each pair opens a block once and holds each place once; where two blocks
    meet the variant repeats and the mode changes."""
    schedule = build_plan(load_experiment(ROOT / "experiments" / "protocol-1.0"))["schedule"]
    blocks = [[(c["variant"], c["mode"]) for c in schedule[i:i + 4]] for i in range(0, 72, 4)]
    first = blocks[0]
    for b, block in enumerate(blocks):
        assert block == first[b % 4:] + first[:b % 4]
    for start in range(len(blocks) - 3):
        four = blocks[start:start + 4]
        for place in range(4):
            assert len({block[place] for block in four}) == 4
    for before, after in itertools.pairwise(blocks):
        assert before[-1][0] == after[0][0] and before[-1][1] != after[0][1]


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


def test_a_plan_frozen_again_while_the_run_begins_is_refused(
        experiment: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """experiment.json rewritten after it was verified and before it is copied into the series
    (another shell's `fragbench freeze`): the copy's bytes are not the verified plan's, so the
    run stops in one line, nothing sent; run again, it collects into the same folder, and its
    plan.json is the plan whose hash series.json and the reports record."""
    import hashlib

    import fragbench.run as run_module

    path = experiment / "experiment.json"
    original = path.read_bytes()
    verified = run_module.verify

    def verify_then_freeze_again(exp: Any) -> Any:
        found = verified(exp)
        path.write_bytes(original.replace(b'"format": 1', b'"format":  1', 1))
        return found

    monkeypatch.setattr(run_module, "verify", verify_then_freeze_again)
    out = workspace / "outputs"
    with pytest.raises(SeriesError, match=r"changed while the run began .* nothing was sent"):
        run(experiment, series="extractive", out=out)
    series_dir = out / "protocol-1.0" / "extractive"
    assert not (series_dir / "journal.jsonl").exists()
    monkeypatch.setattr(run_module, "verify", verified)
    path.write_bytes(original)
    result = run(experiment, series="extractive", out=out)
    assert result.stop is None
    digest = hashlib.sha256((series_dir / "plan.json").read_bytes()).hexdigest()
    assert digest == hashlib.sha256(original).hexdigest()
    assert json.loads((series_dir / "series.json").read_text())["plan_sha256"] == digest
    assert f"`{digest}`" in (series_dir / "report.md").read_text(encoding="utf-8")


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


def test_each_call_reserves_its_utf8_bytes_not_its_characters() -> None:
    """Issue 24, item 11, on a plan built now (not the committed snapshot): every call's
    `request_bytes` and reservation count the UTF-8 bytes of its text (a token is at least one
    byte; a character can be four), for the French calls too, where bytes outnumber
    characters: (bytes + 1024 framing tokens) at the highest input-side rate, 12.50, plus the
    1200-token output ceiling at 50, per million."""
    experiment = load_experiment(ROOT / "experiments" / "protocol-1.0")
    schedule = build_plan(experiment)["schedule"]
    _, calls, _ = verify(experiment)
    longer = 0
    for entry, call in zip(schedule, calls, strict=True):
        text_ = request_text(call.request)
        nbytes = len(text_.encode("utf-8"))
        longer += nbytes > len(text_)
        assert entry["request_bytes"] == nbytes, entry["id"]
        expected = (Decimal(nbytes + 1024) * Decimal("12.50") + 1200 * Decimal(50)) / 1_000_000
        assert Decimal(entry["reserved_usd"]) == expected, entry["id"]
    assert longer >= 36  # the French calls at least: where the two counts differ


def test_the_schedule_alternates_variants_in_block_order() -> None:
    """Issue 24, item 11, on a plan built now: the first block is `block_order` itself (the
    order its docstring states, not another balanced one), and in every block two neighbours
    never share a variant (A, B, A, B), whatever the rotation."""
    experiment = load_experiment(ROOT / "experiments" / "protocol-1.0")
    schedule = build_plan(experiment)["schedule"]
    blocks = [[(c["variant"], c["mode"]) for c in schedule[i:i + 4]] for i in range(0, 72, 4)]
    assert blocks[0] == block_order(experiment.variants, experiment.modes)
    for block in blocks:
        assert all(a[0] != b[0] for a, b in itertools.pairwise(block)), block
