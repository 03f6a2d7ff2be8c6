"""The backend contract: what a priced backend declares, checked when its config loads.

A backend that named its output limit `max_tokens` used to pass `freeze` and crash `run` with
`KeyError: 'max_output_tokens'`; a Chat Completions backend stopped at its first call because
the core demanded cache fields such servers never report. The core now budgets only from what
the backend declares (`Contract`), and refuses at load, naming the plugin, a backend that
cannot declare it.

The plugins these tests install are real distributions found through their entry points, in
process (tests/support/measure_plugin.py's `installer`); a process of its own only where what is
installed in its environment, and what is not, is what the test reads (`fragbench plugins`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.cli import error_lines, run_cli, run_process
from support.measure_plugin import Install, installer
from support.plans import PROTOCOL_PLAN_SHA256
from support.plugins import TOY_BACKEND, toy_experiment, toy_table
from support.suite import COMMITTED_EXPERIMENTS, ROOT

from fragbench.budget.money import Pricing, UnknownCost, cost
from fragbench.errors import PluginError
from fragbench.experiment.config import _contract
from fragbench.interfaces import COST_FIELDS, Contract, Usage

pytestmark = pytest.mark.slow


def test_the_openai_series_frozen_plan_changes_only_deliberately() -> None:
    """The OpenAI series' committed plan is pinned: a change to it (a refreeze) is a decision,
    made with its reason written above, never a side effect of other work."""
    frozen = ROOT / "experiments" / "protocol-1.0" / "experiment.json"
    assert hashlib.sha256(frozen.read_bytes()).hexdigest() == PROTOCOL_PLAN_SHA256
    result = run_cli("plan", "experiments/protocol-1.0")
    assert result.returncode == 0, result.stderr
    assert "experiment.json is current" in result.stdout


class NoContract:
    name, is_model, label = "toy", True, "toy"


class Raising(NoContract):
    def contract(self, params: dict[str, Any]) -> Contract:
        return Contract(model=params["model"], output_ceiling=params["max_output_tokens"],
                        usage_fields=frozenset(COST_FIELDS))


class Returning(NoContract):
    def __init__(self, value: Any) -> None:
        self.value = value

    def contract(self, params: dict[str, Any]) -> Any:
        return self.value


@pytest.mark.parametrize(("backend", "says"), [
    (NoContract(), "declares no contract(params)"),
    (Raising(), "could not state its contract from these parameters (KeyError"),
    (Returning({"output_ceiling": 10}), "returned dict from contract()"),
    (Returning(Contract(model="m", output_ceiling=0, usage_fields=frozenset({"input_tokens"}))),
     "output_ceiling must be a positive integer, not 0; usage_fields must include "
     "output_tokens"),
    (Returning(Contract(model="", output_ceiling=5,
                        usage_fields=frozenset({"input_tokens", "output_tokens", "tokens"}))),
     "model must be a non-empty string; usage_fields names tokens"),
])
def test_a_backend_that_cannot_state_its_contract_is_refused(backend: Any, says: str) -> None:
    with pytest.raises(PluginError) as raised:
        _contract(backend, {"model": "m", "max_tokens": 100}, "config.toml: backends.toy")
    message = str(raised.value)
    assert message.startswith("config.toml: backends.toy: backend 'toy'"), message
    assert says in message and "docs/adding-a-backend.md" in message


PRICING = Pricing(models=("m",), input=Decimal(2), cached_input=None, cache_write=None,
                  output=Decimal(8), per_tokens=1_000_000, max_input_tokens=10_000,
                  read_on="2026-11-30", tier="test")


def test_a_usage_field_the_provider_lacks_is_priced_as_zero_and_a_declared_one_must_come(
) -> None:
    chat = frozenset({"input_tokens", "output_tokens"})
    # Cache fields the contract leaves out cost nothing when the response leaves them out or
    # says zero: every input token is priced at the input rate.
    usage = Usage(input_tokens=1000, cached_tokens=None, cache_write_tokens=None,
                  output_tokens=500, reasoning_tokens=None)
    assert cost(usage, PRICING, usage_fields=chat) == Decimal("0.006")  # 1000*2 + 500*8, /1e6
    zero = Usage(input_tokens=1000, cached_tokens=0, cache_write_tokens=0, output_tokens=500,
                 reasoning_tokens=None)
    assert cost(zero, PRICING, usage_fields=chat) == Decimal("0.006")
    # A response that reports one anyway shows the contract wrong for this server: pricing it
    # as zero could under-count (cache writes cost more than input), so the cost is unknown.
    for reported in (attrs.evolve(zero, cached_tokens=600),
                     attrs.evolve(zero, cache_write_tokens=800)):
        with pytest.raises(UnknownCost, match="which the backend's contract declares the "
                           "provider does not have"):
            cost(reported, PRICING, usage_fields=chat)
    # A field the contract declares and the response leaves out is an unknown cost.
    with pytest.raises(UnknownCost, match="lacks cached_tokens"):
        cost(usage, PRICING, usage_fields=chat | {"cached_tokens"})
    with pytest.raises(UnknownCost, match="lacks output_tokens"):
        cost(Usage(1000, None, None, None, None), PRICING, usage_fields=chat)


CONTRACT = '''def contract(self, params):
        return Contract(model=params["model"], output_ceiling=params["max_tokens"],
                        usage_fields=frozenset({"input_tokens", "output_tokens"}))'''


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """install(distribution, code): a plugin installed in process for this test only."""
    yield from installer(tmp_path, monkeypatch)


@pytest.fixture
def toy(experiment: Path, install: Install) -> Iterator[Install]:
    """The experiment with the toy backend's table; install the toy with `toy(contract)`."""
    toy_table(experiment)
    yield lambda contract: install("fragbench-toy-chat", TOY_BACKEND.format(contract=contract))


