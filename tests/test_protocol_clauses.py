"""Protocol 1.0 clauses that a mutation run showed no test held to account (issue 18).

Each test states the clause it holds, quoted from `../shared/protocol-1.0.md` (or the README
where the protocol leaves a decision to the code), and its expectation is worked out by hand
from that wording, never read back from the code. Each was shown failing once with the bug it
guards (docs/testing.md, "Issue 18: protocol-rule mutants", lists the mutations).

The collector rows go through the real CLI, the real openai SDK and a loopback server, so that
they hold whatever shape the collector's code takes; the citation, scorer and tie rows call the
measure and retrieval functions directly, so that a mutation run can afford them per mutant.

After the issue's rows and the three strengthened tests come those written for the survivors
of the issue-18 cosmic-ray run (docs/testing.md, "The cosmic-ray run"), in the same way.
"""

from __future__ import annotations

import json
import math
import shutil
import unicodedata
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.availability import EXPECTED
from support.cli import error_lines, refreeze, run_cli
from support.reports import section_table
from support.series import call
from support.suite import CANARY_KEY

from fragbench.budget.ledger import Ledger, ledger_path
from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import load_corpus
from fragbench.experiment.config import load_experiment
from fragbench.interfaces import MeasureInput
from fragbench.plugins import registry
from fragbench.redact import Redactor
from fragbench.retrieval.passages import retrieve
from fragbench.series.folder import CALLS_SCHEMA
from fragbench.testing.loopback import Handler, Server, http_error, ok

pytestmark = pytest.mark.slow

# -- Helpers ------------------------------------------------------------------------------------

PLAN_TOTAL = Decimal("6.5419125")
"""What protocol 1.0's 72 calls reserve (`fragbench plan experiments/protocol-1.0`)."""
PRIOR = Decimal("0.41792")
CEILING = Decimal(10)


def series(experiment: Path, server: Server, name: str = "openai") -> tuple[Any, Path]:
    """`fragbench run` of the experiment copy against the loopback Responses server."""
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", name, "--backend", "openai",
                     "--out", str(out),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert "Traceback" not in result.stderr, result.stderr
    return result, out / "protocol-1.0" / name


