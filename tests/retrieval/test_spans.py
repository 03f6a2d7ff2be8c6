"""Span chunkers: chunks as character spans that may cut sentences, with the interface kept stable.

Every expectation here was worked out by hand from the rules, never by calling fragbench:

- the passage is its sentences in passage order joined by one space; offsets count characters
  (code points: `café` is four);
- a token is a maximal run of non-whitespace; token-window cuts `size` tokens at a time from the
  first, and a window's span runs from its first token's first character to its last token's
  last;
- a fact is touched by a span when they share a character, whole when its sentence lies inside
  the span, cut when touched and not whole;
- the sqrt-lexical score (test_availability_expected.py's docstring): distinct question terms in
  the chunk / sqrt(chunk terms), `the`, `at`, `it`, `does`, `when` being English stopwords.

The tiny case, variant A, is the passage (offsets under it):

    The café opens at 8. After the holidays, it opens at noon. Cakes cost 3 euros.
    F1 0..20             F2 21..58                             F3 59..78

Tokens: The 0-3, café 4-8, opens 9-14, at 15-17, 8. 18-20 | After 21-26, the 27-30,
holidays, 31-40, it 41-43, opens 44-49, at 50-52, noon. 53-58 | Cakes 59-64, cost 65-69,
3 70-71, euros. 72-78 (16 tokens).

Windows of 4: [0,17) "The café opens at" F1 cut; [18,40) "8. After the holidays," F1, F2 cut;
[41,58) "it opens at noon." F2 cut; [59,78) "Cakes cost 3 euros." F3 whole.
Windows of 5: [0,20) "The café opens at 8." F1 whole; [21,49) "After the holidays, it opens"
F2 cut; [50,71) "at noon. Cakes cost 3" F2, F3 cut; [72,78) "euros." F3 cut.

Question terms: cafe, open, after, holidays (`opens` is not `open`: no stemming). Scores,
size 4: cafe opens 1/sqrt(2); 8 after holidays 2/sqrt(3); opens noon 0; cakes cost 3 euros 0.
Size 5: cafe opens 8 1/sqrt(3); after holidays opens 2/sqrt(3); noon cakes cost 3 0; euros 0.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import polars as pl
import pytest
from fragbench_sliding_window import SlidingWindow
from fragbench_token_window import TokenWindow
from support.plans import PROTOCOL_PLAN_SHA256
from support.series import call
from support.suite import ROOT

from fragbench.builtin.availability import Availability
from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.citations import Citations
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import facts_frame, load_corpus, sentences_frame
from fragbench.errors import PluginError
from fragbench.experiment.config import load_experiment
from fragbench.experiment.plan import build_plan, verify
from fragbench.interfaces import MeasureInput
from fragbench.retrieval.passages import chunk_passages, read_chunks, retrieve
from fragbench.retrieval.spans import coverage_problems, supplied
from fragbench.series.folder import CALLS_SCHEMA


def selected_facts(table: pl.DataFrame, chunk_size: int, top_k: int
                   ) -> dict[tuple[str, str, str], list[str]]:
    """An independent reading of the selection (what the plan supplied before spans): the
    fact IDs of the selected chunks, chunk order, passage by passage."""
    chosen = (
        table.filter(pl.col("selected"), pl.col("chunk_size") == chunk_size,
                     pl.col("top_k") == top_k)
        .sort("case", "lang", "variant", "chunk")
        .group_by("case", "lang", "variant", maintain_order=True)
        .agg(pl.col("fact_ids").list.explode(keep_nulls=False, empty_as_null=False))
    )
    return {(c, lang, v): list(ids) for c, lang, v, ids in chosen.iter_rows()}

CAFE = """
id = "cafe"
license = "CC-BY-4.0"
conditions = ["F2", "F3"]
variants = { A = ["F1", "F2", "F3"], B = ["F3", "F1", "F2"] }

