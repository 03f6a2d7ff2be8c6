"""`fragbench export`: every table of a series as CSV or JSON lines, for tools that read no
Parquet (a spreadsheet, R, jq).

What is exported is what `fragbench.scan` loads: each table `measures.json` lists (calls and
every measure's tables, a diagnostic's under `diagnostics/` as in the series) plus the recorded
`retrieval` and `facts`. Only the encoding changes (docs/tables.md, "Exporting"): money stays
exact decimal text, never a float; in CSV, lists of IDs are space-joined as everywhere else
(`fragbench.tables.flat_for_csv`), lists of texts and other nested values are JSON arrays.

Nothing is half-written: the export is written into a staging folder beside --out, which takes
its place in one rename; an --out holding anything but an earlier export is refused. In CSV, a
text cell that starts like a formula (=, +, -, @) gets a leading apostrophe (model output is
untrusted text). A table whose money (`*_usd`) is not the exact Decimal(38, 18) is refused
before anything is written, as `fragbench.scan` refuses it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl

from fragbench.budget.money import usd
from fragbench.columns import MONEY_DTYPE
from fragbench.errors import FragbenchError, SeriesError, UsageError
from fragbench.series.folder import read_table, refuse_linked_folder, tables_of
from fragbench.series.measure_tables import inexact_money
from fragbench.tables import flat_for_csv

FORMATS = ("csv", "jsonl")
EXPORT_DIR = "export"
TEXT_LISTS = frozenset({"supplied_texts"})
"""List(String) columns whose items are texts with spaces: space-joining them would lose where
one ends, so in CSV they are JSON arrays like any other nested value."""


def _json_cells(series: pl.Series) -> pl.Series:
    """Each value as JSON text (null stays null): a cell CSV can hold without losing shape."""
    return pl.Series(series.name, [
        None if value is None else json.dumps(value, ensure_ascii=False, default=str)
        for value in series.to_list()], dtype=pl.String)


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet reads as the start of a formula (OWASP, "CSV injection")."""


def _inert(column: pl.Series) -> pl.Series:
    """A CSV text cell a spreadsheet would run as a formula (a model's answer, an extract, a
    cited ID are untrusted text: `=IMPORTDATA("http://...")` would fetch a URL when opened)
    gets a leading apostrophe, which spreadsheets show as text; JSON lines keep the text."""
    return column.map_elements(
        lambda v: "'" + v if v.startswith(FORMULA_START) else v, return_dtype=pl.String,
        skip_nulls=True)


def encoded(frame: pl.DataFrame, fmt: str) -> pl.DataFrame:
    """The frame as it is written in `fmt`: same columns, same order, same rows."""
    columns = []
    for name, dtype in frame.schema.items():
        column = frame.get_column(name)
        if isinstance(dtype, pl.Decimal):
            column = pl.Series(name, [None if v is None else usd(v) for v in column.to_list()],
                               dtype=pl.String)
        elif fmt == "csv" and dtype.is_nested() and (
                dtype != pl.List(pl.String) or name in TEXT_LISTS):
            column = _json_cells(column)
        columns.append(column)
    out = pl.DataFrame(columns)
    if fmt != "csv":
        return out
    out = flat_for_csv(out)
    return out.with_columns(_inert(out.get_column(name)) for name, dtype in out.schema.items()
                            if dtype == pl.String)


def _refuse_inexact_money(frame: pl.DataFrame, series_dir: Path, rel: str) -> None:
    """Money is exported as exact decimal text: a table whose money is a float (written before
    money was exact, or by a measure that broke its promise) is refused before anything is
    written, as `fragbench.scan` refuses it, rather than exported with its float's drift."""
    inexact = inexact_money(frame.schema)
    if inexact is not None:
        column, found = inexact
        raise SeriesError(f"{series_dir / rel}: money column {column} is {found}, not the exact "
                          f"{MONEY_DTYPE}; nothing was exported; rebuild the series' tables with "
                          f"`fragbench measure {series_dir}` (or fix the measure that writes "
                          "it: docs/writing-a-measure.md).")


MARKER = ".fragbench-export"
"""Left in every export folder: an --out that holds it is an earlier export, replaced whole."""


def _check_out(out: Path) -> None:
    """Refuse, before anything is read, an --out that cannot become a folder of this export: a
    file, or a folder holding anything but an earlier export (whose files would be mixed with
    or silently replaced by this one's)."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file; name a folder (it is created if needed).")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UsageError(f"--out {out}: a folder that holds other files; choose a new or empty "
                         "folder (an earlier export there is replaced whole).")
    folder = out
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"--out {out}: {folder} is a file, not a folder; choose another --out.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FragbenchError(f"--out {out}: {folder} is not writable; choose another --out.")


def _swap_in(staged: Path, out: Path) -> None:
    """Put the staged folder at `out`, replacing an earlier export whole: two renames on one
    file system, so a reader sees the old export or the new one, never a mix."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        out.replace(old)
    try:
        staged.replace(out)
    except OSError:
        if old.exists():
            old.replace(out)  # put the earlier export back
        raise
    if old.is_symlink():  # an --out that was a link: the link is replaced, its folder kept
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)


def _mkdirs(folder: Path, created: list[Path]) -> None:
    """Make `folder` and its missing parents, remembering the ones made (to undo them)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir()
        created.append(made)


def export(series_dir: Path, fmt: str, out: Path | None = None) -> list[Path]:
    """Write every table of the series in `fmt` (csv or jsonl) into `out` (default
    SERIES_DIR/export); return the files written, in table order.

    Everything is written into a staging folder beside `out`, which then takes its place in one
    rename: a failure leaves `out` as it was (an earlier export included). Every file's text
    goes through the redactor, as every other write does."""
    from fragbench.redact import Redactor

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: unknown; use one of {', '.join(FORMATS)}.")
    if out is None:  # the series' own folder: a link there is refused, as figures/ is
        refuse_linked_folder(series_dir, EXPORT_DIR)
    out = series_dir / EXPORT_DIR if out is None else out
    tables = tables_of(series_dir)
    _check_out(out)
    frames: list[tuple[Path, pl.DataFrame]] = []
    for name, rel in tables:
        frame = read_table(series_dir, name, rel)
        _refuse_inexact_money(frame, series_dir, rel)
        frames.append((Path(rel).with_suffix(f".{fmt}"), encoded(frame, fmt)))
    redactor = Redactor.from_env()
    created: list[Path] = []
    staged = out.with_name(f".{out.name}.staged-{os.getpid()}")
    current: Path = out
    try:
        _mkdirs(out.parent, created)
        staged.mkdir()
        (staged / MARKER).write_text("written by `fragbench export`\n", encoding="utf-8")
        for rel, frame in frames:
            current = out / rel
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            text = frame.write_csv() if fmt == "csv" else frame.write_ndjson()
            (staged / rel).write_text(redactor.text(text), encoding="utf-8")
        current = out
        _swap_in(staged, out)
    except OSError as exc:
        shutil.rmtree(staged, ignore_errors=True)
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                break
        raise FragbenchError(f"{current}: cannot be written ({exc.strerror or exc}); nothing "
                             "was exported; free some space or choose a writable --out.") \
            from None
    return [out / rel for rel, _ in frames]


def summary(files: list[Path], out: Path) -> str:
    """One line for the screen."""
    return f"{len(files)} tables written to {out}: " + ", ".join(
        str(p.relative_to(out)) for p in files)