def calls_of(series_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(series_dir / "calls.parquet").sort("seq")


def status_of(series_dir: Path) -> dict[str, Any]:
    return json.loads((series_dir / "status.json").read_text(encoding="utf-8"))


def cost_of_default_usage(number: int) -> Decimal:
    """The loopback server's default usage for request `number` (input 400 + n of which 100
    cached and 50 cache writes, output 300 + n), priced by hand at the protocol's rates:
    10 input, 1 cached, 12.50 cache write, 50 output, USD per million tokens."""
    uncached = 400 + number - 100 - 50
    per_million = (Decimal(uncached) * 10 + 100 * 1 + Decimal(50) * Decimal("12.50")
                   + (300 + number) * 50)
    return per_million / 1_000_000


def assert_stopped_at_call_1_unknown_cost(result: Any, server: Server, series_dir: Path) -> None:
    """Protocol: "Arrêt au premier ... coût inconnu"; the answer is recorded, then the series
    stops; nothing after it is sent; a call of unknown cost stays counted at its reservation."""
    assert result.returncode == 3, result.stderr
    assert "stopped at call 1" in result.stderr and "unknown_cost" in result.stderr
    assert len(server.requests) == 1
    status = status_of(series_dir)
    assert status["state"] == "stopped"
    assert (status["stop"]["reason"], status["stop"]["seq"]) == ("unknown_cost", 1)
    first = calls_of(series_dir).row(0, named=True)
    assert first["status"] == "completed"  # recorded, answer kept
    assert first["cost_usd"] is None
    assert first["counted_usd"] >= first["reserved_usd"] > 0


def measure_citations(facts: list[tuple[str, str, str, str, bool]],
                      calls: list[dict]) -> dict[str, pl.DataFrame]:
    """The registered `citations` measure on hand-built calls (the MeasureInput contract)."""
    frame_facts = pl.DataFrame(facts, schema={"case": pl.String, "lang": pl.String,
                                              "fact_id": pl.String, "text": pl.String,
                                              "is_condition": pl.Boolean}, orient="row")
    frame = pl.DataFrame(calls, schema={k: d for k, (d, _) in CALLS_SCHEMA.items()})
    measure = registry().get("measure", "citations")
    return measure.compute(MeasureInput(facts=frame_facts, retrieval=pl.DataFrame(),
                                        calls=frame))


# Plain ASCII spaces throughout, written out, so that every byte of each sentence is known.
FACTS = [
    ("c", "fr", "F1", "Le service coûte 10 € par mois.", False),
    ("c", "fr", "F2", "Une remise de 15 % s’applique dès 10 000 mots.", True),
    ("c", "fr", "F3", "Toute commande est facturée au moins 35 €.", True),
]
assert all(unicodedata.is_normalized("NFC", text) for *_, text, _ in FACTS)


# -- Citations: the exact level -----------------------------------------------------------------

def test_whitespace_the_sentence_does_not_hold_makes_an_extract_not_verbatim() -> None:
    """Protocol: IDs cited "avec un extrait textuellement présent dans les fragments reçus" /
    "accompanied by a verbatim substring in supplied evidence". A space before the sentence's
    first word, after its last character, or a tab where the sentence has a space, is not in
    the sentence: the extract is not a substring of it, whatever it holds besides. The
    typographic level folds a whitespace run to one space, so the tab passes there, and only
    there; the space at either end of the sentence is in no sentence at either level."""
    tables = measure_citations(FACTS, [call("x", "fr", ["F1", "F2"], [
        ("F1", " Le service coûte"),     # a space before the sentence's first word
        ("F1", "par mois. "),            # a space after its full stop
        ("F1", "coûte 10\t€"),           # a tab where the sentence has a space
        ("F1", "Le service coûte"),      # the control: valid
    ])])
    table = tables["citations"].sort("citation")
    assert table["reason"].to_list() == ["not_verbatim", "not_verbatim", "not_verbatim", "valid"]
    assert table["reason_folded"].to_list() == ["not_verbatim", "not_verbatim", "valid", "valid"]
    (row,) = tables["citations_per_call"].to_dicts()
    assert (row["n_citations"], row["n_valid"], row["n_invalid"], row["n_valid_folded"]) == \
        (4, 1, 3, 2)


def test_a_decomposed_accent_is_not_verbatim_at_the_exact_level() -> None:
    """Exact means the same characters: "coûte" written as u + U+0302 (NFD) is another string
    than the sentence's precomposed û (NFC), however alike they look. Only the typographic
    level, which normalises both to NFC, accepts it."""
    decomposed = unicodedata.normalize("NFD", "Le service coûte")
    assert decomposed != "Le service coûte"  # the premise: other code points
    tables = measure_citations(FACTS, [call("x", "fr", ["F1"], [("F1", decomposed)])])
    (cite,) = tables["citations"].to_dicts()
    assert (cite["reason"], cite["valid"]) == ("not_verbatim", False)
    assert (cite["reason_folded"], cite["valid_folded"]) == ("valid", True)
    (row,) = tables["citations_per_call"].to_dicts()
    assert (row["n_valid"], row["n_invalid"], row["n_valid_folded"]) == (0, 1, 1)
    assert row["valid_ids"] == []


def test_a_condition_valid_only_at_the_typographic_level_is_not_cited_validly() -> None:
    """`conditions_cited_validly` is a measure of the exact level (protocol: "textuellement
    présent"); the typographic level is reported beside it, never merged into it. F2, a
    condition, cited with a straight apostrophe where the sentence has ’: valid only once
    folded, so no condition is cited validly and F2 is a supplied condition not cited validly;
    F1 (no condition) is cited word for word."""
    tables = measure_citations(FACTS, [call("x", "fr", ["F1", "F2"], [
        ("F2", "15 % s'applique"),
        ("F1", "10 € par mois"),
    ])])
    (row,) = tables["citations_per_call"].to_dicts()
    assert (row["n_valid"], row["n_invalid"], row["n_valid_folded"]) == (1, 1, 2)
    assert row["valid_ids"] == ["F1"]
    assert row["conditions_cited_validly"] == []
    assert row["supplied_conditions_not_cited"] == []
    assert row["supplied_conditions_not_cited_validly"] == ["F2"]


# -- The collector: budget and stop rules -------------------------------------------------------

def another_run_reserves(experiment: Path, amount: str) -> Any:
    """A loopback action: while this call is out, another series drawing on the same budget
    reserves `amount` in its ledger (as a second run elsewhere would), then the answer comes."""
    budget = load_experiment(experiment).budget

    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        ledger = Ledger(ledger_path(budget.id), budget).load().open(Redactor())
        try:
            with ledger.locked():
                ledger.append({"type": "reserve", "series": "elsewhere",
                               "series_uid": "another-run", "call_id": "o-1", "seq": 1,
                               "reserved_usd": amount})
        finally:
            ledger.close()
        ok()(handler, number, body)
    return act


def test_before_each_call_everything_still_planned_must_fit(experiment: Path,
                                                            server: Server) -> None:
    """Protocol: "Si le plan ne tient pas dans le solde, aucun appel ne part"; the README:
    before the first call *and again before each call*, everything still planned must fit in
    the balance. The plan fits at the start (6.5419125 of 9.58208 USD). While call 1 is out,
    another run on the same budget reserves 8 USD; after call 1 (0.018225 USD) the balance is
    9.58208 - 0.018225 - 8 = 1.563855 USD: enough for any single call (each reserves under
    0.1 USD), far from the 71 calls still planned (6.45 USD). So call 2 never goes."""
    server.script[0] = another_run_reserves(experiment, "8")
    result, series_dir = series(experiment, server)
    assert result.returncode == 3, result.stderr
    assert "stopped at call 2" in result.stderr and "budget" in result.stderr
    assert len(server.requests) == 1
    status = status_of(series_dir)
    assert (status["stop"]["reason"], status["stop"]["seq"]) == ("budget", 2)
    assert "71 calls still planned" in status["stop"]["detail"]  # calls 2 to 72
    calls = calls_of(series_dir)
    assert calls["status"].to_list() == ["completed"] + ["not_sent"] * 71
    assert calls["cost_usd"][0] == cost_of_default_usage(0)
    # The call refused for the budget holds no reservation in the ledger: nothing was sent.
    ledger = ledger_path("protocol-1.0-openai").read_text(encoding="utf-8").splitlines()
    ours = [json.loads(line) for line in ledger if '"reserve"' in line]
    assert [r["call_id"] for r in ours if r.get("series_uid") != "another-run"] == \
        [calls["call_id"][0]]


def omit_service_tier(handler: Handler, number: int, body: dict[str, Any]) -> None:
    """A valid Responses body with no `service_tier` key at all."""
    answer = handler.server.shape.body(json.dumps({"answer": "x", "citations": []}),
                                       number=number, request=body)
    del answer["service_tier"]
    handler.send_json(200, answer)


@pytest.mark.parametrize("tier", ["absent", "null"])
def test_a_response_that_names_no_service_tier_is_an_unknown_cost(
        experiment: Path, server: Server, tier: str) -> None:
    """Protocol: "service `default`" at the frozen Standard prices, and a stop at the first
    unknown cost. A response that does not say which tier served it may have been billed on
    another: its cost is unknown, whatever its usage says."""
    server.script[0] = omit_service_tier if tier == "absent" else ok(service_tier=None)
    result, series_dir = series(experiment, server)
    assert_stopped_at_call_1_unknown_cost(result, server, series_dir)
    assert calls_of(series_dir)["service_tier"][0] is None


@pytest.mark.parametrize("details", ["absent", "null"])
def test_a_responses_usage_without_input_token_details_is_an_unknown_cost(
        experiment: Path, server: Server, details: str) -> None:
    """Protocol: input at 10, cached input at 1 and cache writes at 12.50 USD per million, and
    a stop at the first unknown cost. A usage that gives input tokens but not how many were
    cached or written to the cache cannot be priced: read as zero cached and zero written, 400
    input tokens would cost less than if some were cache writes. Unknown, never zero."""
    usage: dict[str, Any] = {"input_tokens": 400, "output_tokens": 300,
                             "output_tokens_details": {"reasoning_tokens": 200},
                             "total_tokens": 700}
    if details == "null":
        usage["input_tokens_details"] = None
    server.script[0] = ok(usage=usage)
    result, series_dir = series(experiment, server)
    assert_stopped_at_call_1_unknown_cost(result, server, series_dir)
    first = calls_of(series_dir).row(0, named=True)
    assert first["input_tokens"] == 400
    assert first["cached_tokens"] is None and first["cache_write_tokens"] is None


# -- The budget's ledger: one budget, one prior spend -------------------------------------------

def test_a_config_with_another_prior_spend_on_the_same_budget_is_refused(
        experiment: Path, workspace: Path, server: Server) -> None:
    """Protocol: "Le budget cumulé de 10 USD HT inclut les 0,41792 USD calculés précédemment".
    The budget's ledger was opened by a run under that config; a copy of the experiment naming
    the same budget id but a prior spend of 0 would draw on 0.41792 USD that were already
    spent. It is refused (exit 4, one line naming the ledger) and sends nothing."""
    server.script[0] = http_error(500)  # the first run stops at once; its ledger stays
    first, _ = series(experiment, server)
    assert first.returncode == 3, first.stderr
    ledger = ledger_path("protocol-1.0-openai")
    assert ledger.exists()
    before = ledger.read_bytes()

    forgetful = workspace / "experiments" / "protocol-1.0-no-prior"
    shutil.copytree(experiment, forgetful)
    refreeze(forgetful, 'prior_spend_usd = "0.41792"', 'prior_spend_usd = "0"')
    for args in (("plan", str(forgetful)),
                 ("run", str(forgetful), "--series", "openai-2", "--backend", "openai",
                  "--out", str(workspace / "outputs"))):
        result = run_cli(*args, env={"OPENAI_API_KEY": CANARY_KEY,
                                     "OPENAI_BASE_URL": server.base_url})
        assert result.returncode == 4, (args[0], result.stdout, result.stderr)
        (line,) = error_lines(result.stderr)
        assert str(ledger) in line and "0.41792" in line
    assert len(server.requests) == 1
    assert not (workspace / "outputs" / "protocol-1.0" / "openai-2").exists()
    assert ledger.read_bytes() == before


# -- compare: a cell is compared only when both calls answered the same request -----------------

def test_compare_never_compares_cells_whose_requests_differ(extractive: Path, experiment: Path,
                                                            tmp_path: Path) -> None:
    """README (compare): "A cell is compared only when both calls answered the same request".
    Series B ran a plan frozen with chunk size 2: each retrieval call sent two sentences where
    A's sent three (another request: 36 cells), while each full-passage call sent the same six
    sentences under the same instructions (the same request: 36 cells). The baseline is
    deterministic, so the 36 compared cells are the same; the 36 others are not compared,
    never counted as compared or as differing."""
    refreeze(experiment, "chunk_size = 3", "chunk_size = 2")
    out = extractive.parent.parent.parent
    ran = run_cli("run", str(experiment), "--series", "size-2", "--backend", "extractive",
                  "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    other = out / "protocol-1.0" / "size-2"
    table_file = tmp_path / "cmp.parquet"
    result = run_cli("compare", str(extractive), str(other), "--out", str(table_file))
    assert result.returncode == 0, result.stderr
    table = pl.read_parquet(table_file)
    assert table.height == 72
    full = table.filter(pl.col("mode") == "full")
    retrieval = table.filter(pl.col("mode") == "retrieval")
    assert full.height == retrieval.height == 36
    assert full["compared"].all() and full["differs"].to_list() == [False] * 36
    assert not retrieval["compared"].any()
    assert retrieval["differs"].null_count() == 36
    assert set(retrieval["note"].to_list()) == {
        "not compared: the two calls sent different requests"}
    assert "different frozen plans" in result.stdout
    assert "72 cells: 36 compared, of which 0 differ and 36 are the same; 36 not compared." \
        in result.stdout


# -- Retrieval: the question's terms, and ties ---------------------------------------------------

def retrieved(tmp_path: Path, text: str, settings: list[tuple[int, int]]) -> pl.DataFrame:
    path = tmp_path / "case.toml"
    path.write_text(text, encoding="utf-8")
    return retrieve(load_corpus([path]), SentenceGroups(), SqrtLexical(), settings)


# A lab's own case whose English question names a pass and a year that the French text holds
# too (a name and a number read the same in both languages).
SHARED_WORDS = """
id = "pass"
license = "CC-BY-4.0"
conditions = ["F2"]
variants = { A = ["F1", "F2"], B = ["F2", "F1"] }

[en]
source = "Museum"
question = "Is the Orsay pass valid in 2026?"
facts.F1 = "The Orsay 2026 pass stays valid."
facts.F2 = "One ticket is enough on Mondays."

[fr]
source = "Musée"
question = "Le billet est-il accepté le lundi ?"
facts.F1 = "Le pass Orsay 2026 reste valable."
facts.F2 = "Un billet suffit le lundi."
"""


def test_question_terms_are_those_of_the_passage_s_own_question(tmp_path: Path) -> None:
    """Protocol: "nombre de termes distincts de la question présents dans le fragment": the
    question asked of that passage, in its language. By hand, French question terms: billet,
    est, accepte, lundi (le, il are stopwords). F1 -> pass orsay 2026 reste valable: 0 of 5
    terms, score 0, although the English question's orsay, pass, 2026 are all there. F2 ->
    billet suffit lundi: 2 of 3, 2/sqrt(3). F2 is selected in both orders. English: orsay pass
    valid 2026; F1 holds 4 of its 5 terms (4/sqrt(5)), F2 (one ticket enough mondays) none."""
    table = retrieved(tmp_path, SHARED_WORDS, [(1, 1)])
    for variant in ("A", "B"):
        fr = table.filter(pl.col("lang") == "fr", pl.col("variant") == variant)
        by_fact = {row["fact_ids"][0]: row for row in fr.to_dicts()}
        assert by_fact["F1"]["matched_terms"] == []
        assert by_fact["F1"]["score"] == 0.0
        assert by_fact["F2"]["matched_terms"] == ["billet", "lundi"]
        assert by_fact["F2"]["score"] == pytest.approx(2 / math.sqrt(3))
        assert fr.filter(pl.col("selected"))["fact_ids"].to_list() == [["F2"]]
        en = table.filter(pl.col("lang") == "en", pl.col("variant") == variant)
        by_fact = {row["fact_ids"][0]: row for row in en.to_dicts()}
        assert by_fact["F1"]["matched_terms"] == ["2026", "orsay", "pass", "valid"]
        assert by_fact["F1"]["score"] == pytest.approx(4 / math.sqrt(5))
        assert by_fact["F2"]["matched_terms"] == []


# Six sentences, so that the protocol's main setting (groups of three, one kept) makes two
# chunks. Question terms: museum rooms open early sunday school groups families.
CLOSE_SCORES = """
id = "museum"
license = "CC-BY-4.0"
conditions = ["F4"]
variants = { A = ["F1", "F2", "F3", "F4", "F5", "F6"], B = ["F6", "F5", "F4", "F3", "F2", "F1"] }

[en]
source = "Museum"
question = "Which museum rooms open early on Sunday for school groups and families?"
facts.F1 = "On Sunday the museum opens its rooms early for school visits; the upper galleries \
and the library stay shut until ten o’clock, when the open season starts."
facts.F2 = "Tickets are sold online."
facts.F3 = "Dogs stay outside."
facts.F4 = "School groups may enter the museum rooms early on Sunday, before the open hour, \
through the north door; coats, bags, umbrellas and pushchairs are left at the cloakroom beside \
the garden gate, and guides meet each class."
facts.F5 = "Lockers cost nothing."
facts.F6 = "Photos need no flash."
"""


def test_two_distinct_scores_a_thousandth_apart_do_not_tie(tmp_path: Path) -> None:
    """Protocol: "Un seul fragment est retenu ; en cas d'égalité, le premier dans le texte":
    the first in the text wins only a tie. By hand (stopwords: on, the, its, for, and, until,
    when, may, at, are): [F1 F2 F3] has 19 + 3 + 3 = 25 terms holding 6 question terms
    (sunday museum rooms early school open): 6/sqrt(25) = 1.2. [F4 F5 F6] has 27 + 3 + 4 = 34
    terms holding 7 (school groups museum rooms early sunday open): 7/sqrt(34) = 1.20049.
    Distinct, 0.00049 apart: the later chunk scores higher and is the one kept, and neither is
    tied. (In variant B the higher chunk comes first anyway.)"""
    table = retrieved(tmp_path, CLOSE_SCORES, [(3, 1)])
    a = table.filter(pl.col("variant") == "A").sort("chunk")
    assert [(r["n_terms"], len(r["matched_terms"])) for r in a.to_dicts()] == [(25, 6), (34, 7)]
    assert a["score"].to_list() == pytest.approx([6 / math.sqrt(25), 7 / math.sqrt(34)])
    assert 0 < 7 / math.sqrt(34) - 6 / math.sqrt(25) < 5e-4  # the premise: close, distinct
    assert a["rank"].to_list() == [None, 1]
    assert a["tied"].to_list() == [False, False]
    b = table.filter(pl.col("variant") == "B").sort("chunk")
    assert b["fact_ids"].to_list() == [["F6", "F5", "F4"], ["F3", "F2", "F1"]]
    assert b["rank"].to_list() == [1, None]


# -- Strengthened: tests that had killed a mutant only by accident ------------------------------

@pytest.mark.parametrize(("ceiling", "goes"), [
    (str(PRIOR + PLAN_TOTAL), True),                              # 6.9598325: exactly fits
    (str(PRIOR + PLAN_TOTAL - Decimal("0.0000001")), False),      # a ten-millionth short
])
def test_a_plan_equal_to_the_balance_runs_on_a_priced_budget(
        experiment: Path, workspace: Path, server: Server, ceiling: str, goes: bool) -> None:
    """Protocol: "Si le plan ne tient pas dans le solde, aucun appel ne part". A plan that
    reserves exactly the balance (ceiling 6.9598325 - prior 0.41792 = 6.5419125 USD, what the
    72 calls reserve) fits: every call goes. A ten-millionth of a dollar less and no call
    goes (exit 4, nothing sent, no series folder)."""
    refreeze(experiment, 'ceiling_usd = "10"', f'ceiling_usd = "{ceiling}"')
    result, series_dir = series(experiment, server)
    if goes:
        assert result.returncode == 0, result.stderr
        assert len(server.requests) == 72
        assert calls_of(series_dir)["status"].to_list() == ["completed"] * 72
    else:
        assert result.returncode == 4, result.stderr
        (line,) = error_lines(result.stderr)
        assert "nothing was sent" in line
        assert server.requests == [] and not series_dir.exists()


def test_the_report_publishes_all_four_settings_and_the_full_passage(extractive: Path) -> None:
    """Protocol: "Publier aussi toute la matrice de récupération avec groupes de deux ou trois
    phrases et un ou deux fragments retenus ... Ne pas sélectionner après coup le réglage le plus
    favorable." So report.md's availability table has every one of the four settings (2/1,
    2/2, 3/1 marked main, 3/2) and the full passage, for each of the 12 passages, each cell the
    hand-computed one (tests/series/test_availability_expected.py's table)."""
    report = (extractive / "report.md").read_text(encoding="utf-8")
    rows = section_table(report, "## Retrieval")
    settings = ["2/1", "2/2", "3/1 (main)", "3/2", "full"]
    assert all(list(row) == ["case", "lang", "variant", *settings] for row in rows)
    assert sorted((r["case"], r["lang"], r["variant"]) for r in rows) == [
        (case, lang, variant) for case in ("delay", "hosting", "price")
        for lang in ("en", "fr") for variant in ("A", "B")]
    for row in rows:
        for setting in settings:
            _, conditions = EXPECTED[(row["case"], row["lang"], row["variant"],
                                      setting.removesuffix(" (main)"))]
            ids = conditions.split()
            assert row[setting] == (f"{len(ids)}/4: {' '.join(ids)}" if ids else "0/4"), \
                (row, setting)


CUT = '{"answer": "Le service coûte 10 € par mois, sauf'


def test_an_incomplete_answer_keeps_its_text_and_collection_goes_on(experiment: Path,
                                                                    server: Server) -> None:
    """Protocol: "Toute sortie incomplète reste publiée comme telle" / "retain incomplete
    answers", and "max_output_tokens:1200 (raisonnement compris)". Call 6 stops at the
    output ceiling half-way through its JSON, having used exactly the 1,200 output tokens it
    was allowed (1,100 of them reasoning): a usage the request could produce. It is kept as it
    came, text and all (not parsed, since it is cut), priced at its usage (1,500 input tokens,
    none cached: (1500 x 10 + 1200 x 50) per million = 0.075 USD), and the series goes on."""
    usage = {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 0,
                                                            "cache_write_tokens": 0},
             "output_tokens": 1200, "output_tokens_details": {"reasoning_tokens": 1100},
             "total_tokens": 2700}
    server.script[5] = ok(status="incomplete", incomplete_reason="max_output_tokens", text=CUT,
                          usage=usage)
    result, series_dir = series(experiment, server)
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == 72
    sixth = calls_of(series_dir).row(5, named=True)
    assert (sixth["status"], sixth["incomplete_reason"]) == ("incomplete", "max_output_tokens")
    assert sixth["text"] == CUT
    assert sixth["parsed"] is False and sixth["stop_reason"] is None
    assert sixth["cost_usd"] == Decimal("0.075") <= sixth["reserved_usd"]


# -- Survivors of the issue-18 cosmic-ray run, killed -------------------------------------------

ONE_TERM = """
id = "one"
license = "CC-BY-4.0"
conditions = ["F2"]
variants = { A = ["F1", "F2"] }

[en]
source = "Museum"
question = "Is the museum open on Mondays?"
facts.F1 = "Tickets are sold at the door."
facts.F2 = "Mondays!"
"""


def test_a_chunk_of_one_term_is_scored_by_the_same_rule(tmp_path: Path) -> None:
    """Protocol: distinct question terms present "divisé par la racine carrée du nombre de
    termes du fragment". A one-sentence chunk of one term that the question holds ("Mondays!"
    -> mondays) scores 1/sqrt(1) = 1 and is kept; F1 (tickets sold door) holds none of museum,
    open, mondays: 0."""
    table = retrieved(tmp_path, ONE_TERM, [(1, 1)]).sort("chunk")
    assert [(r["n_terms"], r["matched_terms"]) for r in table.to_dicts()] == [
        (3, []), (1, ["mondays"])]
    assert table["score"].to_list() == [0.0, 1.0]
    assert table["rank"].to_list() == [None, 1]


def test_an_empty_collection_answers_every_query_with_nothing() -> None:
    """Collection mode (README: every query against every chunk of a collection): with no
    sentence there is no chunk, so no query has a rank; an empty table, never an error."""
    from fragbench.retrieval.collection.engine import retrieve_collection

    sentences = pl.DataFrame(schema={"passage": pl.String, "position": pl.Int64,
                                     "lang": pl.String, "text": pl.String})
    queries = pl.DataFrame({"query": ["q1"], "lang": ["en"], "text": ["open on Sunday"]})
    result = retrieve_collection(sentences, queries, 3, 1)
    assert result.height == 0
    assert result.columns == ["query", "rank", "passage", "chunk", "score", "tied"]


class _RowTooMany(SqrtLexical):
    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        scored = super().score(chunks, questions)
        return pl.concat([scored, scored.head(1)])


class _RowTooFew(SqrtLexical):
    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        return super().score(chunks, questions).slice(1)


@pytest.mark.parametrize("scorer", [_RowTooMany(), _RowTooFew()], ids=["too-many", "too-few"])
def test_a_scorer_that_returns_other_rows_than_the_chunks_is_refused(tmp_path: Path,
                                                                    scorer: Any) -> None:
    """docs/plugins.md: a scorer returns the chunks it was given, one row each. One row more
    (a chunk scored twice: which score would rank?) or one fewer (a chunk never ranked) is
    refused, naming the plugin, before anything is selected."""
    from fragbench.errors import PluginError

    path = tmp_path / "one.toml"
    path.write_text(ONE_TERM, encoding="utf-8")
    with pytest.raises(PluginError, match=r"scorer 'sqrt-lexical' .* rows for 2 chunks"):
        retrieve(load_corpus([path]), SentenceGroups(), scorer, [(1, 1)])


def test_a_fact_not_supplied_is_not_supplied_whatever_its_id_sorts_after() -> None:
    """Protocol: extracts checked against "les fragments reçus". A call shown F2 and F3 that
    cites F1 (a fact of the case it was not shown) cites it `not_supplied`, whichever way the
    IDs sort; a call shown nothing at all cites every known ID `not_supplied` too."""
    tables = measure_citations(FACTS, [
        call("x", "fr", ["F2", "F3"], [("F1", "Le service coûte")]),
        call("y", "fr", [], [("F1", "Le service coûte")]),
    ])
    reasons = {r["call_id"]: (r["reason"], r["reason_folded"])
               for r in tables["citations"].to_dicts()}
    assert reasons == {"x": ("not_supplied", "not_supplied"),
                       "y": ("not_supplied", "not_supplied")}


# The budget's first record, read back: each field refused in both directions.
LEDGER_BUDGET = {"type": "budget", "id": "b", "ceiling_usd": "10", "prior_spend_usd": "0.5"}


def chained(path: Path, records: list[dict]) -> None:
    """A ledger as a careful forger would write it: every line's number and hash right, so
    that only the values can be refused (the README: each record carries its number and the
    sha256 of the line before)."""
    import hashlib

    out, prev = [], "0" * 64
    for n, record in enumerate(records):
        line = json.dumps({**record, "n": n, "prev": prev}).encode()
        out.append(line)
        prev = hashlib.sha256(line).hexdigest()
    path.write_bytes(b"\n".join(out) + b"\n")


@pytest.mark.parametrize(("first", "says"), [
    ({"type": "reserve"}, "never trusted"),        # sorts after "budget"
    ({"type": None}, "never trusted"),             # no type at all
    ({"type": "account"}, "never trusted"),        # sorts before "budget"
    ({"id": "a"}, "belongs to budget 'a'"),        # another budget's ledger, sorting before
    ({"id": "c"}, "belongs to budget 'c'"),        # and after
    ({"prior_spend_usd": "-0.5"}, "never trusted"),  # an amount that is no amount
    ({"ceiling_usd": "ten"}, "never trusted"),
    ({"ceiling_usd": "20"}, "one budget has one ceiling"),   # a config asking for less
    ({"ceiling_usd": "5"}, "one budget has one ceiling"),    # and for more
    ({"prior_spend_usd": "0.7"}, "one budget has one ceiling"),
    ({"prior_spend_usd": "0.3"}, "one budget has one ceiling"),
], ids=lambda v: json.dumps(v) if isinstance(v, dict) else "")
def test_a_ledger_is_read_only_under_the_budget_its_first_record_fixes(
        tmp_path: Path, first: dict, says: str) -> None:
    """README, the budget ledger: "Its first record fixes the budget's ceiling and prior
    spend", and a ledger that was altered is "refused with one line naming the ledger, never
    trusted". The config's budget is b, ceiling 10, prior 0.5. A first record that is no
    budget record, or an amount that is not one, is an altered ledger (restore it); one of
    another id, or another ceiling or prior spend, above or below the config's, is a config
    that does not match the budget (fix the config or give it its own id)."""
    from fragbench.budget.ledger import LedgerError
    from fragbench.budget.money import Budget

    path = tmp_path / "b.jsonl"
    chained(path, [{k: v for k, v in {**LEDGER_BUDGET, **first}.items() if v is not None}])
    budget = Budget(id="b", ceiling_usd=Decimal(10), prior_spend_usd=Decimal("0.5"),
                    framing_tokens=1024)
    with pytest.raises(LedgerError, match=says) as refused:
        Ledger(path, budget).load()
    assert str(path) in str(refused.value)


def test_a_ledger_file_is_data_never_executable_nor_writable_by_others(tmp_path: Path) -> None:
    """The ledger a run creates is a data file: read and written by its owner, readable by
    others, executable by no one, and writable by no one else (0o644, the umask aside)."""
    import os

    from fragbench.budget.money import Budget

    budget = Budget(id="b", ceiling_usd=Decimal(10), prior_spend_usd=Decimal("0.5"),
                    framing_tokens=1024)
    path = tmp_path / "store" / "b.jsonl"
    old = os.umask(0)
    try:
        Ledger(path, budget).open(Redactor()).close()
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_ledger_store_that_cannot_be_created_is_said_in_one_line(
        experiment: Path, workspace: Path, server: Server) -> None:
    """Bad input: one line naming the file and what to do, nothing sent. The ledger store is
    asked for under a regular file, where no folder can be made."""
    blocker = workspace / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    out = workspace / "outputs"
    result = run_cli("run", str(experiment), "--series", "openai", "--backend", "openai",
                     "--out", str(out),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url,
                          "FRAGBENCH_LEDGER_DIR": str(blocker / "ledgers")})
    assert result.returncode == 4, result.stderr
    (line,) = error_lines(result.stderr)
    assert str(blocker / "ledgers" / "protocol-1.0-openai.jsonl") in line
    assert "nothing was sent" in line
    assert server.requests == [] and not (out / "protocol-1.0" / "openai").exists()


