"""Issue 16, item 3: concurrent collection under the same ceiling.

The real openai SDK against the loopback server, with `max_in_flight = 8` in the backend's
table: every call recorded once, ledger, journal and tables agreeing call by call; a failure
mid-flight starts no new call while the calls in flight are recorded; the ledger's records, in
order, never show "everything still planned" above the balance nor spend plus open
reservations above the ceiling; never a request without its reservation; two processes on
one budget; SIGKILL and SIGINT with calls in flight; pacing under declared rate limits.

Nothing asserts a duration: the server holds requests behind gates and barriers the test
opens, and waits are bounded only by PATIENCE, a bound on a failure.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import error_lines, process_env, refreeze, run_cli
from support.collector import IN_FLIGHT, after, with_in_flight
from support.processes import (
    blocked_on_ledger,
    journal_has,
    kill,
    killed_mid_run,
    launch,
    ledger_held,
    wait_until,
)
from support.suite import CANARY_KEY, PATIENCE, ROOT

from fragbench.budget.ledger import LEDGER_URL_ENV, Ledger, LedgerBase, ledger_path
from fragbench.budget.stores import ledger_for
from fragbench.calls.collector import BudgetBook, collect
from fragbench.calls.pacing import Pacer
from fragbench.experiment.config import Concurrency, load_experiment
from fragbench.experiment.plan import build_plan, call_reservation, verify
from fragbench.interfaces import Usage
from fragbench.plugins import registry
from fragbench.redact import Redactor
from fragbench.run import input_bounds
from fragbench.series.journal import Journal, read_journal
from fragbench.testing.loopback import Action, Handler, Server, http_error, ok

pytestmark = pytest.mark.slow

BILLED_ENV = {"OPENAI_API_KEY": CANARY_KEY}


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def plan_of(experiment: Path) -> dict[str, Any]:
    return json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))


class Peak:
    """Counts the requests the server is answering at once (the most at any moment)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0

    def around(self, action: Action) -> Action:
        def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                action(handler, number, body)
            finally:
                with self.lock:
                    self.now -= 1
        return act


def first_together(n: int, action: Action) -> Action:
    """`action`, once `n` requests are at the server at once (the first `n`; later ones go
    straight through): only a client with `n` calls in flight gets past it."""
    barrier = threading.Barrier(n, timeout=PATIENCE)
    passed = threading.Event()

    def act(handler: Handler, number: int, body: dict[str, Any]) -> None:
        if not passed.is_set():
            barrier.wait()
            passed.set()
        action(handler, number, body)
    return act


def ledger_of(experiment: Path) -> LedgerBase:
    """The budget's ledger in the store the environment selects (file, or PostgreSQL)."""
    budget = load_experiment(experiment).budget
    return ledger_for(budget).load()


def ledger_lines(experiment: Path) -> list[dict[str, Any]]:
    budget = load_experiment(experiment).budget
    url = os.environ.get(LEDGER_URL_ENV)
    if url:  # the PostgreSQL store: each record's text, in order
        import psycopg

        with psycopg.connect(url) as conn:
            return [json.loads(line) for (line,) in conn.execute(
                "SELECT line FROM fragbench_ledger WHERE budget_id = %s ORDER BY n",
                (budget.id,))]
    records = []
    for line in ledger_path(budget.id).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # torn by a kill (the ledger's reader checks the rest)
            continue
    return records


def check_ceiling(experiment: Path, plans: dict[str, dict[str, Decimal]] | None = None) -> int:
    """Replay the budget's ledger record by record: spend plus open reservations never above
    the balance (ceiling less prior spend); and at every reservation, that total plus what the
    reserving series still had planned after it (its calls of a later seq: `plans`, series
    uid -> call id -> reservation, in the frozen order) never above it either, the rule each
    start is checked by. Returns how many reservations were read."""
    records = ledger_lines(experiment)
    budget = records[0]
    room = Decimal(budget["ceiling_usd"]) - Decimal(budget["prior_spend_usd"])
    open_: dict[tuple[str, str], Decimal] = {}
    settled = Decimal(0)
    reserves = 0
    for number, r in enumerate(records[1:], start=2):
        key = (r.get("series_uid"), r.get("call_id"))
        if r["type"] == "reserve":
            reserves += 1
            open_[key] = Decimal(r["reserved_usd"])
        elif r["type"] == "outcome":
            open_.pop(key)
            settled += Decimal(r["counted_usd"])
        total = settled + sum(open_.values(), Decimal(0))
        assert total <= room, f"ledger line {number}: {total} counted, above {room}"
        if r["type"] == "reserve" and plans is not None:
            planned = plans[r["series_uid"]]
            ids = list(planned)
            later = ids[ids.index(r["call_id"]) + 1:]
            still = sum((planned[c] for c in later), Decimal(0))
            assert total + still <= room, (
                f"ledger line {number}: {total} counted and {still} still planned by series "
                f"{r['series']}, above the balance {room}")
    return reserves


