"""Issue 16, item 1: `fragbench new experiment NAME [--corpus PATH] [--dir DIR]` writes an
experiment that freezes and runs offline as written: a one-case corpus, or the corpus given
(TOML or columnar, languages taken from it); protocol 1.0's prompt wording and schema; its own
budget. A bad name, an existing folder, a budget another experiment uses, an unusable corpus:
one line, nothing written.

The real CLI in process (Typer's runner) on real files in tmp_path.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.hotpotqa_data import FIXTURE
from support.suite import ROOT

from fragbench.errors import EXIT_REFUSED, EXIT_USAGE

PROTOCOL = ROOT / "experiments" / "protocol-1.0"


def toml(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def freeze_and_run(experiment: Path, out: Path, calls: int) -> Path:
    """Freeze, then run the offline series; returns the series folder."""
    frozen = run_cli("freeze", str(experiment))
    assert frozen.returncode == 0, frozen.stderr
    ran = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    assert f"{calls} of {calls} calls sent; spent 0 USD" in ran.stdout
    series = out / experiment.name / "extractive"
    assert pl.read_parquet(series / "calls.parquet")["status"].unique().to_list() == \
        ["completed"]
    return series


@pytest.fixture
def experiments(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout's experiments folder, the current folder its parent (the default --dir)."""
    monkeypatch.chdir(workspace)
    return workspace / "experiments"


def test_a_new_experiment_freezes_and_runs_offline_as_written(experiments: Path,
                                                              workspace: Path) -> None:
    made = run_cli("new", "experiment", "my-study")
    assert made.returncode == 0, made.stderr
    experiment = experiments / "my-study"
    assert "experiment 'my-study' written to experiments/my-study: 1 case, languages en" in \
        made.stdout
    assert sorted(str(p.relative_to(experiment)) for p in experiment.rglob("*") if p.is_file()) \
        == ["config.toml", "corpus/example.toml", "prompts/en.toml", "schema.json"]
    config = toml(experiment / "config.toml")
    assert config["id"] == "my-study" and config["default_backend"] == "extractive"
    assert config["budget"]["id"] == "my-study"  # its own budget, never protocol 1.0's
    assert config["budget"]["ceiling_usd"] == "2"
    assert config["backends"]["openai"]["max_in_flight"] == 4
    assert config["backends"]["openai"]["pricing"] == toml(
        PROTOCOL / "config.toml")["backends"]["openai"]["pricing"]
    assert config["languages"] == ["en"] and config["variants"] == ["A", "B"]
    # Protocol 1.0's schema, byte for byte, and its prompt wording.
    assert (experiment / "schema.json").read_bytes() == (PROTOCOL / "schema.json").read_bytes()
    assert toml(experiment / "prompts" / "en.toml") == toml(PROTOCOL / "prompts" / "en.toml")
    text = (experiment / "config.toml").read_text(encoding="utf-8")
    for said in ("What is frozen", "Not frozen", "max_in_flight", "own budget",
                 "offline", "fragbench freeze experiments/my-study"):
        assert said in text, said
    series = freeze_and_run(experiment, workspace / "outputs", 4)
    calls = pl.read_parquet(series / "calls.parquet")
    assert calls["case"].unique().to_list() == ["returns"]
    plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    assert plan["experiment"] == "my-study"
    # The billed backend draws on the experiment's own budget, which fits its plan.
    planned = run_cli("plan", str(experiment), "--backend", "openai")
    assert planned.returncode == 0, planned.stderr
    assert "budget my-study: ceiling 2 - prior 0" in planned.stdout
    assert "a new series fits" in planned.stdout


