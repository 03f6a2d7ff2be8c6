"""`make test` on a quiet machine and under a synthetic load (issue 17: "a suite that stays fast
on a busy machine"). Results go to benchmarks/RESULTS.md ("make test time").

Phases, one after another, in the checkout given (`--dir`, default this one):
1. `make`'s prerequisites of `test` (the locked environment, Chromium, PostgreSQL), untimed, so
   that a first install is not counted as test time;
2. `make test` as a user runs it (ruff, then `pytest -q -n 2 --dist loadfile`), with
   `PYTEST_ADDOPTS="--durations=15 -p no:cacheprovider"` added so pytest lists its 15 slowest
   tests and writes no cache into the checkout (`--quiet-only` / `--load-only` run one of the
   next two);
3. the same, with `--load N` busy processes (default 4; `python3 -c "while True: pass"`, niced
   0, started before and killed after by their process ids) competing for the CPUs.

For each run: wall time, the load average (1, 5, 15 min) before and after, pytest's last line
(how many passed, failed, skipped), the longest silence (the longest interval in which `make
test` wrote nothing: a test that waits without saying so shows here), and the 15 slowest
tests. Printed as it goes, then as Markdown (also written to `--markdown FILE`). Exit status:
non-zero when a `make test` failed.

Run on a machine nothing else is using (the load is what this script adds):
`.venv/bin/python benchmarks/bench_suite.py [--load 4] [--dir CHECKOUT] [--markdown FILE]`.
A fresh clone: `git clone . /tmp/fb && .venv/bin/python benchmarks/bench_suite.py --dir /tmp/fb`
(its first phase installs the environment there). SIGHUP is set back to its default for `make
test` (`default_sighup`), so the script may run under `nohup`. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREREQUISITES = [".venv/.synced", "chromium", "postgresql"]
"""`make test`'s prerequisites, from the Makefile's `test:` line."""
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(call|setup|teardown)\s+(\S+)")
SETTLE_SECONDS = 5.0
"""How long the busy processes run before `make test` starts: the 1-minute load average then
already shows them (it needs about a minute to reach N, so 'before' understates the load)."""


@dataclass
class Run:
    """One `make test`: what this script measured of it."""

    name: str
    busy: int
    wall_s: float = 0.0
    returncode: int = 0
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    longest_silence_s: float = 0.0
    silence_after: str = ""
    summary: str = ""
    slowest: list[tuple[float, str, str]] = field(default_factory=list)


def clean_env() -> dict[str, str]:
    """This environment, less anything that would point the suite elsewhere (a provider's key
    or endpoint, an active virtualenv, fragbench's own settings)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "VIRTUAL_ENV", "FRAGBENCH_"))}
    env["PYTEST_ADDOPTS"] = "--durations=15 -p no:cacheprovider"
    return env


def default_sighup() -> None:
    """SIGHUP back to its default in `make test`: started under `nohup`, it would be ignored
    there, and fragbench rightly keeps an ignored SIGHUP ignored, so tests/test_signals.py's
    SIGHUP test would wait PATIENCE (300 s) for a notice that never comes, then fail."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def make_test(checkout: Path, name: str, busy: int) -> Run:
    """`make test` in `checkout`, its output echoed as it comes and timed chunk by chunk."""
    run = Run(name=name, busy=busy, load_before=os.getloadavg())
    start = last = time.monotonic()
    text = []
    proc = subprocess.Popen(["make", "test"], cwd=checkout, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=default_sighup)
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    while True:
        selector.select()
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        now = time.monotonic()
        if now - last > run.longest_silence_s:
            run.longest_silence_s = now - last
            before = "".join(text[-50:]).strip().splitlines()
            run.silence_after = before[-1][-120:] if before else "(the start)"
        last = now
        decoded = chunk.decode(errors="replace")
        text.append(decoded)
        sys.stdout.write(decoded)
        sys.stdout.flush()
    run.returncode = proc.wait()
    run.wall_s = time.monotonic() - start
    run.load_after = os.getloadavg()
    output = "".join(text)
    lines = output.splitlines()
    run.summary = next((line.strip("= ") for line in reversed(lines)
                        if " in " in line and ("passed" in line or "failed" in line)), "")
    for line in lines:
        found = DURATION.match(line)
        if found:
            run.slowest.append((float(found[1]), found[2], found[3]))
    run.slowest = sorted(run.slowest, reverse=True)[:15]
    return run


def with_load(busy: int, then: Callable[[], Run]) -> Run:
    """`then()` while `busy` processes spin on the CPUs; they are killed (by pid) after."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(busy)]
    try:
        time.sleep(SETTLE_SECONDS)
        return then()
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def load_text(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def markdown(runs: list[Run], checkout: Path) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                            capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           cwd=checkout, capture_output=True, text=True, check=False).stdout
    out = [f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
           f"{platform.python_version()}; commit {commit}{' (modified)' if dirty else ''}; "
           f"`benchmarks/bench_suite.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
           "",
           "| run | busy processes | wall | load before (1/5/15 min) | load after | longest "
           "silence | pytest |",
           "|---|---|---|---|---|---|---|"]
    for run in runs:
        minutes, seconds = divmod(run.wall_s, 60)
        out.append(f"| {run.name} | {run.busy} | {int(minutes)} min {seconds:.0f} s "
                   f"({run.wall_s:.0f} s) | {load_text(run.load_before)} | "
                   f"{load_text(run.load_after)} | {run.longest_silence_s:.0f} s | "
                   f"{run.summary or f'exit {run.returncode}'} |")
    out.append("")
    out += [f"Longest silence, {run.name}: {run.longest_silence_s:.0f} s, after "
            f"`{run.silence_after}`." for run in runs]
    for run in runs:
        out += ["", f"15 slowest, {run.name}:", "", "| s | phase | test |", "|---|---|---|"]
        out += [f"| {s:.2f} | {phase} | `{test}` |" for s, phase, test in run.slowest]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT, help="the checkout to test")
    parser.add_argument("--load", type=int, default=4, help="busy processes for the loaded run")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown here")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--quiet-only", action="store_true", help="no loaded run")
    only.add_argument("--load-only", action="store_true", help="no quiet run")
    args = parser.parse_args()
    checkout = args.dir.resolve()

    print(f"bench_suite: make's prerequisites of test in {checkout} (untimed)", flush=True)
    subprocess.run(["make", *PREREQUISITES], cwd=checkout, env=clean_env(), check=True)
    runs = []
    if not args.load_only:
        print(f"bench_suite: make test, no added load (load {load_text(os.getloadavg())})",
              flush=True)
        runs.append(make_test(checkout, "quiet", 0))
    if not args.quiet_only:
        print(f"bench_suite: make test under {args.load} busy processes", flush=True)
        runs.append(with_load(args.load, lambda: make_test(checkout, f"load {args.load}",
                                                           args.load)))
    text = markdown(runs, checkout)
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    sys.exit(max((run.returncode for run in runs), default=0) and 1)


if __name__ == "__main__":
    main()
