"""Loading series with Polars: what `fragbench.scan` is.

`scan(path)` finds every series at or under `path` (a folder holding `series.json`) and returns
one LazyFrame per table name, over all of them, each row labelled with its series (`experiment`,
`series`) and the series' state (`state`, `series_stop_reason`, from status.json), plus a
`series` table with one row per series.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import polars as pl

from fragbench.columns import MONEY_DTYPE
from fragbench.errors import SeriesError
from fragbench.series.folder import read_json, tables_of, unreadable_table
from fragbench.series.measure_tables import inexact_money
from fragbench.tables import PARQUET_ERRORS

SERIES_LABELS = ("experiment", "series", "state", "series_stop_reason")
"""Added to every scanned table. The series' stop reason is not called `stop_reason`: calls and
completeness already have a `stop_reason` column, set only on the call where a series stopped."""

def series_dirs(path: Path) -> list[Path]:
    if (path / "series.json").exists():
        return [path]
    found = sorted(p.parent for p in path.glob("**/series.json"))
    if not found:
        raise SeriesError(f"{path}: holds no recorded series (no series.json found); point to "
                          "a series folder or a folder of them.")
    return found


def _check_schema(frame: pl.LazyFrame, series_dir: Path, name: str, rel: str) -> None:
    """Money (`*_usd` columns) must be exact decimals: one table of float money (written
    before money was exact, or by a measure that used floats) would make the relaxed concat
    below turn every series' money into floats, silently. And a table may not already hold a
    column scan adds: it would be overwritten without a word."""
    try:
        schema = frame.collect_schema()  # Parquet metadata only, no data read
    except PARQUET_ERRORS as exc:
        raise unreadable_table(series_dir, name, rel, exc) from None
    inexact = inexact_money(schema)
    if inexact is not None:
        column, found = inexact
        raise SeriesError(
            f"{series_dir / rel}: money column {column} is {found}, not the exact {MONEY_DTYPE}; "
            f"rebuild the series' tables with `fragbench measure {series_dir}` (or fix the "
            "measure that writes it).")
    for column in schema:
        if column in SERIES_LABELS:
            raise SeriesError(
                f"{series_dir / rel}: has a column {column}, which scan adds to every table "
                f"({', '.join(SERIES_LABELS)}); rename it in the measure that writes it.")


def series_info(series_dir: Path) -> dict[str, Any]:
    """series.json with status.json over it: who collected, and how it ended."""
    return {**read_json(series_dir / "series.json"), **read_json(series_dir / "status.json")}


def _labels(info: dict[str, Any]) -> list[pl.Expr]:
    stop = info.get("stop") or {}
    return [pl.lit(info["experiment"]).alias("experiment"),
            pl.lit(info["series"]).alias("series"),
            pl.lit(info["state"]).alias("state"),
            pl.lit(stop.get("reason"), pl.String).alias("series_stop_reason")]


def _series_row(info: dict[str, Any], calls: pl.LazyFrame) -> pl.LazyFrame:
    """The `series` table's row for one series: what it is, how it ended, what it sent."""
    return calls.select(
        *_labels(info),
        pl.lit(info["backend"]).alias("backend"),
        pl.lit(info["backend_plugin"]).alias("backend_plugin"),
        pl.lit(info["is_model"]).alias("is_model"),
        pl.len().cast(pl.Int32).alias("calls_planned"),
        (pl.col("status") != "not_sent").sum().cast(pl.Int32).alias("calls_sent"),
    )


class SkippedSeries(UserWarning):
    """`scan` left out a series it could not read (the message names it and says why)."""


def _series_frames(d: Path) -> dict[str, list[pl.LazyFrame]]:
    """One series' tables, labelled, plus its `series` row; SeriesError if it is unreadable
    (status.json, measures.json or a table's schema)."""
    info = series_info(d)
    frames: dict[str, list[pl.LazyFrame]] = {}
    for name, rel in tables_of(d):
        frame = pl.scan_parquet(d / rel)
        _check_schema(frame, d, name, rel)
        frames.setdefault(name, []).append(frame.with_columns(*_labels(info)))
        if name == "calls":
            frames.setdefault("series", []).append(_series_row(info, frame))
    return frames


def scan(path: str | Path, strict: bool = False) -> dict[str, pl.LazyFrame]:
    """Table name -> LazyFrame over every series at or under `path`.

    Every table gains `experiment`, `series`, `state` (status.json: complete, stopped or
    interrupted) and `series_stop_reason` (technical_failure, changed_model, unknown_cost,
    budget, cannot_record, interrupted; null when complete or interrupted without a stop
    record). The `series` table has one row per series: those four, then backend,
    backend_plugin, is_model, calls_planned and calls_sent. Keep only complete series with
    `pl.col("state") == "complete"` on any table, or pick series from the `series` table and
    keep their rows with one semi join on ("experiment", "series").

    A series that cannot be read (its status.json, measures.json or a table's schema) is left
    out with a `SkippedSeries` warning naming its folder and why, so that the others can still
    be read; with `strict=True`, or when `path` is itself a series folder, its error is raised
    instead. If no series under `path` can be read, the first one's error is raised after the
    warnings. Only the schemas are read here: a table whose data is damaged past its metadata
    fails when collected.
    """
    dirs = series_dirs(Path(path))
    strict = strict or dirs == [Path(path)]
    frames: dict[str, list[pl.LazyFrame]] = {}
    first_error: SeriesError | None = None
    for d in dirs:
        try:
            found = _series_frames(d)
        except SeriesError as exc:
            if strict:
                raise
            first_error = first_error or exc
            warnings.warn(f"{d}: series skipped, it cannot be read: {exc}", SkippedSeries,
                          stacklevel=3)
            continue
        for name, parts in found.items():
            frames.setdefault(name, []).extend(parts)
    if not frames and first_error is not None:
        raise first_error
    return {name: pl.concat(parts, how="diagonal_relaxed") for name, parts in frames.items()}
