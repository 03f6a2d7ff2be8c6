"""Loading series with Polars, and comparing two series cell by cell.

`scan(path)` finds every series at or under `path` (a folder holding `series.json`) and returns
one LazyFrame per table name, over all of them, with `experiment` and `series` columns.
`compare(a, b)` joins two series on (case, lang, variant, mode, rep). A cell is compared only
when both sides answered (status completed or incomplete); any other cell says so, and a
series that is stopped, interrupted or incomplete is named in the first line. Series of two
providers (model backends of different plugins) are compared only when both are complete.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from fragbench.errors import SeriesError
from fragbench.series import MEASURES_FILE, MONEY, read_json

CELL = ["case", "lang", "variant", "mode", "rep"]
SIDE = ["status", "parsed", "n_citations", "n_valid", "n_invalid", "conditions_cited_validly",
        "cost_usd"]


def series_dirs(path: Path) -> list[Path]:
    if (path / "series.json").exists():
        return [path]
    found = sorted(p.parent for p in path.glob("**/series.json"))
    if not found:
        raise SeriesError(f"{path}: holds no recorded series (no series.json found); point to "
                          "a series folder or a folder of them.")
    return found


def _refuse_inexact_money(frame: pl.LazyFrame, series_dir: Path, rel: str) -> None:
    """Money (`*_usd` columns) must be exact decimals: one table of float money (written
    before money was exact, or by a measure that used floats) would make the relaxed concat
    below turn every series' money into floats, silently."""
    try:
        schema = frame.collect_schema()  # Parquet metadata only, no data read
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise SeriesError(f"{series_dir / rel}: cannot be read ({exc}).") from None
    for column, dtype in schema.items():
        if column.endswith("_usd") and dtype != MONEY:
            raise SeriesError(
                f"{series_dir / rel}: money column {column} is {dtype}, not the exact {MONEY}; "
                f"rebuild the series' tables with `fragbench measure {series_dir}` (or fix the "
                "measure that writes it).")


def scan(path: str | Path) -> dict[str, pl.LazyFrame]:
    """Table name -> LazyFrame over every series at or under `path`."""
    frames: dict[str, list[pl.LazyFrame]] = {}
    for d in series_dirs(Path(path)):
        info = read_json(d / "series.json")
        tables = [(e["table"], e["path"]) for e in read_json(d / MEASURES_FILE)]
        tables += [("retrieval", "retrieval.parquet"), ("facts", "facts.parquet")]
        for name, rel in tables:
            frame = pl.scan_parquet(d / rel)
            _refuse_inexact_money(frame, d, rel)
            frames.setdefault(name, []).append(
                frame.with_columns(
                    pl.lit(info["experiment"]).alias("experiment"),
                    pl.lit(info["series"]).alias("series"),
                ))
    return {name: pl.concat(parts, how="diagonal_relaxed") for name, parts in frames.items()}


def _side(path: Path) -> tuple[dict, pl.DataFrame]:
    dirs = series_dirs(path)
    if len(dirs) != 1:
        raise SeriesError(f"{path}: holds {len(dirs)} series; name one series folder.")
    d = dirs[0]
    info = {**read_json(d / "series.json"), **read_json(d / "status.json")}
    tables = scan(d)
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
    return info, calls.drop("call_id").collect()


def describe(info: dict) -> str:
    kind = "model" if info["is_model"] else "NON-MODEL BASELINE"
    return f"{info['series']} ({info['label']}, {kind})"


def _refuse_partial_provider_comparison(info_a: dict, info_b: dict) -> None:
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


def compare(a: Path, b: Path) -> tuple[list[str], pl.DataFrame]:
    """Warnings (first) and the side-by-side table, one row per planned cell and repetition."""
    info_a, calls_a = _side(a)
    info_b, calls_b = _side(b)
    _refuse_partial_provider_comparison(info_a, info_b)
    table = calls_a.join(calls_b, on=CELL, how="full", coalesce=True, suffix="_b")
    table = table.rename({c: f"{c}_a" for c in SIDE if c in calls_a.columns})
    answered = ["completed", "incomplete"]
    same_request = pl.col("request_sha256") == pl.col("request_sha256_b")
    table = table.with_columns(
        (pl.col("status_a").is_in(answered) & pl.col("status_b").is_in(answered)
         & same_request).fill_null(False).alias("compared"),
    ).with_columns(
        pl.when(pl.col("compared")).then(pl.lit(""))
        .when(pl.col("status_a").is_null()).then(pl.lit("cell absent from A"))
        .when(pl.col("status_b").is_null()).then(pl.lit("cell absent from B"))
        .when(~same_request).then(pl.lit("not compared: the two calls sent different requests"))
        .otherwise(pl.format("not compared: A {}, B {}", "status_a", "status_b"))
        .alias("note"),
    ).sort(CELL)
    columns = [*CELL, "compared"]
    for c in SIDE:
        columns += [f"{c}_a", f"{c}_b"] if f"{c}_a" in table.columns else []
    table = table.select(*columns, "note")

    warnings = []
    if info_a["plan_sha256"] != info_b["plan_sha256"]:
        warnings.append("WARNING: the two series ran different frozen plans; cells whose "
                        "requests differ are not compared.")
    for side, info in (("A", info_a), ("B", info_b)):
        if info["state"] != "complete":
            stop = info.get("stop")
            where = (f" at call {stop['seq']} ({stop['reason']}: {stop['detail']})" if stop
                     else "")
            warnings.append(f"WARNING: series {side}, {info['series']}, is {info['state']}"
                            f"{where}.")
    uncompared = table.filter(~pl.col("compared")).height
    if uncompared:
        warnings.append(f"WARNING: {uncompared} of {table.height} cells are not compared "
                        "(see the note column); they are never counted as compared.")
    header = f"A: {describe(info_a)} · B: {describe(info_b)}"
    return [*warnings, header], table
