"""Plugin API versions (issue 15, item 6): every registered object declares the API it is
written for, and a fragbench that does not support it refuses it in one line naming the plugin,
its distribution and what to do, for every command that loads plugins.

The plugins are real installed distributions (a module and its dist-info on sys.path), found
through the `fragbench` entry-point group by the real CLI, in process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.cli import error_lines, run_cli
from support.plugins import fake_distribution
from support.suite import ROOT

from fragbench.api import API_VERSION
from fragbench.errors import EXIT_REFUSED
from fragbench.plugins import registry

BODIES = {
    "chunker": ("register_chunkers", "    def chunk(self, sentences, size):\n"
                                     "        return sentences\n"),
    "scorer": ("register_scorers", "    def score(self, chunks, questions):\n"
                                   "        return chunks\n"),
    "backend": ("register_backends", "    is_model = False\n"
                                     "    label = 'a test backend'\n"
                                     "    def check_params(self, params):\n"
                                     "        pass\n"
                                     "    def open(self, params):\n"
                                     "        raise AssertionError('never opened here')\n"),
    "measure": ("register_measures", "    kind = 'diagnostic'\n"
                                     "    def compute(self, data):\n"
                                     "        return {}\n"),
}

Install = Callable[[str, str, str], None]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """`install(kind, name, declaration)`: a distribution `fragbench-<name>` 0.3 registering one
    object of that kind, named `name`, whose class body starts with `declaration` (an
    `api_version = ...` line, or nothing). The registry is loaded afresh around the test, so
    no other test sees these plugins."""
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    registry.cache_clear()

    def make(kind: str, name: str, declaration: str) -> None:
        hook, body = BODIES[kind]
        module = f"fragbench_apitest_{name.replace('-', '_')}"
        fake_distribution(site, f"fragbench-{name}", module, (
            "from fragbench.api import hookimpl\n"
            "class Plugin:\n"
            f"    name = {name!r}\n"
            f"{declaration}"
            f"{body}"
            "@hookimpl\n"
            f"def {hook}(register):\n"
            "    register(Plugin())\n"))

    yield make
    registry.cache_clear()
    for name in [m for m in sys.modules if m.startswith("fragbench_apitest_")]:
        del sys.modules[name]


NEWER_MAJOR = ("was written for plugin API 2.0, and this fragbench provides plugin API 1.1 "
               "(major 1 only); install a version of the plugin written for API 1.x, or a "
               "fragbench that supports API 2.x.")
NEWER_MINOR = ("was written for plugin API 1.9, newer than this fragbench provides plugin API "
               "1.1; upgrade fragbench, or install a version of the plugin written for API 1.1.")
NONE = ("declares no api_version; add `api_version = \"1.1\"` to it (the plugin API it is "
        "written for, docs/plugins.md).")


@pytest.mark.parametrize(("kind", "declaration", "says"), [
    ("chunker", "    api_version = '2.0'\n", NEWER_MAJOR),
    ("scorer", "    api_version = '1.9'\n", NEWER_MINOR),
    ("backend", "", NONE),
    ("measure", "    api_version = None\n", NONE),
    ("chunker", "    api_version = '1'\n",
     "declares api_version '1', not MAJOR.MINOR such as \"1.1\" (docs/plugins.md)."),
    ("scorer", "    api_version = 1.0\n",
     "declares api_version 1.0, not MAJOR.MINOR such as \"1.1\" (docs/plugins.md)."),
    ("backend", "    api_version = '1.0.0'\n",
     "declares api_version '1.0.0', not MAJOR.MINOR such as \"1.1\" (docs/plugins.md)."),
    ("measure", "    api_version = ' 1.0'\n",
     "declares api_version ' 1.0', not MAJOR.MINOR such as \"1.1\" (docs/plugins.md)."),
])
def test_an_unsupported_api_version_is_refused_in_one_line(
        install: Install, kind: str, declaration: str, says: str) -> None:
    install(kind, "old-one", declaration)
    result = run_cli("plugins")
    assert result.returncode == EXIT_REFUSED and result.stdout == ""
    assert error_lines(result.stderr) == [
        f"fragbench: {kind} 'old-one' (plugin fragbench-old-one 0.3) {says}"]
    assert result.stderr.count("\n") == 1


def test_every_command_that_loads_plugins_refuses_it_and_help_loads_none(
        install: Install, tmp_path: Path) -> None:
    """The refusal comes from the registry, so any command that loads plugins says it, even
    one that does not use that plugin; `--help` loads none and still works."""
    install("chunker", "future", "    api_version = '2.0'\n")
    line = (f"fragbench: chunker 'future' (plugin fragbench-future 0.3) {NEWER_MAJOR}")
    out = tmp_path / "r.parquet"
    retrieve = run_cli("retrieve", str(ROOT / "corpus/0.2/price.toml"), "--out", str(out))
    assert retrieve.returncode == EXIT_REFUSED
    assert error_lines(retrieve.stderr) == [line]
    assert not out.exists()
    plan = run_cli("plan", str(ROOT / "experiments/protocol-1.0"), "--backend", "extractive")
    assert plan.returncode == EXIT_REFUSED and error_lines(plan.stderr) == [line]
    helped = run_cli("--help")
    assert helped.returncode == 0 and "retrieve" in helped.stdout and helped.stderr == ""


def test_the_supported_version_is_accepted_and_listed(install: Install) -> None:
    for kind in BODIES:
        install(kind, f"current-{kind}", f"    api_version = {API_VERSION!r}\n")
    result = run_cli("plugins")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for kind in BODIES:
        name = f"current-{kind}"
        assert any(line.split() == [kind, name, f"fragbench-{name}", "0.3", "(plugin)", "API",
                                    API_VERSION] for line in lines), (kind, lines)
    # Every object listed says the API it is written for, built-ins included: theirs is 1.0,
    # which every 1.x accepts (a minor version only adds).
    listed = [line for line in lines if not line.startswith("config ")]
    assert listed and all(line.endswith((" API 1.0", f" API {API_VERSION}")) for line in listed)
    assert any(line.endswith(" API 1.0") and "(built-in)" in line for line in listed), listed