def test_a_corpus_that_import_wrote_is_named_and_its_languages_taken(
        experiments: Path, workspace: Path) -> None:
    source = workspace / "hotpot.json"
    source.write_text(json.dumps(FIXTURE), encoding="utf-8")
    imported = run_cli("import", "hotpotqa", str(source), "--out", "corpus/hotpot-dev")
    assert imported.returncode == 0, imported.stderr
    made = run_cli("new", "experiment", "hotpot-dev", "--corpus", "corpus/hotpot-dev")
    assert made.returncode == 0, made.stderr
    experiment = experiments / "hotpot-dev"
    assert not (experiment / "corpus").exists()
    config = toml(experiment / "config.toml")
    # Relative to the experiment, so that the two travel together.
    assert config["corpus"] == ["../../corpus/hotpot-dev"]
    assert config["languages"] == ["en"] and config["variants"] == ["A", "B"]
    series = freeze_and_run(experiment, workspace / "outputs", 3 * 2 * 2)
    # The dataset's groups are recorded beside the tables.
    assert set(pl.read_parquet(series / "cases.parquet")["type"]) == {"bridge", "comparison"}


def test_a_bilingual_toml_corpus_gets_the_french_prompt(experiments: Path,
                                                        workspace: Path) -> None:
    made = run_cli("new", "experiment", "bilingual", "--corpus", "corpus/0.2",
                   "--dir", str(experiments))
    assert made.returncode == 0, made.stderr
    experiment = experiments / "bilingual"
    config = toml(experiment / "config.toml")
    assert config["languages"] == ["en", "fr"]
    assert config["corpus"] == ["../../corpus/0.2"]
    assert toml(experiment / "prompts" / "fr.toml") == toml(PROTOCOL / "prompts" / "fr.toml")
    freeze_and_run(experiment, workspace / "outputs", 3 * 2 * 2 * 2)


def test_another_language_gets_the_english_wording_marked_to_translate(
        experiments: Path, workspace: Path) -> None:
    case = (ROOT / "corpus" / "0.2" / "price.toml").read_text(encoding="utf-8")
    german = workspace / "german"
    german.mkdir()
    (german / "price.toml").write_text(case.replace("[fr]", "[de]"), encoding="utf-8")
    made = run_cli("new", "experiment", "german", "--corpus", str(german))
    assert made.returncode == 0, made.stderr
    experiment = experiments / "german"
    assert f"translate {experiment.relative_to(workspace) / 'prompts' / 'de.toml'} before " \
        "freezing" in made.stdout
    prompt = (experiment / "prompts" / "de.toml").read_text(encoding="utf-8")
    assert "TRANSLATE BEFORE FREEZING" in prompt.splitlines()[0]
    assert toml(experiment / "config.toml")["languages"] == ["en", "de"]
    freeze_and_run(experiment, workspace / "outputs", 2 * 2 * 2)


@pytest.mark.parametrize(("name", "says"), [
    ("My-Study", "is not lowercase ASCII letters and digits"),
    ("../escape", "is not lowercase ASCII letters and digits"),
    ("two\nlines", "is not lowercase ASCII letters and digits"),
    ("1st", "is not lowercase ASCII letters and digits"),
    ("a--b", "is not lowercase ASCII letters and digits"),
    ("", "is not lowercase ASCII letters and digits"),
    ("s" * 65, "is longer than 64 characters"),
])
def test_a_bad_name_is_refused_in_one_line_and_nothing_is_written(
        tmp_path: Path, name: str, says: str) -> None:
    result = run_cli("new", "experiment", "--dir", str(tmp_path), "--", name)
    assert result.returncode == EXIT_USAGE and result.stdout == ""
    [line] = error_lines(result.stderr)
    assert line.startswith(f"fragbench: experiment name {name!r} {says}"), line
    assert line.endswith("; choose another.")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    existing = tmp_path / "my-study"
    existing.mkdir()
    (existing / "notes.md").write_text("mine\n", encoding="utf-8")
    result = run_cli("new", "experiment", "my-study", "--dir", str(tmp_path))
    assert result.returncode == EXIT_REFUSED
    assert error_lines(result.stderr) == [f"fragbench: {existing} already exists; it is left as "
                                          "it is: remove it, or choose another name or --dir."]
    assert [p.name for p in tmp_path.iterdir()] == ["my-study"]
    assert [p.name for p in existing.iterdir()] == ["notes.md"]


