"""Concurrent collection (issue 16, item 3). Results go to benchmarks/RESULTS.md.

1. Against the loopback server answering after 200 ms (a process of its own, the real openai
   SDK on fragbench's transport, a real billed series with its ledger and journal): CALLS
   calls (default 10,000) at 32 in flight, through `fragbench.run.run`. Reported: the time
   from the first reservation to the last outcome (journal timestamps), against the ideal
   calls x 0.2 s / 32.
   Side by side, against the same server process at the same load: a minimal client
   (`http.client`, one persistent connection per thread, `in_flight` threads, each response
   read whole and parsed as JSON, nothing recorded) sending the same number of requests of
   the same size: the floor a collector cannot beat. Target (issue 26): fragbench's
   collecting time within 10 % of the minimal client's at 32 in flight. `--in-flight` takes
   several values (issue 26 also names a 10,000-call series at 64 in flight).
2. The collector's own time per call: `fragbench.calls.collector.collect` with an in-process session
   that answers at once (no network), one call in flight, at 100, 1,000 and 10,000 calls,
   each on a fresh ledger and on a ledger holding 200 earlier series (72 calls each, every
   call reserved and settled). What it measures: the reservation check under the ledger's
   lock, the durable writes (ledger and journal, fsync'ed), pricing and the stop rules.

The experiment is protocol 1.0 copied to a temporary folder with `repetitions` raised to
reach the call count (24 calls per repetition). Tests never assert timings; this script only
reports them. The machine is shared: the load average is printed at the start and the end.

Run: `.venv/bin/python benchmarks/bench_concurrency.py [--calls 10000] [--in-flight 32]
[--latency 0.2] [--sizes 100,1000,10000] [--skip-loopback] [--skip-overhead]`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
KEY = "fbbench-loopback-only-not-a-key-0123456789"
"""What the benchmark puts in OPENAI_API_KEY: only a loopback server on 127.0.0.1 ever sees it,
and it has no provider's shape, so it cannot be mistaken for (or spend as) a real key."""
SERVER = """
import sys, time
from fragbench.interfaces import Usage
from fragbench.testing.loopback import Server, ok
latency = float(sys.argv[1])
# One usage for every call: the default one grows with the request number, past the output
# ceiling after 900 calls (an impossible usage, which stops a series).
answer = ok(usage=Usage(input_tokens=400, cached_tokens=0, cache_write_tokens=0,
                        output_tokens=300, reasoning_tokens=0))
def act(handler, number, body):
    time.sleep(latency)
    answer(handler, number, body)
with Server() as srv:
    srv.default = act
    print(srv.base_url, flush=True)
    sys.stdin.read()
"""


def experiment(root: Path, calls: int, in_flight: int) -> Path:
    """protocol-1.0 with enough repetitions for `calls` calls (24 a repetition)."""
    shutil.copytree(ROOT / "experiments" / "protocol-1.0", root / "experiments" / "bench",
                    ignore=shutil.ignore_patterns("outputs", "experiment.json"))
    if not (root / "corpus").exists():
        shutil.copytree(ROOT / "corpus", root / "corpus")
    config = root / "experiments" / "bench" / "config.toml"
    reps = max(1, -(-calls // 24))
    text = config.read_text(encoding="utf-8")
    text = text.replace("repetitions = 3", f"repetitions = {reps}")
    text = text.replace('plugin = "openai"\n', f'plugin = "openai"\nmax_in_flight = {in_flight}\n')
    text = text.replace('ceiling_usd = "10"', 'ceiling_usd = "100000"')
    config.write_text(text, encoding="utf-8")
    from fragbench.experiment.config import load_experiment
    from fragbench.experiment.plan import freeze

    freeze(load_experiment(config.parent))
    return config.parent


def loopback(calls: int, in_flight: int, latency: float) -> dict[str, Any]:
    from fragbench.run import run
    from fragbench.series.journal import read_journal

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["FRAGBENCH_LEDGER_DIR"] = str(root / "ledgers")
        exp = experiment(root, calls, in_flight)
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(latency)], cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            os.environ["OPENAI_BASE_URL"] = server.stdout.readline().strip()
            os.environ["OPENAI_API_KEY"] = KEY
            started = time.perf_counter()
            result = run(exp, series="openai", out=root / "outputs")
            whole = time.perf_counter() - started
            body = request_body(exp)
            floor = minimal_client(os.environ["OPENAI_BASE_URL"], body, result.sent, in_flight)
        finally:
            server.stdin.close()  # type: ignore[union-attr]
            server.wait()
        records = read_journal(result.series_dir / "journal.jsonl")
        times = [datetime.fromisoformat(r["at"]) for r in records
                 if r["type"] in ("reserve", "outcome")]
        collecting = (max(times) - min(times)).total_seconds()
        n = result.sent
        ideal = n * latency / in_flight
        return {"calls": n, "stop": result.stop, "collecting_s": collecting,
                "ideal_s": ideal, "over_ideal": collecting / ideal - 1, "whole_run_s": whole,
                "minimal_s": floor, "over_minimal": collecting / floor - 1}


def request_body(exp: Path) -> bytes:
    """A request as the openai SDK sends protocol 1.0's first call: the minimal client sends
    bytes of the same size and shape."""
    from fragbench.experiment.config import load_experiment
    from fragbench.experiment.plan import verify

    request = verify(load_experiment(exp))[1][0].request
    return json.dumps({
        "model": "gpt-6-astra", "instructions": request.instructions, "input": request.input,
        "max_output_tokens": 1200, "reasoning": {"effort": "medium"},
        "service_tier": "default", "store": False, "tools": [],
        "text": {"format": {"type": "json_schema", "name": request.schema_name,
                            "schema": request.schema, "strict": True}},
    }, ensure_ascii=False).encode()


def minimal_client(base_url: str, body: bytes, calls: int, in_flight: int) -> float:
    """Seconds for `calls` POSTs of `body` to the server's /responses at `in_flight` at once
    (module docstring, 1): what a client that records nothing takes against the same server."""
    url = urlsplit(base_url)
    path = url.path.rstrip("/") + "/responses"
    numbers = iter(range(calls))
    lock = threading.Lock()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}

    def worker() -> None:
        conn = http.client.HTTPConnection(url.hostname, url.port)
        while True:
            with lock:
                if next(numbers, None) is None:
                    break
            conn.request("POST", path, body=body, headers=headers)
            reply = conn.getresponse()
            json.loads(reply.read())
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(in_flight)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


