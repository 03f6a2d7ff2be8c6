"""What a measure promises about its tables, checked the same way by `fragbench measure` and
`fragbench run` (before anything is written), by `fragbench export`, and by the test kit's
`check_measure`.

A measure declares its tables as a class attribute, `tables`: table name -> column -> Polars
type, written as `type_name` writes it (`"String"`, `"Int32"`, `"List(String)"`,
`"Decimal(38, 18)"`). Strings, not Polars types, so that a plugin module imports no Polars when
fragbench starts. The promises:

- every table it returns is declared (a declared table may be absent: `citations` writes none
  for a series that was never collected);
- a table has exactly the declared columns, in the declared order, each of the declared type;
- money (any column whose name ends in `_usd`) is `Decimal(38, 18)`, exact, in the declaration
  as in the frame: a float sum drifts where the journal is exact;
- no table takes the name of one the core writes (`calls`, and the recorded `facts` and
  `retrieval`, in any case: on a case-insensitive disk `Facts.parquet` is `facts.parquet`);
- a table or column name is one line, without `|` or control characters (it is a file name,
  a report heading, a Markdown table's header);
- what its optional `summary(tables)` returns is titled frames that keep the same rules: money
  exact, split by case and language (no global score).

`output_problem` checks what `compute` returned, summary included, for the core
(`fragbench.series.folder`) and the kit (`fragbench.testing.check_measure`) alike, so both say the
same words.

Each problem is (promise, detail): the promise in words the kit and the CLI share, and the
detail naming the table, the column, the type found and the type promised.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fragbench.columns import KEY_COLUMNS, MONEY_DTYPE

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

TABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A table's name: also its file name (`<name>.parquet`), so no path separator and no dot first."""
RECORDED_TABLES = ("retrieval", "facts")
"""The tables recorded while collecting (`<name>.parquet` in the series folder)."""
RESERVED_TABLES = ("calls", "cases", "questions", *RECORDED_TABLES)
"""Table names the core writes itself: no measure may declare one (in any case), or its table
would overwrite what was recorded."""
# One line, no `|` (a Markdown cell) and no control character, C0, DEL, C1, or a Unicode line
# or paragraph separator (Python's splitlines breaks at all of them).
_INLINE = r"[^|\x00-\x1f\x7f-\x9f\u2028\u2029]"
_EDGE = r"[^\s|\x00-\x1f\x7f-\x9f\u2028\u2029]"
COLUMN_NAME = re.compile(f"{_EDGE}(?:{_INLINE}{{0,126}}{_EDGE})?")
"""A column's name: 1 to 128 characters on one line, no `|` or control character, no space at
either end (a report shows it as a Markdown table's header)."""
COLUMN_RULE = ("a column name is 1 to 128 characters on one line, without '|' or control "
               "characters, and no space at either end")
DOCS = "docs/writing-a-measure.md"

SUMMARY = "summary(tables) returns titled frames for the reports"
DECLARES_TABLES = "declares its tables"
RETURNS_TABLES = "returns a dict of table name -> Polars DataFrame"
ONLY_DECLARED = "returns only the tables it declares"
EXACT_MONEY = "writes money as exact decimals"
AS_DECLARED = "gives each table the columns and types it declares"
KEYED = "keys every table by case and language (no global score)"
CONTRACT = ("a measure returns a dict of table name (1 to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit: it becomes a file name) -> Polars DataFrame "
            f"({DOCS})")

Problem = tuple[str, str]
"""(the promise broken, what was found)."""


def type_name(dtype: Any) -> str:
    """A Polars type as docs/tables.md and `Measure.tables` write it: `String`,
    `List(String)`, `Decimal(38, 18)`, `List(Struct(id: String, extract: String))`; the same
    for a declared and a read type. A string (a measure's declaration) is returned as is."""
    if isinstance(dtype, str):
        return dtype
    if isinstance(dtype, pl.Decimal):
        return f"Decimal({dtype.precision}, {dtype.scale})"
    if isinstance(dtype, pl.List):
        return f"List({type_name(dtype.inner)})"
    if isinstance(dtype, pl.Struct):
        return "Struct(" + ", ".join(f"{f.name}: {type_name(f.dtype)}"
                                     for f in dtype.fields) + ")"
    return str(dtype)


def is_money(column: str) -> bool:
    return column.endswith("_usd")


def inexact_money(schema: Any) -> tuple[str, str] | None:
    """The first money column of a table's schema (column -> Polars type) that is not the
    exact decimal, as (column, type found); None when every one is."""
    for column, dtype in schema.items():
        if is_money(column) and type_name(dtype) != MONEY_DTYPE:
            return column, type_name(dtype)
    return None


