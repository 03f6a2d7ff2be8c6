"""Condition availability against expectations worked out by hand, not by fragbench.

Every expectation below was derived on paper from the protocol's rule (`text.py`'s docstring:
NFKD, combining marks removed, lowercase, terms are the runs of letters and digits, the
language's stopwords removed; score = distinct question terms in the chunk / sqrt(chunk terms,
repeats counted); groups of `size` consecutive sentences from the first; the top-k chunks kept,
ties to the first in the passage), reading only the stopword lists in `text.py`. No expectation
was produced by calling fragbench: if the code and this file disagree, one of them misreads the
protocol, and the table says which reading is the protocol's.

Two rows worked out in full, case `price`, English (conditions F2 F3 F5 F6):

  question "How much will it cost to translate a 12,000-word contract that I need back within
  24 hours?" -> much will cost translate 12 000 word contract need back within 24 hours (how,
  it, to, a, that, i are stopwords; `will` is kept, a homograph of a content word).
  Per sentence (terms, question terms found): F1 16 {12, word}; F2 13 {000} (`words` is not
  `word`: no stemming); F3 17 {within, 24, hours}; F4 10 {word}; F5 12 {word}; F6 15 {}.

  Variant A (F1 F2 F3 F4 F5 F6), chunk size 2: [F1 F2] 3/sqrt(29) = 0.557, [F3 F4]
  4/sqrt(27) = 0.770, [F5 F6] 1/sqrt(27) = 0.192. Top-1 keeps [F3 F4]: supplied F3 F4,
  condition F3. Top-2 keeps [F3 F4] and [F1 F2], given in passage order: F1 F2 F3 F4,
  conditions F2 F3. (Ranking by the first chunk only would have supplied F3 F4 there too.)

  Variant B (F4 F1 F6 F2 F5 F3), chunk size 3: [F4 F1 F6] 2/sqrt(41) = 0.312,
  [F2 F5 F3] 5/sqrt(42) = 0.772. Top-1: F2 F5 F3, conditions F2 F5 F3 (in supplied order).

A tie that the table depends on: `price`, French, variant A, chunk size 2: [F1 F2] and
[F3 F4] both score 4/sqrt(29); the first in the passage, [F1 F2], is the top-1.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from support.availability import EXPECTED
from support.reports import section_table
from support.series import call
from support.suite import ROOT

from fragbench.builtin.availability import Availability
from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import facts_frame, load_corpus, sentences_frame
from fragbench.interfaces import MeasureInput
from fragbench.retrieval.passages import retrieve
from fragbench.retrieval.spans import supplied as plan_supply
from fragbench.series.folder import CALLS_SCHEMA

SETTINGS = [(2, 1), (2, 2), (3, 1), (3, 2)]
MAIN = (3, 1)
CONDITIONS = {"price": "F2 F3 F5 F6", "delay": "F2 F4 F5 F6", "hosting": "F3 F4 F5 F6"}

# Per sentence, by hand: (number of terms, the distinct question terms it holds).
SENTENCES: dict[tuple[str, str], dict[str, tuple[int, str]]] = {
    # much will cost translate 12 000 word contract need back within 24 hours
    ("price", "en"): {"F1": (16, "12 word"), "F2": (13, "000"), "F3": (17, "24 hours within"),
                      "F4": (10, "word"), "F5": (12, "word"), "F6": (15, "")},
    # coutera traduction contrat 12 000 mots ai besoin sous 24 heures (`ai` is no stopword)
    ("price", "fr"): {"F1": (16, "12 traduction"), "F2": (13, "000 mots"),
                      "F3": (18, "24 heures sous"), "F4": (11, "mots"), "F5": (14, "mots"),
                      "F6": (19, "")},
    # if order 300 flyers express production friday evening will reach office paris
    ("delay", "en"): {"F1": (18, ""), "F2": (15, ""), "F3": (14, ""), "F4": (14, ""),
                      "F5": (14, "express production"), "F6": (16, "production")},
    # si commande 300 flyers fabrication express vendredi soir quand arriveront mon bureau paris
    ("delay", "fr"): {"F1": (18, ""), "F2": (17, ""), "F3": (15, "flyers"),
                      "F4": (15, "commande"), "F5": (12, "express fabrication"),
                      "F6": (16, "fabrication")},
    # any company data leave european union use tessaly
    ("hosting", "en"): {"F1": (15, "data tessaly"), "F2": (11, ""), "F3": (13, ""),
                        "F4": (14, "any"), "F5": (16, ""), "F6": (18, "data")},
    # est partie donnees mon entreprise quitte union europeenne lorsque utilisons tessaly
    ("hosting", "fr"): {"F1": (17, "donnees tessaly"), "F2": (13, ""), "F3": (12, ""),
                        "F4": (13, ""), "F5": (16, ""), "F6": (17, "donnees")},
}


def measured(paths: list[Path], settings: list[tuple[int, int]], main: tuple[int, int]
             ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The retrieval table and the availability table, as a series computes them."""
    cases = load_corpus(paths)
    retrieval = retrieve(cases, SentenceGroups(), SqrtLexical(), settings)
    data = MeasureInput(facts=facts_frame(cases), retrieval=retrieval, calls=None,
                        main_setting=main)
    return retrieval, Availability().compute(data)["availability"]


