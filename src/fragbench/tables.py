"""Writing a table to the format its file name asks for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl

from fragbench.errors import UsageError, first_line

PARQUET_ERRORS = (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException)
"""What reading a Parquet file can raise: the OS's errors, and Polars' for a file it cannot
decode or whose columns are not those asked for. A damaged file can even make Polars' Rust
code panic (PanicException, a BaseException): about 1 in 200 random byte flips does."""
_NOT_THE_FILE = (pl.exceptions.ColumnNotFoundError, pl.exceptions.SchemaError,
                 pl.exceptions.SchemaFieldNotFoundError)
"""Polars errors that say the file was read but is not the table asked for."""


def parquet_problem(exc: BaseException) -> str:
    """What is wrong with a Parquet file that could not be read, in words that follow its path:
    `is not a readable Parquet file (why)` for a file Polars cannot decode (not Parquet,
    truncated, damaged), `cannot be read (why)` for anything else (a missing file, a column it
    lacks). The one wording of every place that reads a Parquet file fragbench is given
    (a collection, a corpus) or wrote (a series' tables, read back by measure, report, compare,
    export and scan); `why` is the first line of the library's words, cut short."""
    if isinstance(exc, OSError):
        why = exc.strerror or first_line(exc, type(exc).__name__)
    else:
        why = first_line(exc, type(exc).__name__)
    why = why if len(why) <= 200 else why[:200] + "..."
    if isinstance(exc, (OSError, *_NOT_THE_FILE)):
        return f"cannot be read ({why})"
    return f"is not a readable Parquet file ({why})"


def check_output(path: Path, formats: tuple[str, ...], option: str = "--out") -> None:
    """Refuse, before any work, an output path (given as `option`) that cannot be written."""
    if path.suffix not in formats:
        raise UsageError(f"{option} {path}: unknown format; end the file name in "
                         f"{', '.join(formats)}.")
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a folder; name a file ending in "
                         f"{', '.join(formats)}.")
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: {folder} is a file, not a folder; choose another "
                         f"{option}.")


def flat_for_csv(frame: pl.DataFrame) -> pl.DataFrame:
    """CSV has no lists: list-of-string columns become space-joined strings."""
    return frame.with_columns(
        pl.col(name).list.join(" ")
        for name, dtype in frame.schema.items()
        if dtype == pl.List(pl.String)
    )


def write_table(frame: pl.DataFrame, path: Path) -> None:
    """Parquet, CSV or JSON lines by suffix; written beside, then renamed into place. A write
    that fails leaves the old file (if any) and no temporary one."""
    from fragbench.errors import FragbenchError
    from fragbench.files import write_atomically

    writers: dict[str, Callable[[Path], object]] = {
        ".parquet": frame.write_parquet, ".csv": lambda tmp: flat_for_csv(frame).write_csv(tmp),
        ".jsonl": frame.write_ndjson}
    if path.suffix not in writers:
        raise ValueError(f"unknown table format {path.suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, writers[path.suffix])
    except OSError as exc:
        raise FragbenchError(f"{path}: cannot be written ({exc.strerror or exc}); choose a "
                             "writable --out.") from None
