"""The `token-window` chunker: its windows, its registration, and its published experiment.

The windows are checked by hand on small passages, and on the whole corpus against a plain
Python reading of the rule (`re.finditer(r"\\S+")` over the passage, windows of `size` tokens),
which shares no code with the Polars implementation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from fragbench_token_window import TokenWindow
from support.cli import run_cli
from support.reports import aggregates
from support.suite import ROOT

from fragbench.corpus.cases import load_corpus, sentences_frame
from fragbench.errors import PluginError
from fragbench.experiment.config import load_experiment
from fragbench.experiment.plan import verify
from fragbench.retrieval.passages import chunk_passages
from fragbench.retrieval.spans import coverage_problems

EXPERIMENT = ROOT / "experiments" / "protocol-1.0-token-window"
NBSP, NNBSP = "\u00a0", "\u202f"


def passage(*texts: str) -> pl.DataFrame:
    """A sentences frame for one passage, with the offsets the core gives (one space between
    sentences)."""
    rows, start = [], 0
    for position, text in enumerate(texts):
        rows.append(("c", "en", "A", position, f"F{position + 1}", text, start,
                     start + len(text)))
        start += len(text) + 1
    return pl.DataFrame(rows, schema={"case": pl.String, "lang": pl.String,
                                      "variant": pl.String, "position": pl.Int32,
                                      "fact_id": pl.String, "text": pl.String,
                                      "start": pl.Int32, "end": pl.Int32}, orient="row")


def spans(frame: pl.DataFrame, size: int) -> list[tuple[int, int]]:
    return TokenWindow().chunk(frame, size).sort("chunk").select("start", "end").rows()


def test_windows_of_a_small_passage_by_hand() -> None:
    # "Open daily. Closed on 1 May." -> Open 0-4, daily. 5-11 | Closed 12-18, on 19-21,
    # 1 22-23, May. 24-28
    frame = passage("Open daily.", "Closed on 1 May.")
    assert spans(frame, 1) == [(0, 4), (5, 11), (12, 18), (19, 21), (22, 23), (24, 28)]
    assert spans(frame, 2) == [(0, 11), (12, 21), (22, 28)]
    assert spans(frame, 3) == [(0, 18), (19, 28)]  # the first window cuts the second sentence
    assert spans(frame, 6) == [(0, 28)]
    assert spans(frame, 100) == [(0, 28)]  # a passage shorter than a window: one chunk


def test_any_whitespace_separates_tokens_and_offsets_count_characters() -> None:
    # No-break spaces (before » and €) are whitespace; é and € are one character each.
    frame = passage(f"Prix{NNBSP}: 7,50{NNBSP}€ «{NBSP}été{NBSP}»", "Tab\tand  two spaces.")
    text = " ".join(frame["text"])
    got = spans(frame, 1)
    assert [text[a:b] for a, b in got] == ["Prix", ":", "7,50", "€", "«", "été", "»", "Tab",
                                           "and", "two", "spaces."]
    assert got[5] == (16, 19)


def test_windows_match_a_plain_reading_of_the_rule_on_the_whole_corpus() -> None:
    sentences = sentences_frame(load_corpus([ROOT / "corpus" / "0.2"]))
    texts = (sentences.sort("case", "lang", "variant", "position")
             .group_by("case", "lang", "variant", maintain_order=True)
             .agg(pl.col("text").str.join(" ")))
    for size in (1, 7, 44, 66, 1000):
        chunks = TokenWindow().chunk(sentences, size)
        assert chunks.schema == pl.Schema({"case": pl.String, "lang": pl.String,
                                           "variant": pl.String, "chunk": pl.Int32,
                                           "start": pl.Int32, "end": pl.Int32})
        for case, lang, variant, text in texts.iter_rows():
            tokens = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
            expected = [(tokens[i][0], tokens[min(i + size, len(tokens)) - 1][1])
                        for i in range(0, len(tokens), size)]
            mine = chunks.filter(pl.col("case") == case, pl.col("lang") == lang,
                                 pl.col("variant") == variant).sort("chunk")
            assert mine["chunk"].to_list() == list(range(len(expected)))
            assert mine.select("start", "end").rows() == expected, (case, lang, variant, size)
        assert coverage_problems(chunk_passages(TokenWindow(), sentences, size),
                                 sentences) == []


def test_a_size_below_one_is_refused_naming_the_plugin() -> None:
    with pytest.raises(ValueError, match="at least 1 token"):
        TokenWindow().chunk(passage("One."), 0)
    with pytest.raises(PluginError, match=r"chunker 'token-window' \(plugin "
                                          r"fragbench-token-window [^)]*\) failed: ValueError"):
        from fragbench.plugins import registry

        chunk_passages(registry().get("chunker", "token-window"), passage("One."), 0)


def test_it_is_registered_through_the_entry_point() -> None:
    result = run_cli("plugins")
    assert result.returncode == 0, result.stderr
    assert any(line.split()[:3] == ["chunker", "token-window", "fragbench-token-window"]
               for line in result.stdout.splitlines())
    assert TokenWindow.output == "spans" and not getattr(TokenWindow, "overlap", False)


def test_the_published_experiment_is_frozen_and_supplies_fragments() -> None:
    experiment = load_experiment(EXPERIMENT)
    assert (experiment.chunker, experiment.chunk_size, experiment.top_k) == ("token-window",
                                                                             66, 1)
    assert experiment.settings == [(44, 1), (44, 2), (66, 1), (66, 2)]
    assert list(experiment.backends) == ["extractive"] and experiment.budget.id == \
        "protocol-1.0-token-window"
    frozen, calls, _ = verify(experiment)  # current: nothing drifted since it was frozen
    assert len(calls) == 72
    cases = {c.id: c for c in experiment.cases}
    cut = 0
    for entry, planned in zip(frozen["schedule"], calls, strict=True):
        facts = cases[entry["case"]].langs[entry["lang"]].facts
        assert entry["supplied_texts"] == [t for _, t in planned.request.supplied]
        for fid, text in zip(entry["supplied_ids"], entry["supplied_texts"], strict=True):
            assert text in facts[fid]  # a fragment of its own sentence, never another's
            assert f"[{fid}] {text}" in planned.request.input
            if entry["mode"] == "full":
                assert text == facts[fid]
            cut += text != facts[fid]
    assert cut > 0  # the main setting does cut sentences


def test_a_run_publishes_whole_and_cut_facts(tmp_path: Path) -> None:
    result = run_cli("run", str(EXPERIMENT), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    series = tmp_path / "protocol-1.0-token-window" / "extractive"
    availability = pl.read_parquet(series / "availability.parquet")
    assert availability.filter(pl.col("mode") == "full")["n_conditions_cut"].to_list() == \
        [0] * 12
    assert availability["n_conditions_cut"].sum() > 0
    for row in availability.to_dicts():  # each condition in exactly one of the three lists
        assert sorted(row["conditions_supplied"] + row["conditions_cut"]
                      + row["conditions_missing"]) == sorted(row["conditions"])
    # Each retrieval call's split is its passage's at the main setting.
    main = {(r["case"], r["lang"], r["variant"]): r for r in availability.filter(
        pl.col("main_setting"), pl.col("mode") == "retrieval").to_dicts()}
    calls = pl.read_parquet(series / "call_availability.parquet").filter(
        pl.col("mode") == "retrieval")
    for row in calls.to_dicts():
        cell = main[(row["case"], row["lang"], row["variant"])]
        for column in ("supplied_ids", "conditions_supplied", "conditions_cut",
                       "conditions_missing"):
            assert row[column] == cell[column], (row["call_id"], column)
    # The baseline cites what it was shown, fragments included: every citation holds.
    assert set(pl.read_parquet(series / "citations.parquet")["reason"]) == {"valid"}
    plan = json.loads((series / "plan.json").read_text(encoding="utf-8"))
    shown = pl.read_parquet(series / "calls.parquet").select("call_id", "supplied_texts")
    assert shown["supplied_texts"].to_list() == [e["supplied_texts"] for e in plan["schedule"]]
    report = (series / "report.md").read_text(encoding="utf-8")
    assert "chunker `token-window`" in report and "; cut 1: " in report
    assert aggregates(series) == []  # still no number folded over cells
    svg = (series / "figures" / "availability.svg").read_text(encoding="utf-8")
    assert "+1 cut" in svg and "only cut (a fragment)" in svg


def test_retrieve_cuts_with_token_windows(tmp_path: Path) -> None:
    out = tmp_path / "w.csv"
    result = run_cli("retrieve", str(ROOT / "corpus" / "0.2" / "price.toml"), "--chunker",
                     "token-window", "--chunk-size", "44", "--top-k", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = pl.read_csv(out).filter(pl.col("lang") == "en", pl.col("variant") == "A").sort(
        "chunk").to_dicts()
    # price en A: sentences of 21, 18, 21, 19, 18, 22 tokens (re.findall(r"\S+") counts):
    # tokens 0-43 hold F1 and F2 whole and 5 tokens of F3; 44-87 the rest of F3, F4 whole and
    # 9 tokens of F5; 88-118 the rest of F5 and F6 whole.
    assert [(r["fact_ids"], r["whole_fact_ids"], r["cut_fact_ids"]) for r in rows] == [
        ("F1 F2 F3", "F1 F2", "F3"), ("F3 F4 F5", "F4", "F3 F5"), ("F5 F6", "F6", "F5")]
    assert rows[0]["text"].endswith("Urgent jobs needed within 24")
    assert rows[0]["start"] == 0 and rows[1]["text"].startswith("hours carry")
