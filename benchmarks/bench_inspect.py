"""Issue 26's side-by-side target: fragbench's whole pipeline against inspect_ai's `inspect
eval` on the same samples, offline, at 4,000 and 40,000 calls. Not a test: no test asserts a
timing.

    .venv/bin/python benchmarks/bench_inspect.py                   # 4,000 and 40,000 calls
    .venv/bin/python benchmarks/bench_inspect.py --calls 4000      # one size

fragbench: `import hotpotqa`, `new experiment`, `freeze` and `run --series extractive` (which
writes the tables, report.md, report.html and the figures), each a process of its own as a
user runs it, on generated HotpotQA-format questions (tests/support/hotpotqa_data.py; four
calls a question: variants A and B, retrieval and full). inspect_ai: one sample per planned
call, its input the text that call sends (the instructions, the question and the fragments it
is shown, from the frozen plan), its target the question's answer; `inspect eval` with the
`mockllm/model` model, the `generate()` solver and the `includes()` scorer, timed as one
process. The samples are written before inspect is timed: what is compared is what each tool
does with them.

Why a virtual environment of its own (made under --venv on first use, inspect-ai pinned):
added to the project's `bench` group, inspect-ai pulls botocore, whose pins move
python-dateutil and fsspec back for every environment the lock file makes (uv resolves one
set of versions for all groups), so the benchmark installs it beside fragbench instead of
into it. inspect_ai counts each sample's tokens with tiktoken's `o200k_base`, which tiktoken
downloads on first use: on a machine without internet, give TIKTOKEN_CACHE_DIR a folder holding
its cached copy, or the eval fails (its log says so; this benchmark reads the log and stops).
Target (issue 26): fragbench from import to report no slower than inspect's eval.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

INSPECT_AI = "inspect-ai==0.3.285"
TASK = '''\
from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def same_samples():
    return Task(dataset=json_dataset("samples.jsonl"), solver=generate(), scorer=includes())
'''


def timed(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    """A process's seconds and peak RSS in bytes; its failure ends the benchmark."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{args[:3]} failed: {err[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def inspect_venv(venv: Path) -> Path:
    """The `inspect` command of a virtual environment holding INSPECT_AI, made on first use."""
    command = venv / "bin" / "inspect"
    if not command.exists():
        print(f"making {venv} with {INSPECT_AI} (first use only)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", INSPECT_AI], check=True)
    return command


def write_samples(root: Path, answers: dict[str, str]) -> int:
    """samples.jsonl: one inspect sample per call of the frozen plan (what the call sends)."""
    from fragbench.experiment.config import load_experiment
    from fragbench.experiment.plan import verify

    _, calls, _ = verify(load_experiment(root / "exp"))
    with open(root / "samples.jsonl", "w", encoding="utf-8") as out:
        for c in calls:
            text = f"{c.request.instructions}\n\n{c.request.input}"
            out.write(json.dumps({"id": c.id, "input": text,
                                  "target": answers[c.case]}, ensure_ascii=False) + "\n")
    return len(calls)


CHECK_LOG = """
import pathlib, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(str(next(pathlib.Path(sys.argv[1]).iterdir())), header_only=True)
done = log.results.completed_samples if log.results else 0
print(log.status, done, str(log.error.message if log.error else "")[:300].replace(chr(10), " "))
"""


def _check_log(inspect: Path, logs: Path, samples: int) -> None:
    """`inspect eval` exits 0 when its task failed: its log says whether every sample ran."""
    line = subprocess.run([str(inspect.parent / "python"), "-c", CHECK_LOG, str(logs)],
                          capture_output=True, text=True, check=True).stdout.strip()
    status, done, *why = line.split(" ", 2)
    if status != "success" or int(done) != samples:
        raise SystemExit(
            f"inspect eval did not run the {samples:,} samples (log status {status}, {done} "
            f"completed): {' '.join(why)}. inspect_ai counts tokens with tiktoken's o200k_base, "
            "which it downloads on first use: offline, put o200k_base.tiktoken's cached copy "
            "in a folder named by TIKTOKEN_CACHE_DIR.")


def one_size(calls: int, root: Path, inspect: Path) -> dict[str, tuple[float, int]]:
    from support.hotpotqa_data import generate, write

    root.mkdir(parents=True)
    questions = generate(calls // 4)
    write(root / "hotpot.json", questions)
    answers = {q["_id"]: q["answer"] for q in questions}
    fragbench = [sys.executable, "-m", "fragbench"]
    out: dict[str, tuple[float, int]] = {}
    for name, args in (
            ("import", ("import", "hotpotqa", "hotpot.json", "--out", "corpus")),
            ("new", ("new", "experiment", "exp", "--dir", ".", "--corpus", "corpus")),
            ("freeze", ("freeze", "exp")),
            ("run", ("run", "exp", "--series", "extractive", "--out", "out"))):
        out[name] = timed([*fragbench, *args], root)
        print(f"  {calls:>7,} calls  fragbench {name:<7} {out[name][0]:8.1f} s  "
              f"{out[name][1] / 2**20:7.0f} MiB", flush=True)
    samples = write_samples(root, answers)
    (root / "task.py").write_text(TASK, encoding="utf-8")
    env = {**os.environ, "INSPECT_LOG_DIR": str(root / "logs"), "NO_COLOR": "1"}
    out["inspect"] = timed([str(inspect), "eval", "task.py", "--model", "mockllm/model",
                            "--log-dir", str(root / "logs"), "--display", "none"], root, env)
    _check_log(inspect, root / "logs", samples)
    print(f"  {calls:>7,} calls  inspect eval ({samples:,} samples) {out['inspect'][0]:8.1f} s"
          f"  {out['inspect'][1] / 2**20:7.0f} MiB", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[4_000, 40_000])
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir())
                        / "fragbench-bench-inspect")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    inspect = inspect_venv(args.venv)
    version = subprocess.run([str(args.venv / "bin" / "python"), "-c",
                              "import inspect_ai; print(inspect_ai.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; inspect_ai {version}; load average before: "
          f"{os.getloadavg()}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for calls in args.calls:
            results[calls] = one_size(calls, base / str(calls), inspect)
    print(f"load average after: {os.getloadavg()}")
    for calls, r in results.items():
        pipeline = sum(r[k][0] for k in ("import", "new", "freeze", "run"))
        print(f"{calls:>7,} calls: fragbench import to report {pipeline:.1f} s, inspect eval "
              f"{r['inspect'][0]:.1f} s; target fragbench <= inspect: "
              f"{'met' if pipeline <= r['inspect'][0] else 'NOT met'}")


if __name__ == "__main__":
    main()
