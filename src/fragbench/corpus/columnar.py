"""Columnar corpus folders: `cases.parquet` + `sentences.parquet` (or `cases.jsonl` +
`sentences.jsonl`), validated as strictly as the TOML cases (docs/corpus.md).

- `sentences`: one row per sentence: `case`, `lang`, `fact_id`, `text` (all strings). A case's
  facts, in a language, are its rows in file order.
- `cases`: one row per case x language: `case`, `lang`, `license`, `source`, `question`
  (strings), `conditions` (list of fact IDs), `variants` (a struct: variant name -> the fact
  IDs in passage order; a null field means the case has no such variant) and, optionally,
  `groups` (a struct: group key -> string value, such as HotpotQA's `type` and `level`).
  `license`, `conditions`, `variants` and `groups` are the case's: every language of a case
  repeats the same values.

Validation is whole-column Polars expressions (JSONL's types are checked per record first: the
JSON reader would turn a number into a string). Any fault stops loading with one line naming
the file, the row (1-based, as read: the line of a JSONL file, lines ending at "\n" only) and
the value. Case and fact IDs follow the rules of every corpus format (`fragbench.corpus.ids`).
Nothing is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import attrs
import polars as pl

from fragbench.columns import RESERVED_COLUMNS
from fragbench.corpus.ids import (
    CASE_ID_PATTERN,
    CASE_ID_RULE,
    FACT_ID_PATTERN,
    FACT_ID_RULE,
    shown,
)
from fragbench.errors import CorpusError
from fragbench.tables import PARQUET_ERRORS, parquet_problem

FORMATS = {"parquet": ("cases.parquet", "sentences.parquet"),
           "jsonl": ("cases.jsonl", "sentences.jsonl")}
SENTENCE_COLUMNS = ("case", "lang", "fact_id", "text")
CASE_COLUMNS = ("case", "lang", "license", "source", "question", "conditions", "variants")
OPTIONAL_CASE_COLUMNS = ("groups",)
GROUP_KEY = re.compile(r"[a-z][a-z0-9_]*")
CORE_COLUMNS = frozenset({"case", "lang", "variant", "mode", "rep", "seq", "call_id",
                          "fact_id", "position", "question", "source", "license", "conditions",
                          "variants", "groups", "is_condition"})
"""Column names of the corpus's own tables; `reserved_group_keys` adds every column of the
core's series tables."""


def reserved_group_keys() -> frozenset[str]:
    """Names no group key may take. Group keys become columns beside the core's (the series'
    `cases.parquet` is joined on `case` to its other tables), so none may be the name of a
    column of any table the core documents (`fragbench.columns.RESERVED_COLUMNS`, the columns
    of `fragbench.schemas.TYPES`)."""
    return CORE_COLUMNS | RESERVED_COLUMNS


def group_key_problem(key: str) -> str | None:
    """Why `key` cannot be a group key, in words that follow `group key KEY`; None when it can.
    The columnar corpus's rule, which the importers check line by line."""
    if GROUP_KEY.fullmatch(key) and key not in reserved_group_keys():
        return None
    return "must match [a-z][a-z0-9_]* and not be a column name of the core's tables"


STRINGS = pl.String
IDS = pl.List(pl.String)


@attrs.frozen
class Frames:
    """A loaded folder's validated tables, kept so that the frame paths of `fragbench.corpus.cases`
    (sentences, facts, questions) never loop over sentences in Python.

    facts: case, lang, fact_id, text, is_condition, _li (language's index in the case), _fi
    (fact's index in the language); orders: case, variant, position, fact_id, _vi (variant's
    index); questions: case, lang, question, _li; groups: case, then one String column per
    group key (no key: only `case`)."""

    facts: pl.DataFrame
    orders: pl.DataFrame
    questions: pl.DataFrame
    groups: pl.DataFrame


def corpus_format(folder: Path) -> str | None:
    """"parquet" or "jsonl" when the folder holds a columnar corpus; None when it holds none
    of its files. Half a corpus, or both formats at once, is refused."""
    found = {fmt: [(folder / name).is_file() for name in names] for fmt, names in FORMATS.items()}
    present = [fmt for fmt, has in found.items() if any(has)]
    if not present:
        return None
    if len(present) > 1:
        raise CorpusError(f"{folder}: holds both cases.parquet/sentences.parquet and "
                          "cases.jsonl/sentences.jsonl; keep one format in a corpus folder.")
    fmt = present[0]
    if not all(found[fmt]):
        missing = next(n for n, has in zip(FORMATS[fmt], found[fmt], strict=True) if not has)
        raise CorpusError(f"{folder}: lacks {missing}; a columnar corpus holds both "
                          f"{' and '.join(FORMATS[fmt])} (docs/corpus.md).")
    return fmt


