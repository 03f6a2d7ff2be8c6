"""`fragbench import hotpotqa` and `import jsonl` (docs/corpus.md): a fixture in HotpotQA's
exact format imported, frozen, planned, retrieved and run offline; the availability split by
the dataset's groups; malformed inputs refused in one line with nothing written."""

from __future__ import annotations

import doctest
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.hotpotqa_data import FIXTURE, generate, write
from support.suite import ROOT

from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import load_corpus
from fragbench.corpus.ids import shown
from fragbench.corpus.importers import hotpotqa
from fragbench.corpus.importers.hotpotqa import fact_id
from fragbench.errors import EXIT_REFUSED, EXIT_USAGE
from fragbench.retrieval.passages import retrieve

DERRICKSON, WOOD, COLLIS = (fact_id(t, i) for t, i in (("Scott Derrickson", 0), ("Ed Wood", 0),
                                                        ("Adam Collis", 0)))
FLORE = "Café de Flore (Paris)"

CONFIG = """id = "hotpot"
corpus = ["../../corpus/hotpot"]
languages = ["en"]
variants = ["A", "B"]
modes = ["retrieval", "full"]
repetitions = 1
measures = ["availability", "citations", "completeness", "usage"]
default_backend = "extractive"

[retrieval]
chunker = "sentence-groups"
scorer = "sqrt-lexical"
chunk_size = 2
top_k = 1

[sensitivity]
chunk_sizes = [1, 2]
top_ks = [1, 2]

[prompts]
en = "prompts/en.toml"
schema = "schema.json"
schema_name = "cited_answer"

[backends.extractive]
plugin = "extractive"

[budget]
id = "hotpot"
ceiling_usd = "1"
prior_spend_usd = "0"
framing_tokens = 1024
"""


def _import(tmp_path: Path, questions: list | None = None, *extra: str) -> Path:
    source = write(tmp_path / "hotpot_dev_distractor.json", FIXTURE if questions is None
                   else questions)
    out = tmp_path / "corpus" / "hotpot"
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(out), *extra)
    assert ran.returncode == 0, ran.stderr
    assert "3 cases, 17 sentences" in ran.stdout or questions is not None, ran.stdout
    return out


def test_ids_conditions_variants_and_groups(tmp_path: Path) -> None:
    out = _import(tmp_path)
    cases = {c.id: c for c in load_corpus([out])}
    assert list(cases) == [q["_id"] for q in FIXTURE[:3]]  # the last has no usable fact
    first = cases["5a8b57f25542995d1e6f1371"]
    assert first.conditions == (DERRICKSON, WOOD)
    assert first.groups == {"type": "comparison", "level": "hard"}
    assert first.variants["A"][:2] == (COLLIS, fact_id("Adam Collis", 1))
    # B: the paragraphs reversed, each one's sentences in order.
    assert first.variants["B"] == (DERRICKSON, fact_id("Scott Derrickson", 1), WOOD,
                                   fact_id("Ed Wood", 1), fact_id("Ed Wood", 2), COLLIS,
                                   fact_id("Adam Collis", 1))
    assert first.langs["en"].facts[fact_id("Ed Wood", 1)] == \
        "In the 1950s he made a number of low-budget films."  # HotpotQA's leading space gone
    cafe = cases["5a8c7595554299585d9e36b6"]
    assert fact_id(FLORE, 1).startswith("Cafe_de_Flore_Paris-")
    assert cafe.conditions == (fact_id(FLORE, 1), fact_id("Jean-Paul Sartre", 0))  # 7 skipped
    assert cafe.groups == {"type": "bridge", "level": "medium"}
    rockets = cases["5ab3b0bf5542992ade7c6e39"]
    assert fact_id("Houston Rockets", 2) not in rockets.fact_ids  # the blank sentence
    assert rockets.groups["level"] == "easy"
    for case in cases.values():
        assert sorted(case.variants["A"]) == sorted(case.variants["B"]) == sorted(case.fact_ids)
        assert all(c.isascii() and " " not in c for c in case.fact_ids)
    manifest = json.loads((out / "import.json").read_text(encoding="utf-8"))
    assert manifest["skipped_questions"] == ["5ae0185b55429942ec259c1b"]
    assert manifest["skipped_supporting_facts"] == [
        {"question": "5a8c7595554299585d9e36b6", "title": FLORE, "index": 7},
        {"question": "5ae0185b55429942ec259c1b", "title": "Lake Ohrid", "index": 4}]
    assert manifest["blank_sentences"] == 1
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp folder


