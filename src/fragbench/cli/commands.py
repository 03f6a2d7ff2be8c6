"""The `fragbench` command: a thin layer over the library.

Imports of the library (Polars, the SDKs) happen inside the commands, so `fragbench --help`
stays fast. Usage errors and the errors a user can cause print in one style, one line
`fragbench: ...`, and the exit code tells them apart (`fragbench.errors`: 2 usage, 3 series
stopped, 4 refused, 1 internal error, which keeps its traceback, 128 + N interrupted by signal
N). Everything printed goes through the same redaction as everything written, and printing is
best effort (`fragbench.cli.progress.emit`): a closed stdout or stderr (`| head`, a terminal that
closed) changes nothing a command does or records. `--version` prints the installed
distribution's version; `--install-completion` and `--show-completion` are Typer's shell
completion.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from fragbench.cli.output import err, redactor, say

INT32_MAX = 2**31 - 1
"""Chunk sizes and top-k are stored as Int32 in the tables."""
OUTPUT_FORMATS = (".parquet", ".csv", ".jsonl")


def _whole_option(text: str, most: int) -> int:
    """A whole-number option from 1 to `most`, in the digits 0-9: click's int() would also read
    "٣", "３", "1_000" and " 3 "."""
    if re.fullmatch(r"[0-9]{1,9}", text, re.ASCII) is None or not 1 <= int(text) <= most:
        raise typer.BadParameter(f"give a whole number from 1 to {most} in the digits 0-9, "
                                 f"not {text[:40]!r}")
    return int(text)


def _exit(code: int) -> None:
    """Exit, without the interpreter's last sweep over every object a command left (Polars
    and matplotlib leave hundreds of thousands: about a fifth of a second). Only the final
    collection is skipped: files are closed and buffers flushed as usual."""
    import gc

    gc.freeze()
    sys.exit(code)


class _Group(TyperGroup):
    """Every way out of the command in one style, in process (CliRunner) as from a shell."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
        from typer.exceptions import Abort

        from fragbench.errors import EXIT_REFUSED, EXIT_USAGE, FragbenchError

        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except NoArgsIsHelpError as exc:
            typer.echo(exc.format_message())
            sys.exit(0)
        except ClickException as exc:
            where = getattr(getattr(exc, "ctx", None), "command_path", "fragbench")
            message = exc.format_message().rstrip(".")
            err(f"{message}; see `{where} --help`.")
            sys.exit(getattr(exc, "exit_code", EXIT_USAGE))
        except FragbenchError as exc:
            err(str(exc))
            sys.exit(exc.exit_code)
        except OSError as exc:  # a file or folder the user named or must fix: not our bug
            where = f"{exc.filename}: " if exc.filename else ""
            err(f"{where}{exc.strerror or exc}; check that the path is right and writable "
                 "and that the disk has room, then run again.")
            sys.exit(EXIT_REFUSED)
        except Abort:
            err("interrupted.")
            sys.exit(130)
        _exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="fragbench",
    cls=_Group,
    help="Pre-registered, budget-safe retrieval benchmarking (protocol 1.0).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from fragbench import __version__

        say(f"fragbench {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the installed fragbench version and exit.")] = False) -> None:
    """Pre-registered, budget-safe retrieval benchmarking (protocol 1.0)."""


