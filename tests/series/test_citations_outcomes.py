"""Citation outcomes that mutation testing showed no test pinned down.

Each expectation is worked out by hand from the rule in `builtin/citations.py`'s docstring: an
extract is valid when it is an exact substring (not a pattern) of the cited ID's supplied
sentence; counts are per call; an answer that was never parsed is not measured at all.
"""

from __future__ import annotations

import polars as pl
from support.series import call

from fragbench.builtin.availability import Availability
from fragbench.builtin.citations import Citations
from fragbench.interfaces import MeasureInput
from fragbench.plugins import registry
from fragbench.series.folder import CALLS_SCHEMA

FACTS = [
    ("c", "fr", "F1", "Le mot source est facturé 0,12 € (relecture comprise).", False),
    ("c", "fr", "F2", "Une remise de 15 % s’applique dès 10 000 mots.", True),
    ("c", "fr", "F3", "Toute commande est facturée au moins 35 €.", True),
]


def measure(calls: list[dict]) -> dict[str, pl.DataFrame]:
    facts = pl.DataFrame(FACTS, schema={"case": pl.String, "lang": pl.String,
                                        "fact_id": pl.String, "text": pl.String,
                                        "is_condition": pl.Boolean}, orient="row")
    frame = pl.DataFrame(calls, schema={k: d for k, (d, _) in CALLS_SCHEMA.items()})
    return Citations().compute(MeasureInput(facts=facts, retrieval=pl.DataFrame(), calls=frame))


def test_an_extract_is_matched_as_text_never_as_a_pattern() -> None:
    # "0.12 €" read as a regular expression matches "0,12 €" (the dot matches the comma);
    # word for word it is in no sentence. "0,12 € (relecture" is no valid pattern (an open
    # bracket); as text it is in F1, bracket and all.
    tables = measure([call("x", "fr", ["F1", "F2"], [
        ("F1", "0.12 €"),                   # cited in F1: exact level not_verbatim
        ("F2", "0.12 €"),                   # cited in F2: a pattern would find it in F1
        ("F1", "0,12 € (relecture"),        # valid as text
        ("F2", "15 . s’applique"),          # a pattern would match "15 % s’applique"
    ])])
    table = tables["citations"].sort("citation")
    assert table["reason"].to_list() == ["not_verbatim", "not_verbatim", "valid", "not_verbatim"]
    assert table["reason_folded"].to_list() == table["reason"].to_list()


def test_counts_per_call_at_both_levels() -> None:
    # Five citations: F2 valid; F1 valid; F2 with a straight apostrophe (invalid exact, valid
    # typographic); F3 not supplied; F1 not verbatim. So 5 citations, 2 valid, 3 invalid, 3
    # valid at the typographic level; conditions cited validly: F2 only (F1 is no condition,
    # F3 was not supplied and its citation is invalid).
    tables = measure([call("x", "fr", ["F1", "F2"], [
        ("F2", "15 % s’applique"),
        ("F1", "0,12 €"),
        ("F2", "15 % s'applique"),
        ("F3", "au moins 35 €"),
        ("F1", "0,13 €"),
    ])])
    table = tables["citations"].sort("citation")
    assert table["valid"].to_list() == [True, True, False, False, False]
    assert table["valid_folded"].to_list() == [True, True, True, False, False]
    (row,) = tables["citations_per_call"].to_dicts()
    assert (row["n_citations"], row["n_valid"], row["n_invalid"], row["n_valid_folded"]) == \
        (5, 2, 3, 3)
    assert row["valid_ids"] == ["F2", "F1"]  # in order of first citation
    assert row["conditions_cited_validly"] == ["F2"]
    assert row["supplied_conditions_not_cited"] == []
    assert row["supplied_conditions_not_cited_validly"] == []


def test_an_invalid_citation_of_a_condition_is_not_a_condition_cited_validly() -> None:
    # F2 (a condition) cited with words it does not hold, F1 (no condition) validly.
    tables = measure([call("x", "fr", ["F1", "F2"], [("F2", "remise de 20 %"),
                                                       ("F1", "0,12 €")])])
    (row,) = tables["citations_per_call"].to_dicts()
    assert row["conditions_cited_validly"] == []
    assert row["supplied_conditions_not_cited"] == []
    assert row["supplied_conditions_not_cited_validly"] == ["F2"]


def test_a_call_never_answered_is_not_measured() -> None:
    # A call not sent (the series stopped first) has parsed null, not false: still nothing
    # measured, never zero.
    not_sent = call("y", "fr", ["F1", "F2"], None)
    not_sent.update(status="not_sent", parsed=None, answer=None)
    tables = measure([call("x", "fr", ["F1"], [("F1", "0,12 €")]), not_sent])
    per_call = {r["call_id"]: r for r in tables["citations_per_call"].to_dicts()}
    assert (per_call["x"]["n_citations"], per_call["x"]["n_valid"]) == (1, 1)
    y = per_call["y"]
    assert y["parsed"] is None
    assert [y[c] for c in ("n_citations", "n_valid", "n_invalid", "n_valid_folded", "valid_ids",
                           "conditions_cited_validly", "supplied_conditions_not_cited",
                           "supplied_conditions_not_cited_validly")] == [None] * 8


def test_the_measures_tested_here_are_the_registered_ones() -> None:
    # The plan names measures; a series computes what the registry returns for those names.
    plugins = registry()
    assert isinstance(plugins.get("measure", "citations"), Citations)
    assert isinstance(plugins.get("measure", "availability"), Availability)