def test_fact_ids_are_stable_and_distinct() -> None:
    assert fact_id("Café", 0) != fact_id("Cafe", 0)  # one slug, two titles
    assert fact_id("Café", 0).startswith("Cafe-") and fact_id("Café", 0).endswith("-0")
    assert fact_id("東京", 3).startswith("p-")
    assert fact_id("A" * 60, 1).split("-")[0] == "A" * 40


def test_import_freeze_plan_retrieve_and_run_offline(tmp_path: Path) -> None:
    _import(tmp_path)
    experiment = tmp_path / "experiments" / "hotpot"
    (experiment / "prompts").mkdir(parents=True)
    shutil.copy(ROOT / "experiments/protocol-1.0/prompts/en.toml", experiment / "prompts")
    shutil.copy(ROOT / "experiments/protocol-1.0/schema.json", experiment)
    (experiment / "config.toml").write_text(CONFIG, encoding="utf-8")
    assert run_cli("freeze", str(experiment)).returncode == 0
    plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    corpus_files = [f for f in plan["files"] if f["role"] == "corpus"]
    assert [f["path"] for f in corpus_files] == ["../../corpus/hotpot/cases.parquet",
                                                 "../../corpus/hotpot/sentences.parquet"]
    assert [c["id"] for c in plan["corpus"]] == [q["_id"] for q in FIXTURE[:3]]
    assert len(plan["schedule"]) == 3 * 2 * 2

    table = tmp_path / "retrieval.parquet"
    assert run_cli("retrieve", str(tmp_path / "corpus" / "hotpot"), "--out", str(table),
                   "--chunk-size", "2").returncode == 0
    assert pl.read_parquet(table).filter("selected").height == 3 * 2

    ran = run_cli("run", str(experiment), "--series", "extractive", "--out",
                  str(tmp_path / "outputs"))
    assert ran.returncode == 0, ran.stderr
    series = tmp_path / "outputs" / "hotpot" / "extractive"
    groups = pl.read_parquet(series / "cases.parquet")
    assert groups.columns == ["case", "type", "level"]
    assert groups.rows() == [(q["_id"], q["type"], q["level"]) for q in FIXTURE[:3]]
    calls = pl.read_parquet(series / "calls.parquet")
    assert calls.height == 12 and set(calls["status"]) == {"completed"}

    # The sensitivity matrix split by group: join the series' cases.parquet on case.
    availability = pl.read_parquet(series / "availability.parquet")
    by_group = (availability.filter(pl.col("mode") == "retrieval")
                .join(groups, on="case")
                .group_by("type", "chunk_size", "top_k")
                .agg(pl.col("n_conditions_supplied").sum(), pl.col("n_conditions").sum())
                .sort("type", "chunk_size", "top_k"))
    assert by_group["type"].unique().sort().to_list() == ["bridge", "comparison"]
    # comparison: one question x 2 variants x 2 conditions at each of the 4 settings.
    assert by_group.filter(pl.col("type") == "comparison")["n_conditions"].to_list() == [4] * 4
    assert by_group.filter(pl.col("type") == "bridge")["n_conditions"].to_list() == [8] * 4
    full = availability.filter(pl.col("mode") == "full").join(groups, on="case")
    assert (full["n_conditions_supplied"] == full["n_conditions"]).all()

    # A corpus file changed after freezing: run refuses, naming it.
    sentences = tmp_path / "corpus" / "hotpot" / "sentences.parquet"
    frame = pl.read_parquet(sentences)
    frame.with_columns(pl.col("text").str.replace("1978", "1979")).write_parquet(sentences)
    planned = run_cli("plan", str(experiment))
    assert "OUT OF DATE" in planned.stdout and "sentences.parquet changed" in planned.stdout


