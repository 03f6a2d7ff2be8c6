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
  as in the frame: a float sum drifts where the journal is exact.

Each problem is (promise, detail): the promise in words the kit and the CLI share, and the
detail naming the table, the column, the type found and the type promised.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fragbench.columns import MONEY_DTYPE

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

TABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A table's name: also its file name (`<name>.parquet`), so no path separator and no dot first."""
COLUMN_NAME = re.compile(r"\S(?:.{0,126}\S)?", re.DOTALL)
DOCS = "docs/writing-a-measure.md"

SUMMARY = "summary(tables) returns titled frames for the reports"
DECLARES_TABLES = "declares its tables"
RETURNS_TABLES = "returns a dict of table name -> Polars DataFrame"
ONLY_DECLARED = "returns only the tables it declares"
EXACT_MONEY = "writes money as exact decimals"
AS_DECLARED = "gives each table the columns and types it declares"

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
        if not columns:
            return DECLARES_TABLES, f"declares table {table} with no column"
        for column, dtype in columns.items():
            if not COLUMN_NAME.fullmatch(column):
                return DECLARES_TABLES, f"declares table {table} with a column {column!r}"
            if is_money(column) and dtype != MONEY_DTYPE:
                return EXACT_MONEY, (f"table {table}: money column {column} is declared {dtype}, "
                                     f"not {MONEY_DTYPE}: every *_usd column is an exact "
                                     f"decimal ({DOCS})")
    return None


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


SUMMARY_TITLE = re.compile(r"\S(?:[^\r\n]{0,118}\S)?")


def summary_problem(parts: Any) -> str | None:
    """Why what a measure's optional `summary(tables)` returned is not a list of (title,
    Polars DataFrame) pairs, each title one line of 1 to 120 characters, or None."""
    if not isinstance(parts, list):
        return f"summary() returned {type(parts).__name__}, not a list of (title, DataFrame)"
    for part in parts:
        if not (isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], str)
                and isinstance(part[1], pl.DataFrame)):
            return (f"summary() returned an item {type(part).__name__}, not a (title, "
                    "DataFrame) pair")
        if not SUMMARY_TITLE.fullmatch(part[0]):
            return f"summary() gave a title {part[0][:40]!r}: one line of 1 to 120 characters"
    return None