@app.command()
def retrieve(
    out: Annotated[Path, typer.Option(
        help="Output: a file (.parquet, .csv or .jsonl) for one setting; for a sweep of "
             "several settings (--collection), a folder that gets one Parquet table per "
             "setting, chunk-size-N_top-k-K_scorer-NAME.parquet, and sweep.json listing "
             "them.")],
    corpus: Annotated[list[Path] | None, typer.Argument(
        help="Case files or folders of them (per-passage mode).")] = None,
    chunk_size: Annotated[str | None, typer.Option(
        help="Chunk size in the chunker's unit: sentences for sentence-groups (and with "
             "--collection), word tokens for token-window. With --collection, a comma list "
             "sweeps (2,3). Default 3.")] = None,
    top_k: Annotated[str | None, typer.Option(
        help="Chunks kept per passage (per query with --collection, where a comma list "
             "sweeps: 1,2). Default 1.")] = None,
    chunker: Annotated[str, typer.Option(help="Chunker plugin (per-passage mode).")]
    = "sentence-groups",
    scorer: Annotated[list[str] | None, typer.Option(
        help="Scorer plugin (default sqrt-lexical). With --collection, several sweep: "
             "repeat the option or separate names by commas.")] = None,
    collection: Annotated[Path | None, typer.Option(
        help="Collection mode: sentences (.parquet or .jsonl: passage, position, lang, text); "
             "every query meets every chunk.")] = None,
    queries: Annotated[Path | None, typer.Option(
        help="With --collection: queries (.parquet or .jsonl: query, lang, text).")] = None,
    sweep: Annotated[Path | None, typer.Option(
        help="With --collection: a TOML sweep file (chunk_size, top_k, scorer: each one "
             "value or a list) instead of --chunk-size, --top-k and --scorer.")] = None,
    engine: Annotated[str, typer.Option(
        help="With --collection: local (this process) or ray (shards of whole passages on "
             "a Ray cluster; needs Ray, the extra named ray). Both give the same "
             "tables.")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        help="With --engine ray: a running cluster's HOST:PORT (or ray://HOST:PORT, auto). "
             "Without it, a local Ray cluster is started for the run and stopped after "
             "(RAY_ADDRESS is not followed).")]
    = None,
    shards: Annotated[int | None, typer.Option(
        parser=lambda text: _whole_option(text, 1_000_000),
        metavar="INTEGER", help="With --engine ray: shards of the collection, 1 to 1000000 "
                                "(default: the cluster's CPUs).")] = None,
    shard_memory: Annotated[str | None, typer.Option(
        help="With --engine ray: index memory per shard (e.g. 2GiB): Ray schedules each shard "
             "task by it, and a task whose index exceeds it stops the run (exit 2, nothing "
             "written).")] = None,
    work_dir: Annotated[Path | None, typer.Option(
        help="With --engine ray: where the shard files are written (default: a temporary "
             "folder; on several machines, a folder every node reads at the same path); "
             "the files are removed after the run.")] = None,
) -> None:
    """Chunk, score and select, per passage or over a whole collection.

    Per passage: one row per chunk of every case x language x variant. With --collection: one
    row per query and rank over the whole collection, for each setting of a sweep (every
    chunk size x top-k x scorer given), on this process or on Ray (--engine ray), the same
    table either way.
    """
    from fragbench.errors import UsageError
    from fragbench.plugins import registry
    from fragbench.tables import check_output, write_table

    if collection is not None or queries is not None:
        if collection is None or queries is None or corpus:
            raise UsageError("collection mode takes --collection SENTENCES and --queries "
                             "QUERIES, and no case files.")
        _retrieve_collection(out, collection, queries, chunk_size, top_k, scorer, sweep,
                             engine, ray_address, shards, shard_memory, work_dir)
        return
    sweep_only = [name for name, value in (
        ("--sweep", sweep), ("--ray-address", ray_address), ("--shards", shards),
        ("--shard-memory", shard_memory), ("--work-dir", work_dir)) if value is not None]
    if engine != "local":
        sweep_only.insert(0, "--engine")
    if sweep_only:
        raise UsageError(f"{sweep_only[0]} is for collection mode (--collection and "
                         "--queries); per passage, an experiment's settings sweep.")
    from fragbench.retrieval.collection.sweep import from_options

    settings = from_options(chunk_size, top_k, scorer)
    if not settings.single:
        raise UsageError("several chunk sizes, top-ks or scorers are for collection mode "
                         "(--collection); per passage, an experiment's settings sweep.")
    check_output(out, OUTPUT_FORMATS)
    if not corpus:
        raise UsageError("give case files or folders, or --collection and --queries.")
    from fragbench.corpus.cases import load_corpus
    from fragbench.retrieval.passages import retrieve as do_retrieve

    reg = registry()
    scorer_obj = reg.get("scorer", settings.scorers[0], where="--scorer")
    chunker_obj = reg.get("chunker", chunker, where="--chunker")
    cases = load_corpus(corpus)
    table = do_retrieve(cases, chunker_obj, scorer_obj,
                        [(settings.chunk_sizes[0], settings.top_ks[0])])
    write_table(table, out)
    selected = table.filter(table["selected"]).height
    say(f"{table.height} chunks, {selected} selected, written to {out}")