def test_a_generated_set_at_size(tmp_path: Path) -> None:
    """500 generated questions: import, load and the whole sensitivity matrix; not timed
    (benchmarks/bench_import.py times 10,000)."""
    out = _import(tmp_path, generate(500))
    cases = load_corpus([out])
    assert len(cases) == 500 and all(len(c.conditions) == 2 for c in cases)
    manifest = json.loads((out / "import.json").read_text(encoding="utf-8"))
    assert len(manifest["skipped_supporting_facts"]) == 5  # one question in 100
    table = retrieve(cases, SentenceGroups(), SqrtLexical(), [(1, 1), (2, 1), (2, 2), (3, 2)])
    selected = table.filter("selected").group_by("chunk_size", "top_k").agg(pl.len())
    assert dict(zip(zip(selected["chunk_size"], selected["top_k"], strict=True),
                    selected["len"], strict=True)) == \
        {(1, 1): 1000, (2, 1): 1000, (2, 2): 2000, (3, 2): 2000}


def _broken(change: str) -> list:
    questions = json.loads(json.dumps(FIXTURE))
    q = questions[1]
    if change == "not a list":
        return {"data": questions}  # type: ignore[return-value]
    if change == "no context":
        del q["context"]
    elif change == "index a string":
        q["supporting_facts"][0][1] = "1"
    elif change == "sentences not a list":
        q["context"][0][1] = "one sentence"
    elif change == "pair of three":
        q["context"][0].append("extra")
    elif change == "duplicate _id":
        q["_id"] = questions[0]["_id"]
    elif change == "unsafe _id":
        q["_id"] = "../etc"
    elif change == "title a number":
        q["context"][0][0] = 7
    elif change == "type a number":
        q["type"] = 1
    elif change == "title twice":
        q["context"][1][0] = q["context"][0][0]
    return questions


@pytest.mark.parametrize(("change", "said"), [
    ("not a list", "holds dict, not a non-empty list of questions"),
    ("no context", "question 2 (5a8c7595554299585d9e36b6): lacks context"),
    ("index a string", "supporting_facts holds [\"Café de Flore (Paris)\", \"1\"], not a "
                       "[title, sentence index] pair"),
    ("sentences not a list", "context paragraph \"Jean-Paul Sartre\" holds \"one sentence\""),
    ("pair of three", "context holds [\"Jean-Paul Sartre\""),
    ("duplicate _id", "question 2 (5a8b57f25542995d1e6f1371): _id is also question 1's"),
    ("unsafe _id", "question 2 (../etc): _id \"../etc\" must be"),
    ("title a number", "context holds the title 7"),
    ("type a number", "type is 1, not a non-empty string"),
    ("title twice", "context holds the paragraph \"Jean-Paul Sartre\" twice"),
])
def test_malformed_hotpotqa_is_refused_writing_nothing(tmp_path: Path, change: str,
                                                       said: str) -> None:
    source = tmp_path / "in.json"
    source.write_text(json.dumps(_broken(change), ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "corpus" / "hotpot"
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(out))
    assert ran.returncode == EXIT_REFUSED
    lines = error_lines(ran.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"fragbench: {source}: "), lines
    assert said in lines[0], lines[0]
    assert not (tmp_path / "corpus").exists()


@pytest.mark.parametrize("text", ["[{", "[" * 200_000, "\ufeff[]", "[]"])
def test_what_is_not_json_is_refused(tmp_path: Path, text: str) -> None:
    source = tmp_path / "in.json"
    source.write_text(text, encoding="utf-8")
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(tmp_path / "out"))
    assert ran.returncode == EXIT_REFUSED
    assert len(error_lines(ran.stderr)) == 1
    assert not (tmp_path / "out").exists()


