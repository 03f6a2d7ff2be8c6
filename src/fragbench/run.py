"""`fragbench run`: verify the frozen plan, record retrieval, collect a series, derive tables.

Everything a user can get wrong (config, corpus, plan, series name, budget, key) is checked
before the series folder is created: a refusal writes nothing and spends nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import attrs

from fragbench.budget import balance, usd
from fragbench.collect import BudgetBook, Progress, Stop, collect
from fragbench.config import load_experiment
from fragbench.corpus import facts_frame
from fragbench.errors import BudgetError, ConfigError, SeriesError
from fragbench.journal import (
    JOURNAL_FILE,
    Journal,
    budget_spent,
    fsync_dir,
    ledger_path,
    now,
    read_journal,
    redact,
    spent,
)
from fragbench.plan import call_reservation, plan_path, verify
from fragbench.plugins import registry
from fragbench.report import write_report
from fragbench.series import derive_tables, write_json, write_parquet

SERIES_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|_SECRET|PASSWORD|_ORG_ID|_PROJECT_ID|ORGANIZATION)$",
                        re.IGNORECASE)


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


def secrets_in_env() -> list[str]:
    """Values never to be written: keys, tokens, secrets, passwords, organization and project
    identifiers found in the environment."""
    return [v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= 8]


def _make_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each made durable in its parent: a power loss
    must not take a series folder, reservations and all, after calls were billed."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir()
        fsync_dir(folder.parent)


def existing_series_error(series_dir: Path, name: str) -> SeriesError:
    journal = series_dir / JOURNAL_FILE
    records = read_journal(journal) if journal.exists() else []
    stop = next((r for r in records if r.get("type") == "stop"), None)
    if stop:
        return SeriesError(
            f"{series_dir}: series {name!r} stopped at call {stop['seq']} ({stop['reason']}: "
            f"{stop['detail']}) and is final; collecting again means a new series name "
            f"(--series {name}-2), whose budget check counts what this one spent.")
    return SeriesError(f"{series_dir}: series {name!r} is already recorded and is never appended "
                       "to or overwritten; choose another --series name.")


def run(
    experiment_dir: Path,
    series: str | None = None,
    backend: str | None = None,
    out: Path = Path("outputs"),
    on_progress: Callable[[Progress], None] = lambda p: None,
) -> RunResult:
    experiment = load_experiment(experiment_dir)
    _, calls, retrieval_table = verify(experiment)

    if backend is None:
        backend = series if series in experiment.backends else experiment.default_backend
    if backend not in experiment.backends:
        raise ConfigError(f"{experiment.config_path}: has no backend {backend!r}; the backends "
                          f"are {', '.join(experiment.backends)}.")
    backend_cfg = experiment.backends[backend]
    series = series or backend
    if not SERIES_NAME.fullmatch(series):
        raise SeriesError(f"series name {series!r} is not usable as a folder name; use letters, "
                          "digits, '.', '_' and '-'.")
    series_dir = out / experiment.id / series
    if series_dir.exists():
        raise existing_series_error(series_dir, series)

    reservations = {c.seq: call_reservation(c, backend_cfg, experiment) for c in calls}
    budget = experiment.budget if backend_cfg.pricing is not None else None
    ledger = ledger_path(experiment.dir, experiment.budget.id)
    if budget is not None:
        # Checked again under the ledger's lock before every call; this one refuses early.
        already = budget_spent(ledger, out, budget.id)
        available = balance(budget, already)
        total = sum(reservations.values(), Decimal(0))
        if total > available:
            raise BudgetError(
                f"the {len(calls)} planned calls reserve {usd(total)} USD but budget "
                f"{budget.id!r} has {usd(available)} USD left (ceiling "
                f"{usd(budget.ceiling_usd)}, prior {usd(budget.prior_spend_usd)}, recorded "
                f"series {usd(already)}); nothing was sent.")

    plugin = registry().get("backend", backend_cfg.plugin)
    session = plugin.open(backend_cfg.params)
    secrets = secrets_in_env()
    book = None
    try:
        _make_dirs(series_dir.parent)
        series_dir.mkdir()  # exclusive: a series created meanwhile is never written into
        fsync_dir(series_dir.parent)
        shutil.copyfile(plan_path(experiment), series_dir / "plan.json")
        series_uid = uuid.uuid4().hex
        info = {
            "experiment": experiment.id,
            "series": series,
            "series_uid": series_uid,
            "backend": backend,
            "backend_plugin": backend_cfg.plugin,
            "is_model": plugin.is_model,
            "label": plugin.label,
            "endpoint": redact(session.endpoint, secrets),
            "budget": budget.id if budget else None,
            "ledger": os.path.relpath(ledger, series_dir) if budget else None,
            "plan_sha256": hashlib.sha256(plan_path(experiment).read_bytes()).hexdigest(),
            "started_at": now(),
        }
        write_json(info, series_dir / "series.json")
        write_parquet(facts_frame(experiment.cases, list(experiment.languages)),
                      series_dir / "facts.parquet")
        write_parquet(retrieval_table, series_dir / "retrieval.parquet")
        journal = Journal(series_dir / JOURNAL_FILE, redact=secrets)
        if budget is not None:
            _make_dirs(ledger.parent)
            book = BudgetBook(budget=budget, ledger=Journal(ledger, redact=secrets), root=out,
                              series=series, series_uid=series_uid)
        try:
            journal.append({"type": "header", "experiment": experiment.id, "series": series,
                            "series_uid": series_uid, "backend": backend,
                            "budget": info["budget"], "plan_sha256": info["plan_sha256"],
                            "calls": len(calls)})
            stop = collect(calls, reservations, session, backend_cfg, journal, book,
                           on_progress)
        finally:
            journal.close()
            if book is not None:
                book.ledger.close()
    finally:
        session.close()
    derive_tables(series_dir)
    write_report(series_dir)
    records = read_journal(series_dir / JOURNAL_FILE)
    return RunResult(
        series_dir=series_dir, backend=backend, is_model=plugin.is_model, label=plugin.label,
        calls=len(calls), sent=sum(r.get("type") == "reserve" for r in records),
        spent_usd=spent(records), stop=stop,
    )
