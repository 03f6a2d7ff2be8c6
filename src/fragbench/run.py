"""`fragbench run`: verify the frozen plan, record retrieval, collect a series, derive tables.

Everything a user can get wrong (options, config, corpus, plan, series name and folder, budget,
ledger, key) is checked before the series folder is created: a refusal writes nothing and
spends nothing.

Which backend: `--backend` when given; else the series name when it names a backend of the
config; else, only when neither `--series` nor `--backend` is given, the config's
`default_backend`. A `--series` that names no backend needs `--backend`, so that a series name
never picks a paid backend by accident.

The series folder goes under `--out`, never into an experiment folder: `--out` resolving inside
the experiment being run, inside a folder holding a frozen plan (`experiment.json`), or inside a
folder at or below the working directory holding a `config.toml`, is refused.

A series folder is claimed under a lock (on the experiment's outputs folder while it is
checked and created, then on the series folder for the whole run), so that two runs with the
same `--series` cannot both write it. A series where nothing left the machine (a run killed or
interrupted before its first call, a folder left by a refused write, a first call that provably
never left: connection refused) is cleared and collected again under the same name: its journal
holds no reservation, or only reservations whose outcome says `never_sent`, the budget's ledger
agrees, and the folder holds only what fragbench writes. A series with any call sent is final.

Before the first call, `say` receives the pre-run line: the backend, its endpoint and the proxy
it goes through (when the session names one; proxy variables of the environment that the
session ignores are said to be ignored), and for a billed run the budget's balance and its
ledger store with how many records the ledger holds (the first run drawing on a budget in a
store says that it starts its ledger there, and how to point at another store).

Interruption (`interruption`, see `fragbench.calls.interruption`): no call starts once it is
requested; the series ends as `interrupted` with its tables and report. Requested before the
series folder exists, nothing is written (`Interrupted`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import polars as pl

from fragbench.budget.ledger import LedgerBase as Ledger
from fragbench.budget.money import balance, usd
from fragbench.budget.stores import ledger_for
from fragbench.calls.collector import (
    BudgetBook,
    Progress,
    Stop,
    collect,
    concurrency_problem,
    pacing_problem,
)
from fragbench.calls.interruption import Interruption
from fragbench.corpus.cases import cases_frame, facts_frame, questions_frame
from fragbench.errors import (
    BudgetError,
    ConfigError,
    Interrupted,
    PluginError,
    SeriesError,
    UsageError,
    first_line,
)
from fragbench.experiment.config import Experiment, load_experiment
from fragbench.experiment.plan import PlannedCall, call_reservation, plan_path, verify
from fragbench.experiment.requests import request_texts
from fragbench.files import FILE_NAME_RULE, file_name_problem, fsync_dir, make_dirs, now
from fragbench.interfaces import Backend, Session
from fragbench.memory import release_freed_memory
from fragbench.plugins import registry
from fragbench.redact import Redactor, secrets_in_env
from fragbench.report.html import REPORT_DATA, REPORT_HTML
from fragbench.report.markdown import write_report
from fragbench.series.folder import (
    DIAGNOSTICS_DIR,
    FIGURES_DIR,
    MEASURES_FILE,
    STAGED_CALLS,
    MeasureFailed,
    check_measures,
    derive_tables,
    journal_records,
    without_cycle_sweeps,
    write_json,
    write_parquet,
    write_status,
)
from fragbench.series.journal import (
    CHAINED,
    FORMAT_FIELD,
    JOURNAL_FILE,
    Journal,
    read_journal,
    spent,
)

RECORDED_FILES = {"plan.json", "series.json", "facts.parquet", "retrieval.parquet",
                  "cases.parquet", "questions.parquet", JOURNAL_FILE}
"""What a series holds before its first call: a folder with only these (and `*.tmp`) and no
reservation sent nothing."""
DERIVED_FILES = {"calls.parquet", STAGED_CALLS, "status.json", MEASURES_FILE, "report.md",
                 REPORT_HTML, REPORT_DATA, FIGURES_DIR, DIAGNOSTICS_DIR}
"""What `derive_tables` and `write_report` write (with the tables `measures.json` lists): a
series where nothing left the machine may hold these too, rebuilt from its journal."""
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@attrs.frozen
class RunResult:
    series_dir: Path
    backend: str
    is_model: bool
    label: str
    calls: int
    sent: int
    spent_usd: Decimal
    stop: Stop | None
    tables_error: str | None = None
    """Why the tables and report could not be written after collection, if they could not: a
    write that failed, or a measure that failed on the answered calls (then status.json is
    still written, and `fragbench measure` derives the rest once the measure is fixed)."""
    sent_nothing: bool = False
    """Nothing left the machine (no call sent, or only calls proven never sent): the series is
    not final, and running it again under the same name collects it anew."""
    citations: dict[str, int] | None = None
    """Citations by their reason at the exact level (`valid`, `not_verbatim`, …), from the
    citations table; None when the plan has no citations measure or the tables failed."""


def choose_backend(experiment: Experiment, series: str | None, backend: str | None) -> str:
    if backend is None:
        if series is None:
            backend = experiment.default_backend
        elif series in experiment.backends:
            backend = series
        else:
            raise UsageError(
                f"--series {series} names no backend of {experiment.config_path} "
                f"({', '.join(experiment.backends)}); add --backend NAME: the default backend "
                "applies only when neither --series nor --backend is given.")
    if backend not in experiment.backends:
        raise UsageError(f"--backend {backend}: {experiment.config_path} has no such backend; "
                         f"the backends are {', '.join(experiment.backends)}.")
    return backend


def _make_dirs(path: Path, what: str) -> None:
    try:
        make_dirs(path)
    except NotADirectoryError as exc:
        raise SeriesError(f"{what} {exc.filename}: is not a folder; choose another {what}.") \
            from None
    except OSError as exc:
        raise SeriesError(f"{what} {exc.filename or path}: cannot be created ({exc.strerror}); "
                          f"choose a writable {what} (nothing was sent).") from None


def existing_series_error(series_dir: Path, name: str) -> SeriesError:
    journal = series_dir / JOURNAL_FILE
    records = read_journal(journal) if journal.exists() else []
    stop = next((r for r in records if r.get("type") == "stop"), None)
    rebuild = f"`fragbench measure {series_dir}` rebuilds its tables and report"
    if stop:
        return SeriesError(
            f"{series_dir}: series {name!r} stopped at call {stop['seq']} ({stop['reason']}: "
            f"{stop['detail']}) and is final; {rebuild}; collecting again means a new series "
            f"name (--series {name}-2), whose budget check counts what this one spent.")
    return SeriesError(f"{series_dir}: series {name!r} is already recorded and is never appended "
                       f"to or overwritten; {rebuild}; to collect again, choose another "
                       "--series name.")


def never_sent(records: list[dict[str, Any]]) -> set[str] | None:
    """The calls of a journal, when none of them left the machine: every reservation has an
    outcome that says `never_sent`. None when any call may have been sent."""
    reserved = {r.get("call_id") for r in records if r.get("type") == "reserve"}
    proven = {r.get("call_id") for r in records
              if r.get("type") == "outcome" and r.get("never_sent") is True}
    return {str(c) for c in reserved} if reserved <= proven else None


def _derived_names(series_dir: Path) -> set[str]:
    """What the tables and report of a series are stored under (top-level names)."""
    names = set(DERIVED_FILES)
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, IndexError):
        manifest = json.loads((series_dir / MEASURES_FILE).read_text(encoding="utf-8"))
        names |= {Path(e["path"]).parts[0] for e in manifest
                  if isinstance(e, dict) and isinstance(e.get("path"), str)}
    return names


def _sent_nothing(series_dir: Path, ledger: Ledger | None) -> bool:
    """Whether an existing series folder provably sent nothing: its journal holds no
    reservation, or only calls whose outcome says they never left; the budget's ledger names
    no other call of it; the folder holds only what fragbench writes
    (what it writes before the first call, or also its tables and report when the journal
    says nothing left)."""
    journal = series_dir / JOURNAL_FILE
    # Tables without a journal could show calls it no longer holds: only beside one.
    allowed = RECORDED_FILES | (_derived_names(series_dir) if journal.exists() else set())
    names = {p.name for p in series_dir.iterdir()}
    if any(n not in allowed and not n.endswith(".tmp") for n in names):
        return False
    calls = never_sent(read_journal(journal) if journal.exists() else [])
    if calls is None:
        return False
    if ledger is not None and (series_dir / "series.json").exists():
        ledger.refresh()  # what the series' last owner appended before it died
        try:
            uid = json.loads((series_dir / "series.json").read_text(encoding="utf-8")).get(
                "series_uid")
        except (OSError, ValueError, AttributeError):
            return True  # torn before its uid was durable: no call can name it
        # The ledger names no call the journal does not prove never sent (a crash between the
        # journal's outcome and the ledger's leaves the reservation counted: it errs high).
        counted = ledger.series_calls(uid) if isinstance(uid, str) else {}
        return set(counted) <= calls
    return True


def refuse_out_in_experiment(out: Path, series_dir: Path, experiment: Experiment) -> None:
    """Refuse a series folder inside an experiment folder: the one being run, one holding a
    frozen plan (experiment.json), or one at or below the working directory holding a
    config.toml. Experiment folders hold what is committed; series are outputs."""
    target = series_dir.resolve()
    cwd = Path.cwd().resolve()
    home = experiment.dir.resolve()
    found = home if target.is_relative_to(home) else None
    for folder in target.parents:
        if found is not None:
            break
        markers = ("experiment.json", "config.toml") if folder.is_relative_to(cwd) \
            else ("experiment.json",)
        if any((folder / m).is_file() for m in markers):
            found = folder
    if found is not None:
        raise SeriesError(f"--out {out}: the series would be written into {found}, an "
                          "experiment folder, which holds what is committed; choose an --out "
                          "outside it, e.g. --out outputs (nothing was written or sent).")


@contextlib.contextmanager
def _dir_lock(path: Path, blocking: bool) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases its lock


def claim_series_dir(series_dir: Path, name: str, out: Path, ledger: Ledger | None) -> int:
    """Create the series folder and return a descriptor holding its lock (keep it open for
    the whole run)."""
    try:
        return _claim(series_dir, name, ledger)
    except OSError as exc:
        raise SeriesError(f"{exc.filename or series_dir}: {exc.strerror or exc}; choose a "
                          "--out you can write, or fix its permissions (nothing was sent)."
                          ) from None


def _claim(series_dir: Path, name: str, ledger: Ledger | None) -> int:
    _make_dirs(series_dir.parent, "--out")
    with _dir_lock(series_dir.parent, blocking=True):
        if series_dir.is_symlink():
            raise SeriesError(f"{series_dir}: is a symbolic link, not a series folder; remove "
                              "it or choose another --series name (nothing was sent).")
        if series_dir.exists():
            if not series_dir.is_dir():
                raise SeriesError(f"{series_dir}: is a file, not a series folder; remove it or "
                                  "choose another --series name (nothing was sent).")
            try:
                with _dir_lock(series_dir, blocking=False):
                    if not _sent_nothing(series_dir, ledger):
                        raise existing_series_error(series_dir, name)
                    shutil.rmtree(series_dir)
            except BlockingIOError:
                raise SeriesError(f"{series_dir}: another run is collecting series {name!r} "
                                  "right now; wait for it to end or choose another --series "
                                  "name (nothing was sent).") from None
        try:
            series_dir.mkdir()
            fsync_dir(series_dir.parent)
            fd = os.open(series_dir, os.O_RDONLY)
        except OSError as exc:
            raise SeriesError(f"{series_dir}: cannot be created ({exc.strerror}); choose a "
                              "writable --out (nothing was sent).") from None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: the parent's lock is ours
        return fd


def run(
    experiment_dir: Path,
    series: str | None = None,
    backend: str | None = None,
    out: Path = Path("outputs"),
    on_progress: Callable[[Progress], None] = lambda p: None,
    say: Callable[[str], None] = lambda line: None,
    interruption: Interruption | None = None,
    notice: Callable[[str], None] | None = None,
) -> RunResult:
    """`say` receives a line per phase (and, for a billed run, what it will draw on) before
    the first call; `notice` (default: `say`) the lines that are no phase: a ledger started in
    a store, the answer to an interruption during a call; `on_progress` a report after each
    call (best effort: an OSError it raises is ignored). `interruption`, once requested, stops
    the run (module docstring); a notebook may request it from another thread, or wrap the
    call in `fragbench.calls.interruption.on_signals`."""
    interruption = interruption or Interruption()
    notice = notice or say
    experiment = load_experiment(experiment_dir)
    backend = choose_backend(experiment, series, backend)
    backend_cfg = experiment.backends[backend]
    series = series or backend
    if file_name_problem(series) is not None:
        raise UsageError(f"--series {series!r} is not usable as a folder name; use "
                         f"{FILE_NAME_RULE}.")
    series_dir = out / experiment.id / series
    if out.exists() and not out.is_dir():
        raise SeriesError(f"--out {out}: is a file, not a folder; choose another --out "
                          "(nothing was sent).")
    refuse_out_in_experiment(out, series_dir, experiment)
    say(f"verifying the frozen plan {plan_path(experiment)}")
    frozen, calls, retrieval_table = verify(experiment)
    # What the series records of the corpus, made now, so that the corpus and the retrieval
    # table are let go before the first call: collecting needs neither (each call's request
    # is in `calls`), and at 100,000 calls they are gigabytes held for the whole collection.
    recorded = Recorded.of(experiment, retrieval_table)
    del retrieval_table
    experiment = attrs.evolve(experiment, cases=[])
    release_freed_memory()

    texts = request_texts([c.request for c in calls])
    reservations = {c.seq: call_reservation(c, backend_cfg, experiment, t)
                    for c, t in zip(calls, texts, strict=True)}
    bounds = input_bounds(calls, experiment, texts)  # the request texts, made once
    del texts
    total = sum(reservations.values(), Decimal(0))
    problem = pacing_problem(calls, bounds, backend_cfg)
    if problem is not None:
        raise ConfigError(f"{experiment.config_path}: {problem} (nothing was sent).")
    budget = experiment.budget if backend_cfg.pricing is not None else None
    secrets = secrets_in_env()
    redactor = Redactor(secrets)
    ledger = None
    if budget is not None:
        ledger = ledger_for(budget).load()  # the file store, or FRAGBENCH_LEDGER_URL's server
        # Checked again under the ledger's lock before every call; this one refuses early.
        available = balance(budget, ledger.spent())
        if total > available:
            raise BudgetError(
                f"the {len(calls)} planned calls reserve {usd(total)} USD but budget "
                f"{budget.id!r} has {usd(available)} USD left (ceiling "
                f"{usd(budget.ceiling_usd)}, prior {usd(budget.prior_spend_usd)}, recorded "
                f"series {usd(ledger.spent())}); nothing was sent.")

    # The session is opened (endpoint, key, certificates checked) before anything is written:
    # a session refused leaves no folder and no ledger record.
    plugin = registry().get("backend", backend_cfg.plugin)
    # Every measure's tables checked on the series before its first call (series.check_measures).
    check_measures(frozen, recorded.facts, recorded.retrieval, backend, bool(plugin.is_model))
    session = plugin.open(backend_cfg.params)
    result: RunResult | None = None
    try:
        problem = concurrency_problem(session, backend_cfg)
        if problem is not None:
            raise PluginError(f"{experiment.config_path}: {problem} (nothing was written or "
                              "sent).")
        if hasattr(session, "max_body_bytes"):
            session.max_body_bytes = experiment.max_response_bytes  # frozen in the plan
        if ledger is not None:
            if not ledger.exists():
                notice(f"budget {ledger.budget_id} has no ledger in the store {ledger.store} "
                    f"yet: starting one there. Runs drawing on this budget from another store "
                    f"or machine are not counted here; {ledger.store_help}")
            ledger.open(redactor)
        if interruption.requested:
            raise Interrupted(f"{interruption.name} received before series {series!r} began: "
                              "nothing was written or sent.", interruption.exit_code)
        lock = claim_series_dir(series_dir, series, out, ledger)
        try:
            planned = len(calls)
            stop = _collect_series(experiment, frozen.sha256, series, backend, series_dir,
                                   plugin, session, calls, recorded, reservations,
                                   bounds, ledger, redactor, say, notice, on_progress,
                                   interruption)
            # What collecting needed (each planned call's request) is let go before the tables
            # are derived from the series' own files: at 100,000 calls it is gigabytes the
            # derivation would otherwise hold beside its own.
            del experiment, calls, recorded, reservations, bounds
            frozen = frozen.without_corpus()  # the tables and pages read no corpus
            release_freed_memory()  # their pages, back to the system (fragbench.memory)
            result = _derive_series(series_dir, frozen, backend, plugin, planned, stop,
                                    ledger is not None, say)
            return result
        finally:
            os.close(lock)
    finally:
        # A call left in flight may still be inside the session's socket: closing it from here
        # could free a descriptor that call still uses. The process ends soon after.
        if result is None or result.stop is None or not result.stop.abandoned:
            session.close()
        if ledger is not None:
            ledger.close()


def _environment_proxies() -> list[str]:
    """The proxy variables set in the environment, as spelled there."""
    return sorted(k for k, v in os.environ.items()
                  if k.upper() in PROXY_VARIABLES and v.strip())


def _route(session: Session, redactor: Redactor) -> tuple[str | None, str]:
    """(the proxy the session goes through, as recorded, or None; what the pre-run line says
    about proxies)."""
    proxy = getattr(session, "proxy", None)
    if proxy:
        shown = redactor.text(str(proxy))
        return shown, f" through the proxy {shown}"
    ignored = _environment_proxies() if hasattr(session, "proxy") else []
    if ignored:
        return None, (f" (the environment sets {', '.join(ignored)}: ignored, calls go straight "
                      "to the endpoint; a proxy is used only when the backend's config names "
                      "one)")
    return None, ""


def _collect_series(experiment: Experiment, plan_hash: str, series: str, backend: str,
                    series_dir: Path, plugin: Backend, session: Session,
                    calls: list[PlannedCall], recorded: Recorded,
                    reservations: dict[int, Decimal], bounds: dict[int, int],
                    ledger: Ledger | None,
                    redactor: Redactor, say: Callable[[str], None],
                    notice: Callable[[str], None], on_progress: Callable[[Progress], None],
                    interruption: Interruption) -> Stop | None:
    """Write the series' recorded files (plan.json a copy of the frozen plan whose bytes hash
    to `plan_hash`), then collect its calls: the collector's stop (None when every call was
    sent)."""
    backend_cfg = experiment.backends[backend]
    budget = experiment.budget if ledger is not None else None
    is_model, label = bool(plugin.is_model), str(plugin.label)
    endpoint = redactor.text(str(session.endpoint))
    proxy, route = _route(session, redactor)
    series_uid = uuid.uuid4().hex
    try:
        _copy_plan(plan_path(experiment), series_dir / "plan.json", plan_hash)
        info = {
            "experiment": experiment.id,
            "series": series,
            "series_uid": series_uid,
            "backend": backend,
            "backend_plugin": backend_cfg.plugin,
            "is_model": is_model,
            "label": label,
            "endpoint": endpoint,
            "proxy": proxy,
            "budget": budget.id if budget else None,
            "plan_sha256": plan_hash,
            "started_at": now(),
            # Before the journal exists: its chain stripped later cannot pass it off as an
            # earlier fragbench's (`fragbench.series.folder.refuse_stripped_chain`).
            FORMAT_FIELD: CHAINED,
        }
        write_json(info, series_dir / "series.json")
        say("recording retrieval and facts")
        recorded.write(series_dir)
        journal = Journal(series_dir / JOURNAL_FILE, redactor)
    except OSError as exc:
        raise SeriesError(f"{series_dir}: cannot be written ({exc.strerror}); free space or "
                          "choose a writable --out, then run again: nothing was sent, and the "
                          "folder will be reused.") from None
    book = None
    try:
        journal.append({"type": "header", "experiment": experiment.id, "series": series,
                        "series_uid": series_uid, "backend": backend,
                        "budget": info["budget"], "plan_sha256": info["plan_sha256"],
                        "calls": len(calls), FORMAT_FIELD: CHAINED})
        total = sum(reservations.values(), Decimal(0))
        if ledger is not None and budget is not None:
            book = BudgetBook(budget=budget, ledger=ledger, series=series,
                              series_uid=series_uid)
            with ledger.locked():
                ledger.append({"type": "series", "series": series, "series_uid": series_uid,
                               "experiment": experiment.id, "backend": backend,
                               FORMAT_FIELD: CHAINED})
                left = balance(budget, ledger.spent())
                held = ledger.records
            say(f"billed run: backend {backend} ({label}) at {endpoint}{route}; budget "
                f"{budget.id}: balance {usd(left)} USD of ceiling {usd(budget.ceiling_usd)} "
                f"(ledger {ledger.where}, {held} records, in the store {ledger.store}); "
                f"the {len(calls)} planned calls reserve {usd(total)} USD")
        else:
            say(f"collecting {len(calls)} calls with backend {backend} ({label}, "
                f"{'unpriced' if is_model else 'a non-model baseline'}), endpoint "
                f"{endpoint}{route}; nothing is billed")
        stop = collect(calls, reservations, session, backend_cfg, journal, book,
                       on_progress, bounds, interruption, notice)
    except OSError as exc:  # before the first call (the collector handles its own)
        raise SeriesError(f"{series_dir}: cannot be written ({exc.strerror}); free space or "
                          "choose a writable --out, then run again: nothing was sent, and the "
                          "folder will be reused.") from None
    finally:
        journal.close()
    return stop


@attrs.define
class Recorded:
    """What a series records of its corpus and retrieval before its first call, each frame
    let go once written (`write`): `run` holds no other reference, so that the collection
    that follows holds none of it."""

    facts: pl.DataFrame
    retrieval: pl.DataFrame
    questions: pl.DataFrame
    """What each call asked, for the page's call cards (a series recorded before it has
    none, and its page shows no question)."""
    groups: pl.DataFrame | None
    """The corpus's case groups, for tables split by group (None: it has none)."""

    @classmethod
    def of(cls, experiment: Experiment, retrieval: pl.DataFrame) -> Recorded:
        langs = list(experiment.languages)
        return cls(facts=facts_frame(experiment.cases, langs), retrieval=retrieval,
                   questions=questions_frame(experiment.cases, langs),
                   groups=cases_frame(experiment.cases))

    def write(self, series_dir: Path) -> None:
        """facts.parquet, retrieval.parquet, questions.parquet and (with groups)
        cases.parquet, each frame let go once written (an empty frame in its place)."""
        for name, file in (("facts", "facts"), ("retrieval", "retrieval"),
                           ("questions", "questions"), ("groups", "cases")):
            frame = getattr(self, name)
            if frame is not None:
                write_parquet(frame, series_dir / f"{file}.parquet")
                setattr(self, name, pl.DataFrame())
        release_freed_memory()