def _retrieve_collection(out: Path, collection: Path, queries: Path, chunk_size: str | None,
                         top_k: str | None, scorer: list[str] | None, sweep_file: Path | None,
                         engine: str, ray_address: str | None, shards: int | None,
                         shard_memory: str | None, work_dir: Path | None) -> None:
    """`retrieve --collection`: everything checked (settings, output, scorers, inputs, Ray)
    before anything is computed; then every setting computed, then written."""
    from fragbench.errors import UsageError
    from fragbench.plugins import registry
    from fragbench.retrieval.collection import sweep as cs
    from fragbench.retrieval.collection.engine import (
        read_inputs,
        require_collection_packages,
        scorer_for_collection,
    )
    from fragbench.tables import check_output, write_table

    require_collection_packages()
    if sweep_file is not None:
        given = [o for o, v in (("--chunk-size", chunk_size), ("--top-k", top_k),
                                ("--scorer", scorer)) if v]
        if given:
            raise UsageError(f"--sweep {sweep_file} sets the chunk sizes, top-ks and scorers; "
                             f"leave out {', '.join(given)}.")
        settings = cs.from_file(sweep_file)
    else:
        settings = cs.from_options(chunk_size, top_k, scorer)
    if engine not in ("local", "ray"):
        raise UsageError(f"--engine {engine!r}: choose local or ray.")
    if engine == "local":
        ray_only = [o for o, v in (("--ray-address", ray_address), ("--shards", shards),
                                   ("--shard-memory", shard_memory), ("--work-dir", work_dir))
                    if v is not None]
        if ray_only:
            raise UsageError(f"{ray_only[0]} is for --engine ray.")
    if settings.single:
        check_output(out, OUTPUT_FORMATS)
    else:
        cs.check_sweep_out(out, settings)
    reg = registry()
    where = f"--sweep {sweep_file}: key scorer" if sweep_file is not None else "--scorer"
    scorers = {name: scorer_for_collection(reg.get("scorer", name, where=where))
               for name in settings.scorers}
    memory = None
    if engine == "ray":
        from fragbench.retrieval.collection import ray as cr

        memory = cr.parse_bytes(shard_memory) if shard_memory is not None else None
        cr.check_scorers(scorers)
        cr.import_ray()
        if work_dir is not None and not work_dir.is_dir():
            raise UsageError(f"--work-dir {work_dir}: no such folder; create it, or leave "
                             "the option out.")
    sentences_lf, query_frame = read_inputs(collection, queries)
    import polars as pl

    try:  # nothing is written before every setting is computed
        if engine == "ray":
            results, report = cr.compute_ray(sentences_lf, query_frame, settings, scorers,
                                             address=ray_address, shards=shards,
                                             shard_memory=memory, work_dir=work_dir)
            say(f"ray: {cs.counted(report.shards, 'shard')}, "
                f"{cs.counted(len(report.tasks), 'task')} on "
                f"{report.cluster_cpus:g} CPUs of the cluster at {report.address}; largest "
                f"shard index {report.largest_index()} bytes")
        else:
            results = cs.compute_local(sentences_lf, query_frame, settings, scorers)
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
        # `read_inputs` has read every value of the queries and checked the collection's
        # columns: what Polars still refuses is in the collection (a file changed under us).
        from fragbench.retrieval.collection.engine import unreadable

        raise unreadable("--collection", collection, exc, "; fix that value") from None
    if settings.single:
        [table] = results.values()
        write_table(table, out)
        say(f"{cs.counted(table.height, 'result')} for "
            f"{cs.counted(table['query'].n_unique(), 'query', 'queries')}, written to {out}")
        return
    for line in cs.write_sweep(results, settings, out, engine):
        say(line)


@app.command()
def plan(
    experiment: Annotated[Path, typer.Argument(help="Experiment folder.")],
    backend: Annotated[str | None, typer.Option(help="Show this backend's reservations and "
                                                "balance (default: the config's "
                                                "default_backend).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole plan, with the "
                                          "review below it, as JSON.")] = False,
    calls: Annotated[bool, typer.Option("--calls", help=f"List every call (by default a plan "
                                        f"of more than {PLAN_CALLS_SHOWN} calls lists its "
                                        f"first {PLAN_CALLS_HEAD}).")] = False,
) -> None:
    """Print the verdict first (the endpoint, the balance and whether a new series fits, the
    ledger store, whether experiment.json is current), then the schedule with each call's
    reservation. Sends nothing.

    The endpoint: the one the backend would use and whether it is usable. The ledger store:
    the folder that holds the budget's ledger, and how many records it holds there. The drift:
    whether experiment.json is current, naming each changed file (a plugin's files included).
    A schedule of more than 100 calls lists its first 20 and says how many are left (`--calls`
    lists every one; `--json` prints the whole plan).
    """
    import json

    from fragbench.experiment.config import load_experiment
    from fragbench.experiment.plan import review

    exp = load_experiment(experiment)
    doc, info = review(exp, backend)
    if as_json:
        say(json.dumps({"plan": doc, "review": info}, ensure_ascii=False, indent=2))
        return
    say(f"experiment {doc['experiment']}: {len(doc['schedule'])} calls, reservations for "
        f"backend {info['backend']}")
    for line in _plan_verdict(info):
        say(line)
    for line in _plan_calls(doc["schedule"], info["reserved_usd"], experiment, calls):
        say(line)


PLAN_CALLS_SHOWN = 100
"""`plan` lists every call of a schedule up to this many (protocol 1.0's 72 among them)."""
PLAN_CALLS_HEAD = 20
"""The calls a longer schedule lists (`--calls`: all of them), then one line on the rest."""


