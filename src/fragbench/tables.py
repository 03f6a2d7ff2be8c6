"""Writing a table to the format its file name asks for."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def flat_for_csv(frame: pl.DataFrame) -> pl.DataFrame:
    """CSV has no lists: list-of-string columns become space-joined strings."""
    return frame.with_columns(
        pl.col(name).list.join(" ")
        for name, dtype in frame.schema.items()
        if dtype == pl.List(pl.String)
    )


def write_table(frame: pl.DataFrame, path: Path) -> None:
    """Parquet, CSV or JSON lines by suffix; written beside, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".parquet":
        frame.write_parquet(tmp)
    elif path.suffix == ".csv":
        flat_for_csv(frame).write_csv(tmp)
    elif path.suffix == ".jsonl":
        frame.write_ndjson(tmp)
    else:
        raise ValueError(f"unknown table format {path.suffix}")
    tmp.replace(path)