def _fail(path: Path, message: str) -> CorpusError:
    return CorpusError(f"{path}: {message}; fix the corpus file and run again.")


# --- reading ----------------------------------------------------------------------------------

def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror})") from None


def _read_parquet(path: Path, raw: bytes) -> pl.DataFrame:
    try:
        return pl.read_parquet(io.BytesIO(raw))
    except PARQUET_ERRORS as exc:  # the bytes are in memory: a damaged file, never the disk
        raise _fail(path, parquet_problem(exc)) from None
    except Exception as exc:  # any other error Polars raises on damaged bytes
        # (a type PARQUET_ERRORS does not list, one a later Polars adds): still one line
        # naming the file, never a traceback.
        raise _fail(path, f"is not a readable Parquet file ({type(exc).__name__})") from None


class NotUtf8(ValueError):
    """A JSON-lines file's bytes are not UTF-8; `line` is the 1-based line of the first fault."""

    def __init__(self, line: int) -> None:
        super().__init__(f"line {line} is not UTF-8 text")
        self.line = line


def jsonl_lines(raw: bytes) -> list[str]:
    """The lines of a JSON-lines file: split at b"\\n" only (a "\\r" before it dropped), never
    at the other characters `str.splitlines` breaks at (U+2028, U+2029, U+0085, \\x1c-\\x1e),
    which a JSON string may hold raw and Polars' `write_ndjson` writes raw. A final newline
    ends the last line; it does not start a blank one. Raises NotUtf8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(raw.count(b"\n", 0, exc.start) + 1) from None
    # UTF-8 never holds the byte 0x0A inside a character: splitting the text at "\n" is
    # splitting the bytes at b"\n".
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline, or an empty file
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _jsonl_records(path: Path, raw: bytes) -> list[Any]:
    """Every line's JSON value. One C call for the whole file when it parses; only a faulty
    file is parsed line by line again, to name the line."""
    try:
        lines = jsonl_lines(raw)
    except NotUtf8 as exc:
        raise _fail(path, str(exc)) from None
    try:
        records = json.loads("[" + ",".join(lines) + "]")
        if len(records) == len(lines):
            return list(records)
    except (ValueError, RecursionError):
        pass
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise _fail(path, f"line {number} is blank (one JSON object a line)")
        try:
            json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise _fail(path, f"line {number} is not one JSON value ({type(exc).__name__}: "
                        f"{str(exc)[:80]})") from None
    raise _fail(path, "holds a line with more than one JSON value")  # such as `{}, {}`


def _check_record(path: Path, number: int, record: Any, columns: tuple[str, ...],
                  optional: tuple[str, ...]) -> None:
    """JSON types, strictly: a string where a string is expected, never a number."""
    if not isinstance(record, dict):
        raise _fail(path, f"row {number} is {shown(record)}, not a JSON object")
    missing = [c for c in columns if c not in record]
    extra = [k for k in record if k not in columns and k not in optional]
    if missing or extra:
        what = f"lacks {', '.join(missing)}" if missing else f"has the unknown key {extra[0]!r}"
        raise _fail(path, f"row {number} {what} (the columns are "
                    f"{', '.join((*columns, *optional))})")
    for key, value in record.items():
        if key == "conditions":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            expected = "a list of strings"
        elif key in ("variants", "groups"):
            inner = (lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v)) \
                if key == "variants" else (lambda v: isinstance(v, str))
            ok = isinstance(value, dict) and all(isinstance(k, str) and inner(v)
                                                 for k, v in value.items())
            expected = ("an object of variant name -> list of fact IDs" if key == "variants"
                        else "an object of group key -> string")
        else:
            ok, expected = isinstance(value, str), "a string"
        if not ok:
            raise _fail(path, f"row {number}: {key} is {shown(value)}, not {expected}")


def _read_jsonl(path: Path, raw: bytes, columns: tuple[str, ...],
                optional: tuple[str, ...] = ()) -> pl.DataFrame:
    records = _jsonl_records(path, raw)
    variant_names: dict[str, None] = {}
    group_keys: dict[str, None] = {}
    for number, record in enumerate(records, 1):
        _check_record(path, number, record, columns, optional)
        variant_names.update(dict.fromkeys(record.get("variants", ())))
        group_keys.update(dict.fromkeys(record.get("groups", ())))
    schema: dict[str, Any] = {c: STRINGS for c in columns}
    if "conditions" in columns:
        schema["conditions"] = IDS
        schema["variants"] = pl.Struct({n: IDS for n in variant_names})
        if group_keys or any("groups" in r for r in records):
            schema["groups"] = pl.Struct({k: STRINGS for k in group_keys})
    if not records:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame(records, schema=schema, strict=True)


# --- validation -------------------------------------------------------------------------------

def _first(frame: pl.DataFrame, bad: pl.Expr) -> dict[str, Any] | None:
    found = frame.filter(bad).head(1)
    return found.row(0, named=True) if found.height else None


def _check_columns(path: Path, frame: pl.DataFrame, expected: dict[str, str],
                   optional: tuple[str, ...] = ()) -> None:
    missing = [c for c in expected if c not in frame.columns and c not in optional]
    extra = [c for c in frame.columns if c not in expected]
    if missing or extra:
        what = f"lacks the column(s) {', '.join(missing)}" if missing \
            else f"has the unknown column {extra[0]!r}"
        raise _fail(path, f"{what} (the columns are {', '.join(expected)})")
    for name, dtype in frame.schema.items():
        kind = expected[name]
        ok = (
            (kind == "string" and dtype == STRINGS)
            or (kind == "ids" and dtype == IDS)
            or (kind in ("variants", "groups") and isinstance(dtype, pl.Struct)
                and all(f.dtype == (IDS if kind == "variants" else STRINGS)
                        for f in dtype.fields))
        )
        if not ok:
            want = {"string": "strings", "ids": "lists of strings",
                    "variants": "a struct of lists of strings (variant -> fact IDs)",
                    "groups": "a struct of strings (group key -> value)"}[kind]
            raise _fail(path, f"column {name} holds {dtype}, not {want}")


def _check_strings(path: Path, frame: pl.DataFrame, columns: list[str]) -> None:
    """No null and no blank string in the given String columns."""
    for column in columns:
        row = _first(frame, pl.col(column).is_null() | (pl.col(column).str.strip_chars() == ""))
        if row is not None:
            what = "is missing (null)" if row[column] is None else \
                f"is empty ({shown(row[column])})"
            raise _fail(path, f"row {row['_row']}: {column} {what}")


def _check_ids(path: Path, frame: pl.DataFrame, column: str, pattern: str, rule: str) -> None:
    """Every value of `column` matches `pattern` whole (`fragbench.corpus.ids`)."""
    row = _first(frame, ~pl.col(column).str.contains(f"^(?:{pattern})$"))
    if row is not None:
        raise _fail(path, f"row {row['_row']}: {column} {shown(row[column])} {rule}")


def _check_id_list(path: Path, frame: pl.DataFrame, column: str, where: str) -> pl.DataFrame:
    """A non-empty list of non-blank, unrepeated IDs in every row; returns it exploded (_row,
    case, fact_id, position)."""
    row = _first(frame, pl.col(column).list.len() == 0)
    if row is not None:
        raise _fail(path, f"row {row['_row']}: {where} is empty; it must name fact IDs")
    long = (frame.select("_row", "case", pl.col(column).alias("fact_id"))
            .with_columns(pl.int_ranges(pl.col("fact_id").list.len(), dtype=pl.Int32)
                          .alias("position"))
            .explode("fact_id", "position"))
    bad = _first(long, pl.col("fact_id").is_null()
                 | (pl.col("fact_id").str.strip_chars() == ""))
    if bad is not None:
        raise _fail(path, f"row {bad['_row']}: {where} holds the empty ID "
                    f"{shown(bad['fact_id'])}")
    bad = _first(long, pl.len().over("_row", "fact_id") > 1)
    if bad is not None:
        raise _fail(path, f"row {bad['_row']}: {where} repeats {shown(bad['fact_id'])}")
    return long


def validate(cases_path: Path, sentences_path: Path, cases: pl.DataFrame,
             sentences: pl.DataFrame, first_rows: tuple[int, int] = (1, 1)) -> Frames:
    """The folder's tables, checked (module docstring) and reshaped for the frame paths.
    `first_rows`: the row numbers of the tables' first rows, as the messages name them (an
    import validates its tables a batch of whole cases at a time)."""
    _check_columns(sentences_path, sentences, dict.fromkeys(SENTENCE_COLUMNS, "string"))
    kinds = {**dict.fromkeys(("case", "lang", "license", "source", "question"), "string"),
             "conditions": "ids", "variants": "variants", "groups": "groups"}
    _check_columns(cases_path, cases, kinds, OPTIONAL_CASE_COLUMNS)
    cases = cases.with_row_index("_row", offset=first_rows[0])
    sentences = sentences.with_row_index("_row", offset=first_rows[1])
    if not cases.height:
        raise _fail(cases_path, "holds no case")
    _check_strings(sentences_path, sentences, list(SENTENCE_COLUMNS))
    _check_strings(cases_path, cases, ["case", "lang", "license", "source", "question"])
    # Case IDs become call IDs and anchors, fact IDs are shown to the model and cited back:
    # the rules of every corpus format (fragbench.corpus.ids).
    _check_ids(cases_path, cases, "case", CASE_ID_PATTERN, CASE_ID_RULE)
    _check_ids(sentences_path, sentences, "case", CASE_ID_PATTERN, CASE_ID_RULE)
    _check_ids(sentences_path, sentences, "fact_id", FACT_ID_PATTERN, FACT_ID_RULE)

    again = pl.int_range(pl.len())  # 0 for a key's first row: the repeat is named, not it
    row = _first(sentences, again.over("case", "lang", "fact_id") > 0)
    if row is not None:
        raise _fail(sentences_path, f"row {row['_row']}: fact {shown(row['fact_id'])} of case "
                    f"{shown(row['case'])} [{row['lang']}] is repeated")
    row = _first(cases, again.over("case", "lang") > 0)
    if row is not None:
        raise _fail(cases_path, f"row {row['_row']}: case {shown(row['case'])} [{row['lang']}] "
                    "has two rows (one row per case and language)")
    row = _first(sentences.join(cases.select("case", "lang"), on=["case", "lang"], how="anti",
                                maintain_order="left"), pl.lit(True))
    if row is not None:
        raise _fail(sentences_path, f"row {row['_row']}: case {shown(row['case'])} "
                    f"[{row['lang']}] has no row in {cases_path.name}")
    row = _first(cases.join(sentences.select("case", "lang").unique(), on=["case", "lang"],
                            how="anti", maintain_order="left"), pl.lit(True))
    if row is not None:
        raise _fail(cases_path, f"row {row['_row']}: case {shown(row['case'])} [{row['lang']}] "
                    f"has no sentence in {sentences_path.name}")

    # Every language of a case has the same fact IDs: the first language's.
    langs = cases.select("case", "lang", "_row").with_columns(
        pl.int_range(pl.len()).over("case").alias("_li"))
    facts = sentences.join(langs.select("case", "lang", "_li"), on=["case", "lang"],
                           maintain_order="left")
    first = facts.filter(pl.col("_li") == 0).select("case", "fact_id")
    row = _first(facts.join(first, on=["case", "fact_id"], how="anti", maintain_order="left"),
                 pl.lit(True))
    if row is not None:
        raise _fail(sentences_path, f"row {row['_row']}: case {shown(row['case'])} "
                    f"[{row['lang']}] has the fact {shown(row['fact_id'])} that its first "
                    "language lacks")
    counts = facts.group_by("case", "lang").agg(pl.len().alias("n"))
    row = _first(langs.join(counts, on=["case", "lang"]), pl.col("n") != pl.col("n").max()
                 .over("case"))
    if row is not None:
        raise _fail(cases_path, f"row {row['_row']}: case {shown(row['case'])} [{row['lang']}] "
                    "lacks facts that its other languages have")

    n_facts = first.group_by("case").agg(pl.len().alias("_n"))
    one = cases.filter(pl.int_range(pl.len()).over("case") == 0)
    conditions = _check_id_list(cases_path, one, "conditions", "conditions")
    row = _first(conditions.join(first, on=["case", "fact_id"], how="anti",
                                 maintain_order="left"), pl.lit(True))
    if row is not None:
        raise _fail(cases_path, f"row {row['_row']}: conditions names {shown(row['fact_id'])}, "
                    f"which is no fact of case {shown(row['case'])}")

    variant_names = [f.name for f in cases.schema["variants"].fields]
    if not variant_names:
        raise _fail(cases_path, "column variants names no variant")
    orders = []
    for index, name in enumerate(variant_names):
        has = one.filter(pl.col("variants").struct.field(name).is_not_null()).select(
            "_row", "case", pl.col("variants").struct.field(name).alias("_order"))
        long = _check_id_list(cases_path, has, "_order", f"variant {name}")
        row = _first(long.join(first, on=["case", "fact_id"], how="anti",
                               maintain_order="left"), pl.lit(True))
        if row is None:
            row = _first(has.join(n_facts, on="case"),
                         pl.col("_order").list.len() != pl.col("_n"))
        if row is not None:
            raise _fail(cases_path, f"row {row['_row']}: variant {name} of case "
                        f"{shown(row['case'])} is not a permutation of its fact IDs")
        orders.append(long.select("case", pl.lit(name).alias("variant"), "position",
                                  "fact_id", pl.lit(index, pl.Int32).alias("_vi")))
    row = _first(one, pl.all_horizontal(pl.col("variants").struct.field(n).is_null()
                                        for n in variant_names))
    if row is not None:
        raise _fail(cases_path, f"row {row['_row']}: case {shown(row['case'])} has no variant")

    groups = one.select("case")
    if "groups" in cases.columns:
        keys = [f.name for f in cases.schema["groups"].fields]
        for key in keys:
            if (problem := group_key_problem(key)) is not None:
                raise _fail(cases_path, f"group key {shown(key)} {problem}")
        groups = one.select("_row", "case", *(pl.col("groups").struct.field(k) for k in keys))
        _check_strings(cases_path, groups.rename({k: f"groups.{k}" for k in keys}),
                       [f"groups.{k}" for k in keys])
        groups = groups.drop("_row")

    # The case's own values are the same in each of its languages: a row that differs from
    # its case's first row is named.
    shared = [c for c in ("license", "conditions", "variants", "groups") if c in cases.columns]
    firsts = one.select("case", *(pl.col(c).alias(f"_first_{c}") for c in shared))
    by_case = cases.join(firsts, on="case", maintain_order="left")
    for column in shared:
        row = _first(by_case, pl.col(column).n_unique().over("case") > 1)
        if row is not None:
            row = _first(by_case.filter(pl.col("case") == row["case"]),
                         pl.col(column) != pl.col(f"_first_{column}"))
            assert row is not None
            raise _fail(cases_path, f"row {row['_row']}: {column} of case {shown(row['case'])} "
                        f"[{row['lang']}] ({shown(row[column])}) differs from its first "
                        "language's")

    is_condition = conditions.select("case", "fact_id", pl.lit(True).alias("is_condition"))
    facts = (facts.join(is_condition, on=["case", "fact_id"], how="left", maintain_order="left")
             .with_columns(pl.col("is_condition").fill_null(False),
                           pl.int_range(pl.len()).over("case", "lang").alias("_fi"))
             .select("case", "lang", "fact_id", "text", "is_condition", "_li", "_fi"))
    questions = cases.join(langs.select("case", "lang", "_li"), on=["case", "lang"],
                           maintain_order="left").select("case", "lang", "question", "source",
                                                         "_li")
    return Frames(facts=facts, orders=pl.concat(orders), questions=questions, groups=groups)


# --- loading ----------------------------------------------------------------------------------

def load_folder(folder: Path, fmt: str) -> tuple[Frames, pl.DataFrame, tuple[tuple[Path, str],
                                                                           ...]]:
    """The folder's validated Frames, its cases table (one row per case, its first
    language's: case, license, conditions, variants) and its files with the sha256 of the very
    bytes parsed (cases first)."""
    cases_path, sentences_path = (folder / name for name in FORMATS[fmt])
    cases_raw, sentences_raw = _read_bytes(cases_path), _read_bytes(sentences_path)
    files = ((cases_path, hashlib.sha256(cases_raw).hexdigest()),
             (sentences_path, hashlib.sha256(sentences_raw).hexdigest()))
    if fmt == "parquet":
        cases = _read_parquet(cases_path, cases_raw)
        sentences = _read_parquet(sentences_path, sentences_raw)
    else:
        cases = _read_jsonl(cases_path, cases_raw, CASE_COLUMNS, OPTIONAL_CASE_COLUMNS)
        sentences = _read_jsonl(sentences_path, sentences_raw, SENTENCE_COLUMNS)
    del cases_raw, sentences_raw
    frames = validate(cases_path, sentences_path, cases, sentences)
    first = cases.filter(pl.int_range(pl.len()).over("case") == 0).select(
        "case", "license", "conditions", "variants")
    return frames, first, files
