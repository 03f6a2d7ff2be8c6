"""Every malformed corpus or config: one line naming the file and the fault, a non-zero exit,
nothing written under outputs/."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import error_lines, run_cli


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count), encoding="utf-8")


def corpus(ws: Path) -> Path:
    return ws / "corpus" / "0.2" / "price.toml"


def config(ws: Path) -> Path:
    return ws / "experiments" / "protocol-1.0" / "config.toml"


Mutation = Callable[[Path], None]

CASES: dict[str, tuple[Mutation, str, str]] = {
    # name: (mutation, file named in the error, words the error must hold)
    "bad TOML": (lambda ws: edit(corpus(ws), 'id = "price"', 'id = "price'),
                 "price.toml", "not valid TOML"),
    "corpus file with a UTF-8 byte-order mark": (
        lambda ws: corpus(ws).write_bytes(b"\xef\xbb\xbf" + corpus(ws).read_bytes()),
        "price.toml", "byte-order mark"),
    "config with a UTF-8 byte-order mark": (
        lambda ws: config(ws).write_bytes(b"\xef\xbb\xbf" + config(ws).read_bytes()),
        "config.toml", "byte-order mark"),
    "prices per a number of tokens that gives inexact amounts": (
        lambda ws: edit(config(ws), "per_tokens = 1000000", "per_tokens = 3"),
        "config.toml", "not exact in 18 decimals"),
    "budget id unusable as a file name": (
        lambda ws: edit(config(ws), 'id = "protocol-1.0-openai"', 'id = "../escape"'),
        "config.toml", "budget.id must be"),
    "variant not a permutation": (
        lambda ws: edit(corpus(ws), 'B = ["F4", "F1", "F6", "F2", "F5", "F3"]',
                        'B = ["F4", "F1", "F6", "F2", "F5", "F7"]'),
        "price.toml", "variant B is not a permutation"),
    "duplicate ID in a variant": (
        lambda ws: edit(corpus(ws), 'B = ["F4", "F1", "F6", "F2", "F5", "F3"]',
                        'B = ["F4", "F1", "F6", "F2", "F5", "F5"]'),
        "price.toml", "repeats F5"),
    "fact missing in one language": (
        lambda ws: edit(corpus(ws), "facts.F6 = \"Tous les prix", "factsX = \"Tous les prix"),
        "price.toml", "[fr] lacks F6"),
    "condition that is no fact": (
        lambda ws: edit(corpus(ws), 'conditions = ["F2", "F3", "F5", "F6"]',
                        'conditions = ["F2", "F3", "F5", "F9"]'),
        "price.toml", "F9, which is no fact"),
    "duplicate condition IDs": (
        lambda ws: edit(corpus(ws), 'conditions = ["F2", "F3", "F5", "F6"]',
                        'conditions = ["F2", "F3", "F5", "F5"]'),
        "price.toml", "conditions repeats F5"),
    "empty sentence": (
        lambda ws: edit(corpus(ws), 'facts.F4 = "Our quotes are based on the word count of the '
                        'source document, as measured by our online quoting tool."',
                        'facts.F4 = "  "'),
        "price.toml", "facts.F4 is empty"),
    "missing key": (lambda ws: edit(corpus(ws), 'license = "CC-BY-4.0"\n', ""),
                    "price.toml", "lacks the key(s) license"),
    "duplicate case ID across files": (
        lambda ws: edit(ws / "corpus" / "0.2" / "delay.toml", 'id = "delay"', 'id = "price"'),
        "delay.toml", "also used by"),
    "unknown chunker": (
        lambda ws: edit(config(ws), 'chunker = "sentence-groups"', 'chunker = "sentences"'),
        "config.toml", "the chunkers that exist are: sentence-groups"),
    "unknown measure": (
        lambda ws: edit(config(ws), 'measures = ["availability"', 'measures = ["fidelity"'),
        "config.toml", "the measures that exist are: availability"),
    "config not TOML": (lambda ws: edit(config(ws), "repetitions = 3", "repetitions = = 3"),
                        "config.toml", "not valid TOML"),
    "config value of the wrong type": (
        lambda ws: edit(config(ws), "chunk_size = 3", 'chunk_size = "three"'),
        "config.toml", 'retrieval.chunk_size is a string ("three"); write a whole number, for '
        "example chunk_size = 3"),
    "zero repetitions": (lambda ws: edit(config(ws), "repetitions = 3", "repetitions = 0"),
                         "config.toml", "repetitions must be at least 1"),
    "unknown mode": (
        lambda ws: edit(config(ws), 'modes = ["retrieval", "full"]',
                        'modes = ["retrieval", "all"]'),
        "config.toml", "the modes are retrieval, full"),
    "missing prompt file": (lambda ws: (ws / "experiments/protocol-1.0/prompts/fr.toml").unlink(),
                            "fr.toml", "cannot be read"),
    "prompt with an unknown placeholder": (
        lambda ws: edit(ws / "experiments/protocol-1.0/prompts/en.toml", "{question}",
                        "{questoin}"),
        "en.toml", "input has the placeholder '{questoin}', which fragbench does not fill; the "
        "placeholders it may hold are {source}, {question}, {sentences}"),
    "schema not JSON": (
        lambda ws: (ws / "experiments/protocol-1.0/schema.json").write_text("{", encoding="utf-8"),
        "schema.json", "not valid JSON"),
    "language the corpus lacks": (
        lambda ws: edit(config(ws), 'languages = ["en", "fr"]', 'languages = ["en", "de"]'),
        "price.toml", "has no [de] passage"),
    "main setting outside the matrix": (
        lambda ws: edit(config(ws), "top_ks = [1, 2]", "top_ks = [2]"),
        "config.toml", "main setting"),
    "missing pricing for a model backend": (
        lambda ws: config(ws).write_text(re.sub(  # the whole table gone, no stray key left
            r"\[backends\.openai\.pricing\].*?(?=\[backends\.extractive\])", "",
            config(ws).read_text(encoding="utf-8"), flags=re.DOTALL), encoding="utf-8"),
        "config.toml", "pricing is missing"),
    "unknown backend parameter": (
        lambda ws: edit(config(ws), "store = false", "store = false\ntemperature = 0.2"),
        "config.toml", "unknown parameter(s) temperature"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_input_is_one_clear_line_and_writes_nothing(workspace: Path, name: str) -> None:
    mutate, filename, words = CASES[name]
    mutate(workspace)
    out = workspace / "outputs"
    result = run_cli("run", str(workspace / "experiments/protocol-1.0"), "--series", "extractive",
                     "--out", str(out))
    assert result.returncode == 4  # refused, nothing sent
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert filename in lines[0] and words in lines[0], lines[0]
    assert not out.exists()


def test_missing_experiment_folder(tmp_path: Path) -> None:
    result = run_cli("plan", str(tmp_path / "nowhere"))
    assert result.returncode != 0
    assert re.search(r"nowhere.*no such experiment config", result.stderr)


def test_bad_series_name_writes_nothing(experiment: Path, workspace: Path) -> None:
    result = run_cli("run", str(experiment), "--series", "../escape", "--backend", "extractive",
                     "--out", str(workspace / "outputs"))
    assert result.returncode == 2 and "not usable as a folder name" in result.stderr
    assert not (workspace / "outputs").exists()


@pytest.mark.parametrize(("old", "new", "words"), [
    ('id = "protocol-1.0-openai"', 'id = "../escape"', "budget.id must be"),
    ("per_tokens = 1000000", "per_tokens = 3", "not exact in 18 decimals"),
])
def test_freeze_refuses_a_config_that_could_not_be_kept_exactly(workspace: Path, old: str,
                                                               new: str, words: str) -> None:
    """Caught before a plan is frozen, let alone run: a budget id that would name a file
    outside the ledger store, prices whose per-token amounts no exact table can hold."""
    frozen = (workspace / "experiments/protocol-1.0/experiment.json").read_bytes()
    edit(config(workspace), old, new)
    result = run_cli("freeze", str(workspace / "experiments/protocol-1.0"))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "config.toml" in line and words in line
    assert (workspace / "experiments/protocol-1.0/experiment.json").read_bytes() == frozen
