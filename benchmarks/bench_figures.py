"""How long drawing every figure of a series takes (target: under a second). Results go to
benchmarks/RESULTS.md.

Four series are recorded first, in a temporary folder: the offline baseline (`fragbench run ...
--series extractive`), and three model series against the tests' loopback Responses server
(`fragbench.testing.loopback`, with TCP_NODELAY so that it answers at once): complete, stopped
at call 10 (an HTTP 500; one earlier answer not JSON), and empty (the first call fails: no
answer, 71 calls never sent). Then, for each series, several fresh processes each draw both
figures (`availability_heatmap`, `citation_outcomes`: PNG and SVG each) into a folder of their
own, exactly as `fragbench report` calls them, and report:

- `cold`: from before `fragbench.report.figures` and matplotlib are imported to both figures written
  (the tables already read): what a report pays for its figures, imports included;
- `warm`: the same two figures drawn again in the same process (matplotlib loaded, fonts
  cached): the drawing alone;
- `process`: the whole process (interpreter start-up, Polars, reading the tables, cold draw).

Medians over the runs, with the range. Every process gets FRAGBENCH_LEDGER_DIR in the temporary
folder and no OPENAI_* variable but the loopback's. Run:
`.venv/bin/python benchmarks/bench_figures.py [--runs 5] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "experiments/protocol-1.0"
TARGET_S = 1.0

CHILD = """
import json, sys, time
from pathlib import Path
start = time.perf_counter()
import polars as pl
series, out = Path(sys.argv[1]), Path(sys.argv[2])
info = json.loads((series / "series.json").read_text(encoding="utf-8"))
t = {n: pl.read_parquet(series / f"{n}.parquet") for n in
     ("availability", "citations", "citations_per_call", "calls")}
ready = time.perf_counter()
from fragbench.report.figures import availability_heatmap, citation_outcomes
def draw(folder):
    folder.mkdir(parents=True)
    availability_heatmap(t["availability"], folder / "availability", info)
    citation_outcomes(t["citations"], t["citations_per_call"], t["calls"],
                      folder / "citations", info)
draw(out / "cold")
cold = time.perf_counter()
draw(out / "warm")
warm = time.perf_counter()
print(json.dumps({"before_s": ready - start, "cold_s": cold - ready, "warm_s": warm - cold}))
"""


def env_for(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["FRAGBENCH_LEDGER_DIR"] = str(tmp / "ledgers")
    env.update(extra or {})
    return env


def fragbench() -> list[str]:
    script = Path(sys.executable).with_name("fragbench")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fragbench"]


def record(tmp: Path) -> dict[str, Path]:
    """The four series: name -> folder."""
    out = tmp / "outputs"
    run = [*fragbench(), "run", EXPERIMENT, "--out", str(out)]
    subprocess.run([*run, "--series", "extractive"], cwd=ROOT, env=env_for(tmp), check=True,
                   capture_output=True)
    from fragbench.testing import loopback

    loopback.Handler.disable_nagle_algorithm = True
    scripts: dict[str, dict[int, Any]] = {
        "complete": {},
        "stopped": {2: loopback.ok(text="not JSON"), 9: loopback.http_error(500)},
        "empty": {0: loopback.http_error(500)},
    }
    for name, script in scripts.items():
        with loopback.Server() as server:
            server.script.update(script)
            env = env_for(tmp, {"OPENAI_API_KEY": "sk-bench-dummy-key-0000",
                                "OPENAI_BASE_URL": server.base_url})
            done = subprocess.run([*run, "--series", name, "--backend", "openai"], cwd=ROOT,
                                  env=env, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 3):
            raise SystemExit(f"recording {name} failed: {done.stderr.strip()[-300:]}")
    return {name: out / "protocol-1.0" / name
            for name in ("extractive", "complete", "stopped", "empty")}


def measure(series: Path, runs: int, tmp: Path) -> dict[str, Any]:
    rows = []
    for i in range(runs):
        out = tmp / f"figures-{series.name}-{i}"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", CHILD, str(series), str(out)], cwd=ROOT,
                              env=env_for(tmp), capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["process_s"] = time.perf_counter() - start
        rows.append(row)
    result: dict[str, Any] = {"series": series.name, "runs": runs}
    for key in ("cold_s", "warm_s", "process_s"):
        values = [r[key] for r in rows]
        result[key] = {"median": statistics.median(values), "min": min(values),
                       "max": max(values)}
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| series | runs | cold s, median (range) | warm s, median (range) | "
             "whole process s, median (range) | cold / target |",
             "|---|---|---|---|---|---|"]
    for r in results:
        cells = [f"{r[k]['median']:.3f} ({r[k]['min']:.3f}-{r[k]['max']:.3f})"
                 for k in ("cold_s", "warm_s", "process_s")]
        lines.append(f"| {r['series']} | {r['runs']} | {' | '.join(cells)} | "
                     f"{r['cold_s']['median'] / TARGET_S:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at the start; {os.cpu_count()} CPUs",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="fbfig-") as name:
        tmp = Path(name)
        series = record(tmp)
        results = [measure(path, args.runs, tmp) for path in series.values()]
    print(table(results))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
