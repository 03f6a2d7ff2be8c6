"""Comparing two series cell by cell (the series are loaded by `fragbench.series.scan`).

`compare_series(a, b)` joins two series on (case, lang, variant, mode, rep). A cell is compared
only when both sides answered (status completed or incomplete) the same request; any other cell
says why not, and a series that is stopped, interrupted or incomplete is named first. `differs`
is null for a cell not compared: a missing side is never "the same" nor "different". Series of
two providers (model backends of different plugins) are compared only when both are complete.
`summary` is the narrow text `fragbench compare` prints; `compare_html` draws the same as a page.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import attrs
import polars as pl

from fragbench.columns import ANSWERED
from fragbench.errors import SeriesError
from fragbench.series.folder import read_table, tables_of
from fragbench.series.scan import scan, series_dirs, series_info
from fragbench.tables import PARQUET_ERRORS

CELL = ["case", "lang", "variant", "mode", "rep"]
SIDE = ["status", "parsed", "n_citations", "n_valid", "n_invalid", "conditions_cited_validly",
        "cost_usd"]
DIFFERS_ON = ["status", "parsed", "n_valid", "n_invalid", "conditions_cited_validly"]
"""What `differs` looks at: the outcome and the citation counts of the exact level. Cost is
left out (it differs between any two billed calls and says nothing about the answer)."""
SCREEN_WIDTH = 100


def cell_counts(table: pl.DataFrame) -> dict[str, int]:
    """Counts of a comparison's or a grid's cells (no score): all, compared, of those
    differing and the same, and not compared."""
    compared = table.filter(pl.col("compared"))
    differing = compared.filter(pl.col("differs")).height
    return {"cells": table.height, "compared": compared.height, "differing": differing,
            "same": compared.height - differing, "not_compared": table.height - compared.height}


def counts_line(counts: dict[str, int], listed: int | None = None) -> str:
    """The closing line of `fragbench compare` (two series or a grid); `listed` is how many
    cells a --differs-only listing showed."""
    return (f"{counts['cells']} cells: {counts['compared']} compared, of which "
            f"{counts['differing']} differ and {counts['same']} are the same; "
            f"{counts['not_compared']} not compared"
            + (f"; only the {listed} that differ are listed." if listed is not None else "."))


def _wrap(lines: list[str], width: int) -> list[str]:
    """Every line within `width` columns: a longer one wraps, its rest indented."""
    wrapped = []
    for line in lines:
        wrapped += textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False,
                                 drop_whitespace=True) or [""]
    return wrapped


def _state_warning(name: str, info: dict[str, Any]) -> list[str]:
    """A warning for a series that is not complete (where and why it stopped), else none."""
    if info["state"] == "complete":
        return []
    stop = info.get("stop")
    where = f" at call {stop['seq']} ({stop['reason']}: {stop['detail']})" if stop else ""
    return [f"WARNING: series {name}, {info['series']}, is {info['state']}{where}."]


@attrs.frozen
class Comparison:
    """Two series side by side: who they are, the warnings to show first, and the table."""

    dir_a: Path
    dir_b: Path
    info_a: dict[str, Any]
    info_b: dict[str, Any]
    warnings: list[str]
    table: pl.DataFrame

    @property
    def counts(self) -> dict[str, int]:
        """Counts of cells (no score): all, compared, of those differing and the same, and not
        compared."""
        return cell_counts(self.table)

    @property
    def sides(self) -> list[str]:
        """Who is A and who is B, a non-model baseline named as such."""
        return [f"A: {describe(self.info_a)}", f"B: {describe(self.info_b)}"]

    @property
    def lines(self) -> list[str]:
        """Warnings first, then who is A and who is B on one line (unwrapped)."""
        return [*self.warnings, " · ".join(self.sides)]


def _side(path: Path) -> tuple[Path, dict[str, Any], pl.DataFrame]:
    dirs = series_dirs(path)
    if len(dirs) != 1:
        raise SeriesError(f"{path}: holds {len(dirs)} series; name one series folder.")
    d = dirs[0]
    info = series_info(d)
    tables = scan(d, strict=True)
    calls = tables["calls"].select(*CELL, "call_id", "status", "cost_usd", "request_sha256")
    if "citations_per_call" in tables:
        per_call = tables["citations_per_call"].select(
            "call_id", "parsed", "n_citations", "n_valid", "n_invalid",
            "conditions_cited_validly")
        calls = calls.join(per_call, on="call_id", how="left")
    else:  # a series whose plan had no citations measure: nothing measured, not zero
        calls = calls.with_columns(
            pl.lit(None, pl.Boolean).alias("parsed"),
            *[pl.lit(None, pl.Int32).alias(c) for c in ("n_citations", "n_valid", "n_invalid")],
            pl.lit(None, pl.List(pl.String)).alias("conditions_cited_validly"),
        )
    try:
        return d, info, calls.drop("call_id").collect()
    except PARQUET_ERRORS:  # damaged past its metadata (read above): say which file
        for name, rel in tables_of(d):
            if name in ("calls", "citations_per_call"):
                read_table(d, name, rel)  # raises, naming the file
        raise


def describe(info: dict[str, Any]) -> str:
    kind = "model" if info["is_model"] else "NON-MODEL BASELINE"
    return f"{info['series']} ({info['label']}, {kind})"


def _refuse_partial_provider_comparison(info_a: dict[str, Any], info_b: dict[str, Any]) -> None:
    """Protocol 1.0, Limits: a second provider's series is never presented as a comparison
    unless it is whole. Two model series of different backend plugins (providers) are compared
    only when both are complete; a partial one has its own report. Series of one provider, or
    a model beside the offline baseline, are compared with warnings as before."""
    if not (info_a["is_model"] and info_b["is_model"]) or \
            info_a["backend_plugin"] == info_b["backend_plugin"]:
        return
    partial = [f"{info['series']} ({info['backend_plugin']}) is {info['state']}"
               for info in (info_a, info_b) if info["state"] != "complete"]
    if partial:
        raise SeriesError(f"{' and '.join(partial)}: series of two providers are compared only "
                          "when both are complete (protocol 1.0, Limits); read each series' "
                          "own report instead.")


def _changed(field: str, left: str = "a", right: str = "b") -> pl.Expr:
    """Whether `field` differs between two sides (columns FIELD_left and FIELD_right). Null
    equals null (a count neither side measured); the conditions cited validly are compared
    as sets (their order is the answer's). The one comparison of a field that the pair, the
    grid and both pages use."""
    a, b = pl.col(f"{field}_{left}"), pl.col(f"{field}_{right}")
    if field == "conditions_cited_validly":
        a, b = a.list.unique().list.sort(), b.list.unique().list.sort()
    return a.ne_missing(b)


def _differs() -> pl.Expr:
    """True when a compared cell differs in any of DIFFERS_ON; null when not compared."""
    changed = pl.any_horizontal([_changed(field) for field in DIFFERS_ON])
    return pl.when(pl.col("compared")).then(changed).alias("differs")


def differing_fields(table: pl.DataFrame) -> list[list[str]]:
    """Per row of a comparison table, which of DIFFERS_ON differ (empty when not compared):
    what the page shows beside `differs`, from the same expressions."""
    flags = table.select(
        pl.when(pl.col("compared")).then(_changed(field)).otherwise(False).alias(field)
        for field in DIFFERS_ON)
    return [[field for field in DIFFERS_ON if row[field]] for row in flags.to_dicts()]


def _warnings(info_a: dict[str, Any], info_b: dict[str, Any], table: pl.DataFrame) -> list[str]:
    warnings = []
    if info_a["plan_sha256"] != info_b["plan_sha256"]:
        warnings.append("WARNING: the two series ran different frozen plans; cells whose "
                        "requests differ are not compared.")
    for side, info in (("A", info_a), ("B", info_b)):
        warnings += _state_warning(side, info)
    uncompared = table.filter(~pl.col("compared")).height
    if uncompared:
        warnings.append(f"WARNING: {uncompared} of {table.height} cells are not compared "
                        "(each says why); they are never counted as compared.")
    return warnings


def compare_series(a: Path, b: Path) -> Comparison:
    """Both series read, the provider guard applied, the side-by-side table built: one row
    per planned cell and repetition, with `compared`, `differs` (null when not compared) and
    the `note` saying why a cell is not compared."""
    dir_a, info_a, calls_a = _side(a)
    dir_b, info_b, calls_b = _side(b)
    _refuse_partial_provider_comparison(info_a, info_b)
    table = calls_a.join(calls_b, on=CELL, how="full", coalesce=True, suffix="_b")
    table = table.rename({c: f"{c}_a" for c in SIDE if c in calls_a.columns})
    same_request = pl.col("request_sha256") == pl.col("request_sha256_b")
    table = table.with_columns(
        (pl.col("status_a").is_in(ANSWERED) & pl.col("status_b").is_in(ANSWERED)
         & same_request).fill_null(False).alias("compared"),
    ).with_columns(
        _differs(),
        pl.when(pl.col("compared")).then(pl.lit(""))
        .when(pl.col("status_a").is_null()).then(pl.lit("cell absent from A"))
        .when(pl.col("status_b").is_null()).then(pl.lit("cell absent from B"))
        .when(~same_request).then(pl.lit("not compared: the two calls sent different requests"))
        .otherwise(pl.format("not compared: A {}, B {}", "status_a", "status_b"))
        .alias("note"),
    ).sort(CELL)
    columns = [*CELL, "compared", "differs"]
    for c in SIDE:
        columns += [f"{c}_a", f"{c}_b"] if f"{c}_a" in table.columns else []
    table = table.select(*columns, "note")
    return Comparison(dir_a, dir_b, info_a, info_b, _warnings(info_a, info_b, table), table)


def compare(a: Path, b: Path) -> tuple[list[str], pl.DataFrame]:
    """Warnings (first), who is A and B on one line, and the table (`compare_series`)."""
    comparison = compare_series(a, b)
    return comparison.lines, comparison.table


def _pair(a: Any, b: Any) -> str:
    return f"{'—' if a is None else a} / {'—' if b is None else b}"


def _verdict(row: dict[str, Any]) -> str:
    if row["compared"]:
        return "differs" if row["differs"] else "same"
    if row["note"].startswith("not compared: the two calls"):
        return "not compared (different requests)"
    return "not compared"


def _cell_name(row: dict[str, Any]) -> str:
    return " ".join(str(row[c]) if c != "rep" else f"r{row[c]}" for c in CELL)


def _columns(head: list[str], rows: list[list[str]]) -> list[str]:
    """A table as lines, each column as wide as its widest value, two spaces apart. The first
    column is the verdict (differs, same or not compared) and the last the cell's name, the
    one column of any length (a case id can be long): when a line is wider than the screen,
    what wraps onto the next, indented, line is the rest of that cell's name, never a verdict
    or a count that could be read as the next cell's."""
    widths = [max(len(v) for v in column) for column in zip(head, *rows, strict=True)]
    return ["  ".join(f"{v:<{w}}" for v, w in zip(line, widths, strict=True)).rstrip()
            for line in (head, *rows)]


def summary(comparison: Comparison, width: int = SCREEN_WIDTH, differs_only: bool = False
            ) -> list[str]:
    """What `fragbench compare` prints, narrow where the whole table (`--out`) is wide: the
    warnings, who is A and who is B, one line per cell (differs, same or not compared first,
    then status A / B, valid citations A / B, and last the cell: case lang variant mode rep),
    then counts of cells. Every line fits `width` columns: a longer one wraps, its rest
    indented, so that a line that starts at the margin always starts with its own cell's
    verdict (`_columns`). Counts of cells only, no score. With `differs_only`, only the cells
    that differ are listed (the counts stay whole)."""
    rows = comparison.table.to_dicts()
    if differs_only:
        rows = [r for r in rows if r["differs"]]
    lines = _columns(["differs", "status A / B", "valid A / B", "cell"],
                     [[_verdict(r), _pair(r["status_a"], r["status_b"]),
                       _pair(r["n_valid_a"], r["n_valid_b"]), _cell_name(r)] for r in rows])
    lines.append(counts_line(comparison.counts, len(rows) if differs_only else None))
    return _wrap([*comparison.warnings, *comparison.sides, *lines], width)


# -- More than two series: a grid of cells x series ---------------------------------------------

GRID_SIDE = ["status", "parsed", "n_valid", "n_invalid", "conditions_cited_validly",
             "request_sha256"]


@attrs.frozen
class Grid:
    """Several series cell by cell (like promptfoo's matrix view): one row per planned cell and
    repetition, per series its status and citation counts (columns FIELD_S1, FIELD_S2, …: the
    series named as the terminal and the page name them, `side_name`). A cell is compared
    only when every series answered (completed or incomplete) the same request; it `differs`
    when any series differs from the first in one of DIFFERS_ON (null when not compared, as
    for two series)."""

    dirs: list[Path]
    infos: list[dict[str, Any]]
    warnings: list[str]
    table: pl.DataFrame

    @property
    def counts(self) -> dict[str, int]:
        """Counts of cells, as Comparison.counts."""
        return cell_counts(self.table)

    @property
    def sides(self) -> list[str]:
        """Who each column is: S1, S2, … (a non-model baseline named as such)."""
        return [f"{side_name(i)}: {describe(info)}" for i, info in enumerate(self.infos)]


def side_name(i: int) -> str:
    """The grid's name of the series at position i (from 0): S1, S2, … on screen, on the page
    and in the table's columns (FIELD_S1)."""
    return f"S{i + 1}"


def compare_grid(paths: list[Path]) -> Grid:
    """Every series read (each one series folder), the provider guard applied to every pair,
    and the grid built: one row per cell present in any series."""
    sides = [_side(p) for p in paths]
    for i, (_, a, _) in enumerate(sides):
        for _, b, _ in sides[i + 1:]:
            _refuse_partial_provider_comparison(a, b)
    table: pl.DataFrame | None = None
    for i, (_, _, calls) in enumerate(sides):
        part = calls.select(*CELL, *(pl.col(c).alias(f"{c}_{side_name(i)}") for c in GRID_SIDE))
        table = part if table is None else table.join(part, on=CELL, how="full",
                                                       coalesce=True)
    assert table is not None
    n = len(sides)
    first = side_name(0)
    answered = [pl.col(f"status_{side_name(i)}").is_in(ANSWERED) for i in range(n)]
    same_request = [pl.col(f"request_sha256_{side_name(i)}") == pl.col(f"request_sha256_{first}")
                    for i in range(1, n)]
    changed = [_changed(field, first, side_name(i)) for i in range(1, n)
               for field in DIFFERS_ON]
    table = table.with_columns(
        pl.all_horizontal([*answered, *same_request]).fill_null(False).alias("compared"),
    ).with_columns(
        pl.when(pl.col("compared")).then(pl.any_horizontal(changed)).alias("differs"),
    ).sort(CELL)
    columns = [*CELL, "compared", "differs"]
    columns += [f"{c}_{side_name(i)}" for i in range(n) for c in GRID_SIDE
                if c != "request_sha256"]
    table = table.select(columns)
    infos = [info for _, info, _ in sides]
    warnings = []
    if len({info["plan_sha256"] for info in infos}) > 1:
        warnings.append("WARNING: the series ran different frozen plans; cells whose requests "
                        "differ are not compared.")
    for i, info in enumerate(infos):
        warnings += _state_warning(side_name(i), info)
    uncompared = table.filter(~pl.col("compared")).height
    if uncompared:
        warnings.append(f"WARNING: {uncompared} of {table.height} cells are not compared "
                        "(not every series answered the same request); they are never "
                        "counted as compared.")
    return Grid([d for d, _, _ in sides], infos, warnings, table)


def about(result: Comparison | Grid) -> dict[str, Any]:
    """What `compare --out FILE` writes once, beside the table (`about_path`): who each side is
    (A and B, or S1, S2, …: the sides the table's columns FIELD_a and FIELD_b, or FIELD_S1,
    FIELD_S2, … name), the warnings the terminal prints first, and the counts of cells. The
    table itself has one row per cell and no warning column: a warning is about the series,
    not about a cell, and repeated on every row it said nothing more."""
    if isinstance(result, Comparison):
        named = [("A", result.dir_a, result.info_a), ("B", result.dir_b, result.info_b)]
    else:
        named = [(side_name(i), d, info)
                 for i, (d, info) in enumerate(zip(result.dirs, result.infos, strict=True))]
    return {
        "sides": [{"side": name, "experiment": info["experiment"], "series": info["series"],
                   "folder": str(folder), "label": info["label"], "is_model": info["is_model"],
                   "state": info["state"], "stop_reason": (info.get("stop") or {}).get("reason")}
                  for name, folder, info in named],
        "warnings": list(result.warnings),
        "counts": result.counts,
    }


def about_path(out: Path) -> Path:
    """Where `about` goes for `--out FILE`: FILE.json (cells.csv -> cells.csv.json), so that
    the tables of two formats side by side keep one each."""
    return out.with_name(out.name + ".json")


def _grid_side(row: dict[str, Any], i: int) -> str:
    status = row[f"status_{side_name(i)}"]
    if status is None:
        return "absent"
    valid, invalid = row[f"n_valid_{side_name(i)}"], row[f"n_invalid_{side_name(i)}"]
    counts = "" if valid is None else f" {valid}v/{invalid}x"
    return f"{status}{counts}"


def grid_summary(grid: Grid, differs_only: bool = False, width: int = SCREEN_WIDTH
                 ) -> list[str]:
    """What `fragbench compare S1 S2 S3 …` prints: the warnings, who each column is, then one
    line per cell (differs, same or not compared first, then per series its status and
    valid/invalid citations, `Nv/Mx`, and last the cell: case lang variant mode rep), then
    counts of cells, every line within `width` columns as in `summary`. With `differs_only`,
    only the cells that differ are listed (the counts stay whole)."""
    rows = grid.table.to_dicts()
    if differs_only:
        rows = [r for r in rows if r["differs"]]
    n = len(grid.infos)
    lines = _columns(
        ["differs", *(side_name(i) for i in range(n)), "cell"],
        [[("differs" if r["differs"] else "same") if r["compared"] else "not compared",
          *(_grid_side(r, i) for i in range(n)), _cell_name(r)] for r in rows])
    lines.append(counts_line(grid.counts, len(rows) if differs_only else None))
    return _wrap([*grid.warnings, *grid.sides, *lines], width)


def grid_differing_fields(grid: Grid) -> list[list[list[str]]]:
    """Per row of the grid, per series, which of DIFFERS_ON differ from the first series'
    (S1's own list is always empty; every list is empty when the cell is not compared): what
    the grid page outlines, from the expressions `differs` uses (list fields as sets)."""
    n = len(grid.infos)
    flags = grid.table.select(
        pl.when(pl.col("compared")).then(_changed(field, side_name(0), side_name(i)))
        .otherwise(False).alias(f"{field}_{side_name(i)}")
        for i in range(1, n) for field in DIFFERS_ON)
    return [[[], *([f for f in DIFFERS_ON if row[f"{f}_{side_name(i)}"]] for i in range(1, n))]
            for row in flags.to_dicts()]
