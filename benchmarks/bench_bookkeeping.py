"""Collector bookkeeping per call, with an empty budget ledger and with 20 earlier series in it.

The collector's work around each request (balance check under the ledger's lock, reservation
and outcome written and fsync'ed to the ledger and the series journal, pricing) must not grow
with the ledger. This script runs the real collector over the protocol's 72 planned calls with
a session that answers at once (no HTTP), so what is timed is the bookkeeping alone, fsyncs
included, and prints the median per call for each ledger size.

    .venv/bin/python benchmarks/bench_bookkeeping.py [--earlier 0 20] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from fragbench.budget.ledger import Ledger
from fragbench.calls.collector import BudgetBook, collect
from fragbench.experiment.config import load_experiment
from fragbench.experiment.plan import call_reservation, verify
from fragbench.interfaces import Reply, Request, Usage
from fragbench.redact import Redactor
from fragbench.series.journal import Journal

ROOT = Path(__file__).resolve().parent.parent


class Instant:
    """Answers every request at once, with a usage inside the reservation."""

    endpoint = "in process"

    def send(self, request: Request) -> Reply:
        return Reply(status="completed", model="gpt-6-astra", service_tier="default",
                     request_id=None, usage=Usage(400, 100, 50, 300, 200),
                     text='{"answer": "", "citations": []}', raw="{}")

    def close(self) -> None:
        return None


def fill(ledger: Ledger, series: int, calls: list, reservations: dict[int, Decimal]) -> None:
    """Earlier series: every call reserved and settled, as a finished run leaves them."""
    for s in range(series):
        for call in calls:
            with ledger.locked():
                ledger.append({"type": "reserve", "series_uid": f"earlier-{s}",
                               "call_id": call.id, "reserved_usd": str(reservations[call.seq])})
                ledger.append({"type": "outcome", "series_uid": f"earlier-{s}",
                               "call_id": call.id, "counted_usd": "0.001"})


def one_run(earlier: int, calls: list, reservations: dict[int, Decimal], experiment) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        budget = experiment.budget
        # A ceiling the earlier series' spend leaves room under.
        budget = type(budget)(id=budget.id, ceiling_usd=Decimal(1000),
                              prior_spend_usd=budget.prior_spend_usd,
                              framing_tokens=budget.framing_tokens)
        ledger = Ledger(Path(tmp) / "ledger.jsonl", budget).open(Redactor())
        fill(ledger, earlier, calls, reservations)
        ledger.close()
        ledger = Ledger(Path(tmp) / "ledger.jsonl", budget).load().open(Redactor())
        journal = Journal(Path(tmp) / "journal.jsonl", Redactor())
        book = BudgetBook(budget=budget, ledger=ledger, series="bench", series_uid="bench")
        backend = experiment.backends["openai"]
        start = time.perf_counter()
        stop = collect(calls, reservations, Instant(), backend, journal, book)
        elapsed = time.perf_counter() - start
        assert stop is None, stop
        journal.close()
        ledger.close()
        return elapsed / len(calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--earlier", type=int, nargs="+", default=[0, 20])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    experiment = load_experiment(ROOT / "experiments" / "protocol-1.0")
    _, calls, _ = verify(experiment)
    backend = experiment.backends["openai"]
    reservations = {c.seq: call_reservation(c, backend, experiment) for c in calls}
    print("| earlier series in the ledger | ledger records | bookkeeping per call (median "
          f"of {args.runs} runs of 72 calls) |")
    print("|---|---|---|")
    for earlier in args.earlier:
        per_call = [one_run(earlier, calls, reservations, experiment) for _ in range(args.runs)]
        print(f"| {earlier} | {1 + 2 * 72 * earlier} | "
              f"{statistics.median(per_call) * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