def schedule_reservations(experiment: Path) -> dict[str, Decimal]:
    return {c["id"]: Decimal(c["reserved_usd"]) for c in plan_of(experiment)["schedule"]}


def journal_lines(series_dir: Path) -> list[dict[str, Any]]:
    return read_journal(series_dir / "journal.jsonl")


def uid_of(series_dir: Path) -> str:
    return str(json.loads((series_dir / "series.json").read_text(encoding="utf-8"))["series_uid"])


def agree_call_by_call(experiment: Path, series_dir: Path) -> list[dict[str, Any]]:
    """Ledger, journal and calls.parquet say the same of every call; returns the journal."""
    records = journal_lines(series_dir)
    reserves = [r for r in records if r["type"] == "reserve"]
    outcomes = {r["call_id"]: r for r in records if r["type"] == "outcome"}
    assert len({r["call_id"] for r in reserves}) == len(reserves)  # each reserved once
    counted = ledger_of(experiment).series_calls(uid_of(series_dir))
    assert set(counted) == {r["call_id"] for r in reserves}
    for r in reserves:
        out = outcomes.get(r["call_id"])
        expected = Decimal(out["counted_usd"]) if out else None
        assert counted[r["call_id"]] == expected, r["call_id"]
    calls = pl.read_parquet(series_dir / "calls.parquet")
    sent = calls.filter(pl.col("status") != "not_sent")
    assert sorted(sent["call_id"].to_list()) == sorted(r["call_id"] for r in reserves)
    for row in sent.iter_rows(named=True):
        out = outcomes.get(row["call_id"])
        want = Decimal(out["counted_usd"]) if out else Decimal(
            next(r["reserved_usd"] for r in reserves if r["call_id"] == row["call_id"]))
        assert row["counted_usd"] == want, row["call_id"]
    return records


def open_most(records: list[dict[str, Any]]) -> int:
    """The most calls the journal shows reserved and not yet settled at once."""
    open_: set[str] = set()
    most = 0
    for r in records:
        if r["type"] == "reserve":
            open_.add(r["call_id"])
        elif r["type"] == "outcome":
            open_.discard(r["call_id"])
        most = max(most, len(open_))
    return most


# -- The config -------------------------------------------------------------------------------

@pytest.mark.parametrize(("setting", "message"), [
    ("max_in_flight = 0", "backends.openai.max_in_flight must be at least 1, got 0"),
    ("max_in_flight = 257", "backends.openai.max_in_flight must be at most 256, got 257"),
    ('max_in_flight = "8"', 'backends.openai.max_in_flight is a string ("8"); write a whole '
     "number: max_in_flight = 8"),
    ("max_in_flight = true", "backends.openai.max_in_flight is a boolean (true); write a whole "
     "number, for example max_in_flight = 3"),
    ("requests_per_minute = 0", "backends.openai.requests_per_minute must be at least 1"),
    ("tokens_per_minute = 1.5", "backends.openai.tokens_per_minute is a number with a point "
     "(1.5); write a whole number"),
])
def test_concurrency_keys_are_checked_at_load(experiment: Path, setting: str, message: str
                                              ) -> None:
    config = experiment / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        'plugin = "openai"\n', f'plugin = "openai"\n{setting}\n'), encoding="utf-8")
    result = run_cli("freeze", str(experiment))
    assert result.returncode == 4, result
    [line] = error_lines(result.stderr)
    assert message in line and str(config) in line