def test_a_backend_that_names_its_limit_max_tokens_is_budgeted_from_its_contract(
        experiment: Path, toy: Any) -> None:
    toy(CONTRACT)
    frozen = run_cli("freeze", str(experiment))
    assert frozen.returncode == 0, frozen.stderr
    shown = run_cli("plan", str(experiment), "--backend", "toy", "--json")
    assert shown.returncode == 0, shown.stderr
    review = json.loads(shown.stdout)["review"]
    first = json.loads(shown.stdout)["plan"]["schedule"][0]
    # No cache rates in the table: the reservation prices every input-side token at the input
    # rate and the declared ceiling (max_tokens = 300) at the output rate.
    expected = (Decimal(first["request_bytes"] + 1024) * 2 + 300 * 8) / 1_000_000
    assert Decimal(review["reserved_usd"][0]) == expected
    assert review["frozen_plan"]["current"] is True


def test_a_priced_backend_without_a_contract_is_refused_at_freeze(experiment: Path,
                                                                  toy: Any) -> None:
    toy("")
    before = (experiment / "experiment.json").read_bytes()
    result = run_cli("freeze", str(experiment))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "backends.toy: backend 'toy-chat' (plugin fragbench-toy-chat 0.3) declares no " \
        "contract(params)" in line
    assert (experiment / "experiment.json").read_bytes() == before  # nothing half-written


def test_a_cache_rate_a_declared_field_needs_is_required(experiment: Path, toy: Any) -> None:
    toy(CONTRACT.replace('{"input_tokens", "output_tokens"}',
                         '{"input_tokens", "cached_tokens", "output_tokens"}'))
    result = run_cli("plan", str(experiment), "--backend", "toy")
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "backends.toy.pricing.cached_input is missing: backend toy-chat reports cached " \
        "tokens" in line