def by_setting(availability: pl.DataFrame) -> dict[tuple[str, str, str, str], dict]:
    """Rows keyed like EXPECTED; a repeated key would be a row too many."""
    keyed: dict[tuple[str, str, str, str], dict] = {}
    for row in availability.to_dicts():
        setting = "full" if row["mode"] == "full" else f"{row['chunk_size']}/{row['top_k']}"
        key = (row["case"], row["lang"], row["variant"], setting)
        assert key not in keyed, key
        keyed[key] = row
    return keyed


def check_row(row: dict, supplied: str, conditions: str, all_conditions: str) -> None:
    key = (row["case"], row["lang"], row["variant"], row["mode"], row["chunk_size"],
           row["top_k"])
    assert row["supplied_ids"] == supplied.split(), key
    assert row["conditions_supplied"] == conditions.split(), key
    assert row["n_conditions_supplied"] == len(conditions.split()), key
    assert row["conditions"] == all_conditions.split(), key
    assert row["n_conditions"] == len(all_conditions.split()), key
    assert row["conditions_missing"] == [c for c in all_conditions.split()
                                         if c not in conditions.split()], key
    assert row["others_supplied"] == [i for i in supplied.split()
                                      if i not in all_conditions.split()], key


def test_the_hand_table_is_consistent_with_itself() -> None:
    # A slip in copying the table would otherwise show up as a fragbench bug.
    assert len(EXPECTED) == 3 * 2 * 2 * 5
    for (case, _, _, _), (supplied, conditions) in EXPECTED.items():
        assert conditions.split() == [i for i in supplied.split()
                                      if i in CONDITIONS[case].split()]


def test_sentence_terms_of_the_corpus_match_the_hand_count() -> None:
    # Chunks of one sentence expose each sentence's term count and question terms.
    retrieval, _ = measured([ROOT / "corpus" / "0.2"], [(1, 1)], (1, 1))
    for row in retrieval.filter(pl.col("variant") == "A").to_dicts():
        (fact,) = row["fact_ids"]
        n_terms, found = SENTENCES[(row["case"], row["lang"])][fact]
        assert (row["n_terms"], row["matched_terms"]) == (n_terms, sorted(found.split())), \
            (row["case"], row["lang"], fact)
        assert row["score"] == pytest.approx(len(found.split()) / math.sqrt(n_terms))


def test_availability_of_every_setting_and_the_full_passage_is_the_hand_computed_one() -> None:
    _, availability = measured([ROOT / "corpus" / "0.2"], SETTINGS, MAIN)
    rows = by_setting(availability)
    assert set(rows) == set(EXPECTED)
    for key, (supplied, conditions) in EXPECTED.items():
        check_row(rows[key], supplied, conditions, CONDITIONS[key[0]])
        assert rows[key]["main_setting"] is (key[3] in ("full", "3/1")), key


