"""Each experiment's reports speak its own words (issue 26): the limits are the experiment's own
(config.toml's `limits`, frozen in the plan), else fragbench's general ones; the repetitions are
counted as they are ("one repetition"); nothing of protocol 1.0's is said of another experiment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_cli

from fragbench.errors import ConfigError
from fragbench.experiment.config import load_experiment
from fragbench.report.data import LIMITS, count_words, limits, repetitions_phrase

PROTOCOL_ONLY = ("corpus 0.2", "checker 0.1", "three repetitions")


def test_words_from_the_plan() -> None:
    assert repetitions_phrase({"parameters": {"repetitions": 1}}) == "with one repetition"
    assert repetitions_phrase({"parameters": {"repetitions": 3}}) == \
        "with the three repetitions as three"
    assert repetitions_phrase({"parameters": {"repetitions": 12}}) == \
        "with the 12 repetitions as 12"
    assert repetitions_phrase({"parameters": {}}) == ""
    assert count_words(1, "call") == "one call" and count_words(2500, "call") == "2,500 calls"
    assert limits({"parameters": {"limits": ["Own."]}}) == ["Own."]
    assert limits({"parameters": {"limits": [3]}}) == LIMITS  # a hand-edited plan: ignored
    assert not any(w in line for line in LIMITS for w in PROTOCOL_ONLY)


def test_new_experiment_speaks_for_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRAGBENCH_LEDGER_DIR", str(tmp_path / "ledgers"))
    assert run_cli("new", "experiment", "mine", "--dir", "exp").returncode == 0
    assert run_cli("freeze", "exp/mine").returncode == 0
    ran = run_cli("run", "exp/mine", "--series", "extractive", "--out", "out")
    assert ran.returncode == 0, ran.stderr
    series = tmp_path / "out" / "mine" / "extractive"
    for page in ("report.md", "report.html"):
        text = (series / page).read_text(encoding="utf-8")
        assert "with one repetition" in text, page
        assert not any(w in text for w in PROTOCOL_ONLY), page
        assert LIMITS[0].split(";")[0].split(",")[0] in text, page


def test_protocol_keeps_its_own(extractive_once: Path) -> None:
    text = (extractive_once / "report.md").read_text(encoding="utf-8")
    assert "corpus 0.2" in text and "checker 0.1" in text
    assert "with the three repetitions as three" in text


def test_limits_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli("new", "experiment", "mine", "--dir", "exp").returncode == 0
    config = tmp_path / "exp" / "mine" / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        '# limits = ["The questions', 'limits = ["", "The questions'), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config\.toml.*limits.*1 to 20 sentences"):
        load_experiment(tmp_path / "exp" / "mine")