def test_a_name_whose_budget_another_experiment_uses_is_refused(experiments: Path) -> None:
    """protocol 1.0's budget id is `protocol-1.0-openai`: an experiment of that name would
    draw on it."""
    before = sorted(p.name for p in experiments.iterdir())
    result = run_cli("new", "experiment", "protocol-1.0-openai")
    assert result.returncode == EXIT_REFUSED
    [line] = error_lines(result.stderr)
    assert line == ("fragbench: experiments/protocol-1.0/config.toml already draws on budget "
                    "'protocol-1.0-openai', which a new experiment protocol-1.0-openai would "
                    "share; choose another name.")
    assert sorted(p.name for p in experiments.iterdir()) == before


def test_an_unusable_corpus_or_folder_is_refused_and_nothing_written(
        experiments: Path, workspace: Path) -> None:
    before = sorted(p.name for p in experiments.iterdir())
    missing = run_cli("new", "experiment", "x", "--corpus", "nowhere")
    assert missing.returncode == EXIT_REFUSED
    assert error_lines(missing.stderr) == [f"fragbench: {workspace / 'nowhere'}: no such file "
                                           "or folder; check the corpus path."]
    broken = workspace / "broken.toml"
    broken.write_text('id = "x"\n', encoding="utf-8")
    bad = run_cli("new", "experiment", "x", "--corpus", str(broken))
    assert bad.returncode == EXIT_REFUSED
    [line] = error_lines(bad.stderr)
    assert line.startswith(f"fragbench: {broken}:")
    # Two cases sharing no language.
    apart = workspace / "apart"
    apart.mkdir()
    price = (ROOT / "corpus" / "0.2" / "price.toml").read_text(encoding="utf-8")
    delay = (ROOT / "corpus" / "0.2" / "delay.toml").read_text(encoding="utf-8")
    (apart / "price.toml").write_text(price.split("\n[fr]")[0] + "\n", encoding="utf-8")
    (apart / "delay.toml").write_text(delay.replace("[en]", "[de]"), encoding="utf-8")
    no_match = run_cli("new", "experiment", "x", "--corpus", str(apart))
    # delay has de and fr, price only en: nothing in common.
    assert no_match.returncode == EXIT_REFUSED
    assert error_lines(no_match.stderr) == [f"fragbench: --corpus {apart}: its cases share no "
                                            "language; an experiment asks every case for each "
                                            "of its languages: make them share one."]
    assert sorted(p.name for p in experiments.iterdir()) == before
    nowhere = run_cli("new", "experiment", "x", "--dir", str(workspace / "no" / "where"))
    assert nowhere.returncode == EXIT_USAGE  # a missing --dir is made, never its parent
    assert not (workspace / "no").exists()
    later = run_cli("new", "experiment", "x", "--dir", str(workspace / "later"), "--corpus",
                    str(broken))
    assert later.returncode == EXIT_REFUSED  # refused before --dir is made
    assert not (workspace / "later").exists()
    plugin = run_cli("new", "chunker", "x", "--corpus", "corpus/0.2")
    assert plugin.returncode == EXIT_USAGE
    assert error_lines(plugin.stderr) == ["fragbench: --corpus is for `fragbench new "
                                          "experiment`, not a chunker."]
    assert sorted(p.name for p in experiments.iterdir()) == before
    assert not (workspace / "fragbench-x").exists()


def test_a_write_that_fails_leaves_nothing_behind(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A file list whose third entry cannot be written (a file where the prompts folder
    goes): the real filesystem refuses it after two files; nothing is left behind."""
    from fragbench.scaffold import experiment as new_experiment

    real = new_experiment.render

    def clashing(name: str, target: Path, corpus: Path | None
                 ) -> tuple[dict[str, str], int, tuple[str, ...]]:
        files, cases, translate = real(name, target, corpus)
        first = {"config.toml": files["config.toml"], "schema.json": files["schema.json"],
                 "prompts": "a file where the prompts folder goes"}
        return first | files, cases, translate

    monkeypatch.setattr(new_experiment, "render", clashing)
    result = run_cli("new", "experiment", "my-study", "--dir", str(tmp_path))
    assert result.returncode == EXIT_REFUSED
    [line] = error_lines(result.stderr)
    assert "prompts" in line, line
    assert list(tmp_path.iterdir()) == []