def _plan_verdict(info: dict[str, Any]) -> list[str]:
    """`plan`'s verdict, printed before the schedule: the endpoint, the budget's balance and
    whether a new series fits, the ledger store, whether the frozen plan is current."""
    lines = []
    end = info["endpoint"]
    if end["usable"] is None:
        lines.append(f"endpoint: backend {info['backend']} states none (its plugin has no "
                     "check_environment).")
    elif end["usable"]:
        lines.append(f"endpoint: {end['description']}")
    else:
        lines.append(f"endpoint: NOT USABLE: {end['problem']}")
    if info["budget"] is None:
        lines.append(f"backend {info['backend']} is not priced: it draws on no budget.")
    else:
        b, ledger = info["budget"], info["ledger"]
        lines.append(
            f"total reservation {info['total_reservation_usd']} USD; budget {b['id']}: ceiling "
            f"{b['ceiling_usd']} - prior {b['prior_spend_usd']} - recorded series "
            f"{b['recorded_usd']} = balance {b['balance_usd']} USD (ledger {b['ledger']}); a "
            f"new series {'fits' if b['fits'] else 'DOES NOT FIT'}")
        lines.append(_ledger_store_line(b["id"], ledger))
    frozen = info["frozen_plan"]
    if frozen["current"]:
        lines.append(f"frozen plan {frozen['path']} is current.")
    else:
        lines.append(f"frozen plan {frozen['path']} is OUT OF DATE: "
                     f"{'; '.join(frozen['differences'])}. `run` refuses this plan: restore "
                     "what changed, or freeze deliberately.")
    return lines


def _plan_calls(schedule: list[dict[str, Any]], reserved: list[str], experiment: Path,
                every: bool) -> list[str]:
    """The schedule, one line per call with its reservation: every call when `every` or when
    there are at most PLAN_CALLS_SHOWN, else the first PLAN_CALLS_HEAD and a line saying how
    many are left, what they reserve, and how to list them."""
    from decimal import Decimal

    from fragbench.budget.money import usd

    shown = len(schedule) if every or len(schedule) <= PLAN_CALLS_SHOWN else PLAN_CALLS_HEAD
    lines = [f"{'seq':>3}  {'call':<28} {'supplied':<20} {'bytes':>5}  reserved USD"]
    for c, usd_text in zip(schedule[:shown], reserved[:shown], strict=True):
        lines.append(f"{c['seq']:>3}  {c['id']:<28} {' '.join(c['supplied_ids']):<20} "
                     f"{c['request_bytes']:>5}  {usd_text}")
    rest = [Decimal(r) for r in reserved[shown:]]
    if rest:
        lines.append(
            f"... {len(rest)} more calls (seq {schedule[shown]['seq']} to "
            f"{schedule[-1]['seq']}) not listed, reserving {usd(sum(rest))} USD, "
            f"{usd(min(rest))} to {usd(max(rest))} each; `fragbench plan {experiment} "
            "--calls` lists every call, `--json` prints the whole plan.")
    return lines


def _ledger_store_line(budget_id: str, ledger: dict[str, Any]) -> str:
    """`plan`'s line on the budget's ledger store, in the words of that store: a folder
    (FRAGBENCH_LEDGER_DIR) or a PostgreSQL server (FRAGBENCH_LEDGER_URL), whose `store_help`
    says how to point at another."""
    from fragbench.budget.ledger import Ledger
    from fragbench.budget.stores import ledger_for

    store = ledger_for(budget_id)  # not read: only which store, and its help
    held = (f"budget {budget_id} has {ledger['records']} records there ({ledger['series']} "
            "series)" if ledger["exists"] else
            f"no ledger for budget {budget_id} there yet (the first run creates it)")
    if isinstance(store, Ledger):
        elsewhere = ("a store on another machine or under another FRAGBENCH_LEDGER_DIR is not "
                     "counted." if ledger["exists"] else
                     "if this budget was spent from another store, set FRAGBENCH_LEDGER_DIR to "
                     "that folder before running.")
    elif ledger["exists"]:
        elsewhere = f"records kept in any other store are not counted ({store.store_help})."
    else:
        elsewhere = (f"if this budget was spent from a file ledger, move it here first "
                     f"(`fragbench ledger move {budget_id} --to \"$FRAGBENCH_LEDGER_URL\"`, "
                     "with FRAGBENCH_LEDGER_DIR naming its folder if it is not the default); "
                     f"{store.store_help}.")
    return f"ledger store {ledger['store']}: {held}; {elsewhere}"


@app.command()
def freeze(experiment: Annotated[Path, typer.Argument(help="Experiment folder.")]) -> None:
    """Write experiment.json: every parameter, hash and planned request. Commit it.

    A plan that is still current is left as it is, byte for byte."""
    from fragbench.experiment.config import load_experiment
    from fragbench.experiment.plan import freeze as do_freeze

    frozen = do_freeze(load_experiment(experiment))
    if frozen.written:
        say(f"frozen plan written to {frozen.path}; commit it before collecting")
    else:
        say(f"frozen plan {frozen.path} is current: left unchanged")


