"""Citation classification on hand-built answers, in both languages."""

from __future__ import annotations

import polars as pl
import pytest
from support.series import call

from fragbench.builtin.citations import Citations
from fragbench.interfaces import MeasureInput
from fragbench.series.folder import CALLS_SCHEMA

NBSP = "\u00a0"
FACTS = [
    ("c", "fr", "F1", f"L’offre s’applique «{NBSP}sans frais{NBSP}» avant le 12 mars.", True),
    ("c", "fr", "F2", "Le service coûte 10 € par mois.", False),
    ("c", "fr", "F3", "Aucune remise n’est possible après le 1er avril.", True),
    ("c", "en", "F1", "The offer applies “free of charge” until 12 March.", True),
    ("c", "en", "F2", "The service costs €10 a month.", False),
    ("c", "en", "F3", "No discount is possible after 1 April.", True),
]


def facts() -> pl.DataFrame:
    return pl.DataFrame(FACTS, schema={"case": pl.String, "lang": pl.String,
                                       "fact_id": pl.String, "text": pl.String,
                                       "is_condition": pl.Boolean}, orient="row")


def measure(calls: list[dict]) -> dict[str, pl.DataFrame]:
    frame = pl.DataFrame(calls, schema={k: d for k, (d, _) in CALLS_SCHEMA.items()})
    return Citations().compute(MeasureInput(facts=facts(), retrieval=pl.DataFrame(),
                                            calls=frame))


FRENCH = [
    # (id, extract, exact reason, typographic-level reason)
    ("F1", "L’offre s’applique", "valid", "valid"),
    ("F1", "L'offre s'applique", "not_verbatim", "valid"),          # straight apostrophes
    ("F2", "L’offre s’applique", "misattributed", "misattributed"),  # exact in F1, not F2
    ("F9", "L’offre", "unknown_id", "unknown_id"),
    ("F3", "Aucune remise", "not_supplied", "not_supplied"),
    ("F3", "", "not_supplied", "not_supplied"),                      # not_supplied comes first
    ("F1", "", "empty_extract", "empty_extract"),
    ("F1", "   ", "empty_extract", "empty_extract"),
    ("F1", "« sans frais »", "not_verbatim", "valid"),               # plain spaces vs NBSP
    ("F1", f"«{NBSP}sans frais{NBSP}»", "valid", "valid"),
    ("F1", "free of charge", "not_verbatim", "not_verbatim"),         # a translated quote
    ("F2", "le service coûte", "not_verbatim", "not_verbatim"),       # no case folding
    ("F2", "Le service coute", "not_verbatim", "not_verbatim"),       # no accent folding
    ("F2", "Le service  coûte", "not_verbatim", "valid"),             # a whitespace run
    ("F1", "Le service coûte", "misattributed", "misattributed"),
]

ENGLISH = [
    ("F1", "applies “free of charge”", "valid", "valid"),
    ("F1", 'applies "free of charge"', "not_verbatim", "valid"),      # curly vs straight
    ("F1", "applies “Free of charge”", "not_verbatim", "not_verbatim"),
    ("F2", "The service costs €10", "valid", "valid"),
    ("F1", "The service costs €10", "misattributed", "misattributed"),
    ("F3", "No discount", "not_supplied", "not_supplied"),
    ("F2", "sans frais", "not_verbatim", "not_verbatim"),              # a translated quote
]


@pytest.mark.parametrize(("lang", "cases"), [("fr", FRENCH), ("en", ENGLISH)])
def test_each_reason_at_both_levels(lang: str, cases: list[tuple[str, str, str, str]]) -> None:
    tables = measure([call("x", lang, ["F1", "F2"], [(i, e) for i, e, _, _ in cases])])
    table = tables["citations"].sort("citation")
    assert table["reason"].to_list() == [r for _, _, r, _ in cases]
    assert table["reason_folded"].to_list() == [f for _, _, _, f in cases]
    assert table["valid"].to_list() == [r == "valid" for _, _, r, _ in cases]
    assert table["extract"].to_list() == [e for _, e, _, _ in cases]  # kept as written


def test_per_call_summary_and_unparsed_answers_stay_unmeasured() -> None:
    tables = measure([
        call("a", "en", ["F1", "F2", "F3"], [("F1", "until 12 March"), ("F1", "until 12 March"),
                                             ("F2", "nope"), ("F9", "x")]),
        call("b", "en", ["F1", "F3"], []),
        call("c", "en", ["F1"], None),
    ])
    per_call = {r["call_id"]: r for r in tables["citations_per_call"].to_dicts()}
    a = per_call["a"]
    assert (a["n_citations"], a["n_valid"], a["n_invalid"]) == (4, 2, 2)
    assert a["valid_ids"] == ["F1"] and a["conditions_cited_validly"] == ["F1"]
    assert a["supplied_conditions_not_cited"] == ["F3"]
    assert a["supplied_conditions_not_cited_validly"] == ["F3"]
    b = per_call["b"]
    assert (b["n_citations"], b["n_valid"]) == (0, 0)
    assert b["supplied_conditions_not_cited"] == ["F1", "F3"]
    c = per_call["c"]
    assert c["parsed"] is False and c["n_citations"] is None and c["n_valid"] is None
    assert c["supplied_conditions_not_cited"] is None


def test_calls_classified_in_batches_give_the_table_of_one_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Citations.compute classifies BATCH_CALLS calls at a time: however the calls fall into
    # batches (one a batch, two, all at once), the tables are the same, rows in the same order.
    from fragbench.builtin import citations

    calls = [call(f"{lang}{n}", lang, ["F1", "F2"][: 1 + n % 2],
                  [(i, e) for i, e, _, _ in cases[n::3]] if n != 4 else None)
             for n in range(6) for lang, cases in (("fr", FRENCH), ("en", ENGLISH))]
    whole = measure(calls)
    assert whole["citations"].height > 10
    for size in (1, 2, 5):
        monkeypatch.setattr(citations, "BATCH_CALLS", size)
        batched = measure(calls)
        for name in ("citations", "citations_per_call"):
            assert batched[name].equals(whole[name], null_equal=True), (name, size)
