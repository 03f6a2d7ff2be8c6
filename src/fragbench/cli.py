"""The `fragbench` command: a thin layer over the library.

Imports of the library (Polars, the SDKs) happen inside the commands, so `fragbench --help`
stays fast. Errors a user can cause print one line and exit non-zero; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="fragbench",
    help="Pre-registered, budget-safe retrieval benchmarking (protocol 1.0).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

OUTPUT_FORMATS = (".parquet", ".csv", ".jsonl")


def _err(message: str) -> None:
    typer.echo(f"fragbench: {message}", err=True)


@app.command()
def retrieve(
    corpus: Annotated[list[Path], typer.Argument(help="Case files or folders of them.")],
    out: Annotated[Path, typer.Option(help="Output file: .parquet, .csv or .jsonl.")],
    chunk_size: Annotated[int, typer.Option(min=1, help="Sentences per chunk.")] = 3,
    top_k: Annotated[int, typer.Option(min=1, help="Chunks kept per passage.")] = 1,
    chunker: Annotated[str, typer.Option(help="Chunker plugin.")] = "sentence-groups",
    scorer: Annotated[str, typer.Option(help="Scorer plugin.")] = "sqrt-lexical",
) -> None:
    """Chunk, score and select: one row per chunk of every case x language x variant."""
    from fragbench.corpus import load_corpus
    from fragbench.errors import FragbenchError
    from fragbench.plugins import registry
    from fragbench.retrieval import retrieve as do_retrieve
    from fragbench.tables import write_table

    if out.suffix not in OUTPUT_FORMATS:
        raise FragbenchError(f"--out {out}: unknown format; end the file name in "
                             f"{', '.join(OUTPUT_FORMATS)}.")
    reg = registry()
    chunker_obj = reg.get("chunker", chunker, where="--chunker")
    scorer_obj = reg.get("scorer", scorer, where="--scorer")
    cases = load_corpus(corpus)
    table = do_retrieve(cases, chunker_obj, scorer_obj, [(chunk_size, top_k)])
    write_table(table, out)
    selected = table.filter(table["selected"]).height
    typer.echo(f"{table.height} chunks, {selected} selected, written to {out}")


@app.command()
def plan(
    experiment: Annotated[Path, typer.Argument(help="Experiment folder.")],
    out: Annotated[Path, typer.Option(help="Outputs root whose series journals count too.")]
    = Path("outputs"),
) -> None:
    """Print the schedule, the reservations and the balance. Sends nothing."""
    from decimal import Decimal

    from fragbench.budget import usd
    from fragbench.config import load_experiment
    from fragbench.journal import budget_spent, ledger_path
    from fragbench.plan import build_plan

    exp = load_experiment(experiment)
    doc = build_plan(exp)
    typer.echo(f"experiment {doc['experiment']}: {len(doc['schedule'])} calls, "
               f"reserved for backend {doc['budget']['reserved_for']}")
    typer.echo(f"{'seq':>3}  {'call':<28} {'supplied':<20} {'bytes':>5}  reserved USD")
    for c in doc["schedule"]:
        typer.echo(f"{c['seq']:>3}  {c['id']:<28} {' '.join(c['supplied_ids']):<20} "
                   f"{c['request_bytes']:>5}  {c['reserved_usd']}")
    b = doc["budget"]
    typer.echo(f"total reservation {b['total_reservation_usd']} USD; balance "
               f"{b['balance_usd']} USD (ceiling {b['ceiling_usd']} - prior "
               f"{b['prior_spend_usd']}); {'fits' if b['fits'] else 'DOES NOT FIT'}")
    already = budget_spent(ledger_path(exp.dir, exp.budget.id), out, exp.budget.id)
    left = Decimal(b["balance_usd"]) - already
    total = Decimal(b["total_reservation_usd"])
    typer.echo(f"already recorded on budget {exp.budget.id}: {usd(already)} USD; balance now "
               f"{usd(left)} USD; a new series {'fits' if total <= left else 'DOES NOT FIT'}")


@app.command()
def freeze(experiment: Annotated[Path, typer.Argument(help="Experiment folder.")]) -> None:
    """Write experiment.json: every parameter, hash and planned request. Commit it."""
    from fragbench.config import load_experiment
    from fragbench.plan import freeze as do_freeze

    path = do_freeze(load_experiment(experiment))
    typer.echo(f"frozen plan written to {path}; commit it before collecting")


@app.command()
def run(
    experiment: Annotated[Path, typer.Argument(help="Experiment folder.")],
    series: Annotated[str | None, typer.Option(help="Series name (default: the backend's).")]
    = None,
    backend: Annotated[str | None, typer.Option(help="Backend from the config (default: the "
                                                "series name if it is one, else the config's "
                                                "default_backend).")] = None,
    out: Annotated[Path, typer.Option(help="Outputs root; series go in OUT/<experiment>/"
                                      "<series>.")] = Path("outputs"),
) -> None:
    """Verify the frozen plan, then record retrieval and collect a series. Never prompts."""
    from fragbench.budget import usd
    from fragbench.progress import Reporter
    from fragbench.run import run as do_run

    with Reporter() as reporter:
        result = do_run(experiment, series=series, backend=backend, out=out,
                        on_progress=reporter.update)
    kind = "" if result.is_model else ": a non-model baseline, not a model's result"
    typer.echo(f"series {result.series_dir.name}: backend {result.label}{kind}")
    typer.echo(f"{result.sent} of {result.calls} calls sent; spent {usd(result.spent_usd)} USD")
    typer.echo(f"outputs in {result.series_dir}; report: {result.series_dir / 'report.md'}")
    if result.stop:
        _err(f"series stopped at call {result.stop.seq} ({result.stop.call_id}): "
             f"{result.stop.reason}: {result.stop.detail}. It is final; see the README, "
             "'after a stop'.")
        raise typer.Exit(3)


@app.command()
def measure(
    series_dir: Annotated[Path, typer.Argument(help="A recorded series folder.")],
    diagnostic: Annotated[list[str] | None, typer.Option(
        help="Also run this diagnostic measure plugin (repeatable).")] = None,
) -> None:
    """Recompute every table and the report of a recorded series. No call is made."""
    from fragbench.report import write_report
    from fragbench.series import derive_tables

    tables = derive_tables(series_dir, tuple(diagnostic or ()))
    report = write_report(series_dir)
    typer.echo(f"{len(tables)} tables and {report.name} rebuilt in {series_dir}")


@app.command()
def report(series_dir: Annotated[Path, typer.Argument(help="A recorded series folder.")]
           ) -> None:
    """Write report.md and its figures (PNG, SVG) for a recorded series."""
    from fragbench.report import write_report

    typer.echo(f"report written to {write_report(series_dir)}")


@app.command()
def compare(
    series_a: Annotated[Path, typer.Argument(help="A series folder.")],
    series_b: Annotated[Path, typer.Argument(help="Another series folder.")],
    out: Annotated[Path | None, typer.Option(help="Also write the table (.parquet, .csv, "
                                             ".jsonl).")] = None,
) -> None:
    """Join two series cell by cell (case, lang, variant, mode, rep), side by side."""
    import polars as pl

    from fragbench.compare import compare as do_compare
    from fragbench.errors import FragbenchError
    from fragbench.tables import write_table

    if out is not None and out.suffix not in OUTPUT_FORMATS:
        raise FragbenchError(f"--out {out}: unknown format; end the file name in "
                             f"{', '.join(OUTPUT_FORMATS)}.")
    lines, table = do_compare(series_a, series_b)
    for line in lines:
        typer.echo(line)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=40,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        typer.echo(str(table.drop("conditions_cited_validly_a", "conditions_cited_validly_b",
                                  strict=False)))
    if out is not None:
        if lines[0].startswith("WARNING"):
            table = table.with_columns(pl.lit(" ".join(lines[:-1])).alias("warning"))
        write_table(table, out)
        typer.echo(f"written to {out}")


@app.command()
def plugins() -> None:
    """List the registered chunkers, scorers, backends and measures."""
    from fragbench.plugins import registry

    for e in sorted(registry().entries, key=lambda e: (e.kind, e.name)):
        where = "built-in" if e.builtin else "plugin"
        typer.echo(f"{e.kind:<8} {e.name:<18} {e.origin} {e.version} ({where})")


def main() -> None:
    from fragbench.errors import FragbenchError

    try:
        app()
    except FragbenchError as exc:
        _err(str(exc))
        sys.exit(exc.exit_code)