def declaration_problem(measure: Any) -> Problem | None:
    """Why the measure's `tables` attribute is not a usable declaration, or None."""
    tables = getattr(measure, "tables", None)
    example = ('add `tables = {"my_table": {"case": "String", "lang": "String", ...}}` to the '
               f"measure: each table's columns and their Polars types ({DOCS})")
    if tables is None:
        return DECLARES_TABLES, f"declares no tables; {example}"
    if not isinstance(tables, dict) or not all(
            isinstance(t, str) and isinstance(cols, dict)
            and all(isinstance(c, str) and isinstance(k, str) for c, k in cols.items())
            for t, cols in tables.items()):
        return DECLARES_TABLES, (f"declares tables {type(tables).__name__} that is not a dict "
                                 f"of table name -> {{column: type name}}; {example}")
    for table, columns in tables.items():
        if not TABLE_NAME.fullmatch(table):
            return DECLARES_TABLES, (f"declares a table {table!r}; a table name is 1 to 64 "
                                     "letters, digits, '_', '.' or '-', starting with a letter "
                                     "or digit")
        if table.lower() in RESERVED_TABLES:
            return DECLARES_TABLES, (f"declares a table {table!r}, a name fragbench's own "
                                     f"tables use ({', '.join(RESERVED_TABLES)}): it would "
                                     f"overwrite what the series recorded; rename it ({DOCS})")
        if not columns:
            return DECLARES_TABLES, f"declares table {table} with no column"
        for column, dtype in columns.items():
            if not COLUMN_NAME.fullmatch(column):
                return DECLARES_TABLES, (f"declares table {table} with a column {column!r}; "
                                         f"{COLUMN_RULE} ({DOCS})")
            if is_money(column) and dtype != MONEY_DTYPE:
                return EXACT_MONEY, (f"table {table}: money column {column} is declared {dtype}, "
                                     f"not {MONEY_DTYPE}: every *_usd column is an exact "
                                     f"decimal ({DOCS})")
    return reads_problem(measure)


READ_TABLES = ("calls", "retrieval", "facts")
"""The inputs a measure's optional `reads` may name (`MeasureInput`'s frames)."""
READS = "declares the columns it reads"


def reads_problem(measure: Any) -> Problem | None:
    """Why the measure's optional `reads` attribute is not a usable declaration, or None.

    `reads`: input table (`READ_TABLES`) -> the names of the columns of it that `compute`
    reads: everything it reads. A measure that declares it is given each table with those
    columns alone, and a table it does not name with none (`given_columns`), so that the core
    need not hold the rest for it (at 100,000 calls the calls table's bodies are a gigabyte,
    the chunks' text 700 MiB)."""
    reads = getattr(measure, "reads", None)
    if reads is None:
        return None
    example = ('for example `reads = {"calls": ("call_id", "case", "lang", "status")}`: the '
               f"columns of calls, retrieval or facts that compute reads ({DOCS})")
    if not isinstance(reads, dict):
        return READS, f"declares reads {type(reads).__name__}, not a dict; {example}"
    for table, columns in reads.items():
        if table not in READ_TABLES:
            return READS, (f"declares reads of a table {table!r}; a measure reads "
                           f"{', '.join(READ_TABLES)}; {example}")
        if not isinstance(columns, (list, tuple)) or not all(
                isinstance(c, str) and COLUMN_NAME.fullmatch(c) for c in columns):
            return READS, (f"declares reads of {table} that are not a list of column names; "
                           f"{example}")
    return None


def given_columns(measure: Any, table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (the input `table`) as the measure is given it: the whole frame when the
    measure declares no `reads`; else the columns its `reads` names for that table (none when
    it names no such table), those the frame has, in the frame's order (a series recorded
    before a column existed lacks it, as the whole table would). A usable declaration is
    assumed (`reads_problem`). Selecting columns copies no data."""
    reads = getattr(measure, "reads", None)
    if reads is None:
        return frame
    wanted = set(reads.get(table, ()))
    return frame.select(c for c in frame.columns if c in wanted)


def given_input(measure: Any, data: Any) -> Any:
    """The `MeasureInput` the measure is given of `data`: each frame as `given_columns` gives
    it (the core's derivation and the kit's `check_measure` alike, so that a column a measure
    reads without declaring it fails in the kit as it would on a series)."""
    from fragbench.interfaces import MeasureInput

    return MeasureInput(
        facts=given_columns(measure, "facts", data.facts),
        retrieval=given_columns(measure, "retrieval", data.retrieval),
        calls=None if data.calls is None else given_columns(measure, "calls", data.calls),
        main_setting=data.main_setting)


def read_hint(measure: Any, exc: BaseException) -> str:
    """What to add to the words of a failure inside `compute` that reads a column it was not
    given (a measure declaring `reads`): where to name it; else nothing."""
    if getattr(measure, "reads", None) is not None \
            and isinstance(exc, pl.exceptions.ColumnNotFoundError):
        return (" (a measure that declares `reads` is given only the columns it names there: "
                "add every column compute reads)")
    return ""


def held_columns(measures: list[Any], table: str) -> set[str] | None:
    """The columns of input `table` some measure of `measures` reads (`reads`), or None when
    one declares no `reads` (it is given every table whole): what the core must hold."""
    held: set[str] = set()
    for measure in measures:
        reads = getattr(measure, "reads", None)
        if not isinstance(reads, dict):
            return None
        held.update(reads.get(table, ()))
    return held


def table_problem(measure: Any, table: str, frame: pl.DataFrame) -> Problem | None:
    """Why the frame the measure returned as `table` breaks its declaration, or None. The
    declaration must be usable (`declaration_problem`), and `frame` a DataFrame."""
    declared: dict[str, dict[str, str]] = measure.tables
    if table not in declared:
        known = ", ".join(declared) or "none"
        return ONLY_DECLARED, (f"returns a table {table!r} it does not declare (it declares: "
                               f"{known}); add it to the measure's `tables` ({DOCS})")
    promised = declared[table]
    found = {column: type_name(dtype) for column, dtype in frame.schema.items()}
    inexact = inexact_money(frame.schema)
    if inexact is not None:
        return EXACT_MONEY, (f"table {table}: money column {inexact[0]} is {inexact[1]}, "
                             f"promised {MONEY_DTYPE} (exact; build it from Decimal values, "
                             f"never a float; {DOCS})")
    for column, dtype in promised.items():
        if column not in found:
            return AS_DECLARED, (f"table {table}: column {column} is missing, promised {dtype} "
                                 f"({DOCS})")
        if found[column] != dtype:
            return AS_DECLARED, (f"table {table}: column {column} is {found[column]}, promised "
                                 f"{dtype}; cast it, or declare what it is ({DOCS})")
    for column, dtype in found.items():
        if column not in promised:
            return AS_DECLARED, (f"table {table}: column {column} ({dtype}) is not declared; "
                                 f"declare it or leave it out ({DOCS})")
    if list(found) != list(promised):
        return AS_DECLARED, (f"table {table}: columns in the order {', '.join(found)}, promised "
                             f"{', '.join(promised)}; select them in the declared order "
                             f"({DOCS})")
    return None


SUMMARY_TITLE = re.compile(f"{_EDGE}(?:{_INLINE}{{0,118}}{_EDGE})?")
"""A summary frame's title: 1 to 120 characters on one line, no `|` or control character."""

