"""Issue 26's scale targets, offline with the extractive baseline: each command of the pipeline
(`import hotpotqa`, `new experiment`, `freeze`, `plan`, `run`, `measure`, `report`) as a user
runs it, in a process of its own, at 1,000, 10,000 and (with `--sizes`) 100,000 calls, timed
with its peak RSS, and the sizes of what it wrote; then each target, met or not, with the
machine and its load. Not a test: no test asserts a timing.

    .venv/bin/python benchmarks/bench_scale.py                  # 1,000 and 10,000 calls
    .venv/bin/python benchmarks/bench_scale.py --sizes 100000   # one size

The questions are generated in HotpotQA's format (tests/support/hotpotqa_data.py), four
calls each (`new experiment`'s defaults: variants A and B, retrieval and full, one
repetition). Targets (issue 26): `run` under 10 minutes at 100,000 calls and at most 11 times
its 10,000-call time, peak RSS under 2 GiB; `plan` and `freeze` under 30 s; `measure` and
`report` under 2 minutes; every figure's PNG at most 1 MB.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

GIB = 1024**3
TARGETS = {"freeze": 30.0, "plan": 30.0, "measure": 120.0, "report": 120.0}


def step(name: str, *args: str, cwd: Path) -> tuple[float, int, str]:
    """`fragbench ARGS` in a process of its own: seconds, peak RSS in bytes, its stderr's
    last line."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "fragbench", *args], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}): {err[-2000:]}")
    return seconds, usage.ru_maxrss * 1024, (err.strip().splitlines() or [""])[-1]


def one_size(calls: int, root: Path) -> dict[str, tuple[float, int]]:
    from support.hotpotqa_data import generate, write

    questions = calls // 4
    root.mkdir(parents=True)
    write(root / "hotpot.json", generate(questions))
    out: dict[str, tuple[float, int]] = {}
    for name, args in (
            ("import", ("import", "hotpotqa", "hotpot.json", "--out", "corpus")),
            ("new", ("new", "experiment", "exp", "--dir", ".", "--corpus", "corpus")),
            ("freeze", ("freeze", "exp")),
            ("plan", ("plan", "exp")),
            ("run", ("run", "exp", "--series", "extractive", "--out", "out")),
            ("measure", ("measure", "out/exp/extractive")),
            ("report", ("report", "out/exp/extractive"))):
        seconds, rss, _ = step(name, *args, cwd=root)
        out[name] = (seconds, rss)
        print(f"  {calls:>7,} calls  {name:<8} {seconds:8.1f} s  {rss / 2**20:8.0f} MiB",
              flush=True)
    series = root / "out" / "exp" / "extractive"
    for path in (series / "report.html", series / "report.md", series / "journal.jsonl",
                 *sorted((series / "figures").glob("*.png"))):
        print(f"  {calls:>7,} calls  {path.name:<18} {path.stat().st_size / 2**20:8.2f} MiB")
        out[f"size:{path.name}"] = (0.0, path.stat().st_size)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--keep", type=Path, help="a folder to keep the experiments in")
    options = parser.parse_args()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; load average before: {os.getloadavg()}")
    base = options.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    results = {n: one_size(n, base / str(n)) for n in options.sizes}
    print(f"load average after: {os.getloadavg()}")
    for n, r in results.items():
        for name, limit in TARGETS.items():
            print(f"{n:>7,} calls: {name} {r[name][0]:.1f} s, target < {limit:.0f} s: "
                  f"{'met' if r[name][0] < limit else 'NOT met'}")
        print(f"{n:>7,} calls: run peak RSS {r['run'][1] / GIB:.2f} GiB, target < 2 GiB: "
              f"{'met' if r['run'][1] < 2 * GIB else 'NOT met'}")
        pngs = [v[1] for k, v in r.items() if k.endswith(".png")]
        print(f"{n:>7,} calls: largest PNG {max(pngs) / 1e6:.2f} MB, target <= 1 MB: "
              f"{'met' if max(pngs) <= 1_000_000 else 'NOT met'}")
    if 100_000 in results:
        run = results[100_000]["run"][0]
        print(f"100,000 calls: run {run:.0f} s, target < 600 s: "
              f"{'met' if run < 600 else 'NOT met'}")
        if 10_000 in results:
            ratio = run / results[10_000]["run"][0]
            print(f"100,000 / 10,000 calls: run {ratio:.1f} times, target <= 11: "
                  f"{'met' if ratio <= 11 else 'NOT met'}")


if __name__ == "__main__":
    main()