def test_plugins_shows_what_each_config_accepts_and_what_is_not_installed(
        experiment: Path, tmp_path: Path) -> None:
    env = toy_experiment(experiment, tmp_path / "site", CONTRACT)
    listed = run_process("plugins", "--experiments", str(experiment.parent), env=env)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:3] == ["backend", "toy-chat", "fragbench-toy-chat"]
               and "0.3 (plugin)" in line for line in listed.stdout.splitlines())
    configs = [ln for ln in listed.stdout.splitlines() if ln.startswith("config")]
    assert f"config   {experiment / 'config.toml'}: --backend openai (plugin openai, default) "\
        "| extractive (plugin extractive) | toy (plugin toy-chat)" in configs
    # Every config of the folder, each with what --backend accepts there (the folder holds the
    # committed experiments, whatever a user added to the repository's experiments/).
    assert sorted(ln.split(": --backend")[0] for ln in configs) == sorted(
        f"config   {experiment.parent / name / 'config.toml'}" for name in COMMITTED_EXPERIMENTS)
    assert any("protocol-1.0-anthropic/config.toml: --backend anthropic (plugin anthropic, "
               "default) | extractive" in ln for ln in configs)
    # Without the package, the list no longer has it, the config says so, and the config is
    # refused with one line naming the backends that exist.
    gone = run_process("plugins", "--experiments", str(experiment.parent))
    assert "toy-chat (plugin" not in gone.stdout.split("config")[0]
    assert "toy (plugin toy-chat, NOT INSTALLED)" in gone.stdout
    refused = run_process("plan", str(experiment))
    assert refused.returncode == 4
    [line] = error_lines(refused.stderr)
    assert "backends.toy.plugin: no backend named 'toy-chat' is registered; the backends " \
        "that exist are:" in line and "install that package" in line


def test_plugins_refuses_an_experiments_folder_that_does_not_exist(tmp_path: Path) -> None:
    result = run_cli("plugins", "--experiments", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and result.stdout == ""
    assert error_lines(result.stderr) == [f"fragbench: --experiments {tmp_path / 'nowhere'}: "
                                          "no such folder; point to an experiment folder or a "
                                          "folder of them."]


BROKEN_MEASURE = '''
import polars as pl
from fragbench.hookspecs import hookimpl


class Broken:
    name = "broken-measure"
    api_version = "1.0"
    kind = "diagnostic"
    tables = {{"fine": {{"a": "Int64"}}}}  # doubled braces: this text goes through format

    def compute(self, data):
        return {compute}


@hookimpl
def register_measures(register):
    register(Broken())
'''


@pytest.mark.parametrize(("returns", "says"), [
    ("[1, 2]", "returned list; a measure returns a dict of table name"),
    ("{'../escape': pl.DataFrame({'a': [1]})}", "names a table '../escape'"),
    ("{'fine': [1, 2]}", "table fine returned list, not a Polars DataFrame"),
    ("{'fine': 1 / 0}", "failed: ZeroDivisionError: division by zero"),
])
def test_a_measure_plugin_that_breaks_its_contract_is_named_and_writes_nothing(
        extractive: Path, install: Install, returns: str, says: str) -> None:
    install("fragbench-broken", BROKEN_MEASURE.format(compute=returns))
    before = {p.name: p.read_bytes() for p in extractive.iterdir() if p.is_file()}
    result = run_cli("measure", str(extractive), "--diagnostic", "broken-measure")
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "measure 'broken-measure' (plugin fragbench-broken 0.3)" in line and says in line
    assert {p.name: p.read_bytes() for p in extractive.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("url", [
    "http://alice:hunter2pass@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1?api_key=SECRET123",
    "http://127.0.0.1:8000/v1#token", "ftp://127.0.0.1/v1"])
def test_a_base_url_that_could_carry_a_credential_is_refused_before_anything_is_frozen(
        experiment: Path, url: str) -> None:
    """A config's base URL is frozen in the committed plan and printed by `plan`: it holds no
    user-info, query or fragment (a key belongs in the environment)."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace('timeout_seconds = 600\n',
                                   f'timeout_seconds = 600\nbase_url = "{url}"\n', 1),
                      encoding="utf-8")
    before = (experiment / "experiment.json").read_bytes()
    result = run_cli("freeze", str(experiment))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "backends.openai is unusable: base_url" in line
    assert "hunter2" not in line and "SECRET123" not in line and "token" not in line
    assert (experiment / "experiment.json").read_bytes() == before


def test_a_chat_server_key_too_short_to_redact_is_refused(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from fragbench_openai_chat import OpenAIChatBackend

    from fragbench.errors import FragbenchError

    monkeypatch.setenv("LOCAL_API_KEY", "abc123")
    params = {"model": "m", "max_tokens": 10, "timeout_seconds": 5, "key_env": "LOCAL_API_KEY",
              "base_url": "http://127.0.0.1:9/v1"}
    OpenAIChatBackend().check_params(params)
    with pytest.raises(FragbenchError, match="LOCAL_API_KEY is shorter than 8 characters"):
        OpenAIChatBackend().open(params)
