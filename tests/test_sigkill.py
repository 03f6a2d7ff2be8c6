"""SIGKILL the collector at random points of a run (20 trials): the journal stays readable,
every sent call is counted at least at its reservation, and the next run's budget check refuses
anything that would cross the ceiling."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
from conftest import CANARY_KEY, ROOT, process_env, refreeze, run_cli
from loopback import Server, sleep

from fragbench.config import load_experiment
from fragbench.journal import read_journal
from fragbench.ledger import Ledger, ledger_path

TRIALS = 20


def killed_mid_run(experiment: Path, out: Path, env: dict[str, str], server: Server,
                   rng: random.Random, patience: float) -> tuple[int, Path, list[dict[str, Any]]]:
    """`fragbench run` of the experiment's openai series in a subprocess, SIGKILLed once the
    server has received a random number of its 72 requests (plus a random instant up to
    20 ms): how many requests the server received, the series folder, and its journal read
    back (readable, torn last line or not). `patience` bounds the wait for a failure only."""
    target = rng.randrange(0, 72)
    proc = subprocess.Popen([sys.executable, "-m", "fragbench", "run", str(experiment),
                             "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + patience
    while len(server.requests) <= target and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.02))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    series_dir = out / "protocol-1.0" / "openai"
    return len(server.requests), series_dir, read_journal(series_dir / "journal.jsonl")


def test_sigkill_at_random_points(experiment: Path, server: Server) -> None:
    # A ceiling that fits the plan with less slack than any single call's reservation: once one
    # call is counted, a whole new series can no longer fit.
    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "7"')
    plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    reserved = {c["id"]: Decimal(c["reserved_usd"]) for c in plan["schedule"]}
    assert Decimal(plan["budget"]["total_reservation_usd"]) + min(reserved.values()) > \
        Decimal(plan["budget"]["balance_usd"])

    server.default = sleep(0.01)
    rng = random.Random(20261129)
    env = process_env({"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    mid_run = 0
    ledger = ledger_path("protocol-1.0-openai")
    budget = load_experiment(experiment).budget
    for trial in range(TRIALS):
        ledger.unlink(missing_ok=True)  # each trial is a budget of its own
        with server.lock:
            server.requests.clear()
        out = experiment.parent.parent / f"outputs-{trial}"
        received, series_dir, records = killed_mid_run(experiment, out, env, server, rng, 60)
        mid_run += 0 < received < 72
        reserves = [r for r in records if r["type"] == "reserve"]
        outcomes = {r["call_id"]: r for r in records if r["type"] == "outcome"}
        # Every request the server saw had its reservation on disk first.
        assert len(reserves) >= received, (trial, len(reserves), received)
        floor = sum((Decimal(outcomes[r["call_id"]]["cost_usd"]) if r["call_id"] in outcomes
                     else reserved[r["call_id"]] for r in reserves), Decimal(0))
        # The ledger counts at least every reservation not yet settled.
        assert Ledger(ledger, budget).load().spent() >= floor

        # The killed series can still be measured: its unfinished call shows as interrupted.
        measured = run_cli("measure", str(series_dir))
        assert measured.returncode == 0, measured.stderr
        calls = pl.read_parquet(series_dir / "calls.parquet")
        sent = calls.filter(pl.col("status") != "not_sent").height
        assert sent == len(reserves)

        with server.lock:
            server.requests.clear()
        nxt = run_cli("run", str(experiment), "--series", "after-kill", "--backend", "openai",
                      "--out", str(out),
                      env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
        if reserves:
            assert nxt.returncode != 0 and "nothing was sent" in nxt.stderr, nxt.stderr
            assert server.requests == []
            assert not (out / "protocol-1.0" / "after-kill").exists()
        else:  # killed before the first reservation: nothing was counted, the plan still fits
            assert nxt.returncode == 0, nxt.stderr
    assert mid_run >= TRIALS // 2  # the kills did land inside runs