@app.command()
def run(
    experiment: Annotated[Path, typer.Argument(help="Experiment folder.")],
    series: Annotated[str | None, typer.Option(help="Series name (default: the backend's).")]
    = None,
    backend: Annotated[str | None, typer.Option(help="Backend from the config. Default: the "
                                                "series name if it names one; the config's "
                                                "default_backend only when neither --series "
                                                "nor --backend is given.")] = None,
    out: Annotated[Path, typer.Option(help="Outputs root; series go in OUT/<experiment>/"
                                      "<series>.")] = Path("outputs"),
) -> None:
    """Verify the frozen plan, then record retrieval and collect a series. Never prompts.

    Ctrl-C (or SIGTERM, or SIGHUP) starts no new call, waits for the call in flight and
    records it, and ends the series as interrupted, with its tables and report (exit 130, 143,
    129); a second one abandons that wait (the call stays counted at its reservation).
    """
    from fragbench.budget.money import usd
    from fragbench.calls.interruption import Interruption, on_signals
    from fragbench.cli.progress import Reporter
    from fragbench.errors import EXIT_STOPPED
    from fragbench.run import run as do_run

    interruption = Interruption()
    with on_signals(interruption), Reporter(redactor()) as reporter:
        result = do_run(experiment, series=series, backend=backend, out=out,
                        on_progress=reporter.update, say=reporter.phase,
                        interruption=interruption, notice=reporter.note)
    where = result.series_dir
    kind = "" if result.is_model else ": a non-model baseline, not a model's result"
    say(f"series {where.name}: backend {result.label}{kind}")
    say(f"{result.sent} of {result.calls} calls sent; spent {usd(result.spent_usd)} USD")
    if result.tables_error is None:
        say(f"outputs in {where}; report: {where / 'report.md'} and {where / 'report.html'}")
        say(_citations_line(result.citations, where / "report.html"))
    stop = result.stop
    if stop and stop.unrecorded:
        err(f"unrecorded outcome of call {stop.seq} (paid for, kept here since it "
             f"could not be written): {stop.unrecorded}")
    if result.tables_error is not None:
        err(result.tables_error + ".")
    if stop and stop.reason == "interrupted":
        err(_interrupted_line(result, interruption))
        raise typer.Exit(interruption.exit_code)
    if stop and result.sent_nothing:
        err(f"series stopped at call {stop.seq} ({stop.call_id}): {stop.reason}: "
             f"{stop.detail}. Nothing left this machine, so the series is not used up: fix "
             f"what the line says and run again with the same --series {where.name} (its "
             "folder is cleared and collected anew).")
        raise typer.Exit(EXIT_STOPPED)
    if stop:
        err(f"series stopped at call {stop.seq} ({stop.call_id}): {stop.reason}: "
             f"{stop.detail}. It is final; `fragbench measure {where}` rebuilds its tables; "
             "see docs/running.md, 'After a stop'.")
        raise typer.Exit(EXIT_STOPPED)
    if result.tables_error is not None:
        raise typer.Exit(EXIT_STOPPED)


def _citations_line(counts: dict[str, int] | None, page: Path) -> str:
    """The run's last line: citation outcomes (exact level), then the evidence page."""
    if counts is None:
        return f"evidence, call by call: {page}"
    valid = counts.get("valid", 0)
    invalid = {r: n for r, n in counts.items() if r != "valid"}
    why = f" ({', '.join(f'{n} {r}' for r, n in invalid.items())})" if invalid else ""
    return (f"citations: {valid} valid, {sum(invalid.values())} invalid{why}; evidence, call "
            f"by call: {page}")


def _interrupted_line(result: Any, interruption: Any) -> str:
    """What an interruption kept, and what to do next."""
    stop, where = result.stop, result.series_dir
    if result.sent_nothing:
        return (f"interrupted ({interruption.name}) before the first call: nothing was sent; "
                f"run again with the same --series {where.name} to collect it.")
    done = stop.seq - 1
    kept = ("no call" if done == 0 else "call 1" if done == 1 else f"calls 1-{done}") + \
        " recorded"
    if stop.abandoned and f"the wait for call {stop.seq}'s answer" in stop.detail:
        kept += (f"; call {stop.seq} was abandoned in flight and stays counted at its "
                 "reservation")
    elif stop.abandoned:
        # Several calls in flight (max_in_flight > 1): the stop names only the first of them,
        # its detail lists them all (and says whether the series had stopped before).
        kept += f"; {stop.detail}"
    tables = "" if result.tables_error else ", with its tables and report"
    return (f"interrupted ({interruption.name}) at call {stop.seq} of {result.calls}: {kept}. "
            f"Series {where.name} is final, as interrupted{tables} (`fragbench measure "
            f"{where}` rebuilds them); to collect again, run a new series (--series "
            f"{where.name}-2): it collects every planned call, and its budget check counts what "
            "this one spent.")