def test_an_existing_out_is_refused_and_left_alone(tmp_path: Path) -> None:
    source = write(tmp_path / "in.json", FIXTURE)
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(out))
    assert ran.returncode == EXIT_USAGE
    assert "already exists" in error_lines(ran.stderr)[0]
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_jsonl_format_and_generic_import(tmp_path: Path) -> None:
    out = _import(tmp_path, FIXTURE, "--format", "jsonl")
    assert sorted(p.name for p in out.iterdir()) == ["cases.jsonl", "import.json",
                                                     "paragraphs.jsonl", "sentences.jsonl"]
    assert [c.id for c in load_corpus([out])] == [q["_id"] for q in FIXTURE[:3]]

    lines = [{"id": "q1", "question": "Which river?", "conditions": ["b"],
              "sentences": [{"id": "a", "text": "A town."}, {"id": "b", "text": "The river."},
                            {"id": "c", "text": "A hill."}], "groups": {"topic": "geo"}},
             {"id": "q2", "question": "Who?", "conditions": ["x"], "source": "Atlas",
              "sentences": [{"id": "x", "text": "Someone."}], "groups": {"topic": "people"}}]
    source = tmp_path / "cases.jsonl"
    source.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    generic = tmp_path / "generic"
    ran = run_cli("import", "jsonl", str(source), "--out", str(generic), "--lang", "en")
    assert ran.returncode == 0, ran.stderr
    q1, q2 = load_corpus([generic])
    assert q1.variants["A"] == ("a", "b", "c") and sorted(q1.variants["B"]) == ["a", "b", "c"]
    assert q1.groups == {"topic": "geo"} and q2.langs["en"].source == "Atlas"
    assert q1.license == "unspecified" and q1.langs["en"].source == "the document"

    lines[1]["conditions"] = ["y"]
    source.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    ran = run_cli("import", "jsonl", str(source), "--out", str(tmp_path / "refused"), "--lang",
                  "en")
    assert ran.returncode == EXIT_REFUSED
    assert error_lines(ran.stderr)[0].startswith(f"fragbench: {source}: line 2: conditions "
                                                 "names \"y\"")
    assert not (tmp_path / "refused").exists()


def test_the_documented_fact_id_is_the_one_computed() -> None:
    """The example in the module docstring, fact_id's doctest and docs/corpus.md all give the
    ID the code computes."""
    computed = fact_id("Scott Derrickson", 0)
    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(hotpotqa) if t.examples]
    assert [t.name for t in tests] == ["fragbench.corpus.importers.hotpotqa.fact_id"]
    assert doctest.DocTestRunner().run(tests[0]).failed == 0
    assert tests[0].examples[0].want.strip() == repr(computed)
    for text in (hotpotqa.__doc__ or "",
                 (ROOT / "docs" / "corpus.md").read_text(encoding="utf-8")):
        assert re.findall(r"Scott_Derrickson-[0-9a-f]{6}-0", text) == [computed]


def _generic(tmp_path: Path, lines: list[dict], *extra: str) -> tuple[Path, Path, object]:
    """`lines` imported; `--lang en` unless `extra` names the language (these lines are too
    short for the detector to be sure)."""
    if not {"--lang", "--fallback-lang", "--detect-among"} & set(extra):
        extra = (*extra, "--lang", "en")
    tmp_path.mkdir(exist_ok=True)
    source = tmp_path / "generic.jsonl"
    source.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                      encoding="utf-8")
    out = tmp_path / "generic"
    return source, out, run_cli("import", "jsonl", str(source), "--out", str(out), *extra)


