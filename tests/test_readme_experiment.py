"""Issue 16, "Done when" (first line): "Your own experiment" (docs/your-own-experiment.md, the
README's section until issue 25 moved it), followed word for word as a reader would (see
walkthrough), from `fragbench new experiment` and from
`fragbench import hotpotqa` (on a fixture in HotpotQA's exact format) to a frozen plan, an
offline series and a loopback series with `max_in_flight > 1`, whose ledger, journal and
calls.parquet then agree call by call.

Real subprocesses: the page's commands, as a shell runs them. The model is the real openai
SDK against a loopback Responses server, which lets no request through until as many calls as
the page's `max_in_flight` are at the server at once (so a series that sends them one at a
time cannot pass), and counts how many it answers at once.
"""

from __future__ import annotations

import json
import re
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.hotpotqa_data import FIXTURE
from support.suite import ROOT
from support.walkthrough import blocks, follow

from fragbench.budget.stores import ledger_for
from fragbench.experiment.config import load_experiment
from fragbench.series.journal import read_journal
from fragbench.testing.loopback import Action, Handler, Server, ok

pytestmark = pytest.mark.slow

PAGE = ROOT / "docs" / "your-own-experiment.md"
PATIENCE = 300.0
"""How long the server waits for the calls to be in flight together: a bound on a failure,
never a timing a passing run must meet."""
DATASET = "hotpot_dev_distractor_v1.json"
URL = "http://127.0.0.1:8000/v1"
KEY = "sk-your-key"


def page_in_flight() -> int:
    """The `max_in_flight` the page's config edit sets."""
    [edit] = [b for b in blocks(PAGE) if b.edit]
    [value] = re.findall(r"^max_in_flight = (\d+)$", edit.text, re.MULTILINE)
    return int(value)


class Together:
    """Holds the first `n` requests until all `n` are at the server (later ones go straight
    through), and counts the most it answers at once."""

    def __init__(self, n: int, action: Action) -> None:
        self.barrier = threading.Barrier(n, timeout=PATIENCE)
        self.passed = threading.Event()
        self.action = action
        self.lock = threading.Lock()
        self.now = self.most = 0

    def __call__(self, handler: Handler, number: int, body: dict[str, Any]) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            if not self.passed.is_set():
                self.barrier.wait()
                self.passed.set()
            self.action(handler, number, body)
        finally:
            with self.lock:
                self.now -= 1


def test_the_page_goes_from_a_new_experiment_and_an_import_to_a_loopback_series(
        tmp_path: Path, ledger_store: Path) -> None:
    in_flight = page_in_flight()
    assert in_flight > 1
    dataset = tmp_path / DATASET
    dataset.write_text(json.dumps(FIXTURE), encoding="utf-8")
    with Server("responses") as server:
        together = Together(in_flight, ok())
        server.default = together
        ran = follow(PAGE, tmp_path, replace={DATASET: str(dataset), URL: server.base_url})
        requests = list(server.requests)
    checkout = tmp_path / "fragbench"
    said = "\n".join(r.stdout for r in ran)
    assert "4 of 4 calls sent; spent 0 USD" in said  # the one-case example, offline
    calls = 3 * 2 * 2  # the fixture's 3 usable questions x variants A, B x 2 modes
    assert f"{calls} of {calls} calls sent; spent 0 USD" in said  # the import, offline
    assert f"{calls} of {calls} calls sent; spent" in ran[-2].stdout  # the loopback series
    # The budget's record, the series' and a reservation and an outcome per call.
    assert f"verified, {2 + 2 * calls} records, chain intact" in ran[-1].stdout

    experiment = checkout / "experiments" / "hotpot-dev"
    plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    assert plan["backends"]["openai"]["concurrency"]["max_in_flight"] == in_flight
    assert together.most == in_flight  # that many at once (the barrier), never more

    series = checkout / "outputs" / "hotpot-dev" / "openai"
    journal = read_journal(series / "journal.jsonl")
    reserves = [r for r in journal if r["type"] == "reserve"]
    outcomes = [r for r in journal if r["type"] == "outcome"]
    # Every reserved call once, each with exactly one outcome; one request per reservation.
    reserved_ids = [r["call_id"] for r in reserves]
    assert len(set(reserved_ids)) == len(reserved_ids) == calls
    assert sorted(r["call_id"] for r in outcomes) == sorted(reserved_ids)
    assert len(requests) == len(reserves)
    assert {r["status"] for r in outcomes} == {"completed"}
    by_call = {r["call_id"]: r for r in outcomes}

    # The ledger in the store the test points FRAGBENCH_LEDGER_DIR at.
    budget = load_experiment(experiment).budget
    assert budget.id == "hotpot-dev"
    assert (ledger_store / "hotpot-dev.jsonl").is_file()
    assert not (ledger_store / "protocol-1.0-openai.jsonl").exists()
    ledger = ledger_for(budget).load()
    uid = json.loads((series / "series.json").read_text(encoding="utf-8"))["series_uid"]
    counted = ledger.series_calls(uid)
    assert set(counted) == set(reserved_ids)

    table = pl.read_parquet(series / "calls.parquet")
    assert sorted(table["call_id"].to_list()) == sorted(reserved_ids)
    total = Decimal(0)
    for row in table.iter_rows(named=True):
        outcome = by_call[row["call_id"]]
        amount = Decimal(outcome["counted_usd"])
        assert counted[row["call_id"]] == amount, row["call_id"]
        assert row["counted_usd"] == amount, row["call_id"]
        assert row["cost_usd"] == Decimal(outcome["cost_usd"]) == amount, row["call_id"]
        assert amount > 0
        total += amount
    assert ledger.spent() == total
    # The fake key is never written: not in the series, the experiment or the ledger.
    for path in [*series.rglob("*"), *experiment.rglob("*"), *ledger_store.rglob("*")]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
