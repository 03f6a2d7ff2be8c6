"""`fragbench export`: every table of a series as CSV or JSON lines, for tools that read no
Parquet (a spreadsheet, R, jq).

What is exported is what `fragbench.scan` loads: each table `measures.json` lists (calls and
every measure's tables, a diagnostic's under `diagnostics/` as in the series) plus the recorded
`retrieval` and `facts`. Only the encoding changes (docs/tables.md, "Exporting"): money stays
exact decimal text, never a float; in CSV, lists of IDs are space-joined as everywhere else
(`fragbench.tables.flat_for_csv`), lists of texts and other nested values are JSON arrays.

Nothing is half-written: every file is first written beside its place, and renamed into it only
once all of them are written; a failure removes what this export wrote and names the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import polars as pl

from fragbench.errors import FragbenchError, SeriesError, UsageError
from fragbench.series import MEASURES_FILE, read_json, require_series
from fragbench.tables import flat_for_csv

FORMATS = ("csv", "jsonl")
EXPORT_DIR = "export"
RECORDED = (("retrieval", "retrieval.parquet"), ("facts", "facts.parquet"))
"""Tables recorded while collecting, which measures.json does not list."""
TEXT_LISTS = frozenset({"supplied_texts"})
"""List(String) columns whose items are texts with spaces: space-joining them would lose where
one ends, so in CSV they are JSON arrays like any other nested value."""


def tables_of(series_dir: Path) -> list[tuple[str, str]]:
    """(table, path relative to the series folder) for every table of the series."""
    require_series(series_dir)
    manifest = series_dir / MEASURES_FILE
    if not manifest.is_file():
        raise SeriesError(f"{series_dir}: no {MEASURES_FILE} (its tables were never derived); "
                          f"run `fragbench measure {series_dir}` first.")
    entries = read_json(manifest)
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("table"), str)
            and isinstance(e.get("path"), str) for e in entries):
        raise SeriesError(f"{manifest}: not a list of tables; rebuild it with "
                          f"`fragbench measure {series_dir}`.")
    for e in entries:  # the export mirrors these paths: none may lead out of its folder
        rel = Path(e["path"])
        if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".parquet":
            raise SeriesError(f"{manifest}: table {e['table']} has path {e['path']!r}, not a "
                              "Parquet file inside the series; rebuild it with "
                              f"`fragbench measure {series_dir}`.")
    return [(e["table"], e["path"]) for e in entries] + list(RECORDED)


def _plain(amount: Decimal | None) -> str | None:
    """Exact, plain decimal text (`0.003024`, never `3.024E-3` nor a float)."""
    if amount is None:
        return None
    text = format(amount, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _json_cells(series: pl.Series) -> pl.Series:
    """Each value as JSON text (null stays null): a cell CSV can hold without losing shape."""
    return pl.Series(series.name, [
        None if value is None else json.dumps(value, ensure_ascii=False, default=str)
        for value in series.to_list()], dtype=pl.String)


def encoded(frame: pl.DataFrame, fmt: str) -> pl.DataFrame:
    """The frame as it is written in `fmt`: same columns, same order, same rows."""
    columns = []
    for name, dtype in frame.schema.items():
        column = frame.get_column(name)
        if isinstance(dtype, pl.Decimal):
            column = pl.Series(name, [_plain(v) for v in column.to_list()], dtype=pl.String)
        elif fmt == "csv" and dtype.is_nested() and (
                dtype != pl.List(pl.String) or name in TEXT_LISTS):
            column = _json_cells(column)
        columns.append(column)
    out = pl.DataFrame(columns)
    return flat_for_csv(out) if fmt == "csv" else out


def _check_out(out: Path) -> None:
    """Refuse, before anything is read, an --out that cannot become a folder of files."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file; name a folder (it is created if needed).")
    folder = out
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"--out {out}: {folder} is a file, not a folder; choose another --out.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FragbenchError(f"--out {out}: {folder} is not writable; choose another --out.")


@contextmanager
def _all_or_nothing() -> Iterator[list[tuple[Path, Path]]]:
    """Collect (temporary, final) pairs; rename them all at the end, or remove every
    temporary file if anything failed (the caller removes the folders it made)."""
    pending: list[tuple[Path, Path]] = []
    try:
        yield pending
        for tmp, final in pending:
            tmp.replace(final)
    except BaseException:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        raise


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
    SERIES_DIR/export); return the files written, in table order."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: unknown; use one of {', '.join(FORMATS)}.")
    out = series_dir / EXPORT_DIR if out is None else out
    tables = tables_of(series_dir)
    _check_out(out)
    frames: list[tuple[Path, pl.DataFrame]] = []
    for name, rel in tables:
        try:
            frame = pl.read_parquet(series_dir / rel)
        except (OSError, pl.exceptions.PolarsError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SeriesError(f"{series_dir / rel}: table {name} cannot be read ({first}); "
                              f"rebuild it with `fragbench measure {series_dir}`.") from None
        frames.append((out / Path(rel).with_suffix(f".{fmt}"), encoded(frame, fmt)))
    created: list[Path] = []
    current: Path = out
    try:
        with _all_or_nothing() as pending:
            for path, frame in frames:
                current = path
                _mkdirs(path.parent, created)
                tmp = path.with_name(f".{path.name}.tmp")
                pending.append((tmp, path))
                if fmt == "csv":
                    frame.write_csv(tmp)
                else:
                    frame.write_ndjson(tmp)
    except OSError as exc:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                break
        raise FragbenchError(f"{current}: cannot be written ({exc.strerror or exc}); nothing "
                             "was exported; free some space or choose a writable --out.") \
            from None
    return [path for path, _ in frames]


def summary(files: list[Path], out: Path) -> str:
    """One line for the screen."""
    return f"{len(files)} tables written to {out}: " + ", ".join(
        str(p.relative_to(out)) for p in files)