def test_compare_shows_a_cell_absent_from_one_side_by_its_own_keys(
        extractive: Path, experiment: Path, tmp_path: Path) -> None:
    """README (compare): "a missing cell is never the same or different, and never counted as
    compared". Series A ran a plan of two repetitions (48 cells), B the protocol's three (72):
    each repetition-3 cell is absent from A. It is listed under its own case, language,
    variant, mode and repetition, not compared, `differs` null; the 48 cells both ran sent the
    same requests (the repetition is not part of a request) and are the same."""
    refreeze(experiment, "repetitions = 3", "repetitions = 2")
    out = extractive.parent.parent.parent
    ran = run_cli("run", str(experiment), "--series", "two-reps", "--backend", "extractive",
                  "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    table_file = tmp_path / "cmp.parquet"
    result = run_cli("compare", str(out / "protocol-1.0" / "two-reps"), str(extractive),
                     "--out", str(table_file))
    assert result.returncode == 0, result.stderr
    table = pl.read_parquet(table_file)
    assert table.height == 72
    for column in ("case", "lang", "variant", "mode", "rep"):
        assert table[column].null_count() == 0, column
    third = table.filter(pl.col("rep") == 3)
    assert third.height == 24
    assert not third["compared"].any() and third["differs"].null_count() == 24
    assert set(third["note"].to_list()) == {"cell absent from A"}
    both = table.filter(pl.col("rep") < 3)
    assert both["compared"].all() and both["differs"].to_list() == [False] * 48
    assert "72 cells: 48 compared, of which 0 differ and 48 are the same; 24 not compared." \
        in result.stdout


def test_the_offline_baseline_costs_nothing(extractive: Path) -> None:
    """The extractive baseline calls no model and draws on no budget: every call's cost and
    what is counted for it are 0, and the series spent 0 USD."""
    calls = calls_of(extractive)
    assert calls.height == 72
    assert calls["cost_usd"].to_list() == [Decimal(0)] * 72
    assert calls["counted_usd"].to_list() == [Decimal(0)] * 72
    assert Decimal(status_of(extractive)["spent_usd"]) == 0


def test_an_unknown_cost_counts_at_least_what_its_usage_shows(tmp_path: Path) -> None:
    """collect.py: an unknown cost counts "at least the whole reservation, and more when a
    possible usage priced at the frozen rates already shows more" (never less than the
    evidence). Through the library, with no input bound given: 300,000 input tokens is past
    the 272K short-context limit (unknown cost: another price list), yet at the frozen rates
    alone it shows (300000 x 10 + 100 x 50) per million = 3.005 USD, more than the 1 USD
    reserved: 3.005 is counted, and the series stops."""
    from support.collector import PRICING, planned

    from fragbench.calls.collector import collect
    from fragbench.experiment.config import BackendConfig
    from fragbench.interfaces import COST_FIELDS, Contract, Reply, Request, Usage
    from fragbench.series.journal import Journal, read_journal

    class Answers:
        endpoint = "scripted"

        def __init__(self) -> None:
            self.sent = 0

        def send(self, request: Request) -> Reply:
            self.sent += 1
            return Reply(status="completed", model="m", service_tier=None, request_id=None,
                         usage=Usage(300_000, 0, 0, 100, 0),
                         text='{"answer": "", "citations": []}')

        def close(self) -> None:
            return None

    contract = Contract(model="m", output_ceiling=1200, usage_fields=frozenset(COST_FIELDS))
    backend = BackendConfig(name="m", plugin="scripted", params={"model": "m"},
                            pricing=PRICING, contract=contract)
    calls = [planned(i) for i in range(2)]
    journal = Journal(tmp_path / "journal.jsonl")
    session = Answers()
    stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session, backend, journal, None)
    journal.close()
    assert stop is not None and (stop.reason, stop.seq, session.sent) == ("unknown_cost", 1, 1)
    (outcome,) = [r for r in read_journal(tmp_path / "journal.jsonl")
                  if r["type"] == "outcome"]
    assert outcome["cost_usd"] is None
    assert Decimal(outcome["counted_usd"]) == Decimal("3.005")


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: bound to learn it, then released."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_failed_call_may_have_been_billed_one_never_sent_was_not(
        experiment: Path, server: Server) -> None:
    """Protocol: stop at the first technical failure. An HTTP 500 comes from a server that
    had the request: its cost is unknown (stated), counted at its whole reservation. A
    connection refused never left the machine: it costs 0, and nothing is unknown about it."""
    server.script[0] = http_error(500)
    result, series_dir = series(experiment, server)
    assert result.returncode == 3, result.stderr
    first = calls_of(series_dir).row(0, named=True)
    assert first["status"] == "failed" and first["cost_usd"] is None
    assert first["cost_unknown"] and first["counted_usd"] == first["reserved_usd"] > 0

    nowhere = run_cli("run", str(experiment), "--series", "nowhere", "--backend", "openai",
                      "--out", str(experiment.parent.parent / "outputs"),
                      env={"OPENAI_API_KEY": CANARY_KEY,
                           "OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1"})
    assert nowhere.returncode == 3, nowhere.stderr
    first = calls_of(series_dir.parent / "nowhere").row(0, named=True)
    assert first["status"] == "failed"
    assert (first["cost_usd"], first["counted_usd"], first["cost_unknown"]) == (0, 0, None)


