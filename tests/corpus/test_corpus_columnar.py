"""Columnar corpus folders (docs/corpus.md): the same cases as TOML give the same frames and
retrieval; every malformed table is refused in one line naming the file, the row and the value,
before anything is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.corpora import TOML_CORPUS, columnar, write

from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.columns import RESERVED_COLUMNS
from fragbench.corpus.cases import (
    Case,
    cases_frame,
    facts_frame,
    load_case,
    load_corpus,
    questions_frame,
    sentences_frame,
)
from fragbench.corpus.columnar import CORE_COLUMNS, reserved_group_keys
from fragbench.corpus.ids import CASE_ID, CASE_ID_PATTERN, FACT_ID, FACT_ID_PATTERN
from fragbench.errors import EXIT_REFUSED, CorpusError
from fragbench.retrieval.passages import retrieve
from fragbench.schemas import TYPES


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_same_cases_give_the_same_frames_and_retrieval(toml_cases: list[Case], tmp_path: Path,
                                                       fmt: str) -> None:
    folder = write(tmp_path / "c", *columnar(toml_cases), fmt=fmt)
    loaded = load_corpus([folder])
    assert [c.id for c in loaded] == [c.id for c in toml_cases]
    for a, b in zip(loaded, toml_cases, strict=True):
        assert (a.conditions, a.variants, a.langs, a.license) == \
            (b.conditions, b.variants, b.langs, b.license)
        assert a.frames is not None and b.frames is None
    assert loaded[0].groups == {"topic": "delay", "size": "large"}
    for frame in (sentences_frame, facts_frame, questions_frame):
        for langs in (None, ["fr"]):
            assert frame(loaded, langs).equals(frame(toml_cases, langs)), frame.__name__
    # A subset, in another order, mixed with TOML cases: still one row set, in that order.
    mixed = [loaded[2], toml_cases[0], loaded[1]]
    expected = [toml_cases[2], toml_cases[0], toml_cases[1]]
    assert sentences_frame(mixed).equals(sentences_frame(expected))
    settings = [(2, 1), (2, 2), (3, 1), (3, 2)]
    assert retrieve(loaded, SentenceGroups(), SqrtLexical(), settings).equals(
        retrieve(toml_cases, SentenceGroups(), SqrtLexical(), settings))


def test_case_ids_are_unique_across_folders_and_files(toml_cases: list[Case],
                                                      tmp_path: Path) -> None:
    folder = write(tmp_path / "c", *columnar(toml_cases[:1]))
    with pytest.raises(CorpusError, match="case id 'delay' is also used by"):
        load_corpus([folder, TOML_CORPUS])


def test_reserved_group_keys_cover_every_table_column() -> None:
    columns = {c for table in TYPES.values() for c in table}
    assert columns <= reserved_group_keys(), sorted(columns - reserved_group_keys())
    assert {"answer", "n_conditions", "question"} <= reserved_group_keys()


def test_reserved_columns_are_exactly_the_documented_tables_columns() -> None:
    """`columns.RESERVED_COLUMNS` is written out so that the corpus need not import `schemas`
    (issue 25: that one import tied nine modules in a circle): it must be TYPES' columns, no
    more (a group key refused for nothing) and no fewer (a column a group key would shadow)."""
    columns = {c for table in TYPES.values() for c in table}
    assert columns == RESERVED_COLUMNS, (sorted(columns - RESERVED_COLUMNS),
                                         sorted(RESERVED_COLUMNS - columns))
    assert reserved_group_keys() == CORE_COLUMNS | columns


Mutation = Callable[[pl.DataFrame, pl.DataFrame], tuple[pl.DataFrame, pl.DataFrame]]


def _set(frame: pl.DataFrame, row: int, column: str, value: object) -> pl.DataFrame:
    rows = frame.to_dicts()
    rows[row][column] = value
    return pl.DataFrame(rows, schema=frame.schema)


def _variant(row: dict, name: str, order: list[str]) -> dict:
    return {**row, "variants": {**row["variants"], name: order}}


def _first_case(cases: pl.DataFrame, change: Callable[[dict], dict]) -> pl.DataFrame:
    rows = cases.to_dicts()
    rows[0] = change(rows[0])
    return pl.DataFrame(rows, schema=cases.schema)


MUTATIONS: dict[str, tuple[Mutation, str, str]] = {
    "case row twice": (lambda c, s: (pl.concat([c, c.head(1)]), s), "cases",
                       "row 7: case \"delay\" [en] has two rows"),
    "fact twice": (lambda c, s: (c, pl.concat([s, s.head(1)])), "sentences",
                   "row 37: fact \"F1\" of case \"delay\" [en] is repeated"),
    "condition no fact": (
        lambda c, s: (c.with_columns(pl.col("conditions").list.concat(pl.lit(["F9"]))), s),
        "cases", "row 1: conditions names \"F9\", which is no fact of case \"delay\""),
    "condition twice": (
        lambda c, s: (c.with_columns(pl.col("conditions").list.concat(pl.lit(["F2"]))), s),
        "cases", "row 1: conditions repeats \"F2\""),
    "no condition": (
        lambda c, s: (c.with_columns(pl.lit([], pl.List(pl.String)).alias("conditions")), s),
        "cases", "row 1: conditions is empty"),
    "variant not a permutation": (
        lambda c, s: (_first_case(c, lambda r: _variant(r, "A", r["variants"]["A"][:-1])), s),
        "cases", "row 1: variant A of case \"delay\" is not a permutation"),
    "variant repeats": (
        lambda c, s: (_first_case(c, lambda r: _variant(
            r, "B", r["variants"]["B"][:-1] + r["variants"]["B"][:1])), s),
        "cases", "row 1: variant B repeats \"F3\""),
    "variant names a stranger": (
        lambda c, s: (_first_case(c, lambda r: _variant(
            r, "B", [*r["variants"]["B"][:-1], "F9"])), s),
        "cases", "row 1: variant B of case \"delay\" is not a permutation"),
    "empty text": (lambda c, s: (c, _set(s, 3, "text", "   ")), "sentences",
                   "row 4: text is empty (\"   \")"),
    "null question": (lambda c, s: (_set(c, 2, "question", None), s), "cases",
                      "row 3: question is missing (null)"),
    "text not strings": (lambda c, s: (c, s.with_columns(pl.lit(1).alias("text"))),
                         "sentences", "column text holds Int32, not strings"),
    "unknown column": (lambda c, s: (c.with_columns(pl.lit("x").alias("licence")), s), "cases",
                       "has the unknown column 'licence'"),
    "missing column": (lambda c, s: (c.drop("source"), s), "cases",
                       "lacks the column(s) source"),
    "sentences of no case": (
        lambda c, s: (c.filter(pl.col("case") != "hosting"), s), "sentences",
        "row 13: case \"hosting\" [en] has no row in cases.parquet"),
    "case with no sentence": (
        lambda c, s: (c, s.filter((pl.col("case") != "delay") | (pl.col("lang") != "fr"))),
        "cases", "row 2: case \"delay\" [fr] has no sentence in sentences.parquet"),
    "fact in one language only": (
        lambda c, s: (c, _set(s, 7, "fact_id", "F7")), "sentences",
        "row 8: case \"delay\" [fr] has the fact \"F7\" that its first language lacks"),
    "fact missing in one language": (
        lambda c, s: (c, s.filter(~((pl.col("case") == "price") & (pl.col("lang") == "fr")
                                    & (pl.col("fact_id") == "F6")))),
        "cases", "row 6: case \"price\" [fr] lacks facts that its other languages have"),
    "conditions differ by language": (
        lambda c, s: (_set(c, 1, "conditions", ["F2"]), s), "cases",
        "row 2: conditions of case \"delay\" [fr] ([\"F2\"]) differs from its first "
        "language's"),
    "group key reserved": (
        lambda c, s: (c.with_columns(pl.col("groups").struct.rename_fields(["lang", "size"])),
                      s), "cases", "group key \"lang\" must match"),
    "group key a series column": (
        lambda c, s: (c.with_columns(pl.col("groups").struct.rename_fields(["answer", "size"])),
                      s), "cases", "group key \"answer\" must match"),
    "group key not lowercase": (
        lambda c, s: (c.with_columns(pl.col("groups").struct.rename_fields(["Topic", "size"])),
                      s), "cases", "group key \"Topic\" must match"),
    "case ID with a path and a newline": (
        lambda c, s: (_set(c, 0, "case", "q 1/../x\ny"), s), "cases",
        "row 1: case \"q 1/../x\\ny\" must be 1 to 128 letters, digits"),
    "case ID in sentences only": (
        lambda c, s: (c, _set(s, 2, "case", "delay\u2028")), "sentences",
        "row 3: case \"delay\\u2028\" must be 1 to 128 letters"),
    "fact ID with a NUL": (
        lambda c, s: (c, _set(s, 0, "fact_id", "s\x00 1")), "sentences",
        "row 1: fact_id \"s\\u0000 1\" must be 1 to 128 characters without control"),
    "fact ID with a bracket": (
        lambda c, s: (c, _set(s, 4, "fact_id", "F5] [F1")), "sentences",
        "row 5: fact_id \"F5] [F1\" must be"),
    "fact ID with a space at its end": (
        lambda c, s: (c, _set(s, 1, "fact_id", "F2\u3000")), "sentences",
        "row 2: fact_id \"F2\u3000\" must be"),
    "fact ID with a line separator": (
        lambda c, s: (c, _set(s, 1, "fact_id", "F\u20282")), "sentences",
        "row 2: fact_id \"F\\u20282\" must be"),
    "group value empty": (
        lambda c, s: (_first_case(c, lambda r: {**r, "groups": {**r["groups"], "size": ""}}), s),
        "cases", "row 1: groups.size is empty"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_malformed_tables_are_refused_in_one_line(toml_cases: list[Case], tmp_path: Path,
                                                  name: str) -> None:
    mutate, file, said = MUTATIONS[name]
    folder = write(tmp_path / "c", *mutate(*columnar(toml_cases)))
    with pytest.raises(CorpusError) as caught:
        load_corpus([folder])
    message = str(caught.value)
    assert message.startswith(f"{folder / file}.parquet: "), message
    assert said in message, message
    assert not set(message) & {"\n", "\r", "\x00", "\u2028", "\x85"}, repr(message)


def test_the_cli_refuses_a_malformed_folder_writing_nothing(toml_cases: list[Case],
                                                            tmp_path: Path) -> None:
    cases, sentences = columnar(toml_cases)
    folder = write(tmp_path / "c", cases, _set(sentences, 3, "text", ""))
    out = tmp_path / "r.parquet"
    ran = run_cli("retrieve", str(folder), "--out", str(out))
    assert ran.returncode == EXIT_REFUSED
    lines = error_lines(ran.stderr)
    assert len(lines) == 1 and "sentences.parquet: row 4: text is empty" in lines[0], lines
    assert not out.exists()


def _jsonl_lines(folder: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (folder / name).read_text().splitlines()]


def _rewrite(folder: Path, name: str, rows: list[object]) -> None:
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.mark.parametrize(("change", "said"), [
    (lambda rows: rows.__setitem__(2, {**rows[2], "question": 3}),
     "cases.jsonl: row 3: question is 3, not a string"),
    (lambda rows: rows.__setitem__(0, {**rows[0], "conditions": ["F2", 5]}),
     "cases.jsonl: row 1: conditions is [\"F2\", 5], not a list of strings"),
    (lambda rows: rows.__setitem__(0, {**rows[0], "groups": {"topic": True, "size": "s"}}),
     "cases.jsonl: row 1: groups is"),
    (lambda rows: rows.__setitem__(1, [1, 2]), "cases.jsonl: row 2 is [1, 2], not a JSON object"),
    (lambda rows: rows.__setitem__(1, {k: v for k, v in rows[1].items() if k != "license"}),
     "cases.jsonl: row 2 lacks license"),
])
def test_jsonl_types_are_strict(toml_cases: list[Case], tmp_path: Path,
                                change: Callable[[list], None], said: str) -> None:
    folder = write(tmp_path / "c", *columnar(toml_cases), fmt="jsonl")
    rows: list = _jsonl_lines(folder, "cases.jsonl")
    change(rows)
    _rewrite(folder, "cases.jsonl", rows)
    with pytest.raises(CorpusError, match="^" + str(folder).replace("\\", "\\\\")) as caught:
        load_corpus([folder])
    assert said in str(caught.value), caught.value


def test_jsonl_lines_that_are_not_json_are_named(toml_cases: list[Case],
                                                 tmp_path: Path) -> None:
    folder = write(tmp_path / "c", *columnar(toml_cases), fmt="jsonl")
    text = (folder / "sentences.jsonl").read_text().splitlines()
    text[4] = text[4][:-1]
    (folder / "sentences.jsonl").write_text("\n".join(text) + "\n")
    with pytest.raises(CorpusError, match=r"sentences.jsonl: line 5 is not one JSON value"):
        load_corpus([folder])
    text[4] = "[" * 100_000
    (folder / "sentences.jsonl").write_text("\n".join(text) + "\n")
    with pytest.raises(CorpusError, match=r"sentences.jsonl: line 5 is not one JSON value"):
        load_corpus([folder])


def test_a_folder_holds_one_whole_format(toml_cases: list[Case], tmp_path: Path) -> None:
    folder = write(tmp_path / "c", *columnar(toml_cases))
    write(folder, *columnar(toml_cases), fmt="jsonl")
    with pytest.raises(CorpusError, match=r"holds both cases.parquet"):
        load_corpus([folder])
    half = write(tmp_path / "h", *columnar(toml_cases))
    (half / "sentences.parquet").unlink()
    with pytest.raises(CorpusError, match=r"lacks sentences.parquet"):
        load_corpus([half])
    damaged = write(tmp_path / "d", *columnar(toml_cases))
    (damaged / "cases.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(CorpusError, match=r"cases.parquet: is not a readable Parquet file"):
        load_corpus([damaged])


def test_any_error_reading_a_parquet_corpus_is_one_line_naming_the_file(
        toml_cases: list[Case], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review finding 8: an error Polars raises on damaged bytes that `tables.PARQUET_ERRORS`
    does not list (a type a later Polars adds; a ValueError here) is still one line naming
    the file and the error's type, never a traceback. The fault is injected: no bytes are
    known that make this Polars raise such a type."""
    folder = write(tmp_path / "c", *columnar(toml_cases))

    def unlisted(*args: object, **kwargs: object) -> pl.DataFrame:
        raise ValueError("an error type Polars may raise on damaged bytes")

    monkeypatch.setattr(pl, "read_parquet", unlisted)
    with pytest.raises(CorpusError) as caught:
        load_corpus([folder])
    message = str(caught.value)
    assert message.startswith(f"{folder / 'cases.parquet'}: is not a readable Parquet file "
                              "(ValueError); fix the corpus file"), message
    assert "\n" not in message


