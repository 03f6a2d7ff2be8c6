"""Issue 24, item 10: one-line messages that said the wrong thing, each written from what the
user must learn from it.

- A config value of the wrong type names what it is, the type that belongs there and how to
  write it (`repetitions is a string ("3"); write a whole number: repetitions = 3`).
- A prompt template with a placeholder fragbench does not fill names it and lists the valid
  ones.
- A Parquet file that Polars cannot read (not Parquet, or damaged past its footer) is named,
  with "is not a readable Parquet file" and Polars' reason, by every reader of one: a
  collection's sentences and queries, a corpus folder, a series' tables (measure, report,
  compare, compare --html, export). Nothing is written.

Every command runs through the real CLI (Typer's runner) on copies of the committed files.
"""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.corpora import columnar, write

from fragbench.corpus.cases import Case, load_corpus
from fragbench.errors import CorpusError
from fragbench.experiment.config import placeholder_problem, type_mismatch


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


# -- A config value of the wrong type ------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "said"), [
    ("repetitions = 3", 'repetitions = "3"',
     'repetitions is a string ("3"); write a whole number: repetitions = 3'),
    ("repetitions = 3", "repetitions = 3.0",
     "repetitions is a number with a point (3.0); write a whole number: repetitions = 3"),
    ("repetitions = 3", "repetitions = true",
     "repetitions is a boolean (true); write a whole number, for example repetitions = 3"),
    ('languages = ["en", "fr"]', 'languages = "en"',
     'languages is a string ("en"); write a list: languages = ["en"]'),
    ('title = "Fragment retrieval experiment, protocol 1.0"', "title = 10",
     'title is a whole number (10); write a string: title = "10"'),
    ("chunk_size = 3", 'chunk_size = "three"',
     'retrieval.chunk_size is a string ("three"); write a whole number, for example '
     "chunk_size = 3"),
    ("max_output_tokens = 1200", 'max_output_tokens = "1200"',  # a backend's parameter
     'max_output_tokens is a string ("1200"); write a whole number: max_output_tokens = 1200'),
    ("timeout_seconds = 600", "timeout_seconds = [600]",
     "timeout_seconds is a list; write a number, for example timeout_seconds = 3"),
])
def test_a_value_of_the_wrong_type_names_the_type_that_belongs(
        experiment: Path, old: str, new: str, said: str) -> None:
    config = experiment / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert text.count(old) == 1
    config.write_text(text.replace(old, new), encoding="utf-8")
    before = files_of(experiment)
    result = run_cli("freeze", str(experiment))
    assert result.returncode == 4, result
    [line] = error_lines(result.stderr)
    assert line.startswith(f"fragbench: {config}: ") and said in line, line
    assert files_of(experiment) == before  # experiment.json not rewritten


WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
         list: "a list", dict: "a table", datetime.date: "a date"}
VALUES = [True, 3, 2.5, "x", ["x"], {"x": 1}, datetime.date(2026, 10, 8),
          datetime.datetime(2026, 10, 8, 9, 0)]


@pytest.mark.parametrize("kind", list(WORDS))
def test_every_mismatch_says_what_it_is_and_what_belongs(kind: type) -> None:
    """Every TOML value against every type a config reads: the words name what the value is
    (never a Python name such as `str`) and what belongs there, then how to write it."""
    nouns = {bool: "a boolean", int: "a whole number", float: "a number with a point",
             str: "a string", list: "a list", dict: "a table",
             datetime.datetime: "a date and time", datetime.date: "a date"}
    for value in VALUES:
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) \
                and not (kind is datetime.date and isinstance(value, datetime.datetime)):
            continue  # of the right type: no mismatch
        words = type_mismatch("section.key", value, kind)
        noun = next(n for t, n in nouns.items() if type(value) is t)
        assert words.startswith(f"is {noun}"), words
        assert f"; write {WORDS[kind]}" in words, words
        assert "key =" in words or "[section.key]" in words, words
        for python_name in ("str)", "int)", "float)", "bool)", "(list", "(dict"):
            assert python_name not in words, words


def test_a_long_or_hostile_value_is_shown_short_and_escaped() -> None:
    words = type_mismatch("repetitions", "\u202e\x1b[31m" + "9" * 500, int)
    assert "\x1b" not in words and "\u202e" not in words and len(words) < 160, words


# -- A prompt placeholder ------------------------------------------------------------------------

def test_an_unknown_placeholder_lists_the_valid_ones(experiment: Path) -> None:
    prompt = experiment / "prompts" / "en.toml"
    text = prompt.read_text(encoding="utf-8")
    for old, new, said in (
            ("{question}", "{questoin}",
             "input has the placeholder '{questoin}', which fragbench does not fill; the "
             "placeholders it may hold are {source}, {question}, {sentences} (write {{ or }} "
             "for a brace)"),
            ("[{id}] {text}", "[{id}] {sentence}",
             "sentence has the placeholder '{sentence}', which fragbench does not fill; the "
             "placeholders it may hold are {id}, {text}"),
            ("{question}", "{question.upper}", "input has the placeholder '{question.upper}'"),
            ("{question}", "{}", "input has the placeholder '{}'"),
            ("{question}", "{question", "input has a malformed placeholder (unmatched '{' in "
             "format spec); the placeholders it may hold are {source}, {question}, "
             "{sentences}")):
        prompt.write_text(text.replace(old, new, 1), encoding="utf-8")
        result = run_cli("freeze", str(experiment))
        assert result.returncode == 4, result
        [line] = error_lines(result.stderr)
        assert f"{prompt}: {said}" in line, line
    prompt.write_text(text.replace("{question}", "{question} {{literal}}", 1), encoding="utf-8")
    assert run_cli("freeze", str(experiment)).returncode == 0  # a doubled brace is a brace