def test_a_failed_response_s_stop_says_the_server_s_error(experiment: Path,
                                                          server: Server) -> None:
    """README, after a stop: the run "says where and why". A response whose status is
    `failed` carries the server's error; the stop shows it, in status.json and on screen. Its
    usage may not be its final bill: its cost is unknown, counted at the reservation."""
    server.script[0] = ok(status="failed", error_message="The model ran out of capacity.")
    result, series_dir = series(experiment, server)
    assert result.returncode == 3, result.stderr
    first = calls_of(series_dir).row(0, named=True)
    assert first["cost_usd"] is None and first["counted_usd"] == first["reserved_usd"]
    stop = status_of(series_dir)["stop"]
    assert (stop["reason"], stop["seq"]) == ("technical_failure", 1)
    assert "The model ran out of capacity." in stop["detail"]
    assert "The model ran out of capacity." in result.stderr


def test_an_answer_from_a_model_without_a_frozen_price_is_of_unknown_cost(
        experiment: Path, server: Server) -> None:
    """Protocol: stop at a changed model, and at an unknown cost. The first answer comes from
    gpt-5-mini, which the frozen pricing table does not price: the series stops there, the
    answer recorded, its cost unknown (never priced at gpt-6-astra's rates) and counted at
    the whole reservation."""
    server.script[0] = ok(model="gpt-5-mini")
    result, series_dir = series(experiment, server)
    assert result.returncode == 3, result.stderr
    assert len(server.requests) == 1
    first = calls_of(series_dir).row(0, named=True)
    assert (first["model"], first["status"]) == ("gpt-5-mini", "completed")
    assert first["cost_usd"] is None and first["cost_unknown"]
    assert first["counted_usd"] == first["reserved_usd"]