class Instant:
    """A session that answers every request at once, as a valid completed response would."""

    endpoint = "instant"
    concurrent = True

    def send(self, request: Any) -> Any:
        from fragbench.interfaces import Reply, Usage

        return Reply(status="completed", model="gpt-6-astra-2026-09-30", service_tier="default",
                     request_id=None, text='{"answer": "", "citations": []}',
                     usage=Usage(input_tokens=400, cached_tokens=0, cache_write_tokens=0,
                                 output_tokens=300, reasoning_tokens=0))

    def close(self) -> None:
        return None


def earlier_series(ledger: Any, count: int, calls: int) -> None:
    """`count` finished series of `calls` calls each, appended as a run appends them."""
    for s in range(count):
        uid = uuid.uuid4().hex
        with ledger.locked():
            ledger.append({"type": "series", "series": f"old-{s}", "series_uid": uid})
            for c in range(calls):
                ledger.append({"type": "reserve", "call_id": f"c{c}", "seq": c + 1,
                               "reserved_usd": "0.001", "series": f"old-{s}",
                               "series_uid": uid})
                ledger.append({"type": "outcome", "call_id": f"c{c}", "seq": c + 1,
                               "status": "completed", "cost_usd": "0.0001",
                               "counted_usd": "0.0001", "series": f"old-{s}",
                               "series_uid": uid})


def overhead(calls: int, earlier: int) -> dict[str, Any]:
    from fragbench.budget.ledger import Ledger, ledger_path
    from fragbench.calls.collector import BudgetBook, collect
    from fragbench.experiment.config import load_experiment
    from fragbench.experiment.plan import call_reservation, verify
    from fragbench.redact import Redactor
    from fragbench.run import input_bounds
    from fragbench.series.journal import Journal

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["FRAGBENCH_LEDGER_DIR"] = str(root / "ledgers")
        exp = load_experiment(experiment(root, calls, 1))
        _, planned, _ = verify(exp)
        planned = planned[:calls]
        backend = exp.backends["openai"]
        reservations = {c.seq: call_reservation(c, backend, exp) for c in planned}
        ledger = Ledger(ledger_path(exp.budget.id), exp.budget).load().open(Redactor())
        earlier_series(ledger, earlier, 72)
        journal = Journal(root / "journal.jsonl")
        try:
            started = time.perf_counter()
            stop = collect(planned, reservations, Instant(), backend, journal,
                           BudgetBook(exp.budget, ledger, "bench", uuid.uuid4().hex),
                           input_bounds=input_bounds(planned, exp))
            took = time.perf_counter() - started
        finally:
            journal.close()
            ledger.close()
        assert stop is None, stop
        return {"calls": len(planned), "earlier_series": earlier, "ledger_records":
                ledger.records, "per_call_ms": took / len(planned) * 1000,
                "total_s": took}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[32])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--skip-loopback", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}", flush=True)
    if not args.skip_overhead:
        for earlier in (0, 200):
            for size in (int(s) for s in args.sizes.split(",")):
                r = overhead(size, earlier)
                print(f"collector overhead: {r['calls']} calls, ledger with {earlier} earlier "
                      f"series ({r['ledger_records']} records at the end): "
                      f"{r['per_call_ms']:.2f} ms per call ({r['total_s']:.1f} s)", flush=True)
    for in_flight in [] if args.skip_loopback else args.in_flight:
        r = loopback(args.calls, in_flight, args.latency)
        print(f"loopback: {r['calls']} calls at {in_flight} in flight, {args.latency} s "
              f"each: collecting {r['collecting_s']:.1f} s, ideal {r['ideal_s']:.1f} s, "
              f"{r['over_ideal'] * 100:+.1f} % over ideal; the whole run (plan check, "
              f"retrieval, tables, report) {r['whole_run_s']:.1f} s; stop: {r['stop']}",
              flush=True)
        met = "met" if r["over_minimal"] <= 0.10 else "NOT met"
        print(f"minimal client, same server, {r['calls']} requests at {in_flight} in flight: "
              f"{r['minimal_s']:.1f} s; fragbench {r['over_minimal'] * 100:+.1f} % over it"
              + (f" (target within 10 %: {met})" if in_flight == 32 else ""), flush=True)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