[en]
source = "Café Ondine"
question = "When does the café open after the holidays?"
facts.F1 = "The café opens at 8."
facts.F2 = "After the holidays, it opens at noon."
facts.F3 = "Cakes cost 3 euros."
"""
PASSAGE_A = "The café opens at 8. After the holidays, it opens at noon. Cakes cost 3 euros."

# (variant, size) -> per chunk: (start, end, text, whole, cut), by hand (module docstring).
WINDOWS = {
    ("A", 4): [(0, 17, "The café opens at", "", "F1"),
               (18, 40, "8. After the holidays,", "", "F1 F2"),
               (41, 58, "it opens at noon.", "", "F2"),
               (59, 78, "Cakes cost 3 euros.", "F3", "")],
    ("A", 5): [(0, 20, "The café opens at 8.", "F1", ""),
               (21, 49, "After the holidays, it opens", "", "F2"),
               (50, 71, "at noon. Cakes cost 3", "", "F2 F3"),
               (72, 78, "euros.", "", "F3")],
    # B: Cakes cost 3 euros. (0..19) The café opens at 8. (20..40) After ... noon. (41..78)
    ("B", 4): [(0, 19, "Cakes cost 3 euros.", "F3", ""),
               (20, 37, "The café opens at", "", "F1"),
               (38, 60, "8. After the holidays,", "", "F1 F2"),
               (61, 78, "it opens at noon.", "", "F2")],
}

# Variant A, (size, top_k) -> (supplied IDs, conditions whole, conditions only cut, missing,
# others), by hand from the scores in the module docstring: size 4 ranks [18,40) then [0,17);
# size 5 ranks [21,49) then [0,20); top-4 at size 4 keeps every window.
AVAILABILITY = {
    (4, 1): ("F1 F2", "", "F2", "F3", "F1"),
    (4, 2): ("F1 F1 F2", "", "F2", "F3", "F1"),
    (4, 4): ("F1 F1 F2 F2 F3", "F3", "F2", "", "F1"),
    (5, 1): ("F2", "", "F2", "F3", ""),
    (5, 2): ("F1 F2", "", "F2", "F3", "F1"),
}


@pytest.fixture
def cafe(tmp_path: Path) -> Path:
    path = tmp_path / "cafe.toml"
    path.write_text(CAFE, encoding="utf-8")
    return path


def test_the_core_gives_chunkers_each_sentences_offsets_in_the_passage(cafe: Path) -> None:
    frame = sentences_frame(load_corpus([cafe])).filter(pl.col("variant") == "A")
    assert frame.columns == ["case", "lang", "variant", "position", "fact_id", "text", "start",
                             "end"]
    assert frame.select("start", "end").rows() == [(0, 20), (21, 58), (59, 78)]
    for row in frame.to_dicts():
        assert PASSAGE_A[row["start"]:row["end"]] == row["text"]


@pytest.mark.parametrize(("variant", "size"), sorted(WINDOWS))
def test_token_windows_and_their_whole_and_cut_facts_are_the_hand_computed_ones(
        cafe: Path, variant: str, size: int) -> None:
    sentences = sentences_frame(load_corpus([cafe]))
    chunks = chunk_passages(TokenWindow(), sentences, size).filter(pl.col("variant") == variant)
    got = [(r["start"], r["end"], r["text"], " ".join(r["whole_fact_ids"]),
            " ".join(r["cut_fact_ids"])) for r in chunks.sort("chunk").to_dicts()]
    assert got == WINDOWS[(variant, size)]
    assert chunks.sort("chunk")["chunk"].to_list() == [0, 1, 2, 3]
    order = {"A": ["F1", "F2", "F3"], "B": ["F3", "F1", "F2"]}[variant]
    for row in chunks.to_dicts():  # every fact touched, whole or cut, in passage order
        touched = set(row["whole_fact_ids"]) | set(row["cut_fact_ids"])
        assert row["fact_ids"] == [f for f in order if f in touched]


def test_availability_reports_whole_cut_and_missing_conditions(cafe: Path) -> None:
    cases = load_corpus([cafe])
    table = retrieve(cases, TokenWindow(), SqrtLexical(), list(AVAILABILITY))
    a4 = table.filter(pl.col("variant") == "A", pl.col("chunk_size") == 4,
                      pl.col("top_k") == 1).sort("chunk")
    assert a4["score"].to_list() == pytest.approx([1 / math.sqrt(2), 2 / math.sqrt(3), 0, 0])
    a5 = table.filter(pl.col("variant") == "A", pl.col("chunk_size") == 5,
                      pl.col("top_k") == 1).sort("chunk")
    assert a5["score"].to_list() == pytest.approx([1 / math.sqrt(3), 2 / math.sqrt(3), 0, 0])
    availability = Availability().compute(MeasureInput(
        facts=facts_frame(cases), retrieval=table, calls=None, main_setting=(5, 1)))
    rows = {(r["chunk_size"], r["top_k"]): r for r in availability["availability"]
            .filter(pl.col("variant") == "A").to_dicts()}
    for setting, (ids, whole, cut, missing, others) in AVAILABILITY.items():
        row = rows[setting]
        assert row["supplied_ids"] == ids.split(), setting
        assert row["conditions_supplied"] == whole.split(), setting
        assert row["conditions_cut"] == cut.split(), setting
        assert row["conditions_missing"] == missing.split(), setting
        assert row["others_supplied"] == others.split(), setting
        assert (row["n_conditions_supplied"], row["n_conditions_cut"], row["n_conditions"]) == (
            len(whole.split()), len(cut.split()), 2), setting
        assert row["main_setting"] is (setting == (5, 1))
    full = rows[(None, None)]  # every sentence once, whole, though windows cut F1 and F2 twice
    assert full["supplied_ids"] == ["F1", "F2", "F3"]
    assert (full["conditions_supplied"], full["conditions_cut"]) == (["F2", "F3"], [])


def test_a_retrieval_call_is_given_each_touched_fact_as_the_span_holds_it(cafe: Path) -> None:
    cases = load_corpus([cafe])
    sentences = sentences_frame(cases)
    table = retrieve(cases, TokenWindow(), SqrtLexical(), [(4, 2), (5, 2), (4, 4)])
    assert supplied(table, sentences, 4, 2)[("cafe", "en", "A")] == [
        ("F1", "The café opens at"), ("F1", "8."), ("F2", "After the holidays,")]
    assert supplied(table, sentences, 5, 2)[("cafe", "en", "A")] == [
        ("F1", "The café opens at 8."), ("F2", "After the holidays, it opens")]
    assert supplied(table, sentences, 4, 4)[("cafe", "en", "A")] == [
        ("F1", "The café opens at"), ("F1", "8."), ("F2", "After the holidays,"),
        ("F2", "it opens at noon."), ("F3", "Cakes cost 3 euros.")]
    # The IDs are those selected_facts gives (test_availability_expected's hand table).
    for size, k in ((4, 2), (5, 2), (4, 4)):
        assert {key: [f for f, _ in pairs] for key, pairs in supplied(
            table, sentences, size, k).items()} == selected_facts(table, size, k)
    # A sentence chunker's chunks have no span: whole sentences, as before spans existed.
    groups = retrieve(cases, SentenceGroups(), SqrtLexical(), [(2, 1)])
    assert supplied(groups, sentences, 2, 1)[("cafe", "en", "A")] == [
        ("F1", "The café opens at 8."), ("F2", "After the holidays, it opens at noon.")]


def test_citations_and_call_availability_read_what_the_call_was_shown(cafe: Path) -> None:
    cases = load_corpus([cafe])
    shown = call("span", "en", ["F1", "F1", "F2"], [
        ("F2", "After the holidays"),   # in the fragment shown under F2
        ("F2", "it opens at noon"),     # in F2's sentence, but not in what was shown
        ("F1", "8."),                   # in F1's second fragment
        ("F1", "After the"),            # shown, under F2
        ("F3", "Cakes"),                # F3 was not given at all
    ])
    shown.update(case="cafe", supplied_texts=["The café opens at", "8.", "After the holidays,"])
    whole = call("whole", "en", ["F1", "F2"], [("F2", "it opens at noon")])
    whole.update(case="cafe")  # supplied_texts null: every sentence shown whole
    frame = pl.DataFrame([shown, whole], schema={k: d for k, (d, _) in CALLS_SCHEMA.items()})
    data = MeasureInput(facts=facts_frame(cases), retrieval=pl.DataFrame(), calls=frame)
    reasons = Citations().compute(data)["citations"].filter(pl.col("call_id") == "span")
    assert reasons["reason"].to_list() == ["valid", "not_verbatim", "valid", "misattributed",
                                           "not_supplied"]
    assert Citations().compute(data)["citations"].filter(
        pl.col("call_id") == "whole")["reason"].to_list() == ["valid"]
    table = retrieve(cases, TokenWindow(), SqrtLexical(), [(4, 1)])
    split = {r["call_id"]: r for r in Availability().compute(MeasureInput(
        facts=facts_frame(cases), retrieval=table, calls=frame))["call_availability"].to_dicts()}
    assert (split["span"]["conditions_supplied"], split["span"]["conditions_cut"],
            split["span"]["conditions_missing"]) == ([], ["F2"], ["F3"])
    assert (split["whole"]["conditions_supplied"], split["whole"]["conditions_cut"]) == (
        ["F2"], [])


class BadSpans:
    """A span chunker that breaks its contract one way at a time."""

    name = "bad-spans"
    output = "spans"

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        spans = TokenWindow().chunk(sentences, size)
        faults = {
            "beyond": spans.with_columns(pl.col("end") + 1000),
            "empty": spans.with_columns(pl.col("start").alias("end")),
            "negative": spans.with_columns(pl.col("start") - 1),
            "float": spans.with_columns(pl.col("start").cast(pl.Float64)),
            "no end": spans.drop("end"),
            "null": spans.with_columns(pl.lit(None, pl.Int32).alias("start")),
            "unknown passage": spans.with_columns(pl.lit("nope").alias("case")),
            "one chunk index": spans.with_columns(pl.lit(0, pl.Int32).alias("chunk")),
            "raises": None,
        }
        if self.fault == "raises":
            raise ValueError("windows must be\ntwo lines")
        return faults[self.fault]


@pytest.mark.parametrize(("fault", "said"), [
    ("beyond", "a span outside 0 <= start < end <= 78 (the passage's length): cafe en A "
               "chunk 0 [0, 1017) (and 7 more)"),
    ("empty", "a span outside 0 <= start < end"),
    ("negative", "chunk 0 [-1, 17)"),
    ("float", "start is Float64"),
    ("no end", "no column end"),
    ("null", "null values in start"),
    ("unknown passage", "a span of no passage it was given: nope en A chunk 0"),
    ("one chunk index", "two spans with one chunk index"),
    ("raises", "failed: ValueError: windows must be;"),
])
def test_span_output_that_breaks_the_contract_is_refused_naming_the_plugin(
        cafe: Path, fault: str, said: str) -> None:
    with pytest.raises(PluginError) as caught:
        retrieve(load_corpus([cafe]), BadSpans(fault), SqrtLexical(), [(4, 1)])
    message = str(caught.value)
    assert "chunker 'bad-spans'" in message and said in message, message
    assert "\n" not in message and "uninstall that plugin" in message


def test_an_unknown_output_kind_is_refused_naming_the_plugin(cafe: Path) -> None:
    class Typo(SentenceGroups):
        name = "typo"
        output = "span"

    with pytest.raises(PluginError, match=r"chunker 'typo' .* declares output = 'span'; a "
                                          r"chunker's output is 'sentences' or 'spans'"):
        retrieve(load_corpus([cafe]), Typo(), SqrtLexical(), [(2, 1)])


class TodaysChunker:
    """Written against the interface as documented before spans: no `output`, no `overlap`,
    the six columns it knew of, a frame built row by row."""

    name = "todays-groups"

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        rows = []
        for (case, lang, variant), group in sentences.sort("position").group_by(
                ["case", "lang", "variant"], maintain_order=True):
            ids, texts = group["fact_id"].to_list(), group["text"].to_list()
            for n, i in enumerate(range(0, len(ids), size)):
                rows.append({"case": case, "lang": lang, "variant": variant, "chunk": n,
                             "fact_ids": ids[i:i + size], "text": " ".join(texts[i:i + size])})
        return pl.DataFrame(rows, schema={"case": pl.String, "lang": pl.String,
                                          "variant": pl.String, "chunk": pl.Int64,
                                          "fact_ids": pl.List(pl.String), "text": pl.String})


def test_a_chunker_written_against_todays_interface_works_unchanged() -> None:
    assert not hasattr(TodaysChunker, "output")
    cases = load_corpus([ROOT / "corpus" / "0.2"])
    settings = [(2, 1), (2, 2), (3, 1), (3, 2)]
    todays = retrieve(cases, TodaysChunker(), SqrtLexical(), settings)
    groups = retrieve(cases, SentenceGroups(), SqrtLexical(), settings)
    assert todays.drop("chunk").equals(groups.drop("chunk"))
    assert todays["chunk"].to_list() == groups["chunk"].to_list()
    assert todays["whole_fact_ids"].to_list() == todays["fact_ids"].to_list()
    assert set(todays["cut_fact_ids"].list.len().to_list()) == {0}
    assert todays["start"].null_count() == todays.height
    facts = facts_frame(cases)
    assert Availability().compute(MeasureInput(facts, todays, None, (3, 1)))["availability"] \
        .equals(Availability().compute(MeasureInput(facts, groups, None, (3, 1)))["availability"])
    # The example plugin, also written before spans, untouched but for `overlap = True`.
    windows = retrieve(cases, SlidingWindow(), SqrtLexical(), [(3, 2)])
    assert windows.filter(pl.col("case") == "price", pl.col("lang") == "en",
                          pl.col("variant") == "A")["fact_ids"].to_list() == [
        ["F1", "F2", "F3"], ["F2", "F3", "F4"], ["F3", "F4", "F5"], ["F4", "F5", "F6"]]
    assert windows["whole_fact_ids"].to_list() == windows["fact_ids"].to_list()


def test_sentence_groups_gives_the_tables_it_gave_before_spans() -> None:
    """tests/snapshots/sentence_groups_retrieval.csv was written from the protocol's retrieval
    table as recorded by the code before span chunkers existed (commit 3d15f93)."""
    cases = load_corpus([ROOT / "corpus" / "0.2"])
    table = retrieve(cases, SentenceGroups(), SqrtLexical(), [(2, 1), (2, 2), (3, 1), (3, 2)])
    before = ["case", "lang", "variant", "chunk_size", "top_k", "chunk", "fact_ids", "score",
              "rank", "selected", "tied", "text", "n_terms", "matched_terms"]
    assert [c for c in table.columns if c in before] == before
    assert {c: str(table.schema[c]) for c in before} == {
        "case": "String", "lang": "String", "variant": "String", "chunk_size": "Int32",
        "top_k": "Int32", "chunk": "Int32", "fact_ids": "List(String)", "score": "Float64",
        "rank": "Int32", "selected": "Boolean", "tied": "Boolean", "text": "String",
        "n_terms": "Int64", "matched_terms": "List(String)"}
    snapshot = pl.read_csv(ROOT / "tests" / "snapshots" / "sentence_groups_retrieval.csv",
                           schema_overrides={"fact_ids": pl.String, "matched_terms": pl.String})
    now = table.select(
        "case", "lang", "variant", "chunk_size", "top_k", "chunk",
        pl.col("fact_ids").list.join(" "), pl.col("score").round(12), "rank", "selected",
        "tied", "n_terms", pl.col("matched_terms").list.join(" ").fill_null(""))
    assert now.cast(snapshot.schema).fill_null("").equals(snapshot.fill_null(""))
    sentence = {(c.id, lang, fid): text for c in cases for lang, p in c.langs.items()
                for fid, text in p.facts.items()}
    for row in table.to_dicts():
        assert row["text"] == " ".join(sentence[(row["case"], row["lang"], f)]
                                       for f in row["fact_ids"])
        assert (row["whole_fact_ids"], row["cut_fact_ids"], row["start"], row["end"]) == (
            row["fact_ids"], [], None, None)
    availability = Availability().compute(MeasureInput(facts_frame(cases), table, None,
                                                       (3, 1)))["availability"]
    assert set(availability["n_conditions_cut"].to_list()) == {0}
    assert availability["n_conditions_supplied"].to_list() == availability[
        "conditions_supplied"].list.len().to_list()




def test_the_protocols_frozen_plan_is_still_current_byte_for_byte() -> None:
    """Spans change nothing a sentence-groups plan hashes or schedules: the committed plan is
    the one frozen before them (a deliberate refreeze of protocol 1.0 would update this pin)."""
    path = ROOT / "experiments" / "protocol-1.0" / "experiment.json"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PROTOCOL_PLAN_SHA256
    experiment = load_experiment(path.parent)
    _, calls, table = verify(experiment)
    assert all("supplied_texts" not in entry for entry in build_plan(experiment)["schedule"])
    sentences = sentences_frame(experiment.cases)
    for size, k in experiment.settings:  # the plan's supply is selected_facts' IDs, whole
        shown = supplied(table, sentences, size, k)
        assert {key: [f for f, _ in pairs] for key, pairs in shown.items()} == \
            selected_facts(table, size, k)
    for planned in calls:  # every call shows its facts' whole sentences
        case = next(c for c in experiment.cases if c.id == planned.case)
        assert list(planned.request.supplied) == [
            (fid, case.langs[planned.lang].facts[fid]) for fid in planned.supplied_ids]


def test_coverage_check_holds_chunkers_without_overlap_to_their_promise(cafe: Path) -> None:
    sentences = sentences_frame(load_corpus([cafe, ROOT / "corpus" / "0.2" / "price.toml"]))
    for chunker, sizes in ((SentenceGroups(), (1, 2, 4)), (TokenWindow(), (1, 4, 7, 500)),
                           (TodaysChunker(), (3,))):
        for size in sizes:
            assert coverage_problems(chunk_passages(chunker, sentences, size), sentences) == []
    # Sliding windows overlap, and say so; the check would catch them otherwise.
    assert SlidingWindow.overlap is True
    found = coverage_problems(read_chunks(SlidingWindow(), sentences, 2), sentences)
    assert found and found[0].startswith("cafe en A: the chunks hold F1 F2 F2 F3, not each")

    class Skips(TokenWindow):
        name = "skips"

        def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
            return super().chunk(sentences, size).filter(pl.col("chunk") != 1)

    class Overlaps(TokenWindow):
        name = "overlaps"

        def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
            return super().chunk(sentences, size).with_columns(pl.col("start") - 3)\
                .with_columns(pl.col("start").clip(lower_bound=0))

    skipped = coverage_problems(read_chunks(Skips(), sentences, 4), sentences)
    assert skipped[0] == "cafe en A: characters 17..40 (' 8. After the holidays, ') are in no chunk"
    overlapping = coverage_problems(read_chunks(Overlaps(), sentences, 4), sentences)
    assert overlapping[0] == ("cafe en A: chunk 1 starts at 15, before the previous chunk ends "
                              "(17): spans overlap or are out of order")
    # The core holds them to it too, before anything is scored (freeze, plan, run, retrieve).
    for chunker, said in ((Skips(), skipped[0]), (Overlaps(), overlapping[0])):
        with pytest.raises(PluginError) as caught:
            chunk_passages(chunker, sentences, 4)
        assert str(caught.value).startswith(
            f"chunker '{chunker.name}' ({__name__}) declares no overlap = True, so it promises "
            f"every character once and in order, but at size 4 {said} (and ")


def reference_problems(chunks: pl.DataFrame, sentences: pl.DataFrame) -> list[str]:
    """The promise's words read row by row in plain Python, as coverage_problems worded them
    before it became whole-frame expressions: the first break of each passage, passage
    order."""
    rows = sorted(chunks.iter_rows(named=True),
                  key=lambda r: (r["case"], r["lang"], r["variant"], r["chunk"]))
    facts = sorted(sentences.iter_rows(named=True),
                   key=lambda r: (r["case"], r["lang"], r["variant"], r["position"]))
    problems = []
    for key in sorted({(r["case"], r["lang"], r["variant"]) for r in rows}):
        mine = [r for r in rows if (r["case"], r["lang"], r["variant"]) == key]
        passage = [f for f in facts if (f["case"], f["lang"], f["variant"]) == key]
        where = " ".join(key)
        if mine[0]["start"] is None:
            got = [fid for r in mine for fid in r["fact_ids"]]
            expected = [f["fact_id"] for f in passage]
            if got != expected:
                problems.append(f"{where}: the chunks hold {' '.join(got)}, not each sentence "
                                f"once in passage order ({' '.join(expected)})")
            continue
        text = " ".join(f["text"] for f in passage)
        edges = [0, *[x for r in mine for x in (r["start"], r["end"])], len(text)]
        for i in range(0, len(edges), 2):
            lo, hi = edges[i], edges[i + 1]
            if hi < lo:
                problems.append(f"{where}: chunk {mine[i // 2]['chunk']} starts at {hi}, before "
                                f"the previous chunk ends ({lo}): spans overlap or are out of "
                                "order")
                break
            if text[lo:hi].strip():
                problems.append(f"{where}: characters {lo}..{hi - 1} ({text[lo:hi]!r}) are in "
                                "no chunk")
                break
    return problems


def test_the_whole_frame_coverage_check_says_what_a_row_by_row_reading_says(cafe: Path) -> None:
    """Random damage to good chunkings (a chunk dropped, two swapped, a span moved or
    stretched), on the cafe passage, the protocol's price case and the kit's samples: the
    whole-frame check finds the same passages, in the same words, as the plain reading."""
    import random

    from fragbench.testing import samples

    sentences = pl.concat([
        sentences_frame(load_corpus([cafe, ROOT / "corpus" / "0.2" / "price.toml"])),
        samples.sentences()])
    rng = random.Random(15)
    broken: set[str] = set()
    length = {(c, lang, v): n for c, lang, v, n in sentences.group_by("case", "lang", "variant")
              .agg(pl.col("end").max()).iter_rows()}
    for chunker, size in ((SentenceGroups(), 2), (TokenWindow(), 3), (SentenceGroups(), 1),
                          (TokenWindow(), 5)):
        good = read_chunks(chunker, sentences, size)
        assert coverage_problems(good, sentences) == reference_problems(good, sentences) == []
        for _ in range(12):
            rows = good.to_dicts()
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(rows))
                how = rng.choice(["drop", "swap", "move", "stretch"])
                if how == "drop" and len(rows) > 1:
                    rows.pop(i)
                elif how == "swap" and i + 1 < len(rows):
                    rows[i]["chunk"], rows[i + 1]["chunk"] = rows[i + 1]["chunk"], rows[i]["chunk"]
                elif rows[i]["start"] is not None:
                    shift = rng.randint(-6, 6)
                    rows[i]["start"] = max(0, rows[i]["start"] + shift)
                    if how == "stretch":
                        rows[i]["end"] = rows[i]["end"] + abs(shift)
                    end = length[(rows[i]["case"], rows[i]["lang"], rows[i]["variant"])]
                    rows[i]["start"] = min(rows[i]["start"], end - 1)  # within the passage,
                    rows[i]["end"] = min(max(rows[i]["end"], rows[i]["start"] + 1), end)  # as
                    # the core's check_spans demands before coverage is looked at
                else:
                    rows[i]["fact_ids"] = rows[i]["fact_ids"][::-1] + rows[i]["fact_ids"][:1]
            damaged = pl.DataFrame(rows, schema=good.schema)
            said = coverage_problems(damaged, sentences)
            assert said == reference_problems(damaged, sentences)
            broken.update(line.split(": ", 1)[1].split(" ", 1)[0] for line in said)
    assert {"the", "chunk", "characters"} <= broken  # every kind of break was met