def test_the_full_passage_is_every_sentence_once_whatever_the_matrix(hard: Path) -> None:
    # The full-passage rows are built from one slice of the retrieval table; with three chunk
    # sizes and three top-ks, a slice wider than one setting would repeat sentences.
    settings = [(size, k) for size in (1, 2, 3) for k in (1, 2, 3)]
    _, availability = measured([hard], settings, (2, 2))
    rows = by_setting(availability)
    assert len(rows) == 2 * 2 * (9 + 1)
    for lang in ("en", "fr"):
        check_row(rows[("hard", lang, "A", "full")], "F1 F2 F3 F4 F5", "F2 F4 F5", "F2 F4 F5")
        check_row(rows[("hard", lang, "B", "full")], "F5 F4 F3 F2 F1", "F5 F4 F2", "F2 F4 F5")
    assert [key for key, row in rows.items() if row["main_setting"]] == [
        key for key in rows if key[3] in ("2/2", "full")]


def test_each_call_is_split_by_what_it_was_given() -> None:
    # Calls as the plan makes them: the main setting's selection, or the whole passage.
    cases = load_corpus([ROOT / "corpus" / "0.2"])
    calls = []
    for (case, lang, variant, setting), (supplied, _) in EXPECTED.items():
        if setting in ("3/1", "full"):
            row = call(f"{case}-{lang}-{variant}-{setting}", lang, supplied.split(), [])
            row.update(case=case, variant=variant,
                       mode="retrieval" if setting == "3/1" else "full")
            calls.append(row)
    frame = pl.DataFrame(calls, schema={k: d for k, (d, _) in CALLS_SCHEMA.items()})
    retrieval = retrieve(cases, SentenceGroups(), SqrtLexical(), SETTINGS)
    tables = Availability().compute(MeasureInput(facts=facts_frame(cases), retrieval=retrieval,
                                                 calls=frame, main_setting=MAIN))
    split = {r["call_id"]: r for r in tables["call_availability"].to_dicts()}
    assert len(split) == 24
    for (case, lang, variant, setting), (supplied, conditions) in EXPECTED.items():
        if setting in ("3/1", "full"):
            row = split[f"{case}-{lang}-{variant}-{setting}"]
            assert row["status"] == "completed"
            check_row({**row, "chunk_size": None, "top_k": None}, supplied, conditions,
                      CONDITIONS[case])


def test_the_plan_supply_at_any_main_setting_is_the_hand_computed_one() -> None:
    # `spans.supplied` is what the plan gives the retrieval calls; it reads the table of all
    # four settings at once, so it must pick exactly the one asked for, not its neighbours.
    retrieval, _ = measured([ROOT / "corpus" / "0.2"], SETTINGS, MAIN)
    sentences = sentences_frame(load_corpus([ROOT / "corpus" / "0.2"]))
    for size, k in SETTINGS:
        supply = {key: [fid for fid, _ in pairs]
                  for key, pairs in plan_supply(retrieval, sentences, size, k).items()}
        assert supply == {(case, lang, variant): supplied.split()
                          for (case, lang, variant, setting), (supplied, _) in EXPECTED.items()
                          if setting == f"{size}/{k}"}, (size, k)


def test_report_shows_the_hand_computed_availability(extractive: Path) -> None:
    """The published table and the calls' own supply, against the hand table (not Parquet)."""
    report = (extractive / "report.md").read_text(encoding="utf-8")
    rows = section_table(report, "## Retrieval")
    assert len(rows) == 12
    for row in rows:
        for column, cell in row.items():
            if column in ("case", "lang", "variant"):
                continue
            setting = column.removesuffix(" (main)")
            assert column.endswith(" (main)") == (setting == "3/1")
            _, conditions = EXPECTED[(row["case"], row["lang"], row["variant"], setting)]
            ids = conditions.split()
            assert cell == (f"{len(ids)}/4: {' '.join(ids)}" if ids else "0/4"), (row, column)
    calls = pl.read_parquet(extractive / "call_availability.parquet")
    assert calls.height == 72
    for planned in calls.to_dicts():
        setting = "3/1" if planned["mode"] == "retrieval" else "full"
        supplied, conditions = EXPECTED[
            (planned["case"], planned["lang"], planned["variant"], setting)]
        assert planned["supplied_ids"] == supplied.split(), planned["call_id"]
        assert planned["conditions_supplied"] == conditions.split(), planned["call_id"]