SEPARATORS = "A\u2028B\u2029C\x85D\x1cE\x1dF\x1eG"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_generic_import_keeps_what_splitlines_breaks_at(tmp_path: Path, fmt: str) -> None:
    """A raw U+2028 in an input line is not a line end, and `--format jsonl` writes a corpus
    that loads (Polars writes U+2028, U+2029 and U+0085 raw)."""
    lines = [{"id": "q1", "question": f"Which{SEPARATORS}?", "conditions": ["a"],
              "sentences": [{"id": "a", "text": SEPARATORS}, {"id": "b", "text": "B."}]},
             {"id": "q2", "question": "Who?", "conditions": ["x"],
              "sentences": [{"id": "x", "text": f"Someone{SEPARATORS}"}]}]
    source, out, ran = _generic(tmp_path, lines, "--format", fmt)
    assert "\u2028".encode() in source.read_bytes()  # the input holds it raw
    assert ran.returncode == 0, ran.stderr
    q1, q2 = load_corpus([out])
    assert q1.langs["en"].facts == {"a": SEPARATORS, "b": "B."}
    assert q1.langs["en"].question == f"Which{SEPARATORS}?"
    assert q2.langs["en"].facts == {"x": f"Someone{SEPARATORS}"}

    lines.append({"id": "q3", "question": "Where?", "conditions": ["z"], "sentences": []})
    source, out, ran = _generic(tmp_path / "bad", lines)
    assert ran.returncode == EXIT_REFUSED
    assert error_lines(ran.stderr)[0].startswith(f"fragbench: {source}: line 3: sentences is "
                                                 "[], not a non-empty list"), ran.stderr
    assert not out.exists()


@pytest.mark.parametrize(("change", "said"), [
    pytest.param(lambda x: x.update(id="q 1/../x\ny"),
                 'line 2: id "q 1/../x\\ny" must be 1 to 128 letters, digits', id="path"),
    pytest.param(lambda x: x.update(id="q\u20281"), 'line 2: id "q\\u20281" must be',
                 id="line-separator"),
    pytest.param(lambda x: x["sentences"][0].update(id="s\x00 1"),
                 'line 2: sentence id "s\\u0000 1" must be 1 to 128 characters without '
                 "control", id="nul"),
    pytest.param(lambda x: x["sentences"][0].update(id=" s1"),
                 'line 2: sentence id " s1" must be', id="leading-space"),
    pytest.param(lambda x: x["sentences"][0].update(id="[s1]"),
                 'line 2: sentence id "[s1]" must be', id="brackets"),
])
def test_generic_import_refuses_unsafe_ids(tmp_path: Path, change: Callable[[dict], None],
                                           said: str) -> None:
    lines = [{"id": f"q{n}", "question": "Which?", "conditions": ["s1"],
              "sentences": [{"id": "s1", "text": "One."}]} for n in (1, 2)]
    change(lines[1])
    lines[1]["conditions"] = [lines[1]["sentences"][0]["id"]]
    source, out, ran = _generic(tmp_path, lines)
    assert ran.returncode == EXIT_REFUSED
    errors = error_lines(ran.stderr)
    assert len(errors) == 1 and errors[0].startswith(f"fragbench: {source}: {said}"), errors
    assert not out.exists()


@pytest.mark.parametrize("first", [1, 2])
@pytest.mark.parametrize("key", ["Topic", "lang", "answer", "../x", "a b", "x\ny", "é"])
def test_generic_import_names_the_line_of_a_hostile_group_key(tmp_path: Path, key: str,
                                                               first: int) -> None:
    """Issue 24, item 10: refused at the input's first line holding it (the columnar corpus's
    rule, `group_key_problem`), not as the output's `cases.parquet`, never written; on line 2,
    before the "every case the same keys" check, which would name the key but not say why."""
    lines = [{"id": f"q{n}", "question": "Which?", "conditions": ["s1"],
              "sentences": [{"id": "s1", "text": "One."}],
              "groups": {key if n >= first else "topic": "x"}} for n in (1, 2)]
    source, out, ran = _generic(tmp_path, lines)
    assert ran.returncode == EXIT_REFUSED
    [line] = error_lines(ran.stderr)
    assert line.startswith(f"fragbench: {source}: line {first}: group key {shown(key)} must "
                           "match [a-z][a-z0-9_]*"), line
    assert "cases.parquet" not in line
    assert not out.exists()