@app.command()
def measure(
    series_dir: Annotated[Path, typer.Argument(help="A recorded series folder.")],
    diagnostic: Annotated[list[str] | None, typer.Option(
        help="Also run this diagnostic measure plugin (repeatable).")] = None,
) -> None:
    """Recompute every table and the report of a recorded series. No call is made."""
    from fragbench.report.markdown import write_report
    from fragbench.series.folder import (
        derive_tables,
        journal_records,
        read_plan,
        require_series,
        without_cycle_sweeps,
    )

    require_series(series_dir)
    with without_cycle_sweeps():
        # Read once, as the journal is, for the tables and reports (which read no corpus).
        plan = read_plan(series_dir).without_corpus()
        records = journal_records(series_dir, plan)
        tables = derive_tables(series_dir, tuple(diagnostic or ()), records, plan)
        report = write_report(series_dir, tables, records, plan)
    from fragbench.report.html import REPORT_HTML
    from fragbench.series.folder import FIGURES_DIR

    figures = series_dir / FIGURES_DIR
    drawn = " and the figures" if figures.is_dir() and any(figures.iterdir()) else ""
    say(f"{len(tables)} tables, {report.name}, {REPORT_HTML}{drawn} rebuilt in {series_dir}")
    _say_chain_note(series_dir, records)


def _say_chain_note(series_dir: Path, records: list[dict[str, Any]]) -> None:
    """A journal written before the chain is read, and said to be unchecked for edits (its
    records say whether; the file is opened again only to word the note)."""
    from fragbench.series.folder import unchained
    from fragbench.series.journal import JOURNAL_FILE, chain_note

    note = chain_note(series_dir / JOURNAL_FILE) if unchained(records) else None
    if note is not None:
        say(note)


@app.command()
def report(series_dir: Annotated[Path, typer.Argument(help="A recorded series folder.")]
           ) -> None:
    """Write report.md, report.html (the evidence, call by call) and the figures of a series."""
    from fragbench.memory import release_freed_memory
    from fragbench.report.html import REPORT_HTML
    from fragbench.report.markdown import write_report
    from fragbench.series.folder import (
        drop_bodies,
        journal_records,
        read_plan,
        require_series,
        without_cycle_sweeps,
    )

    require_series(series_dir)
    with without_cycle_sweeps():
        plan = read_plan(series_dir).without_corpus()  # the pages read no corpus
        records = journal_records(series_dir, plan)  # read once, for both reports
        drop_bodies(records)  # the pages take the bodies from calls.parquet, not the journal
        release_freed_memory()
        written = write_report(series_dir, records=records, plan=plan)
    say(f"report written to {written} and {series_dir / REPORT_HTML}")
    _say_chain_note(series_dir, records)


@app.command()
def compare(
    series: Annotated[list[Path], typer.Argument(
        help="Two or more series folders (two: side by side; more: a grid of cells x "
             "series).")],
    out: Annotated[Path | None, typer.Option(help="Also write the whole table (.parquet, .csv, "
                                             ".jsonl).")] = None,
    html: Annotated[Path | None, typer.Option(help="Also write the series cell by cell "
                                              "as one self-contained page (.html).")] = None,
    differs_only: Annotated[bool, typer.Option(
        "--differs-only", help="List only the cells that differ (the counts stay whole).")
    ] = False,
) -> None:
    """Join series cell by cell (case, lang, variant, mode, rep): two side by side, more as a
    grid of cells x series.

    Prints the warnings first, one line per cell, then counts of cells (no score).
    A cell differs when status, parsed, n_valid, n_invalid or conditions cited validly do
    (with more than two series: in any series, against the first).
    A cell not compared has no `differs` (null): neither the same nor different.
    """
    from fragbench.errors import UsageError
    from fragbench.report.compare import about_path, compare_grid, compare_series, summary
    from fragbench.tables import check_output

    if len(series) < 2:
        raise UsageError("compare: name two or more series folders.")
    if out is not None:
        check_output(out, OUTPUT_FORMATS)
        check_output(about_path(out), (".json",))  # its warnings and sides, written beside
    if html is not None:
        # Checked like --out, before anything is written: a bad --html must not leave --out
        # written and then fail.
        check_output(html, (".html", ".htm"), "--html")
    if len(series) > 2:
        _compare_grid(compare_grid(series), out, html, differs_only)
        return
    comparison = compare_series(series[0], series[1])
    for line in summary(comparison, differs_only=differs_only):
        say(line)
    _compare_files(comparison, out, html, "write_compare_page")


def _compare_grid(grid: Any, out: Path | None, html: Path | None, differs_only: bool) -> None:
    """`compare` of more than two series: the grid on screen, in --out and in --html."""
    from fragbench.report.compare import grid_summary

    for line in grid_summary(grid, differs_only=differs_only):
        say(line)
    _compare_files(grid, out, html, "write_grid_page")


def _compare_files(result: Any, out: Path | None, html: Path | None, page: str) -> None:
    """A comparison's (a pair's or a grid's) `--out` table, one row per cell, and beside it,
    once, who each side is and the warnings (`compare.about`, in FILE.json); and its `--html`
    page, written by `fragbench.report.compare_html.<page>`."""
    from fragbench.report import compare_html
    from fragbench.report.compare import about, about_path
    from fragbench.series.folder import write_json
    from fragbench.tables import write_table

    if out is not None:
        write_table(result.table, out)
        notes = about(result)
        notes["warnings"] = [redactor().text(w) for w in notes["warnings"]]  # as printed
        write_json(notes, about_path(out))
        say(f"written to {out}")
        say(f"and beside it {about_path(out).name}: who each side is, and the warnings")
    if html is not None:
        getattr(compare_html, page)(result, html, redactor().text)
        say(f"page written to {html}")


