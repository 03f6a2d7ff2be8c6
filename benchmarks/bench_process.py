"""Whole-process timings of the commands people run. Results go to benchmarks/RESULTS.md.

Each command runs as a process of its own, several times; the median wall time is reported with
the median CPU time and peak RSS (`os.wait4`), and its ratio to the issue's target:

- `fragbench --help` (< 0.25 s), `fragbench plugins`, `fragbench plan experiments/protocol-1.0`;
- the offline protocol run, `fragbench run experiments/protocol-1.0 --series extractive --out
  TMP` (< 2 s), each run into a fresh folder;
- `fragbench report` on that series (< 1 s);
- the collector: `fragbench run experiments/protocol-1.0 --series openai --backend openai --out
  TMP` against the loopback Responses-API server of the tests (`fragbench.testing.loopback`)
  (< 3 s for the 72 calls); OPENAI_API_KEY is a dummy, OPENAI_BASE_URL the server,
  FRAGBENCH_LEDGER_DIR a fresh temporary folder (the real ledger store is never touched). Twice:
  `collector`, the server with TCP_NODELAY, which answers at once; `collector-nagle`, the server
  exactly as the tests use it, whose two writes per response (headers, then body) meet Nagle's
  algorithm and the client's delayed ACK, about 40 ms a call spent waiting in the kernel;
- with `--make-test head|worktree`: `make test` in a fresh copy (a `git clone` of HEAD, or the
  working tree's tracked and untracked non-ignored files), bootstrap of uv and the locked
  environment included (< 3 min). It takes minutes, so it is off by default.

For `run`, each `phase:` line on stderr is timestamped as it arrives, so the time of every phase
(verifying, retrieval, collecting, tables, report) is reported too; the collector's overhead is
the collecting phase (the server's answers take no time).

Every command gets FRAGBENCH_LEDGER_DIR in a temporary folder and no OPENAI_* variable except
where stated. Peak RSS is read straight from `os.wait4`: this script stays small (standard
library only), so the peak Linux carries from a parent into its child is not the child's.
The commit measured, whether the tree is clean, the load average and whether every fragbench
module has current bytecode are printed first. Run: `make bench`, or
`.venv/bin/python benchmarks/bench_process.py [--runs 5] [--slow-runs 3]
[--make-test head|worktree] [--make-test-only head|worktree] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "experiments/protocol-1.0"
TARGETS = {"help": 0.25, "run-offline": 2.0, "report": 1.0, "collector": 3.0,
           "make-test": 180.0}


def stale_bytecode() -> tuple[int, int]:
    """(modules of src/ and plugins/ without current bytecode, all modules). With
    PYTHONDONTWRITEBYTECODE set (as on the project machine) nothing is written at run time, so
    every process compiles those again: `make` compiles them once; an edit after that makes
    every start-up slower until the next compile."""
    import importlib.util

    sources = [p for d in ("src", "plugins") for p in (ROOT / d).rglob("*.py")]
    stale = 0
    for source in sources:
        try:
            head = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
        except OSError:
            stale += 1
            continue
        if int.from_bytes(head[4:8], "little") & 1:  # hash-based: checked otherwise, trusted
            continue
        st = source.stat()
        if (int.from_bytes(head[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF
                or int.from_bytes(head[12:16], "little") != st.st_size & 0xFFFFFFFF):
            stale += 1
    return stale, len(sources)


def machine_line() -> str:
    stale, total = stale_bytecode()
    writes = "not written at run time" if os.environ.get("PYTHONDONTWRITEBYTECODE") else \
        "written at run time"
    return (f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; bytecode "
            f"{writes}, {stale} of {total} fragbench modules without current bytecode")


def source_line() -> str:
    """The commit measured, and whether the working tree differs from it (read-only git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, check=True, capture_output=True,
                               text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "source: not a git checkout"
    return f"source: commit {head}" + (f", {len(dirty)} tracked files modified" if dirty else
                                       ", clean")


def fragbench() -> list[str]:
    script = Path(sys.executable).with_name("fragbench")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fragbench"]


def base_env(ledgers: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["FRAGBENCH_LEDGER_DIR"] = str(ledgers)
    return env


def timed(cmd: list[str], env: dict[str, str], cwd: Path = ROOT, merge: bool = False
          ) -> dict[str, Any]:
    """One process: wall and CPU time, peak RSS, exit code, and every stderr line (stdout too
    with `merge`) with the time it arrived."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if merge else subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if merge else subprocess.PIPE)
    stream = proc.stdout if merge else proc.stderr
    assert stream is not None
    lines = [(time.perf_counter() - start, raw.decode("utf-8", "replace").rstrip("\n"))
             for raw in stream]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mib": usage.ru_maxrss / 1024, "rc": proc.returncode, "lines": lines}


def phases(run: dict[str, Any]) -> dict[str, float]:
    """Seconds per `phase:` of a `run`, from each phase line to the next (the last one to the
    process's end); `start-up` is from the start to the first phase line."""
    names = {"verifying": "verifying", "recording": "retrieval", "collecting": "collecting",
             "billed": "collecting", "deriving": "tables", "writing": "report"}
    marks = [(t, names.get(word, word)) for t, line in run["lines"] if line.startswith("phase: ")
             for word in [line.removeprefix("phase: ").split(" ")[0]]]
    out: dict[str, float] = {}
    if not marks:
        return out
    out["start-up"] = marks[0][0]
    ends = [t for t, _ in marks[1:]] + [run["wall_s"]]
    for (t, name), end in zip(marks, ends, strict=True):
        out[name] = end - t
    return out


def summary(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    row: dict[str, Any] = {
        "name": name, "runs": len(runs), "median_s": statistics.median(walls),
        "min_s": min(walls), "max_s": max(walls),
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "rss_mib": statistics.median(r["rss_mib"] for r in runs),
        "failed": [r["rc"] for r in runs if r["rc"] != 0],
    }
    per_phase = [phases(r) for r in runs]
    if per_phase and per_phase[0]:
        row["phases"] = {k: statistics.median(p.get(k, 0.0) for p in per_phase)
                         for k in per_phase[0]}
    if name in TARGETS:
        row["target_s"] = TARGETS[name]
    return row


def bench(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    fb = fragbench()
    rows: list[dict[str, Any]] = []
    if args.make_test_only:
        return [make_test(args.make_test_only, tmp)]

    def repeat(name: str, n: int, make: Any) -> dict[str, Any]:
        runs = []
        for i in range(n):
            cmd, env = make(i)
            run = timed(cmd, env)
            if run["rc"] != 0:
                tail = [line for _, line in run["lines"]][-3:]
                print(f"   {name} run {i}: exit {run['rc']}: {' | '.join(tail)}",
                      file=sys.stderr)
            runs.append(run)
        row = summary(name, runs)
        rows.append(row)
        print(f"   {name}: median {row['median_s']:.3f} s over {n} runs", flush=True)
        return row

    def simple(*argv: str) -> Any:
        return lambda i: ([*fb, *argv], base_env(tmp / "ledgers-ro"))

    repeat("help", args.runs, simple("--help"))
    repeat("plugins", args.runs, simple("plugins"))
    repeat("plan", args.runs, simple("plan", EXPERIMENT))

    def offline(i: int) -> Any:
        return ([*fb, "run", EXPERIMENT, "--series", "extractive", "--out",
                 str(tmp / f"offline-{i}")], base_env(tmp / f"ledgers-offline-{i}"))

    repeat("run-offline", args.runs, offline)
    series = tmp / "offline-0" / "protocol-1.0" / "extractive"
    repeat("report", args.runs, simple("report", str(series)))

    from fragbench.testing import loopback

    # Two servers: fragbench.testing.loopback as it is, which writes a response's headers and
    # body in two writes, so that Nagle's algorithm holds the body until the client's delayed ACK
    # (about 40 ms a call on Linux loopback); and the same server with TCP_NODELAY, which
    # answers at once: the collector's own overhead, the one the target is about.
    variants = {"collector": True, "collector-nagle": False}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for i in range(args.slow_runs):
        for name, nodelay in variants.items():
            loopback.Handler.disable_nagle_algorithm = nodelay
            with loopback.Server() as server:
                env = base_env(tmp / f"ledgers-{name}-{i}")
                env.update({"OPENAI_API_KEY": "sk-bench-dummy-key-0000",
                            "OPENAI_BASE_URL": server.base_url})
                run = timed([*fb, "run", EXPERIMENT, "--series", "openai", "--backend",
                             "openai", "--out", str(tmp / f"{name}-{i}")], env)
                run["requests"] = len(server.requests)
            if run["rc"] != 0 or run["requests"] != 72:
                tail = [line for _, line in run["lines"]][-3:]
                print(f"   {name} run {i}: exit {run['rc']}, {run['requests']} requests: "
                      f"{' | '.join(tail)}", file=sys.stderr)
                run["rc"] = run["rc"] or f"{run['requests']} requests"
            runs[name].append(run)
    loopback.Handler.disable_nagle_algorithm = False
    for name in variants:
        whole = summary(f"run-openai-{name.replace('collector', 'loopback')}", runs[name])
        collect_s = [phases(r).get("collecting", float("nan")) for r in runs[name]]
        rows.append({"name": name, "runs": len(collect_s),
                     "median_s": statistics.median(collect_s), "min_s": min(collect_s),
                     "max_s": max(collect_s), "cpu_s": None, "rss_mib": None,
                     "failed": whole["failed"], "target_s": TARGETS.get(name),
                     "note": f"the collecting phase of {whole['name']} (72 calls)"})
        rows.append(whole)
        print(f"   {name}: median {rows[-2]['median_s']:.3f} s (collecting phase), whole run "
              f"{whole['median_s']:.3f} s over {len(collect_s)} runs", flush=True)

    if args.make_test:
        rows.append(make_test(args.make_test, tmp))
    return rows


def make_test(mode: str, tmp: Path) -> dict[str, Any]:
    """`make test` in a fresh copy: bootstrap (uv, the locked environment) then ruff + pytest."""
    copy = tmp / "fresh"
    if mode == "head":
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(copy)], check=True)
    else:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=ROOT, check=True,
                                capture_output=True).stdout.decode().split("\0")
        for rel in filter(None, listed):
            source = ROOT / rel
            if source.is_file():
                (copy / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy / rel)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "VIRTUAL_ENV", "FRAGBENCH_"))}
    print(f"   make test in a fresh copy ({mode}) ...", flush=True)
    run = timed(["make", "test"], env, cwd=copy, merge=True)
    lines = run["lines"]
    ruff_at = next((t for t, line in lines if "ruff check" in line), None)
    tail = [line for _, line in lines][-3:]
    row = {"name": "make-test", "runs": 1, "median_s": run["wall_s"], "min_s": run["wall_s"],
           "max_s": run["wall_s"], "cpu_s": run["cpu_s"], "rss_mib": None,
           "failed": [run["rc"]] if run["rc"] else [], "target_s": TARGETS["make-test"],
           "phases": {"bootstrap": ruff_at or 0.0,
                      "ruff+pytest": run["wall_s"] - (ruff_at or 0.0)},
           "note": f"fresh copy ({mode}); last lines: {' | '.join(tail)}"}
    print(f"   make-test: {run['wall_s']:.1f} s (exit {run['rc']}); {tail[-1] if tail else ''}",
          flush=True)
    return row