def test_tokens_per_minute_needs_a_priced_backend(experiment: Path) -> None:
    config = experiment / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        'plugin = "extractive"\n', 'plugin = "extractive"\ntokens_per_minute = 1000\n'),
        encoding="utf-8")
    result = run_cli("freeze", str(experiment))
    [line] = error_lines(result.stderr)
    assert "backends.extractive.tokens_per_minute needs a pricing table" in line


def test_the_keys_are_frozen_and_a_plan_without_them_is_unchanged(experiment: Path) -> None:
    before = (experiment / "experiment.json").read_bytes()
    assert run_cli("freeze", str(experiment)).returncode == 0
    assert (experiment / "experiment.json").read_bytes() == before  # protocol 1.0 as it was
    assert "concurrency" not in plan_of(experiment)["backends"]["openai"]
    with_in_flight(experiment, 8, "requests_per_minute = 500\ntokens_per_minute = 4000000\n")
    frozen = plan_of(experiment)["backends"]["openai"]
    assert frozen["concurrency"] == {"max_in_flight": 8, "requests_per_minute": 500,
                                     "tokens_per_minute": 4000000}
    assert "max_in_flight" not in frozen["params"]  # fragbench's, never the backend's
    exp = load_experiment(experiment)
    assert exp.backends["openai"].concurrency == Concurrency(8, 500, 4000000)
    assert build_plan(exp)["backends"]["openai"]["concurrency"]["max_in_flight"] == 8


def test_a_session_not_declared_concurrent_is_refused_before_anything_is_written(
        experiment: Path) -> None:
    refreeze(experiment, 'plugin = "extractive"\n', 'plugin = "extractive"\nmax_in_flight = 4\n')
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", "extractive", "--out", str(out))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "backends.extractive.max_in_flight is 4" in line and "concurrent = True" in line
    assert "nothing was written or sent" in line
    assert not (out / "protocol-1.0" / "extractive").exists()