def _question(context: list, supporting: list) -> dict:
    """One question in HotpotQA's shape, with the given context and supporting facts."""
    return {"_id": "5a8b57f25542995d1e6f9999", "answer": "yes", "question": "Which one?",
            "supporting_facts": supporting, "context": context, "type": "bridge",
            "level": "easy"}


def test_a_supporting_fact_listed_twice_is_one_condition(tmp_path: Path) -> None:
    """Issue 24, item 11 (rule: conditions are the supporting facts, each once, in their
    order): HotpotQA's files hold a few repeated pairs."""
    context = [["River", ["The river is long.", " It floods."]], ["Town", ["The town."]]]
    out = _import(tmp_path, [_question(context, [["River", 1], ["Town", 0], ["River", 1]])])
    [case] = load_corpus([out])
    assert case.conditions == (fact_id("River", 1), fact_id("Town", 0))


def test_a_sentence_index_counts_blank_sentences(tmp_path: Path) -> None:
    """Issue 24, item 11 (rule: INDEX is the sentence's index in its paragraph as
    `supporting_facts` counts, every sentence, blank ones included): counting only the
    non-blank ones would move each condition after a blank to the next sentence, silently.
    A supporting fact naming the blank sentence itself names no sentence: skipped, counted."""
    context = [["River", [" ", " It floods in spring.", " It freezes in winter."]],
               ["Town", ["The town.", "", " It has a bridge."]]]
    out = _import(tmp_path, [_question(context, [["River", 1], ["Town", 2], ["Town", 1]])])
    [case] = load_corpus([out])
    facts = case.langs["en"].facts
    assert case.conditions == (fact_id("River", 1), fact_id("Town", 2))
    assert [facts[c] for c in case.conditions] == ["It floods in spring.", "It has a bridge."]
    assert facts[fact_id("River", 2)] == "It freezes in winter."
    manifest = json.loads((out / "import.json").read_text(encoding="utf-8"))
    assert manifest["skipped_supporting_facts"] == [
        {"question": "5a8b57f25542995d1e6f9999", "title": "Town", "index": 1}]
    assert manifest["blank_sentences"] == 2


def test_the_import_summary_counts_in_words(tmp_path: Path) -> None:
    """Issue 24, item 10: "1 supporting fact", not "1 supporting facts" (and each count)."""
    context = [["River", ["The river is long.", " "]]]
    source = write(tmp_path / "one.json", [_question(context, [["River", 0], ["River", 5]])])
    out = tmp_path / "one"
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        f"1 case, 1 sentence written to {out}; skipped: 0 questions without a usable supporting "
        f"fact, 1 supporting fact naming no sentence, 1 blank sentence (listed in "
        f"{out / 'import.json'})",
        "languages: en 1 (1 detected by py3langid 0.4.0 among 31 languages, lowest confidence "
        "0.986 (5a8b57f25542995d1e6f9999), 1 under 0.99)",
        "paragraphs: not kept apart, chunks may cross paragraph boundaries; each sentence's "
        f"paragraph is in {out / 'paragraphs.parquet'}"]
    lines = [{"id": "q1", "question": "Which?", "conditions": ["s1"],
              "sentences": [{"id": "s1", "text": "One."}]}]
    source, generic, ran = _generic(tmp_path / "generic", lines)
    assert ran.stdout == f"1 case written to {generic}\nlanguages: en 1 (--lang)\n"