@app.command()
def plugins(
    experiments: Annotated[Path | None, typer.Option(
        help="An experiment folder, or a folder of them, whose configs' backends to list "
             "[default: ./experiments when it exists].")] = None,
) -> None:
    """List the registered plugins with their packages and the plugin API each is written for,
    and the backends each config defines."""
    from fragbench.errors import UsageError
    from fragbench.plugins import config_backends, registry

    folder = experiments if experiments is not None else Path("experiments")
    if experiments is not None and not folder.is_dir():
        raise UsageError(f"--experiments {folder}: no such folder; point to an experiment "
                         "folder or a folder of them.")
    reg = registry()
    for e in sorted(reg.entries, key=lambda e: (e.kind, e.name)):
        where = "built-in" if e.builtin else "plugin"
        say(f"{e.kind:<8} {e.name:<18} {e.origin} {e.version} ({where}) API "
            f"{e.obj.api_version}")
    if not folder.is_dir():
        return
    registered = set(reg.names("backend"))
    for found in config_backends(folder):
        if found.problem is not None:
            say(f"config   {found.config}: {found.problem}")
            continue
        shown = []
        for name, plugin in found.backends:
            missing = "" if plugin in registered else ", NOT INSTALLED"
            default = ", default" if name == found.default else ""
            shown.append(f"{name} (plugin {plugin}{missing}{default})")
        say(f"config   {found.config}: --backend {' | '.join(shown) or 'none defined'}")


@app.command()
def new(
    kind: Annotated[str, typer.Argument(
        help="chunker, scorer, measure or backend (a plugin package), or experiment.")],
    name: Annotated[str, typer.Argument(
        help="A plugin: the name it registers, lowercase letters, digits and hyphens (the "
             "package is fragbench-NAME). An experiment: its folder, id and budget id.")],
    folder: Annotated[Path | None, typer.Option(
        "--dir", help="The folder to write into, made when missing (its parent must exist; "
                      "default: the current folder for a plugin, experiments for an "
                      "experiment).")] = None,
    corpus: Annotated[Path | None, typer.Option(
        help="experiment only: the corpus to name (a TOML case file or folder, or a columnar "
             "folder such as `fragbench import` writes) instead of a one-case example.")] = None,
) -> None:
    """Write a plugin package or an experiment folder to start from.

    A plugin: pyproject.toml (the entry point), the plugin, tests using the test kit, and a
    README saying what to edit next; it installs and passes its tests as written. An
    experiment: a commented config.toml, prompts, the answer schema and a one-case corpus (or
    the --corpus given); it freezes and runs offline as written. Nothing is half-written, and
    an existing folder is never touched."""
    from fragbench.errors import UsageError

    if kind == "experiment":
        from fragbench.scaffold.experiment import new_experiment

        made = new_experiment(name, Path("experiments") if folder is None else folder, corpus)
        target = made.folder
        say(f"experiment {name!r} written to {target}: {made.cases} case"
            f"{'' if made.cases == 1 else 's'}, languages {', '.join(made.languages)}")
        for path in made.to_translate:
            say(f"translate {target / path} before freezing: it holds the English wording")
        say(f"next: fragbench freeze {target}, then fragbench run {target} --series extractive "
            "(offline); config.toml says what each key means")
        return
    if corpus is not None:
        raise UsageError(f"--corpus is for `fragbench new experiment`, not a {kind}.")
    from fragbench.scaffold.plugin import new_plugin

    target = new_plugin(kind, name, Path(".") if folder is None else folder)
    say(f"{kind} plugin {name!r} written to {target}")
    say(f"next: {target / 'README.md'} says how to install it, run its tests and what to "
        "edit")


@app.command()
def export(
    series_dir: Annotated[Path, typer.Argument(help="A recorded series folder.")],
    fmt: Annotated[str, typer.Option(
        "--format", help="csv or jsonl (money as exact decimal text; docs/tables.md).")],
    out: Annotated[Path | None, typer.Option(
        help="Folder to write into (default: SERIES_DIR/export).")] = None,
) -> None:
    """Write every table of a series (measures.json's, retrieval, facts) as CSV or JSON lines,
    one file per table. Nothing is half-written: all files or none."""
    from fragbench.series.export import EXPORT_DIR, summary
    from fragbench.series.export import export as do_export

    files = do_export(series_dir, fmt, out)
    say(summary(files, series_dir / EXPORT_DIR if out is None else out))


