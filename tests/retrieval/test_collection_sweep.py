"""Sweeps of `retrieve --collection` on the local engine, through the real CLI.

A sweep's table for a setting is exactly the table of that setting run alone (today's
command, one --out file); several settings go to one folder, a table per setting named by it,
and sweep.json lists them; bad settings are refused in one line before anything is computed
or written.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.corpora import synthetic

from fragbench.retrieval.collection.sweep import MANIFEST, table_name

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("sweep")
    rows, queries = synthetic(20261201, passages=40)
    pl.DataFrame(rows, schema=["passage", "position", "lang", "text"], orient="row"
                 ).write_parquet(folder / "s.parquet", row_group_size=16)
    pl.DataFrame(queries[:300], schema=["query", "lang", "text"], orient="row"
                 ).write_parquet(folder / "q.parquet")
    return folder / "s.parquet", folder / "q.parquet"


def collection_args(inputs: tuple[Path, Path]) -> list[str]:
    return ["retrieve", "--collection", str(inputs[0]), "--queries", str(inputs[1])]


def test_each_table_of_a_sweep_is_that_setting_run_alone(inputs: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    ran = run_cli(*collection_args(inputs), "--chunk-size", "2,3", "--top-k", "1,3",
                  "--scorer", "sqrt-lexical", "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["engine"] == "local"
    assert [(s["chunk_size"], s["top_k"], s["scorer"]) for s in manifest["settings"]] == [
        (2, 1, "sqrt-lexical"), (2, 3, "sqrt-lexical"), (3, 1, "sqrt-lexical"),
        (3, 3, "sqrt-lexical")]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MANIFEST, *(s["file"] for s in manifest["settings"])])
    ties = 0
    for setting in manifest["settings"]:
        alone = tmp_path / f"alone-{setting['chunk_size']}-{setting['top_k']}.parquet"
        single = run_cli(*collection_args(inputs), "--chunk-size", str(setting["chunk_size"]),
                         "--top-k", str(setting["top_k"]), "--out", str(alone))
        assert single.returncode == 0, single.stderr
        table = pl.read_parquet(out / setting["file"])
        assert table.equals(pl.read_parquet(alone))  # cut from the largest k: the same
        assert table.height == setting["rows"] == 300 * setting["top_k"]
        assert "chunk_size" not in table.columns and "top_k" not in table.columns
        ties += int(table["tied"].sum())
    assert ties > 300  # the tie flags of the cut top-ks are exercised


def test_a_sweep_file_gives_the_same_tables(inputs: tuple[Path, Path], tmp_path: Path
                                            ) -> None:
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('chunk_size = [3, 2]\ntop_k = 2\nscorer = "sqrt-lexical"\n',
                     encoding="utf-8")
    ran = run_cli(*collection_args(inputs), "--sweep", str(sweep), "--out",
                  str(tmp_path / "a"))
    assert ran.returncode == 0, ran.stderr
    same = run_cli(*collection_args(inputs), "--chunk-size", "3,2", "--top-k", "2", "--out",
                   str(tmp_path / "b"))
    assert same.returncode == 0, same.stderr
    for size in (2, 3):
        name = table_name(size, 2, "sqrt-lexical")
        assert pl.read_parquet(tmp_path / "a" / name).equals(
            pl.read_parquet(tmp_path / "b" / name))


@pytest.mark.parametrize(("text", "words"), [
    ('chunk_size = [2, 3]\ntop_k = [1, 0]\n', ["key top_k", "holds 0"]),
    ('chunk_size = [2, "3"]\ntop_k = 1\n', ["key chunk_size", "holds '3'"]),
    ('chunk_size = 2\ntop_k = 1\nscorers = ["sqrt-lexical"]\n', ["unknown key 'scorers'"]),
    ('chunk_size = 2\n', ["lacks the key top_k"]),
    ('chunk_size = [2\n', ["not a TOML file"]),
    ('chunk_size = []\ntop_k = 1\n', ["key chunk_size is an empty list"]),
    ('chunk_size = 2\ntop_k = 1\nscorer = ["sqrt-lexical", "nope"]\n',
     ["key scorer", "no scorer named 'nope'"]),
])
def test_a_bad_sweep_file_is_one_line_and_writes_nothing(inputs: tuple[Path, Path],
                                                         tmp_path: Path, text: str,
                                                         words: list[str]) -> None:
    sweep = tmp_path / "bad.toml"
    sweep.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    ran = run_cli(*collection_args(inputs), "--sweep", str(sweep), "--out", str(out))
    assert ran.returncode == (4 if "nope" in text else 2), ran.stderr  # unknown plugin: 4
    [line] = error_lines(ran.stderr)
    for word in [*words, "bad.toml"]:
        assert word in line, line
    assert not out.exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--chunk-size", "2,x"], ["--chunk-size '2,x'", "whole numbers"]),
    (["--top-k", "1,2147483648"], ["--top-k", "2147483647"]),
    (["--chunk-size", "2,3", "--out-file"], ["a sweep writes one table per setting"]),
    (["--scorer", "sqrt-lexical,"], ["--scorer", "empty scorer name"]),
    (["--top-k", "1,2", "--scorer", "sqrt-lexical", "--scorer", "missing"],
     ["--scorer", "no scorer named 'missing'"]),
    (["--engine", "spark"], ["--engine 'spark'", "local or ray"]),
    (["--shards", "3"], ["--shards is for --engine ray"]),
])
def test_bad_sweep_options_are_one_line_and_write_nothing(inputs: tuple[Path, Path],
                                                          tmp_path: Path, args: list[str],
                                                          words: list[str]) -> None:
    out = tmp_path / ("r.parquet" if "--out-file" in args else "out")
    args = [a for a in args if a != "--out-file"]
    ran = run_cli(*collection_args(inputs), *args, "--out", str(out))
    assert ran.returncode == (4 if "missing" in args else 2), ran.stderr  # unknown plugin: 4
    [line] = error_lines(ran.stderr)
    for word in words:
        assert word in line, line
    assert list(tmp_path.iterdir()) == []


def test_per_passage_mode_refuses_a_sweep(tmp_path: Path) -> None:
    from support.suite import ROOT

    ran = run_cli("retrieve", str(ROOT / "corpus" / "0.2"), "--chunk-size", "2,3", "--out",
                  str(tmp_path / "r.parquet"))
    assert ran.returncode == 2
    [line] = error_lines(ran.stderr)
    assert "collection mode" in line
    assert list(tmp_path.iterdir()) == []


def test_the_local_engine_imports_no_ray(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    """A process of its own (what a process imports is under test): a local sweep runs, and
    Ray is never imported."""
    import subprocess
    import sys

    from support.cli import process_env

    script = ("import sys\nfrom typer.testing import CliRunner\n"
              "from fragbench.cli.commands import app\n"
              "ran = CliRunner().invoke(app, sys.argv[1:])\n"
              "print(ran.exit_code, 'ray' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script, *collection_args(inputs)[0:5],
                           "--chunk-size", "2,3", "--out", str(tmp_path / "out")],
                          env=process_env(), capture_output=True, text=True, check=False)
    assert done.stdout.split() == ["0", "False"], done.stderr
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 2
