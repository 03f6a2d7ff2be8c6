"""Plugins: discovery through the `fragbench` entry-point group, names owned by the core."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from support.cli import run_cli, run_process
from support.plugins import fake_distribution, with_path
from support.suite import ROOT

pytestmark = pytest.mark.slow


def test_plugins_lists_builtins_and_third_party() -> None:
    result = run_cli("plugins")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for kind, name in [("chunker", "sentence-groups"), ("scorer", "sqrt-lexical"),
                       ("backend", "openai"), ("backend", "extractive"),
                       ("measure", "availability")]:
        assert any(line.split()[:3] == [kind, name, "fragbench"] and "built-in" in line
                   for line in lines), (kind, name)
    assert any(line.split()[:3] == ["chunker", "sliding-window", "fragbench-sliding-window"]
               and "(plugin)" in line for line in lines)


def test_load_plugins_variable_limits_third_party_plugins() -> None:
    result = run_process("plugins", env={"FRAGBENCH_LOAD_PLUGINS": ""})
    assert result.returncode == 0
    assert "sliding-window" not in result.stdout and "sentence-groups" in result.stdout


def test_third_party_chunker_gets_the_core_selection(tmp_path: Path) -> None:
    out = tmp_path / "w.parquet"
    result = run_cli("retrieve", str(ROOT / "corpus/0.2/price.toml"), "--chunker", "sliding-window",
                     "--chunk-size", "3", "--top-k", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    table = pl.read_parquet(out)
    # Six sentences, windows of three with stride one: four chunks per passage.
    assert table.group_by("lang", "variant").len()["len"].to_list() == [4, 4, 4, 4]
    assert table.filter(pl.col("selected")).height == 8
    assert table.filter(pl.col("chunk") == 1)["fact_ids"].to_list()[0] == ["F2", "F3", "F4"]


def test_a_plugin_cannot_take_a_name_already_registered(tmp_path: Path) -> None:
    fake_distribution(tmp_path, "fragbench-dup", "fragbench_dup", (
        "from fragbench.hookspecs import hookimpl\n"
        "from fragbench.builtin.chunkers import SentenceGroups\n"
        "@hookimpl\n"
        "def register_chunkers(register):\n"
        "    register(SentenceGroups())\n"))
    result = run_process("plugins", env=with_path(tmp_path))
    assert result.returncode != 0
    assert ("fragbench-dup registers a chunker named 'sentence-groups', which fragbench already "
            "registered") in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_misspelt_hook_is_an_error(tmp_path: Path) -> None:
    fake_distribution(tmp_path, "fragbench-typo", "fragbench_typo", (
        "from fragbench.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def register_chunker(register):\n"
        "    pass\n"))
    result = run_process("plugins", env=with_path(tmp_path))
    assert result.returncode != 0
    assert "register_chunker" in result.stderr


def test_a_third_party_measure_is_found_by_name(tmp_path: Path) -> None:
    fake_distribution(tmp_path, "fragbench-count", "fragbench_count", (
        "import polars as pl\n"
        "from fragbench.hookspecs import hookimpl\n"
        "class Count:\n"
        "    name = 'chunk-count'\n"
        "    api_version = '1.0'\n"
        "    kind = 'diagnostic'\n"
        "    def compute(self, data):\n"
        "        return {'chunk_count': data.retrieval.group_by('case').len()}\n"
        "@hookimpl\n"
        "def register_measures(register):\n"
        "    register(Count())\n"))
    result = run_process("plugins", env=with_path(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "measure  chunk-count        fragbench-count 0.3 (plugin)" in result.stdout


def test_help_and_plugins_import_no_heavy_library() -> None:
    """Start-up stays light: listing the plugins loads every plugin module, built-in and
    installed, and none may pull in Polars, an SDK or matplotlib until a command needs it;
    nor may `fragbench.api`, which every plugin module imports."""
    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from fragbench.cli.commands import app\n"
            "import fragbench.api\n"  # the one import a plugin needs: light too
            "for args in (['--help'], ['plugins']):\n"
            "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
            "heavy = ('polars', 'numpy', 'scipy', 'openai', 'anthropic', 'matplotlib', "
            "'jinja2')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