Call = Callable[[str, Any], Any]
"""How a check calls one of the measure's methods with one argument (`call("summary",
tables)`): the core's turns a failure inside the plugin into its one-line error, the kit's into
a failed promise."""


def output_problem(measure: Any, tables: Any, call: Call) -> Problem | None:
    """Why what the measure's `compute` returned (`tables`) breaks its promises, or None: a
    dict of valid table names -> Polars DataFrames, each as declared (`table_problem`); then,
    when the measure has a `summary` and returned at least one table (the reports show no
    section for a measure without one), what `call("summary", tables)` returns
    (`summary_problem`). The declaration must be usable (`declaration_problem`)."""
    if not isinstance(tables, dict):
        return RETURNS_TABLES, f"returned {type(tables).__name__}; {CONTRACT}"
    for name, frame in tables.items():
        if not isinstance(name, str) or not TABLE_NAME.fullmatch(name):
            return RETURNS_TABLES, f"names a table {name!r}; {CONTRACT}"
        if not isinstance(frame, pl.DataFrame):
            return RETURNS_TABLES, (f"table {name} returned {type(frame).__name__}, not a "
                                    f"Polars DataFrame; {CONTRACT}")
        problem = table_problem(measure, name, frame)
        if problem is not None:
            return problem
    if tables and callable(getattr(measure, "summary", None)):
        return summary_problem(call("summary", tables))
    return None


def summary_problem(parts: Any) -> Problem | None:
    """Why what a measure's optional `summary(tables)` returned breaks its promise, or None:
    a list of (title, Polars DataFrame) pairs, each title one line of 1 to 120 characters
    (`SUMMARY_TITLE`), each frame's columns named as a table's are (`COLUMN_NAME`), its money
    exact (`inexact_money`) and its rows keyed by case and language (`KEY_COLUMNS`), as every
    table is: the reports show these frames in place of the tables."""
    if not isinstance(parts, list):
        return SUMMARY, (f"summary() returned {type(parts).__name__}, not a list of (title, "
                         f"DataFrame) pairs ({DOCS})")
    for part in parts:
        if not (isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], str)
                and isinstance(part[1], pl.DataFrame)):
            return SUMMARY, (f"summary() returned an item {type(part).__name__}, not a (title, "
                             f"DataFrame) pair ({DOCS})")
        title, frame = part
        if not SUMMARY_TITLE.fullmatch(title):
            return SUMMARY, (f"summary() gave a title {title[:40]!r}: one line of 1 to 120 "
                             f"characters, without '|' or control characters ({DOCS})")
        where = f"summary() frame {title[:40]!r}"
        for column in frame.columns:
            if not COLUMN_NAME.fullmatch(column):
                return SUMMARY, f"{where} has a column {column[:40]!r}; {COLUMN_RULE} ({DOCS})"
        inexact = inexact_money(frame.schema)
        if inexact is not None:
            return EXACT_MONEY, (f"{where}: money column {inexact[0]} is {inexact[1]}, promised "
                                 f"{MONEY_DTYPE} (exact; build it from Decimal values, never a "
                                 f"float; {DOCS})")
        missing = [c for c in KEY_COLUMNS if c not in frame.columns]
        if missing:
            return KEYED, (f"{where} has no {' or '.join(missing)} column; publish results per "
                           f"case and language, never one number over everything ({DOCS})")
    return None