import_app = typer.Typer(help="Import a dataset as a columnar corpus folder (docs/corpus.md).",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")
_IMPORT_FORMAT = typer.Option("--format", help="parquet or jsonl: the corpus files written.")
_IMPORT_LANG = typer.Option(
    "--lang", help="Every question's language code (such as en, fr, pt-BR); without it each "
    "question's language is detected (py3langid) and counted in import.json.")
_IMPORT_AMONG = typer.Option(
    "--detect-among", help="Comma-separated language codes the detector chooses among "
    "(default: 31 widely written languages, docs/corpus.md).")
_IMPORT_FALLBACK = typer.Option(
    "--fallback-lang", help="The language of a question the detector is unsure of (under "
    "0.9), counted in import.json; without it such a question is refused.")


def _languages(lang: str | None, among: str | None, fallback: str | None) -> Any:
    from fragbench.corpus.importers.language import CANDIDATES, Languages, check_lang
    from fragbench.errors import UsageError

    if lang is not None and (among is not None or fallback is not None):
        raise UsageError("--lang gives every question its language: --detect-among and "
                         "--fallback-lang are for detection; pass one or the others.")
    codes = tuple(c.strip() for c in among.split(",") if c.strip()) if among else CANDIDATES
    if not codes:
        raise UsageError("--detect-among names no language; give codes such as en,fr,ar.")
    return Languages(given=None if lang is None else check_lang("--lang", lang), among=codes,
                     fallback=None if fallback is None else check_lang("--fallback-lang",
                                                                       fallback))


def _import_progress(line: str) -> None:
    from fragbench.cli.progress import emit

    emit(f"import: {line}", err=True)


@import_app.command("hotpotqa")
def import_hotpotqa(
    file: Annotated[Path, typer.Argument(help="HotpotQA distractor-setting JSON.")],
    out: Annotated[Path, typer.Option(help="The new corpus folder (must not exist).")],
    fmt: Annotated[str, _IMPORT_FORMAT] = "parquet",
    lang: Annotated[str | None, _IMPORT_LANG] = None,
    among: Annotated[str | None, _IMPORT_AMONG] = None,
    fallback: Annotated[str | None, _IMPORT_FALLBACK] = None,
) -> None:
    """One case per question: its context sentences as facts (IDs from title and index), its
    supporting facts as conditions, variants A (as given) and B (paragraphs reversed), groups
    type and level, the language given (--lang) or detected. Paragraphs are not kept apart:
    chunks may cross them; each sentence's paragraph is written to paragraphs.parquet. Read as
    a stream, written atomically; nothing is written on a refusal."""
    from fragbench.corpus.importers.hotpotqa import import_hotpotqa as do_import
    from fragbench.corpus.importers.write import check_format
    from fragbench.retrieval.collection.sweep import counted

    languages = _languages(lang, among, fallback)
    done = do_import(file, out, check_format(fmt), languages, _import_progress)
    say(f"{counted(done.cases, 'case')}, {counted(done.sentences, 'sentence')} written to "
        f"{out}; skipped: {counted(len(done.skipped_questions), 'question')} without a usable "
        f"supporting fact, {counted(len(done.skipped_facts), 'supporting fact')} naming no "
        f"sentence, {counted(done.blank_sentences, 'blank sentence')} (listed in "
        f"{out / 'import.json'})")
    say(done.languages.summary())
    say(f"paragraphs: not kept apart, chunks may cross paragraph boundaries; each sentence's "
        f"paragraph is in {done.paragraphs}")


@import_app.command("jsonl")
def import_jsonl(
    file: Annotated[Path, typer.Argument(help="One JSON object a line, one case each.")],
    out: Annotated[Path, typer.Option(help="The new corpus folder (must not exist).")],
    fmt: Annotated[str, _IMPORT_FORMAT] = "parquet",
    lang: Annotated[str | None, typer.Option(
        "--lang", help="The language code of a line without its own lang; without it such a "
        "line's language is detected (py3langid) and counted in import.json.")] = None,
    among: Annotated[str | None, _IMPORT_AMONG] = None,
    fallback: Annotated[str | None, _IMPORT_FALLBACK] = None,
) -> None:
    """One case per line: id, question, sentences (id, text), conditions, optional groups,
    source, license, lang (else --lang, else detected); variant A as given, B a fixed shuffle
    by ID (docs/corpus.md). Read a line at a time, written atomically."""
    from fragbench.corpus.importers.jsonl import import_jsonl as do_import
    from fragbench.corpus.importers.write import check_format
    from fragbench.retrieval.collection.sweep import counted

    languages = _languages(lang, among, fallback)
    done = do_import(file, out, check_format(fmt), languages, _import_progress)
    say(f"{counted(done.cases, 'case')} written to {out}")
    say(done.languages.summary())


def _add_ledger_group() -> None:
    """`fragbench ledger show|verify|move` (fragbench.ledger_cli: Typer only at import)."""
    from fragbench.cli.ledger import ledger_app

    app.add_typer(ledger_app, name="ledger")


_add_ledger_group()


def main() -> None:
    app()