def _copy_plan(source: Path, target: Path, plan_hash: str) -> None:
    """Copy the frozen plan into the series, hashing the bytes copied: when they are not the
    plan that was verified (frozen again meanwhile), refuse before anything is sent, so that
    plan.json and every hash the series records are the verified plan's."""
    digest = hashlib.sha256()
    with open(source, "rb") as src, open(target, "wb") as dst:
        while block := src.read(1 << 20):
            digest.update(block)
            dst.write(block)
    if digest.hexdigest() != plan_hash:
        raise SeriesError(f"{source}: changed while the run began (frozen again since it was "
                          "verified); run again: nothing was sent, and the series folder will "
                          "be reused.")


def _derive_series(series_dir: Path, plan: dict[str, Any], backend: str, plugin: Backend,
                   planned: int, stop: Stop | None, billed: bool,
                   say: Callable[[str], None]) -> RunResult:
    """The tables and reports of a series just collected, from its journal read once (and the
    frozen `plan`, the bytes of its plan.json, already in hand); what went wrong deriving them
    is said in `tables_error`, never raised: what was paid for is recorded already."""
    is_model, label = bool(plugin.is_model), str(plugin.label)
    tables_error = None
    citations = None
    # The journal read once, here, for the tables, both reports and the result.
    records: list[dict[str, Any]] | None = None
    try:
        with without_cycle_sweeps():
            say("reading the journal back")
            records = journal_records(series_dir, plan)
            say("deriving the tables")
            tables = derive_tables(series_dir, records=records, plan=plan)
            say("writing the report")
            write_report(series_dir, tables, records, plan)
            citations = citation_counts(tables)
    except OSError as exc:
        tables_error = (f"the tables and report could not be written ({exc.strerror}); free "
                        f"space, then run `fragbench measure {series_dir}`")
    except PluginError as exc:
        # A measure that passed the check before the first call (`check_measures`) broke on
        # the answered calls. What was paid for stands: the journal (and the ledger) hold it;
        # only the derived files are missing, and `measure` derives them once it is fixed.
        what = exc.what if isinstance(exc, MeasureFailed) else first_line(exc)
        kept = "its journal and the budget's ledger" if billed else "its journal"
        tables_error = (f"{what}; the series' calls are recorded in {kept}, but its tables "
                        f"and report could not be derived: fix the measure, then run "
                        f"`fragbench measure {series_dir}`")
        with contextlib.suppress(OSError):  # a full disk too: the line above still says it
            write_status(series_dir, records=records)
    if records is None:  # the read itself failed (a full disk, an I/O error): once more
        records = read_journal(series_dir / JOURNAL_FILE)
    nothing = never_sent(records)
    return RunResult(
        series_dir=series_dir, backend=backend, is_model=is_model, label=label,
        calls=planned, sent=sum(r.get("type") == "reserve" for r in records),
        spent_usd=spent(records), stop=stop, tables_error=tables_error,
        sent_nothing=stop is not None and nothing is not None, citations=citations,
    )


def input_bounds(calls: list[PlannedCall], experiment: Experiment,
                 texts: list[str] | None = None) -> dict[int, int]:
    """Seq -> the most input tokens a call can report: its UTF-8 bytes plus the framing.
    `texts`: the calls' `request_texts`, when the caller has them."""
    texts = request_texts([c.request for c in calls]) if texts is None else texts
    return {c.seq: len(text.encode("utf-8")) + experiment.budget.framing_tokens
            for c, text in zip(calls, texts, strict=True)}


def citation_counts(tables: dict[str, pl.DataFrame]) -> dict[str, int] | None:
    """Citations by reason at the exact level, most frequent first (`valid` included)."""
    table = tables.get("citations")
    if table is None or "reason" not in table.columns:
        return None
    counts = table.group_by("reason").len().sort(["len", "reason"], descending=[True, False])
    return {str(r): int(n) for r, n in counts.iter_rows()}
