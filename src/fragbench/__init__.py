"""fragbench: pre-registered, budget-safe retrieval benchmarking.

`fragbench.scan(path)` loads one series, or every series under a folder, as Polars LazyFrames.
Kept light: importing fragbench imports neither Polars nor an SDK until they are used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def __getattr__(name: str) -> str:
    """`fragbench.__version__`: the installed distribution's version, read when first asked
    (so that importing fragbench, and `fragbench --help`, read no package metadata)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("fragbench")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "unknown"
    raise AttributeError(f"module 'fragbench' has no attribute {name!r}")


def scan(path: str | Path, strict: bool = False) -> dict[str, pl.LazyFrame]:
    """Table name -> LazyFrame over every series at or under `path`.

    Every table has `experiment`, `series`, the series' `state` (complete, stopped,
    interrupted) and `series_stop_reason` columns; the `series` table has one row per series
    (backend, is_model, state, calls planned and sent). A series under a folder that cannot be
    read is skipped with a warning (`fragbench.series.scan.SkippedSeries`) naming it; `strict=True`
    raises its error instead. Details: `fragbench.series.scan.scan`.
    """
    from fragbench.series.scan import scan as _scan

    return _scan(path, strict=strict)


__all__ = ["__version__", "scan"]
