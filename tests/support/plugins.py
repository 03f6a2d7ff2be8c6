"""Plugins a test installs: a fake distribution on sys.path with its entry points, and the toy
chat backend (its output limit named max_tokens) of the backend-contract tests."""

from __future__ import annotations

import os
from pathlib import Path


def fake_distribution(site: Path, name: str, module: str, code: str) -> None:
    """A real installed distribution, as pip would lay it out: module + dist-info."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(code, encoding="utf-8")
    # Named as a wheel names it (hyphens as underscores): importlib.metadata reads a
    # `fragbench-x-0.3.dist-info` folder as a distribution of `fragbench` itself.
    info = site / f"{name.replace('-', '_')}-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.3\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[fragbench]\n{module} = {module}\n",
                                           encoding="utf-8")


def with_path(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


TOY_BACKEND = '''
from fragbench.hookspecs import hookimpl
from fragbench.interfaces import Contract


class ToyChat:
    """Names its output limit max_tokens, as Chat Completions does."""

    name = "toy-chat"
    api_version = "1.0"
    is_model = True
    label = "toy chat server"

    def check_params(self, params):
        if not isinstance(params.get("max_tokens"), int):
            raise ValueError("max_tokens must be an integer")

    {contract}

    def open(self, params):
        raise AssertionError("planning never opens a session")


@hookimpl
def register_backends(register):
    register(ToyChat())
'''


TOY_TABLE = '''
[backends.toy]
plugin = "toy-chat"
model = "toy-1"
max_tokens = 300

[backends.toy.pricing]
read_on = "2026-11-30"
tier = "test"
models = ["toy-1"]
per_tokens = 1000000
input = "2"
output = "8"
max_input_tokens = 100000
'''


def toy_table(experiment: Path) -> None:
    """The toy backend's table in the experiment's config."""
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("[budget]", TOY_TABLE + "\n[budget]"), encoding="utf-8")


def toy_experiment(experiment: Path, site: Path, contract: str) -> dict[str, str]:
    """The toy backend installed in `site` (for a process given the environment returned)."""
    fake_distribution(site, "fragbench-toy-chat", "fragbench_toy_chat",
                      TOY_BACKEND.format(contract=contract))
    toy_table(experiment)
    return with_path(site)