def test_id_rules_read_alike_in_python_and_polars() -> None:
    """One rule, two engines: Python's `re` (TOML cases, the importers) and Polars' (columnar
    folders) accept exactly the same IDs."""
    values = ["F1", "Scott_Derrickson-a6f7cf-0", "a b", "é", "x" * 128, "x" * 129, "", " F1",
              "F1 ", "F1\t", "F\x001", "F\x1c1", "F\x7f", "F\x85", "F\u2028", "F\u2029",
              "[F1]", "F]", "\u00a0F", "F\u3000", "F\u2009", "F\u200b", "q 1/../x\ny",
              "a.b_c-d", ".a", "-a", "a/b"]
    frame = pl.DataFrame({"v": values})
    for rule, pattern in ((FACT_ID, FACT_ID_PATTERN), (CASE_ID, CASE_ID_PATTERN)):
        polars = frame["v"].str.contains(f"^(?:{pattern})$").to_list()
        assert polars == [rule.fullmatch(v) is not None for v in values], pattern
    accepted = [v for v in values if FACT_ID.fullmatch(v)]
    assert accepted == ["F1", "Scott_Derrickson-a6f7cf-0", "a b", "é", "x" * 128, "F\u200b",
                        "a.b_c-d", ".a", "-a", "a/b"]
    assert [v for v in values if CASE_ID.fullmatch(v)] == [
        "F1", "Scott_Derrickson-a6f7cf-0", "x" * 128, "a.b_c-d"]


