"""Issue 24, items 1, 2 and 10 (usage parts): what a response's model and usage must be for a
call to be priced, through the real openai SDK against the loopback server (the CLI's `run`),
and the CLI (Typer's runner). The pure rules (`model_matches`, `impossible`, `lacking`) are
tested in process in test_collect_stops.py, the file collect.py's mutation run uses.

- Item 1: a dated snapshot is written in ASCII digits. A model named with Arabic-Indic or
  full-width digits (`gpt-6-astra-٢٠٢٦-٠٩-٠٣`) is another model: the first call stops the series
  as a changed model, unpriced, counted at its reservation. Wherever a number is read from
  outside (a price in the config, an amount in the ledger, `--shard-memory`), only 0-9 are
  digits: Python's `Decimal()` and `int()` read `١٠` and `１０` as 10.
- Item 2: reasoning is part of the output (every shipped backend maps it so), so reasoning
  above the output tokens, or above the output ceiling, is a usage the request could not have
  produced; so is a `total_tokens` other than input plus output. Each is an impossible usage:
  an unknown cost, counted at the reservation, and the series stops.
- Item 10: a count that is there but no whole number is said as such, with its place in the
  body; a declared field that is absent is named with its place and with how a backend's
  contract declares the fields its provider reports (`Contract.usage_fields`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import error_lines, run_cli
from support.series import calls_of, collect

from fragbench.errors import UsageError
from fragbench.interfaces import COST_FIELDS, SNAPSHOT, Contract
from fragbench.testing.loopback import Server, ok

pytestmark = pytest.mark.slow

ARABIC = "gpt-6-astra-\u0662\u0660\u0662\u0666-\u0660\u0669-\u0660\u0663"  # ٢٠٢٦-٠٩-٠٣
FULL_WIDTH = "gpt-6-astra-\uff12\uff10\uff12\uff16-\uff10\uff19-\uff10\uff13"  # ２０２６-０９-０３


def usage(output: Any = 321, reasoning: Any = 0, *, total: Any = "sum",
          cache_write: Any = 0) -> dict[str, Any]:
    """A Responses API usage object: 500 input tokens, none cached; `total` "sum" is input plus
    output, None leaves a field out."""
    details: dict[str, Any] = {"cached_tokens": 0}
    if cache_write is not None:
        details["cache_write_tokens"] = cache_write
    body: dict[str, Any] = {"input_tokens": 500, "input_tokens_details": details,
                            "output_tokens": output,
                            "output_tokens_details": {"reasoning_tokens": reasoning}}
    if total == "sum":
        total = 500 + output if isinstance(output, int) else None
    if total is not None:
        body["total_tokens"] = total
    return body


def stopped_at_six(experiment: Path, server: Server, answer: dict[str, Any], reason: str
                   ) -> tuple[Any, dict[str, Any]]:
    """Call 6 answers `answer`: the series stops there with `reason`, after six requests, the
    call unpriced and counted at its whole reservation. Returns (the run, call 6's row)."""
    server.script[5] = answer
    result, series_dir = collect(experiment, server)
    assert result.returncode == 3, result.stderr
    assert "stopped at call 6" in result.stderr and reason in result.stderr
    assert len(server.requests) == 6
    row = calls_of(series_dir).row(5, named=True)
    assert row["stop_reason"] == reason
    assert row["cost_usd"] is None and row["counted_usd"] == row["reserved_usd"]
    return result, row


# -- Item 1: a snapshot in other digits ---------------------------------------------------------

@pytest.mark.parametrize("model", [ARABIC, FULL_WIDTH], ids=["arabic-indic", "full-width"])
def test_a_snapshot_in_other_digits_is_another_model_at_the_first_call(
        experiment: Path, server: Server, model: str) -> None:
    """Protocol: "changement de modèle" stops the series; the first response must be the model
    asked for or a dated snapshot of it. `gpt-6-astra-٢٠٢٦-٠٩-٠٣` is neither: call 1 stops
    the series (not call 2, as when it was taken for a snapshot), and it is not priced at the
    frozen rates (it has no price in the table): counted at its reservation."""
    server.script[0] = ok(model=model)
    result, series_dir = collect(experiment, server)
    assert result.returncode == 3, result.stderr
    assert "stopped at call 1" in result.stderr and "changed_model" in result.stderr
    assert len(server.requests) == 1
    row = calls_of(series_dir).row(0, named=True)
    assert row["model"] == model and row["stop_reason"] == "changed_model"
    assert row["cost_usd"] is None and row["counted_usd"] == row["reserved_usd"]


def test_the_default_snapshot_is_ascii_digits_on_its_own() -> None:
    """SNAPSHOT is public (a backend's contract may use or extend it without re.ASCII): it
    writes [0-9] itself."""
    import re

    assert re.fullmatch(SNAPSHOT, "-2026-09-03")
    assert re.fullmatch(SNAPSHOT, ARABIC.removeprefix("gpt-6-astra")) is None
    assert re.fullmatch(SNAPSHOT, FULL_WIDTH.removeprefix("gpt-6-astra")) is None


def test_a_contract_snapshot_that_cannot_follow_the_model_name_is_refused() -> None:
    """A snapshot pattern is checked as model_matches uses it (after the model's name, with
    re.ASCII): an inline global flag compiles alone but not there, and would fail the first
    answer; refused when the contract is read instead."""
    contract = Contract(model="m", output_ceiling=10, usage_fields=frozenset(COST_FIELDS),
                        snapshot="(?i)-[0-9]{8}")
    assert any("snapshot must be a regular expression" in p for p in contract.problems())
    assert Contract(model="m", output_ceiling=10, usage_fields=frozenset(COST_FIELDS),
                    snapshot=r"-\d{8}").problems() == []


@pytest.mark.parametrize("price", ["\u0661\u0660", "\uff11\uff10", "1_0", " 10", "1e1"])
def test_a_price_in_other_digits_is_refused_when_the_config_is_read(
        experiment: Path, price: str) -> None:
    """`input = "١٠"` was read as 10 USD per million (Decimal() takes any script's digits,
    underscores, spaces and exponents): one line naming the key, exit 4, no plan written."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert 'input = "10"' in text
    config.write_text(text.replace('input = "10"', f'input = "{price}"', 1), encoding="utf-8")
    plan = experiment / "experiment.json"
    before = plan.read_bytes()
    result = run_cli("freeze", str(experiment))
    assert result.returncode == 4, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and "input" in lines[0] and "digits 0-9" in lines[0], lines
    assert plan.read_bytes() == before


def test_a_ledger_amount_in_other_digits_is_no_amount() -> None:
    """The ledger's reader takes an amount only as `usd` writes it."""
    from fragbench.budget.ledger import amount_of

    assert amount_of("0.015") is not None and amount_of("12") is not None
    for forged in ("\u0661\u0662", "\uff11\uff12", "1_2", " 12", "12 ", "1e2", "NaN", "+1"):
        assert amount_of(forged) is None, forged


@pytest.mark.parametrize("text", ["2\u3000GiB", "\u00a064KiB", "\uff12GiB", "\u0662GiB"])
def test_shard_memory_in_other_digits_or_spaces_is_refused(text: str) -> None:
    """`--shard-memory`: ASCII digits and white space only (`\\s` under re.ASCII)."""
    from fragbench.retrieval.collection.ray import parse_bytes

    with pytest.raises(UsageError, match="give a size such as 2GiB"):
        parse_bytes(text)


@pytest.mark.parametrize("shards", ["\u0663", "\uff13", "1_000", " 3", "0", "1000001"])
def test_shards_in_other_digits_is_one_line_and_writes_nothing(tmp_path: Path, shards: str
                                                               ) -> None:
    """`--shards`: click's int() reads "٣", "３", "1_000" and " 3"; the option takes 0-9 only,
    1 to 1,000,000 (a usage error, exit 2, before anything is read or written)."""
    from support.suite import ROOT

    out = tmp_path / "r.parquet"
    ran = run_cli("retrieve", str(ROOT / "corpus" / "0.2"), "--shards", shards, "--out",
                  str(out))
    assert ran.returncode == 2, ran.stderr
    [line] = error_lines(ran.stderr)
    assert "--shards" in line and "in the digits 0-9" in line, line
    assert list(tmp_path.iterdir()) == []


# -- Item 2: reasoning beyond output, a total that does not add up -------------------------------

@pytest.mark.parametrize(("answer", "said"), [
    (usage(output=321, reasoning=1000), "1000 reasoning tokens reported, more than the 321 "
     "output tokens they are part of"),
    (usage(output=321, reasoning=5000), "5000 reasoning tokens reported, more than the "
     "request's output ceiling of 1200 (reasoning included)"),
    (usage(output=321, total=9999), "9999 total tokens reported, not the 500 input plus 321 "
     "output tokens"),
], ids=["reasoning above output", "reasoning above the ceiling", "total not input + output"])
def test_a_usage_the_request_could_not_produce_is_an_unknown_cost(
        experiment: Path, server: Server, answer: dict[str, Any], said: str) -> None:
    """Protocol: max_output_tokens 1200 "(raisonnement compris)", and a stop at the first
    unknown cost. Reasoning is part of output_tokens on the Responses API (and in the core's
    terms, `Usage`): 1,000 reasoning tokens of 321 output, or 5,000 of a 1,200 ceiling, cannot
    be; nor can a total_tokens that is not input plus output. Never priced: counted at the
    reservation, its figures kept."""
    result, row = stopped_at_six(experiment, server, ok(usage=answer), "unknown_cost")
    assert f"impossible usage: {said}" in result.stderr
    assert row["output_tokens"] == 321  # the figures kept for a person to read


def test_reasoning_within_output_and_a_total_that_adds_up_are_priced(
        experiment: Path, server: Server) -> None:
    """The rule's other side: 1,200 output tokens of which 1,200 reasoning, total 1,700, is a
    usage the request can produce, priced, and the series goes on."""
    server.script[5] = ok(usage=usage(output=1200, reasoning=1200))
    result, series_dir = collect(experiment, server)
    assert result.returncode == 0, result.stderr
    row = calls_of(series_dir).row(5, named=True)
    assert row["cost_usd"] is not None and row["reasoning_tokens"] == 1200


# -- Item 10: what is wrong with a usage field, and where it was looked for ----------------------

@pytest.mark.parametrize(("count", "shown"), [(180.0, "180.0"), ("180", '"180"'),
                                              (True, "true")])
def test_a_count_that_is_no_whole_number_is_said_as_such(
        experiment: Path, server: Server, count: Any, shown: str) -> None:
    """`output_tokens: 180.0` is there: the line says what it is, where, and why it is not
    priced, not that the usage lacks it."""
    result, row = stopped_at_six(experiment, server, ok(usage=usage(output=count, total=None)),
                                 "unknown_cost")
    assert f"usage.output_tokens is {shown}, not a whole number" in result.stderr
    assert "lacks" not in row["cost_unknown"]


def test_a_server_without_cache_writes_is_told_where_and_how_to_declare(
        experiment: Path, server: Server) -> None:
    """A compatible server whose usage has no cache_write_tokens stops at call 1 (the built-in
    backend's contract declares it); the line names where the field is expected and how a
    backend's contract declares the fields its provider reports."""
    server.script[0] = ok(usage=usage(cache_write=None))
    result, series_dir = collect(experiment, server)
    assert result.returncode == 3 and "stopped at call 1" in result.stderr, result.stderr
    line = next(x for x in error_lines(result.stderr) if "stopped at call 1" in x)
    assert "usage.input_tokens_details.cache_write_tokens" in line
    assert "Contract.usage_fields" in line and "docs/adding-a-backend.md" in line
    outcome = next(json.loads(x) for x in
                   (series_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()
                   if '"outcome"' in x)
    assert "usage.input_tokens_details.cache_write_tokens" in outcome["cost_unknown"]
