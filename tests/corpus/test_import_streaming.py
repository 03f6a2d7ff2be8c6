"""Issue 26, streaming import (docs/corpus.md#importing): `import hotpotqa` and `import jsonl`
read their input as a stream and write the corpus in batches, giving the tables the whole-file
import gave; each question's language is given (`--lang`, a line's `lang`) or detected
(py3langid), an unsure one refused or, with `--fallback-lang`, counted; HotpotQA's paragraphs
are said (`paragraphs.parquet`, import.json, the summary); a refusal at any batch writes
nothing. The 540 MB scale is benchmarks/bench_import.py --scale's (benchmarks/RESULTS.md)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.hotpotqa_data import FIXTURE, generate, write

from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import load_corpus
from fragbench.corpus.importers import write as corpus_write
from fragbench.corpus.importers.hotpotqa import fact_id
from fragbench.errors import EXIT_REFUSED, EXIT_USAGE
from fragbench.retrieval.passages import retrieve

OLD_JSONL = {
    # sha256 of `import hotpotqa --format jsonl`'s files from the whole-file importer (commit
    # 2750855, which read the file with one json.loads and wrote each table at once).
    "fixture": ("ee3863e42915364075cc207e52ee0c69f4ac545998b1d7ee6e72b9dddaf26b88",
                "ab888396042a56b9bc81c52b26c38b3d514b316b61ac1054d6c69dd69191b622"),
    "generated": ("2da40a6c1544114804b35fa37bdb4f95f120f4c2527733ed28970b14e11c90c4",
                  "145c9f9856e133a6255f883e45e2975beaee3cdc8c18d1fb9c7e09efa1084e3e"),
}

FRENCH = {
    "_id": "fr-louvre", "answer": "Paris",
    "question": "Dans quelle ville se trouve le musée où est exposée la Joconde ?",
    "supporting_facts": [["La Joconde", 1], ["Musée du Louvre", 1]],
    "context": [
        ["Musée du Louvre", ["Le musée du Louvre est le plus grand musée d'art du monde.",
                             " Il se trouve à Paris, sur la rive droite de la Seine."]],
        ["La Joconde", ["La Joconde est un tableau de Léonard de Vinci.",
                        " Elle est exposée au musée du Louvre depuis 1797."]],
    ],
    "type": "bridge", "level": "easy",
}
ARABIC = {
    "_id": "ar-azhar", "answer": "القاهرة",
    "question": "في أي مدينة يقع الجامع الأزهر؟",
    "supporting_facts": [["الجامع الأزهر", 1]],
    "context": [
        ["الجامع الأزهر", ["الجامع الأزهر هو أحد أقدم المساجد في مصر.",
                           " يقع في مدينة القاهرة القديمة."]],
        ["القاهرة", ["القاهرة هي عاصمة جمهورية مصر العربية.",
                     " وهي أكبر مدينة في العالم العربي."]],
    ],
    "type": "bridge", "level": "medium",
}
VAGUE = {"_id": "vague", "answer": "no", "question": "Who?",
         "supporting_facts": [["Someone", 0]], "context": [["Someone", ["Someone."]]],
         "type": "bridge", "level": "hard"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hotpot(tmp_path: Path, questions: list, *extra: str, name: str = "corpus"):
    source = write(tmp_path / f"{name}.json", questions)
    out = tmp_path / "out" / name
    return source, out, run_cli("import", "hotpotqa", str(source), "--out", str(out), *extra)


def _manifest(out: Path) -> dict:
    return json.loads((out / "import.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["fixture", "generated"])
def test_batches_give_the_whole_file_imports_tables(tmp_path: Path, name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Written 7 cases a part (43 parts for 300 questions), the corpus files are the bytes the
    whole-file importer wrote: JSON lines against its recorded sha256, Parquet the very frame
    written at once (`write_parquet`, as it did)."""
    monkeypatch.setattr(corpus_write, "BATCH_CASES", 7)
    questions = FIXTURE if name == "fixture" else generate(300)
    _, jsonl, ran = _hotpot(tmp_path, questions, "--format", "jsonl", name="jsonl")
    assert ran.returncode == 0, ran.stderr
    assert (_sha(jsonl / "cases.jsonl"), _sha(jsonl / "sentences.jsonl")) == OLD_JSONL[name]
    progress = [line for line in ran.stderr.splitlines() if line.startswith("import: ")]
    assert len(progress) == -(-len(load_corpus([jsonl])) // 7)  # one line a part written

    _, parquet, ran = _hotpot(tmp_path, questions, name="parquet")
    assert ran.returncode == 0, ran.stderr
    for table in ("cases", "sentences"):
        frame = pl.read_parquet(parquet / f"{table}.parquet")
        assert frame.equals(pl.read_ndjson(jsonl / f"{table}.jsonl", schema=frame.schema))
        frame.write_parquet(tmp_path / "whole.parquet")
        assert _sha(tmp_path / "whole.parquet") == _sha(parquet / f"{table}.parquet")


def test_the_input_is_never_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `read_bytes`, `read_text` or `json.loads` of the input: the HotpotQA file is parsed
    as a stream; a JSON-lines file is parsed a line at a time."""
    source = write(tmp_path / "in.json", FIXTURE)
    read_bytes, read_text = Path.read_bytes, Path.read_text

    def whole_bytes(self: Path) -> bytes:
        assert self != source, "the input was read whole"
        return read_bytes(self)

    def whole_text(self: Path, *args: object, **kwargs: object) -> str:
        assert self != source, "the input was read whole"
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_bytes", whole_bytes)
    monkeypatch.setattr(Path, "read_text", whole_text)
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("json.loads"))
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(tmp_path / "out"))
    assert ran.returncode == 0, ran.stderr
    monkeypatch.undo()
    assert _manifest(tmp_path / "out")["input_sha256"] == _sha(source)


def test_lang_gives_every_question_its_language(tmp_path: Path) -> None:
    _, out, ran = _hotpot(tmp_path, [*FIXTURE, VAGUE], "--lang", "fr")
    assert ran.returncode == 0, ran.stderr
    assert {lang for c in load_corpus([out]) for lang in c.langs} == {"fr"}
    assert _manifest(out)["languages"] == {"cases": {"fr": 4}, "given": "fr"}
    assert "languages: fr 4 (--lang)" in ran.stdout.splitlines()


def test_english_french_and_arabic_questions_are_detected(tmp_path: Path) -> None:
    """Without --lang each question gets its own language (the generated English data stays
    `en`, as the old import's fixed `en`); import.json says by what and how sure."""
    _, out, ran = _hotpot(tmp_path, [*FIXTURE, FRENCH, ARABIC, *generate(20)])
    assert ran.returncode == 0, ran.stderr
    langs = {c.id: next(iter(c.langs)) for c in load_corpus([out])}
    assert langs.pop("fr-louvre") == "fr" and langs.pop("ar-azhar") == "ar"
    assert set(langs.values()) == {"en"} and len(langs) == 23
    said = _manifest(out)["languages"]
    assert said["cases"] == {"ar": 1, "en": 23, "fr": 1}
    detected = said["detected"]
    assert detected["detector"].startswith("py3langid ") and detected["cases"] == 25
    assert "en" in detected["candidates"] and detected["threshold"] == 0.9
    assert 0.9 <= detected["lowest_confidence"] <= 1 and detected["unsure"] == []
    [line] = [x for x in ran.stdout.splitlines() if x.startswith("languages: ")]
    assert line.startswith("languages: en 23, ar 1, fr 1 (25 detected by py3langid")


def test_an_unsure_language_is_refused_or_given_the_fallback(tmp_path: Path) -> None:
    source, out, ran = _hotpot(tmp_path, [*FIXTURE, VAGUE])
    assert ran.returncode == EXIT_REFUSED
    [line] = error_lines(ran.stderr)
    assert line.startswith(f"fragbench: {source}: question 5 (vague): its language is unsure "
                           "(en 0."), line
    assert "pass --lang CODE" in line and "--fallback-lang CODE" in line
    assert not (tmp_path / "out").exists()

    _, out, ran = _hotpot(tmp_path, [*FIXTURE, VAGUE], "--fallback-lang", "en")
    assert ran.returncode == 0, ran.stderr
    detected = _manifest(out)["languages"]["detected"]
    assert detected["fallback"] == "en" and [u["question"] for u in detected["unsure"]] == \
        ["vague"]
    assert detected["lowest_question"] == "vague" and detected["lowest_confidence"] < 0.9
    assert "1 under 0.9 given --fallback-lang en" in ran.stdout


def test_detect_among_names_the_candidates(tmp_path: Path) -> None:
    _, out, ran = _hotpot(tmp_path, [FRENCH], "--detect-among", "en,de")
    assert ran.returncode == EXIT_REFUSED  # French is no candidate: unsure, not English
    assert "its language is unsure" in error_lines(ran.stderr)[0]
    _, out, ran = _hotpot(tmp_path, [FRENCH], "--detect-among", "en,fr")
    assert ran.returncode == 0, ran.stderr
    assert _manifest(out)["languages"]["detected"]["candidates"] == ["en", "fr"]


@pytest.mark.parametrize(("args", "said"), [
    (("--lang", "e n"), "--lang 'e n': not a language code"),
    (("--lang", "en", "--detect-among", "en,fr"), "--lang gives every question"),
    (("--detect-among", "en,xx"), "--detect-among: py3langid"),
    (("--fallback-lang", "../en"), "--fallback-lang '../en': not a language code"),
])
def test_language_options_are_checked_first(tmp_path: Path, args: tuple[str, ...],
                                            said: str) -> None:
    _, _, ran = _hotpot(tmp_path, FIXTURE, *args)
    assert ran.returncode == EXIT_USAGE
    [line] = error_lines(ran.stderr)
    assert said in line, line
    assert not (tmp_path / "out").exists()


def test_paragraphs_are_said_and_recorded(tmp_path: Path) -> None:
    """Chunks run across paragraphs (the passage is the sentences in order): import.json and
    the summary say so, and paragraphs.parquet gives each sentence's paragraph, joined on
    case and fact_id; here a chunk of two sentences does cross one."""
    _, out, ran = _hotpot(tmp_path, FIXTURE)
    assert ran.returncode == 0, ran.stderr
    assert "chunks may cross paragraph boundaries" in ran.stdout.splitlines()[-1]
    assert "may cross paragraph boundaries" in _manifest(out)["paragraphs"]
    paragraphs = pl.read_parquet(out / "paragraphs.parquet")
    sentences = pl.read_parquet(out / "sentences.parquet")
    assert paragraphs.columns == ["case", "fact_id", "paragraph", "paragraph_index",
                                  "sentence_index"]
    assert paragraphs.select("case", "fact_id").equals(sentences.select("case", "fact_id"))
    wood = paragraphs.filter(pl.col("fact_id") == fact_id("Ed Wood", 2)).row(0, named=True)
    assert (wood["paragraph"], wood["paragraph_index"], wood["sentence_index"]) == \
        ("Ed Wood", 1, 2)
    chunks = retrieve(load_corpus([out]), SentenceGroups(), SqrtLexical(), [(2, 9)])
    spans = (chunks.filter(pl.col("variant") == "A").select("case", "chunk", "fact_ids")
             .explode("fact_ids").rename({"fact_ids": "fact_id"})
             .join(paragraphs, on=["case", "fact_id"])
             .group_by("case", "chunk").agg(pl.col("paragraph").n_unique()))
    assert spans["paragraph"].max() == 2


def test_a_jsonl_lines_own_lang_wins_then_lang_then_detection(tmp_path: Path) -> None:
    def line(case: str, question: str, text: str, **more: str) -> dict:
        return {"id": case, "question": question, "conditions": ["a"],
                "sentences": [{"id": "a", "text": text}], **more}

    lines = [line("q1", "Wer?", "Jemand.", lang="de"),
             line("q2", "Où se trouve le musée du Louvre ?", "Le musée du Louvre se trouve à "
                  "Paris, sur la rive droite de la Seine, dans le premier arrondissement."),
             line("q3", "في أي مدينة يقع الجامع الأزهر؟", "يقع الجامع الأزهر في مدينة "
                  "القاهرة القديمة، وهو أحد أقدم المساجد في مصر.")]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                      encoding="utf-8")
    out = tmp_path / "detected"
    ran = run_cli("import", "jsonl", str(source), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    assert [next(iter(c.langs)) for c in load_corpus([out])] == ["de", "fr", "ar"]
    assert _manifest(out)["input_sha256"] == _sha(source)
    said = _manifest(out)["languages"]
    assert said["cases"] == {"ar": 1, "de": 1, "fr": 1} and said["from_lines"] == 1
    assert said["detected"]["cases"] == 2
    given = tmp_path / "given"
    ran = run_cli("import", "jsonl", str(source), "--out", str(given), "--lang", "es")
    assert ran.returncode == 0, ran.stderr
    assert [next(iter(c.langs)) for c in load_corpus([given])] == ["de", "es", "es"]
    assert "languages: es 2, de 1 (1 from their line's lang; --lang)" in ran.stdout


def _truncated(tmp_path: Path) -> Path:
    text = json.dumps(generate(40), ensure_ascii=False)
    source = tmp_path / "cut.json"
    source.write_text(text[: len(text) * 9 // 10], encoding="utf-8")
    return source


@pytest.mark.parametrize("damage", ["truncated", "not utf-8", "trailing", "duplicate late",
                                    "jsonl not utf-8", "jsonl bad late"])
def test_a_refusal_after_parts_were_written_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """Refused at question 36 or so, after parts of 7 cases were written: one line, exit 4, no
    --out, no temporary folder, and not the folders above --out that the import made."""
    monkeypatch.setattr(corpus_write, "BATCH_CASES", 7)
    questions = generate(40)
    kind = "hotpotqa"
    if damage == "truncated":
        source, said = _truncated(tmp_path), "is not JSON (parse error: premature EOF"
    elif damage == "not utf-8":
        raw = json.dumps(questions).encode()
        source = tmp_path / "bad.json"
        source.write_bytes(raw[:-2000] + b"\xff\xfe" + raw[-2000:])
        said = "is not UTF-8 text"
    elif damage == "trailing":
        source = tmp_path / "trail.json"
        source.write_text(json.dumps(questions) + " []", encoding="utf-8")
        said = "is not JSON (parse error: trailing garbage"
    elif damage == "duplicate late":
        questions[36]["_id"] = questions[2]["_id"]
        source = write(tmp_path / "dup.json", questions)
        said = f"question 37 ({questions[2]['_id']}): _id is also question 3's"
    else:
        kind = "jsonl"
        rows = [json.dumps({"id": f"q{n}", "question": "Which river?", "conditions": ["a"],
                            "sentences": [{"id": "a", "text": "The river."}]}).encode()
                for n in range(40)]
        if damage == "jsonl not utf-8":
            rows[35] = rows[35].replace(b"river.", b"riv\xe9r.")
            said = "line 36 is not UTF-8 text"
        else:
            rows[35] = rows[35][:-1]
            said = "line 36: is not one JSON value"
        source = tmp_path / "in.jsonl"
        source.write_bytes(b"\n".join(rows) + b"\n")
    out = tmp_path / "made" / "above" / "corpus"
    ran = run_cli("import", kind, str(source), "--out", str(out), "--lang", "en")
    assert ran.returncode == EXIT_REFUSED, ran.stdout
    [line] = error_lines(ran.stderr)
    assert line.startswith(f"fragbench: {source}: {said}"), line
    assert line.endswith("Nothing was written.")
    assert sum(1 for x in ran.stderr.splitlines() if x.startswith("import: ")) >= 4
    assert not (tmp_path / "made").exists()


def test_nesting_is_refused_before_it_costs_memory(tmp_path: Path) -> None:
    """ijson's own item builder keeps a path per level (2 GiB for 30,000 `[`): fragbench's
    stops at 64 levels, at once."""
    source = tmp_path / "deep.json"
    source.write_text("[" * 5_000_000, encoding="utf-8")
    ran = run_cli("import", "hotpotqa", str(source), "--out", str(tmp_path / "out"))
    assert ran.returncode == EXIT_REFUSED
    [line] = error_lines(ran.stderr)
    assert "is not JSON (nested too deep)" in line, line