def test_a_call_no_minute_can_hold_is_refused_before_anything_is_sent(
        experiment: Path, server: Server) -> None:
    with_in_flight(experiment, 2, "tokens_per_minute = 1000\n")  # below one call's bound
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", "openai", "--out", str(out),
                     env=BILLED_ENV | {"OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "tokens_per_minute is 1000, but call 1 alone bounds" in line
    assert server.requests == [] and not out.exists()


# -- Collection with calls in flight ----------------------------------------------------------

def test_eight_in_flight_every_call_recorded_once_and_everything_agrees(
        experiment: Path, server: Server) -> None:
    with_in_flight(experiment)
    peak = Peak()
    server.default = peak.around(first_together(IN_FLIGHT, ok()))
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", "openai", "--out", str(out),
                     env=BILLED_ENV | {"OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 0, result.stderr
    assert "72 of 72 calls sent" in result.stdout
    assert peak.most == IN_FLIGHT  # eight at once (the barrier), never more
    series_dir = out / "protocol-1.0" / "openai"
    records = agree_call_by_call(experiment, series_dir)
    assert open_most(records) <= IN_FLIGHT
    assert records[-1]["type"] == "end"
    reserves = [r for r in records if r["type"] == "reserve"]
    # Started in the frozen order; never a request without its reservation.
    assert [r["seq"] for r in reserves] == list(range(1, 73))
    assert len(server.requests) == len(reserves) == 72
    outcomes = [r for r in records if r["type"] == "outcome"]
    received = [r for r in records if r["type"] == "received"]
    assert len(outcomes) == len(received) == 72
    assert {r["status"] for r in outcomes} == {"completed"}
    # Spend is the sum of the calls, in the ledger as in the journal and the table.
    spend = sum((Decimal(r["counted_usd"]) for r in outcomes), Decimal(0))
    ledger = ledger_of(experiment)
    assert ledger.spent() == spend
    assert pl.read_parquet(series_dir / "calls.parquet")["counted_usd"].sum() == spend
    check_ceiling(experiment, {uid_of(series_dir): schedule_reservations(experiment)})


def test_a_failure_mid_flight_starts_no_new_call_and_records_those_in_flight(
        experiment: Path, server: Server) -> None:
    with_in_flight(experiment)
    gate = threading.Event()
    # Request 20 is held while later calls go out, then fails; the others answer at once.
    server.script[19] = after(gate, http_error(500, "boom"))
    server.default = ok()
    out = experiment.parent.parent / "outputs"
    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(run_cli(
        "run", str(experiment), "--series", "openai", "--out", str(out),
        env=BILLED_ENV | {"OPENAI_BASE_URL": server.base_url})))
    runner.start()
    wait_for("request 27 at the server", lambda: len(server.requests) >= 27)
    gate.set()
    runner.join(PATIENCE)
    [result] = results
    assert result.returncode == 3, result.stderr
    series_dir = out / "protocol-1.0" / "openai"
    records = agree_call_by_call(experiment, series_dir)
    [failed] = [r for r in records if r["type"] == "outcome" and r["status"] == "failed"]
    [stop] = [r for r in records if r["type"] == "stop"]
    assert (stop["reason"], stop["seq"]) == ("technical_failure", failed["seq"])
    reserves = [r for r in records if r["type"] == "reserve"]
    outcomes = {r["call_id"] for r in records if r["type"] == "outcome"}
    # No call started once the failure was recorded; every call in flight was recorded.
    at = records.index(failed)
    assert not any(r["type"] == "reserve" for r in records[at:])
    assert {r["call_id"] for r in reserves} == outcomes
    assert len(server.requests) == len(reserves) < 72
    assert records[-1] == stop
    check_ceiling(experiment)


# -- The ceiling with calls in flight, two series on one budget ------------------------------

class InProcess:
    """A billed series collected by `fragbench.calls.collector.collect` itself, on the real openai
    session, with a ledger and journal of its own: two of them on one budget are two runs
    taking turns under the ledger's file lock (the lock is per open file, as between two
    processes)."""

    def __init__(self, experiment: Path, name: str, monkeypatch: pytest.MonkeyPatch,
                 server: Server) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        self.exp = load_experiment(experiment)
        _, self.calls, _ = verify(self.exp)
        self.backend = self.exp.backends["openai"]
        self.reservations = {c.seq: call_reservation(c, self.backend, self.exp)
                             for c in self.calls}
        self.dir = experiment.parent.parent / "outputs" / name
        self.dir.mkdir(parents=True)
        self.uid = uuid.uuid4().hex
        self.stop: Any = None

    def run(self) -> None:
        budget = self.exp.budget
        ledger = Ledger(ledger_path(budget.id), budget).load().open(Redactor())
        session = registry().get("backend", "openai").open(self.backend.params)
        journal = Journal(self.dir / "journal.jsonl")
        try:
            book = BudgetBook(budget, ledger, self.dir.name, self.uid)
            self.stop = collect(self.calls, self.reservations, session, self.backend, journal,
                                book, input_bounds=input_bounds(self.calls, self.exp))
        finally:
            journal.close()
            session.close()
            ledger.close()

    def plan(self) -> dict[str, Decimal]:
        return {c.id: self.reservations[c.seq] for c in self.calls}


def tight_budget(experiment: Path, slack_calls: int) -> None:
    """A ceiling that holds the whole plan and `slack_calls` more of its largest calls."""
    plan = plan_of(experiment)
    largest = max(Decimal(c["reserved_usd"]) for c in plan["schedule"])
    prior = Decimal(plan["budget"]["prior_spend_usd"])
    ceiling = prior + Decimal(plan["budget"]["total_reservation_usd"]) + slack_calls * largest
    refreeze(experiment, 'ceiling_usd = "10"', f'ceiling_usd = "{ceiling}"')


def test_calls_in_flight_hold_their_reservations_against_another_series(
        experiment: Path, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Series A has eight calls held in flight by the server; series B on the same budget
    then finds everything it plans above the balance (A's calls in flight count at their
    whole reservations) and sends nothing; A, released, completes."""
    with_in_flight(experiment)
    tight_budget(experiment, slack_calls=4)  # fewer than A's eight in flight
    gate = threading.Event()
    server.default = after(gate, ok())
    first = InProcess(experiment, "a", monkeypatch, server)
    second = InProcess(experiment, "b", monkeypatch, server)
    runner = threading.Thread(target=first.run)
    runner.start()
    try:
        wait_for("eight calls of A at the server", lambda: len(server.requests) >= IN_FLIGHT)
        other = threading.Thread(target=second.run)
        other.start()
        # B ends (its check fails), or a request of B reaches the server (it should not).
        wait_for("series B", lambda: not other.is_alive() or len(server.requests) > IN_FLIGHT)
    finally:
        gate.set()
        runner.join(PATIENCE)
    other.join(PATIENCE)
    assert (second.stop.reason, second.stop.seq) == ("budget", 1)
    assert first.stop is None
    b_records = read_journal(second.dir / "journal.jsonl")
    assert not [r for r in b_records if r["type"] == "reserve"]
    reserves = check_ceiling(experiment, {first.uid: first.plan(), second.uid: second.plan()})
    assert len(server.requests) == reserves == 72  # never a request without a reservation


@pytest.mark.parametrize("store", ["file", "postgresql"])
def test_two_processes_on_one_budget_with_calls_in_flight_never_cross_the_ceiling(
        experiment: Path, server: Server, store: str, request: pytest.FixtureRequest) -> None:
    """Both runs get their eight calls in flight (the server holds them), then every answer
    costs about its reservation, so the two plans cannot both be paid: one run stops at a
    start whose check fails, and at no record of the ledger did the two together go above
    the ceiling. On both ledger stores: the file (flock), and a PostgreSQL server
    (FRAGBENCH_LEDGER_URL, its advisory lock per budget; skipped without server binaries)."""
    from support.processes import Lines

    if store == "postgresql":
        request.getfixturevalue("ledger_url")  # sets FRAGBENCH_LEDGER_URL, unsets the folder
    with_in_flight(experiment)
    tight_budget(experiment, slack_calls=12)  # one plan and a bit: never two
    gate = threading.Event()
    # 2100 input tokens written to the cache and the whole output ceiling: 99 % of the
    # smallest reservation (2179 input tokens at the cache-write rate, 1200 output).
    server.default = after(gate, ok(usage=Usage(input_tokens=2100, cached_tokens=0,
                                                cache_write_tokens=2100, output_tokens=1200,
                                                reasoning_tokens=0)))
    out = experiment.parent.parent / "outputs"
    env = process_env(BILLED_ENV | {"OPENAI_BASE_URL": server.base_url})
    procs = [subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                               "--series", name, "--backend", "openai", "--out", str(out)],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
             for name in ("one", "two")]
    lines = [Lines(p.stderr) for p in procs if p.stderr is not None]
    try:
        wait_for("both runs' calls in flight", lambda: len(server.requests) >= 2 * IN_FLIGHT
                 or any(p.poll() is not None for p in procs))
    finally:
        gate.set()
    codes = [p.wait(PATIENCE) for p in procs]
    stderr = ["\n".join(ln.rest()) for ln in lines]
    assert all("Traceback" not in s for s in stderr), stderr
    assert sorted(codes) == [0, 3] or codes == [3, 3], (codes, stderr)
    assert any("budget: the" in s for s in stderr), stderr
    plans = {}
    sent = 0
    for name in ("one", "two"):
        series_dir = out / "protocol-1.0" / name
        if (series_dir / "series.json").exists():
            plans[uid_of(series_dir)] = schedule_reservations(experiment)
            records = agree_call_by_call(experiment, series_dir)
            sent += sum(r["type"] == "reserve" for r in records)
    reserves = check_ceiling(experiment, plans)
    assert len(server.requests) == reserves == sent


# -- Processes under test: SIGKILL, SIGINT ----------------------------------------------------

def test_sigkill_with_calls_in_flight(experiment: Path, server: Server) -> None:
    """As tests/test_sigkill.py, with eight calls in flight, at two chosen points and a random
    one: the eight sent and held by the server; the eight answered while another run holds the
    ledger's lock (bodies and a first outcome journaled, the ledger not yet told); then a
    random instant after one of the first answers. Each time the ledger counts every reserved
    call, the journal reads back, `measure` rebuilds, and no request went out without its
    reservation on disk."""
    with_in_flight(experiment)
    reserved = schedule_reservations(experiment)
    ledger = ledger_path("protocol-1.0-openai")
    budget = load_experiment(experiment).budget

    def check(out: Path) -> list[dict[str, Any]]:
        series_dir = out / "protocol-1.0" / "openai"
        records = read_journal(series_dir / "journal.jsonl")
        reserves = [r for r in records if r["type"] == "reserve"]
        outcomes = {r["call_id"]: r for r in records if r["type"] == "outcome"}
        with server.lock:
            assert len(reserves) >= len(server.requests), (len(reserves), len(server.requests))
        floor = sum((Decimal(outcomes[r["call_id"]]["cost_usd"]) if r["call_id"] in outcomes
                     else reserved[r["call_id"]] for r in reserves), Decimal(0))
        loaded = Ledger(ledger, budget).load()
        assert loaded.spent() >= floor
        # Every call the journal reserved is in the ledger, counted at least at its
        # reservation until its outcome is there too.
        counted = loaded.series_calls(uid_of(series_dir)) if reserves else {}
        assert {r["call_id"] for r in reserves} <= set(counted)
        measured = run_cli("measure", str(series_dir))
        assert measured.returncode == 0, measured.stderr
        calls = pl.read_parquet(series_dir / "calls.parquet")
        assert calls.filter(pl.col("status") != "not_sent").height == len(reserves)
        check_ceiling(experiment)
        return records

    def fresh(name: str, action: Action) -> Path:
        ledger.unlink(missing_ok=True)
        server.reset()
        server.default = action
        return experiment.parent.parent / f"outputs-{name}"

    # Eight sent and held: eight reservations on disk, none answered, all counted whole.
    gate = threading.Event()
    out = fresh("held", after(gate, ok()))
    proc = launch(experiment, out, server)
    wait_until("eight calls at the server", lambda: len(server.requests) >= IN_FLIGHT, proc)
    kill(proc)
    gate.set()
    records = check(out)
    assert sum(r["type"] == "reserve" for r in records) == IN_FLIGHT
    assert not [r for r in records if r["type"] in ("received", "outcome")]
    assert set(Ledger(ledger, budget).load().series_calls(uid_of(
        out / "protocol-1.0" / "openai")).values()) == {None}

    # Eight answered while another run holds the ledger's lock: the bodies (journaled by the
    # calls' threads) and the first outcome are in the journal; the ledger still counts all
    # eight at their reservations.
    gate = threading.Event()
    out = fresh("answered", after(gate, ok()))
    series_dir = out / "protocol-1.0" / "openai"
    proc = launch(experiment, out, server)
    wait_until("eight calls at the server", lambda: len(server.requests) >= IN_FLIGHT, proc)
    with ledger_held(ledger):
        gate.set()
        wait_until("an outcome journaled, or the run waiting for the ledger",
                   lambda: journal_has(series_dir, "outcome") or blocked_on_ledger(proc), proc)
        kill(proc)
    records = check(out)
    assert len(server.requests) == IN_FLIGHT
    assert sum(r["type"] == "outcome" for r in records) >= 1
    assert set(Ledger(ledger, budget).load().series_calls(uid_of(series_dir)).values()) == {None}

    # A random instant after a random answer: wherever it lands between two writes.
    out = fresh("random", ok())
    received, _, _ = killed_mid_run(experiment, out, server, random.Random(20261216))
    assert received > 0
    check(out)


def test_sigint_with_calls_in_flight_awaits_and_records_them_all(
        experiment: Path, server: Server, held: threading.Event) -> None:
    from support.processes import Lines

    with_in_flight(experiment)
    out = experiment.parent.parent / "outputs"
    env = process_env(BILLED_ENV | {"OPENAI_BASE_URL": server.base_url})
    from support.processes import signals_at_default

    with signals_at_default():  # the SIGINT below must reach the run
        proc = subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                                 "--series", "openai", "--backend", "openai", "--out",
                                 str(out)], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    lines = Lines(proc.stderr)
    wait_for("eight calls at the server", lambda: len(server.requests) >= IN_FLIGHT
             or proc.poll() is not None)
    proc.send_signal(signal.SIGINT)
    notice = lines.wait_for("no new call will start")
    assert "the 8 calls in flight (1, 2, 3, 4, 5, 6, 7, 8 of 72)" in notice
    held.set()
    assert proc.wait(PATIENCE) == 130
    lines.rest()
    assert len(server.requests) == IN_FLIGHT
    series_dir = out / "protocol-1.0" / "openai"
    records = agree_call_by_call(experiment, series_dir)
    outcomes = [r for r in records if r["type"] == "outcome"]
    assert sorted(r["seq"] for r in outcomes) == list(range(1, 9))
    assert {r["status"] for r in outcomes} == {"completed"}
    [stop] = [r for r in records if r["type"] == "stop"]
    assert (stop["reason"], stop["seq"]) == ("interrupted", 9)
    assert all(v is not None for v in ledger_of(experiment).series_calls(
        uid_of(series_dir)).values())


# -- Pacing ------------------------------------------------------------------------------------

def test_pacer_never_lets_a_sliding_window_exceed_either_limit() -> None:
    """Random token bounds and waits on a clock of the test's own: whatever the order, no
    window of the pacer's length holds more starts or tokens than declared."""
    rng = random.Random(16)
    now = [0.0]
    for _ in range(50):
        now[0] = 0.0
        rpm, tpm = rng.randint(1, 6), rng.randint(100, 400)
        pacer = Pacer(rpm, tpm, clock=lambda: now[0], window=60.0)
        for _ in range(60):
            tokens = rng.randint(1, 100)
            now[0] += rng.choice([0.0, 0.0, rng.uniform(0, 30)])
            while (delay := pacer.delay(tokens)) > 0:
                now[0] += delay
            pacer.started(tokens)
        starts = pacer.history
        for i, (t, _) in enumerate(starts):
            inside = [s for s in starts[i:] if s[0] < t + 60.0]
            assert len(inside) <= rpm
            assert sum(k for _, k in inside) <= tpm
    with pytest.raises(ValueError, match="more than tokens_per_minute"):
        Pacer(None, 10).delay(11)


def test_the_collector_paces_its_starts(experiment: Path, server: Server,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector asks the pacer before each start: on a window of 0.4 s (a sped-up
    minute) with 3 requests and 2.5 calls' tokens per window, the starts it made never
    exceed either, with eight calls allowed in flight."""
    with_in_flight(experiment)
    server.default = ok()
    series = InProcess(experiment, "paced", monkeypatch, server)
    series.calls = series.calls[:12]
    bounds = input_bounds(series.calls, series.exp)
    ceiling = series.backend.contract.output_ceiling
    tokens = {c.seq: bounds[c.seq] + ceiling for c in series.calls}
    tpm = int(max(tokens.values()) * 2.5)
    pacer = Pacer(3, tpm, window=0.4)
    budget = series.exp.budget
    ledger = Ledger(ledger_path(budget.id), budget).load().open(Redactor())
    session = registry().get("backend", "openai").open(series.backend.params)
    journal = Journal(series.dir / "journal.jsonl")
    try:
        stop = collect(series.calls, series.reservations, session, series.backend, journal,
                       BudgetBook(budget, ledger, "paced", series.uid),
                       input_bounds=bounds, pacer=pacer)
    finally:
        journal.close()
        session.close()
        ledger.close()
    assert stop is None and len(server.requests) == 12
    starts = pacer.history
    assert [k for _, k in starts] == [tokens[c.seq] for c in series.calls]
    for i, (t, _) in enumerate(starts):
        inside = [s for s in starts[i:] if s[0] < t + 0.4]
        assert len(inside) <= 3
        assert sum(k for _, k in inside) <= tpm


# -- Stops whatever order the answers come back in --------------------------------------------

def _has_outcome(journal: Path, call_id: str) -> bool:
    """The journal holds `call_id`'s outcome (whole lines only)."""
    text = journal.read_bytes().decode("utf-8", "replace") if journal.exists() else ""
    return any(json.loads(line).get("type") == "outcome"
               and json.loads(line).get("call_id") == call_id
               for line in text.splitlines(keepends=True) if line.endswith("\n"))


class OutOfOrder:
    """A concurrency-safe session whose call 1 answers only after call 2 has (the order a
    slow first answer gives with calls in flight): call i answers with `models[i]`."""

    endpoint = "scripted"
    concurrent = True

    def __init__(self, models: dict[str, str | None], journal: Path) -> None:
        self.models = models
        """None: the call fails (an HTTP 500)."""
        self.journal = journal
        self.second = threading.Event()

    def send(self, request: Any) -> Any:
        from fragbench.interfaces import BackendFailure, Reply

        if request.call_id == "c0":
            # Call 2's outcome on disk, not only its reply returned: released any earlier,
            # call 1 could be recorded first on a loaded machine, and the order under test
            # would not be the one the test asserts.
            assert self.second.wait(PATIENCE)
            deadline = time.monotonic() + PATIENCE
            while not _has_outcome(self.journal, "c1"):
                assert time.monotonic() < deadline, "call 2's outcome never reached the journal"
                time.sleep(0.01)
        if request.call_id == "c2":
            # Call 3 may start once call 2 has answered (nothing is known to have stopped the
            # series then); it answers after call 1, so that the order of the outcomes is the
            # test's, not the machine's.
            deadline = time.monotonic() + PATIENCE
            while not _has_outcome(self.journal, "c0"):
                assert time.monotonic() < deadline, "call 1's outcome never reached the journal"
                time.sleep(0.01)
        if self.models[request.call_id] is None:
            self.second.set()
            raise BackendFailure("http_error", "HTTP 500 from the API", http_status=500)
        reply = Reply(status="completed", model=self.models[request.call_id],
                      service_tier=None, request_id=None, text="{}",
                      usage=Usage(input_tokens=10, cached_tokens=0, cache_write_tokens=0,
                                  output_tokens=10, reasoning_tokens=0))
        if request.call_id == "c1":
            self.second.set()
        return reply

    def close(self) -> None:
        return None


def test_the_first_model_is_the_lowest_seq_answer_not_the_first_to_arrive(tmp_path: Path
                                                                          ) -> None:
    """Call 2 answers first with a dated snapshot, call 1 then with the bare model: as one
    call at a time would see it, call 1's model is the first and call 2 changed it. The stop
    is at call 2, recorded after both answers. Call 3 may have started in between (when call 2
    answered, nothing had stopped the series yet: it was in flight, and is recorded); none
    after it."""
    from support.collector import PRICING, planned

    from fragbench.experiment.config import BackendConfig
    from fragbench.interfaces import COST_FIELDS, Contract

    contract = Contract(model="m", output_ceiling=10**6, usage_fields=frozenset(COST_FIELDS))
    backend = BackendConfig(name="m", plugin="scripted", params={"model": "m"},
                            pricing=PRICING, contract=contract,
                            concurrency=Concurrency(max_in_flight=2))
    calls = [planned(i) for i in range(4)]
    journal = Journal(tmp_path / "journal.jsonl")
    session = OutOfOrder({"c0": "m", "c1": "m-2026-09-30", "c2": "m", "c3": "m"},
                         tmp_path / "journal.jsonl")
    stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session, backend, journal, None)
    journal.close()
    assert stop is not None and (stop.reason, stop.seq) == ("changed_model", 2)
    assert stop.detail == "model 'm-2026-09-30' came back after 'm'"
    records = read_journal(tmp_path / "journal.jsonl")
    outcomes = [r["seq"] for r in records if r["type"] == "outcome"]
    assert outcomes in ([2, 1], [2, 1, 3]), outcomes  # as they came
    assert {r["seq"] for r in records if r["type"] == "reserve" and r["seq"] > 2} <= {3}


def test_the_recorded_stop_is_the_lowest_seq_not_the_first_met(tmp_path: Path) -> None:
    """Call 2 fails first; call 1, awaited, then answers from another model: the series
    records call 1's stop (changed model), the one a run one call at a time meets first."""
    from support.collector import PRICING, planned

    from fragbench.experiment.config import BackendConfig
    from fragbench.interfaces import COST_FIELDS, Contract

    contract = Contract(model="m", output_ceiling=10**6, usage_fields=frozenset(COST_FIELDS))
    backend = BackendConfig(name="m", plugin="scripted", params={"model": "m"},
                            pricing=PRICING, contract=contract,
                            concurrency=Concurrency(max_in_flight=2))
    calls = [planned(i) for i in range(4)]
    journal = Journal(tmp_path / "journal.jsonl")
    session = OutOfOrder({"c0": "other", "c1": None, "c2": "m", "c3": "m"},
                         tmp_path / "journal.jsonl")
    stop = collect(calls, {c.seq: Decimal(1) for c in calls}, session, backend, journal, None)
    journal.close()
    assert stop is not None and (stop.reason, stop.seq) == ("changed_model", 1)
    records = read_journal(tmp_path / "journal.jsonl")
    assert [(r["seq"], r["status"]) for r in records if r["type"] == "outcome"] == [
        (2, "failed"), (1, "completed")]
    assert [r for r in records if r["type"] == "stop"] == [records[-1]]