@pytest.mark.parametrize(("old", "new", "said"), [
    pytest.param('id = "delay"', 'id = "q 1/../x"', 'id "q 1/../x" must be 1 to 128 letters',
                 id="case-path"),
    pytest.param("facts.F1 =", 'facts."F\\u0000 1" =',
                 '[en] fact ID "F\\u0000 1" must be 1 to 128 characters', id="fact-nul"),
    pytest.param("facts.F1 =", 'facts."[F1]" =', '[en] fact ID "[F1]" must be',
                 id="fact-brackets"),
])
def test_toml_cases_follow_the_same_id_rules(tmp_path: Path, old: str, new: str,
                                             said: str) -> None:
    path = tmp_path / "delay.toml"
    path.write_text((TOML_CORPUS / "delay.toml").read_text(encoding="utf-8").replace(old, new, 1),
                    encoding="utf-8")
    with pytest.raises(CorpusError) as caught:
        load_case(path)
    assert str(caught.value).startswith(f"{path}: {said}"), caught.value


SEPARATORS = "A\u2028B\u2029C\x85D\x1cE\x1dF\x1eG"
"""What `str.splitlines` breaks at, besides \\n and \\r: a JSON string may hold the first three
raw (Polars' write_ndjson writes them so)."""


def test_jsonl_lines_end_at_newline_only(toml_cases: list[Case], tmp_path: Path) -> None:
    cases, sentences = columnar(toml_cases)
    sentences = _set(sentences, 0, "text", SEPARATORS)
    folder = write(tmp_path / "c", _set(cases, 0, "question", f"Q{SEPARATORS}?"), sentences,
                   fmt="jsonl")
    assert "\u2028".encode() in (folder / "sentences.jsonl").read_bytes()  # written raw
    loaded = load_corpus([folder])
    assert loaded[0].langs["en"].facts["F1"] == SEPARATORS
    assert loaded[0].langs["en"].question == f"Q{SEPARATORS}?"
    # CRLF line ends read alike.
    for name in ("cases.jsonl", "sentences.jsonl"):
        raw = (folder / name).read_bytes()
        (folder / name).write_bytes(raw.replace(b"\n", b"\r\n"))
    assert [c.langs for c in load_corpus([folder])] == [c.langs for c in loaded]

    # Faults are named by their line, counted at "\n" only (line 1 holds U+2028 raw).
    lines = (folder / "sentences.jsonl").read_bytes().split(b"\r\n")
    lines[4] = lines[4][:-1]
    (folder / "sentences.jsonl").write_bytes(b"\n".join(lines))
    with pytest.raises(CorpusError, match=r"sentences.jsonl: line 5 is not one JSON value"):
        load_corpus([folder])
    lines[4] = b'{"case": "delay", "lang": "en", "fact_id": "F5", "text": "\xff"}'
    (folder / "sentences.jsonl").write_bytes(b"\n".join(lines))
    with pytest.raises(CorpusError, match=r"sentences.jsonl: line 5 is not UTF-8 text"):
        load_corpus([folder])
    rows = [json.loads(line) for line in (folder / "cases.jsonl").read_bytes().splitlines()]
    rows[2]["license"] = 4
    (folder / "cases.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"cases.jsonl: row 3: license is 4, not a string"):
        load_corpus([folder])


def test_groups_of_two_folders_are_merged(toml_cases: list[Case], tmp_path: Path) -> None:
    """Folders with different group keys: every key is a column of the series' cases.parquet
    (first seen first); a case without a key, such as a TOML case, holds null there."""
    cases, sentences = columnar(toml_cases[:1])
    first = write(tmp_path / "a", cases, sentences)
    cases, sentences = columnar(toml_cases[1:2])
    other = cases.with_columns(pl.struct(pl.lit("hard").alias("level"),
                                         pl.lit("x").alias("topic")).alias("groups"))
    second = write(tmp_path / "b", other, sentences)
    loaded = load_corpus([first, second, TOML_CORPUS / "price.toml"])
    frame = cases_frame(loaded)
    assert frame is not None
    assert frame.columns == ["case", "topic", "size", "level"]
    assert frame.rows() == [("delay", "delay", "large", None), ("hosting", "x", None, "hard"),
                            ("price", None, None, None)]
    assert cases_frame(load_corpus([TOML_CORPUS])) is None
