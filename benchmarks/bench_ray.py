"""`retrieve --collection` sweeps: the local engine against the Ray engine on this machine.

The corpus is bench_collection.py's (the same seeded synthetic bilingual collection and 1,000
queries; its rows shuffled, so a passage's sentences are spread over the file), the sweep
`--chunk-size 2,3,4 --top-k 1,10` (six settings: three chunkings, three indexes, three
scorings at k = 10, six merges). Per size:

- `local`: `fragbench retrieve ... --out DIR` as a whole process (wall, CPU, peak RSS);
- `ray-cli`: the same with `--engine ray --shards S`, which starts a local Ray cluster for the
  run and stops it (wall; the RSS is the driver's alone, the cluster's processes are not its
  children once detached);
- `ray-phases`: a process that starts a local Ray cluster (2 CPUs) first, then times
  `compute_ray` alone, phase by phase (shard files written by the driver, shard tasks, merge),
  and samples the summed RSS of itself and every process below it (Ray's GCS, raylet,
  workers) every 0.2 s (shared pages, such as the object store's, counted in each process
  that maps them: an upper bound).

Every table of the Ray runs must equal the local run's (`.equals`), else the script exits 1.
The load average is printed at the start and the end.

Run: `.venv/bin/python benchmarks/bench_ray.py [--sizes 200k,1m] [--shards 2]
[--json FILE]`; `--sizes 5m` for five million sentences (a few minutes per engine here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_collection import build_corpus, fragbench_command, measure  # noqa: E402

SWEEP = ["--chunk-size", "2,3,4", "--top-k", "1,10"]
QUERIES = 1000
SEED = 7


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * scale)


def tree_rss_bytes(root: int) -> int:
    """Summed VmRSS of `root` and every process below it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def phases_worker(folder: Path, shards: int) -> dict[str, Any]:
    """In a process of its own: a local Ray cluster started first, then `compute_ray` timed
    by phase, with the process tree's RSS sampled."""
    import logging

    import ray

    from fragbench.plugins import registry
    from fragbench.retrieval.collection import sweep as cs
    from fragbench.retrieval.collection.engine import read_inputs
    from fragbench.retrieval.collection.ray import compute_ray

    began = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False)
    started = time.perf_counter() - began
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], tree_rss_bytes(os.getpid()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sweep = cs.from_options("2,3,4", "1,10", None)
    scorer = registry().get("scorer", "sqrt-lexical")
    t0 = time.perf_counter()
    sentences_lf, query_frame = read_inputs(folder / "sentences.parquet",
                                            folder / "queries.parquet")
    t1 = time.perf_counter()
    results, report = compute_ray(sentences_lf, query_frame, sweep, {"sqrt-lexical": scorer},
                                  shards=shards)
    t2 = time.perf_counter()
    done.set()
    sampler.join()
    ray.shutdown()
    task_seconds = [t["seconds"] for t in report.tasks]
    return {"cluster_start_s": started, "read_s": t1 - t0, "compute_s": t2 - t1,
            **{f"{k.replace(' ', '_')}_s": v for k, v in report.seconds.items()},
            "tasks": len(report.tasks), "task_s_sum": sum(task_seconds),
            "task_s_max": max(task_seconds), "largest_index_mib": report.largest_index() / 2**20,
            "tree_rss_peak_mib": peak[0] / 2**20, "settings": len(results)}


def tables_equal(a: Path, b: Path) -> list[str]:
    import polars as pl

    names = sorted(p.name for p in a.glob("*.parquet"))
    problems = [] if names == sorted(p.name for p in b.glob("*.parquet")) else [
        f"{b}: other tables than {a}"]
    for name in names:
        if (b / name).exists() and not pl.read_parquet(a / name).equals(
                pl.read_parquet(b / name)):
            problems.append(f"{b / name} differs from {a / name}")
    return problems


def bench_size(n: int, shards: int, root: Path) -> dict[str, Any]:
    folder = root / f"n{n}"
    began = time.perf_counter()
    corpus = build_corpus(n, QUERIES, SEED, True, folder)
    print(f"  corpus of {n:,} sentences built in {time.perf_counter() - began:.0f} s",
          flush=True)
    env = dict(os.environ)
    base = [*fragbench_command(), "retrieve", "--collection", str(folder / "sentences.parquet"),
            "--queries", str(folder / "queries.parquet"), *SWEEP]
    out: dict[str, Any] = {"sentences": n, "corpus": corpus, "shards": shards}
    out["local"] = measure([*base, "--out", str(folder / "local")], env, folder, "local")
    print(f"  local: {out['local']}", flush=True)
    out["ray_cli"] = measure([*base, "--engine", "ray", "--shards", str(shards), "--out",
                              str(folder / "ray")], env, folder, "ray")
    print(f"  ray-cli: {out['ray_cli']}", flush=True)
    worker = subprocess.run(
        [sys.executable, __file__, "--phases-worker", str(folder), "--shards", str(shards)],
        capture_output=True, text=True, check=False, env=env)
    lines = [ln for ln in worker.stdout.splitlines() if ln.startswith("{")]
    out["ray_phases"] = json.loads(lines[-1]) if lines else {
        "error": (worker.stderr.strip().splitlines() or ["?"])[-1]}
    print(f"  ray-phases: {out['ray_phases']}", flush=True)
    out["problems"] = tables_equal(folder / "local", folder / "ray")
    shutil.rmtree(folder, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200k,1m")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--phases-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phases_worker:
        print(json.dumps(phases_worker(args.phases_worker, args.shards)))
        return
    print(f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        for size in args.sizes.split(","):
            n = parse_size(size)
            print(f"{n:,} sentences", flush=True)
            results.append(bench_size(n, args.shards, Path(tmp)))
    print(f"load average at end: {os.getloadavg()}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    problems = [p for r in results for p in r["problems"]]
    for problem in problems:
        print(f"DIFFERS: {problem}")
    if problems:
        raise SystemExit(1)
    print("every Ray table equals the local engine's")


if __name__ == "__main__":
    main()