def report(rows: list[dict[str, Any]]) -> str:
    out = ["| command | runs | median s | min-max s | CPU s | peak RSS MiB | target s | "
           "median / target | verdict |", "|" + "---|" * 9]
    for r in rows:
        target = r.get("target_s")
        if r["failed"]:
            verdict = f"FAILED {r['failed']}"
        elif target is not None:
            verdict = "met" if r["median_s"] < target else "MISSED"
        else:
            verdict = ""
        cpu = f"{r['cpu_s']:.2f}" if r.get("cpu_s") is not None else "-"
        rss = f"{r['rss_mib']:.0f}" if r.get("rss_mib") is not None else "-"
        ratio = f"{r['median_s'] / target:.2f}" if target else "-"
        out.append(f"| {r['name']} | {r['runs']} | {r['median_s']:.3f} | {r['min_s']:.3f}-"
                   f"{r['max_s']:.3f} | {cpu} | {rss} | {target or '-'} | {ratio} | "
                   f"{verdict} |")
    lines = ["\n".join(out), ""]
    for r in rows:
        if r.get("phases"):
            parts = ", ".join(f"{k} {v:.2f} s" for k, v in r["phases"].items())
            lines.append(f"- {r['name']}: {parts}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (median)")
    parser.add_argument("--slow-runs", type=int, default=3, help="runs of the collector")
    parser.add_argument("--make-test", choices=("head", "worktree"),
                        help="also time `make test` in a fresh copy (minutes)")
    parser.add_argument("--make-test-only", choices=("head", "worktree"),
                        help="time only `make test` in a fresh copy")
    parser.add_argument("--json", help="write every measurement to this file")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    print(source_line(), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="fbproc-"))
    try:
        rows = bench(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(report(rows))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    if any(r["failed"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
