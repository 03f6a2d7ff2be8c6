"""The fault suite (`fragbench.testing.check_backend`) on every shipped backend, each against
the loopback server of its API shape: the OpenAI Responses backend, the Anthropic Messages
backend and the Chat Completions backend keep the same promises, checked the same way.

Each backend runs with the parameters of its committed experiment (`experiments/*/config.toml`),
pointed at the loopback server through its base-URL variable, priced with the kit's frozen
table (distinct rates, so that a usage field read into the wrong place changes the cost).
The plugin packages' own tests (plugins/*/tests) run the suite once more each, the server named
by the `base_url` parameter instead, not again as here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from support.suite import ROOT

from fragbench.plugins import registry
from fragbench.testing import check_backend
from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow


SHIPPED: dict[str, tuple[str, str]] = {
    # backend name in its experiment: (experiment folder, API shape)
    "openai": ("protocol-1.0", "responses"),
    "anthropic": ("protocol-1.0-anthropic", "messages"),
    "openai-chat": ("protocol-1.0-openai-chat", "chat"),
}


def backend_table(experiment: str, name: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "experiments" / experiment / "config.toml")
                           .read_text(encoding="utf-8"))
    table: dict[str, Any] = config["backends"][name]
    return table


@pytest.mark.parametrize("name", list(SHIPPED))
def test_every_shipped_backend_passes_the_same_fault_suite(name: str, tmp_path: Path) -> None:
    experiment, api = SHIPPED[name]
    table = backend_table(experiment, name)
    params = {k: v for k, v in table.items() if k not in ("plugin", "pricing")}
    backend = registry().get("backend", table["plugin"])
    # The Chat Completions backend names its key's variable in its config ("" for a local
    # server that takes none); the others read their provider's.
    key_env: Any = (params["key_env"] or None) if "key_env" in params else ...
    with Server(api) as server:
        ran = check_backend(backend, params, server, key_env=key_env, tmp_path=tmp_path)
    assert "every call answered" in ran and "a connection refused at call 1" in ran
    assert sum(n.startswith("a usage without") for n in ran) >= 2  # input and output at least