# Hidden-style hard cases: typographic apostrophes (’) and a straight one, « » with no-break
# spaces, narrow no-break spaces before € and :, “ ” quotes, decimal commas (12,50 and 7,50
# split into two terms), upper case with accents, and five sentences, so that the last chunk
# is short at chunk size 2 (one sentence) and 3 (two sentences) and sometimes wins.
HARD = r"""
id = "hard"
license = "CC-BY-4.0"
conditions = ["F2", "F4", "F5"]
variants = { A = ["F1", "F2", "F3", "F4", "F5"], B = ["F5", "F4", "F3", "F2", "F1"] }

[en]
source = "Café Ondine"
question = "Does the café’s 12,50 € “brunch” price include coffee?"
facts.F1 = "Welcome to Café Ondine’s terrace."
facts.F2 = "The “brunch” menu costs 12,50 € per person."
facts.F3 = "Coffee isn’t included; it’s 2,10 € extra."
facts.F4 = "Tea is free until 11 o’clock."
facts.F5 = "Price: 12,50 €, coffee included."

[fr]
source = "Cinéma Lumière"
question = "Le tarif réduit à 7,50\u202f€ s’applique-t-il à l’avant-première du dimanche\u202f?"
facts.F1 = "Le cinéma «\u00a0Lumière\u00a0» ouvre à 10\u202fh."
facts.F2 = "TARIF RÉDUIT\u202f: 7,50\u202f€ pour les étudiants."
facts.F3 = "Les séances «\u00a0avant-première\u00a0» ont lieu le dimanche soir."
facts.F4 = "Aucune réduction ne s’applique aux avant-premières."
facts.F5 = "L'offre du dimanche\u202f: 7,50\u202f€."
"""

# By hand. English question terms: cafe 12 50 brunch price include coffee (does, the, s are
# stopwords). French: tarif reduit 7 50 applique avant premiere dimanche (le, a, s, t, il, l,
# du are stopwords).
HARD_SENTENCES = {
    # welcome cafe ondine terrace (s dropped)
    ("en", "F1"): (4, "cafe"),
    # brunch menu costs 12 50 person
    ("en", "F2"): (6, "12 50 brunch"),
    # coffee isn t included 2 10 extra: `t` is no English stopword; `included` is not `include`
    ("en", "F3"): (7, "coffee"),
    # tea free until 11 o clock: the apostrophe splits o’clock
    ("en", "F4"): (6, ""),
    # price 12 50 coffee included
    ("en", "F5"): (5, "12 50 coffee price"),
    # cinema lumiere ouvre 10 h: « » and the no-break spaces are not letters
    ("fr", "F1"): (5, ""),
    # tarif reduit 7 50 etudiants: upper case and É fold
    ("fr", "F2"): (5, "50 7 reduit tarif"),
    # seances avant premiere ont lieu dimanche soir: `ont` is no stopword
    ("fr", "F3"): (7, "avant dimanche premiere"),
    # aucune reduction ne applique avant premieres: `ne` stays, `premieres` is not `premiere`
    ("fr", "F4"): (6, "applique avant"),
    # offre dimanche 7 50: the straight apostrophe splits L'offre like ’ does
    ("fr", "F5"): (4, "50 7 dimanche"),
}