def test_placeholder_rule_in_words() -> None:
    fields = ("id", "text")
    assert placeholder_problem("[{id}] {text:>20}", fields) is None  # a format spec is fine
    assert "format spec" in (placeholder_problem("{id:>{text}}", fields) or "")
    assert "'{0}'" in (placeholder_problem("{0}", fields) or "")


# -- A Parquet file that cannot be read ----------------------------------------------------------

def not_parquet(path: Path) -> None:
    path.write_bytes(b"these bytes are not a Parquet file\n")


def damaged(path: Path) -> None:
    """The first data page overwritten: the footer (schema) still reads, the data does not."""
    raw = bytearray(path.read_bytes())
    raw[8:60] = b"\xff" * 52
    path.write_bytes(bytes(raw))


HARMS = {"not Parquet": not_parquet, "damaged data": damaged}


def assert_named(result: object, path: Path, fix: str) -> None:
    assert result.returncode in (2, 4), result  # type: ignore[attr-defined]
    [line] = error_lines(result.stderr)  # type: ignore[attr-defined]
    assert f"{path}: " in line and "is not a readable Parquet file (parquet: " in line, line
    assert fix in line and "ComputeError" not in line, line


@pytest.mark.parametrize("harm", list(HARMS))
@pytest.mark.parametrize("which", ["--collection", "--queries"])
def test_a_collection_input_that_is_not_readable_parquet(tmp_path: Path, harm: str,
                                                         which: str) -> None:
    sentences, queries = tmp_path / "s.parquet", tmp_path / "q.parquet"
    pl.DataFrame({"passage": ["p"] * 40, "position": range(40), "lang": ["en"] * 40,
                  "text": [f"word{i} refund" for i in range(40)]}).write_parquet(sentences)
    pl.DataFrame({"query": ["q"], "lang": ["en"], "text": ["refund"]}).write_parquet(queries)
    target = sentences if which == "--collection" else queries
    HARMS[harm](target)
    out = tmp_path / "r.parquet"
    result = run_cli("retrieve", "--collection", str(sentences), "--queries", str(queries),
                     "--chunk-size", "2", "--top-k", "1", "--out", str(out))
    assert_named(result, target, "check that it is the file you meant, or write it again")
    assert error_lines(result.stderr)[0].startswith(f"fragbench: {which} {target}: ")
    assert not out.exists()


def test_a_corpus_folder_whose_table_is_not_parquet(toml_cases: list[Case],
                                                    tmp_path: Path) -> None:
    for harm in HARMS.values():
        folder = write(tmp_path / harm.__name__, *columnar(toml_cases))
        harm(folder / "sentences.parquet")
        with pytest.raises(CorpusError) as caught:
            load_corpus([folder])
        message = str(caught.value)
        assert message.startswith(f"{folder / 'sentences.parquet'}: is not a readable Parquet "
                                  "file (parquet: "), message
        assert "ComputeError" not in message and "fix the corpus file" in message


@pytest.mark.parametrize("harm", list(HARMS))
@pytest.mark.parametrize(("table", "command"), [
    ("calls", "report"), ("calls", "compare"), ("calls", "compare --html"),
    ("calls", "export"), ("citations_per_call", "compare"), ("citations", "compare --html"),
    ("facts", "measure"), ("facts", "export"), ("retrieval", "measure"),
])
def test_a_series_table_that_is_not_readable_parquet(extractive: Path, tmp_path: Path,
                                                     harm: str, table: str,
                                                     command: str) -> None:
    """Each reader of a series' table names the file, says it is not a readable Parquet file,
    and says what to do: rebuild a measure's table with `fragbench measure`; restore a table
    `run` recorded (facts, retrieval), which nothing rebuilds."""
    other = extractive.parent / "again"
    shutil.copytree(extractive, other)
    path = extractive / f"{table}.parquet"
    HARMS[harm](path)
    out = tmp_path / "written"
    args = {"report": ["report", str(extractive)],
            "compare": ["compare", str(extractive), str(other), "--out", str(out / "c.csv")],
            "compare --html": ["compare", str(extractive), str(other), "--html",
                               str(out / "c.html")],
            "export": ["export", str(extractive), "--format", "csv", "--out", str(out)],
            "measure": ["measure", str(extractive)]}[command]
    before = files_of(extractive)
    result = run_cli(*args)
    fix = ("restore it from a backup" if table in ("facts", "retrieval")
           else f"rebuild it with `fragbench measure {extractive}`")
    assert_named(result, path, fix)
    assert files_of(extractive) == before and not out.exists()