# (lang, variant, setting) -> (chunk scores in passage order, IDs supplied, conditions supplied).
# EN A, size 3: [F1 F2 F3] 5/sqrt(17) = 1.2127 against the short [F4 F5] 4/sqrt(11) = 1.2060:
# the first wins by 0.007 (had o’clock been one term, [F4 F5] would score 4/sqrt(10) and win).
HARD_EXPECTED = {
    ("en", "A", "2/1"): ((4 / math.sqrt(10), 1 / math.sqrt(13), 4 / math.sqrt(5)), "F5", "F5"),
    ("en", "A", "2/2"): ((4 / math.sqrt(10), 1 / math.sqrt(13), 4 / math.sqrt(5)),
                         "F1 F2 F5", "F2 F5"),
    ("en", "A", "3/1"): ((5 / math.sqrt(17), 4 / math.sqrt(11)), "F1 F2 F3", "F2"),
    ("en", "A", "3/2"): ((5 / math.sqrt(17), 4 / math.sqrt(11)), "F1 F2 F3 F4 F5", "F2 F4 F5"),
    ("en", "B", "2/1"): ((4 / math.sqrt(11), 4 / math.sqrt(13), 1 / math.sqrt(4)),
                         "F5 F4", "F5 F4"),
    ("en", "B", "2/2"): ((4 / math.sqrt(11), 4 / math.sqrt(13), 1 / math.sqrt(4)),
                         "F5 F4 F3 F2", "F5 F4 F2"),
    ("en", "B", "3/1"): ((4 / math.sqrt(18), 4 / math.sqrt(10)), "F2 F1", "F2"),
    ("en", "B", "3/2"): ((4 / math.sqrt(18), 4 / math.sqrt(10)), "F5 F4 F3 F2 F1", "F5 F4 F2"),
    ("fr", "A", "2/1"): ((4 / math.sqrt(10), 4 / math.sqrt(13), 3 / math.sqrt(4)), "F5", "F5"),
    ("fr", "A", "2/2"): ((4 / math.sqrt(10), 4 / math.sqrt(13), 3 / math.sqrt(4)),
                         "F1 F2 F5", "F2 F5"),
    ("fr", "A", "3/1"): ((7 / math.sqrt(17), 5 / math.sqrt(10)), "F1 F2 F3", "F2"),
    ("fr", "A", "3/2"): ((7 / math.sqrt(17), 5 / math.sqrt(10)), "F1 F2 F3 F4 F5", "F2 F4 F5"),
    ("fr", "B", "2/1"): ((5 / math.sqrt(10), 7 / math.sqrt(12), 0.0), "F3 F2", "F2"),
    ("fr", "B", "2/2"): ((5 / math.sqrt(10), 7 / math.sqrt(12), 0.0), "F5 F4 F3 F2", "F5 F4 F2"),
    ("fr", "B", "3/1"): ((6 / math.sqrt(17), 4 / math.sqrt(10)), "F5 F4 F3", "F5 F4"),
    ("fr", "B", "3/2"): ((6 / math.sqrt(17), 4 / math.sqrt(10)), "F5 F4 F3 F2 F1", "F5 F4 F2"),
}


@pytest.fixture
def hard(tmp_path: Path) -> Path:
    path = tmp_path / "hard.toml"
    path.write_text(HARD, encoding="utf-8")
    return path


def test_hard_case_terms_match_the_hand_count(hard: Path) -> None:
    retrieval, _ = measured([hard], [(1, 1)], (1, 1))
    for row in retrieval.filter(pl.col("variant") == "A").to_dicts():
        (fact,) = row["fact_ids"]
        n_terms, found = HARD_SENTENCES[(row["lang"], fact)]
        assert (row["n_terms"], row["matched_terms"]) == (n_terms, sorted(found.split())), \
            (row["lang"], fact)


def test_hard_case_selection_and_availability_match_the_hand_computation(hard: Path) -> None:
    retrieval, availability = measured([hard], SETTINGS, MAIN)
    rows = by_setting(availability)
    assert set(rows) == {("hard", lang, variant, setting)
                         for lang, variant, setting in HARD_EXPECTED} | {
        ("hard", lang, variant, "full") for lang in ("en", "fr") for variant in ("A", "B")}
    for (lang, variant, setting), (scores, supplied, conditions) in HARD_EXPECTED.items():
        size, k = (int(n) for n in setting.split("/"))
        chunks = retrieval.filter(pl.col("lang") == lang, pl.col("variant") == variant,
                                  pl.col("chunk_size") == size, pl.col("top_k") == k
                                  ).sort("chunk")
        assert chunks["score"].to_list() == pytest.approx(scores), (lang, variant, setting)
        # The last chunk is the short one: 5 sentences make groups of 2-2-1 and 3-2.
        assert [len(ids) for ids in chunks["fact_ids"]] == ([2, 2, 1] if size == 2 else [3, 2])
        check_row(rows[("hard", lang, variant, setting)], supplied, conditions, "F2 F4 F5")
    for lang in ("en", "fr"):
        check_row(rows[("hard", lang, "A", "full")], "F1 F2 F3 F4 F5", "F2 F4 F5", "F2 F4 F5")
        check_row(rows[("hard", lang, "B", "full")], "F5 F4 F3 F2 F1", "F5 F4 F2", "F2 F4 F5")
