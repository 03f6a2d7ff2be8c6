"""Import and sensitivity matrix for N HotpotQA-format questions: time and peak memory.

Generates N questions in HotpotQA's distractor format (tests/support/hotpotqa_data.py: 10 paragraphs
of 2 to 6 sentences, about 40 sentences a question), then, each in a fresh process (peak memory
is that process's maximum resident set size):

1. `fragbench import hotpotqa FILE --out DIR` (the whole CLI process);
2. the sensitivity matrix: load the corpus folder (validation included) and retrieve every
   setting (chunk sizes 1, 2, 3 x top-k 1, 2; sentence-groups + sqrt-lexical), as
   `fragbench freeze`/`run` compute it; the load and retrieval phases are timed apart;
3. with `--phases`, the same matrix once more, its steps called one by one in another fresh
   process (sentence frame, chunking with the core's checks, the scorer's `score`,
   selection), each step's time and the resident memory after it.

Run: `.venv/bin/python benchmarks/bench_import.py [N] [--repeat R] [--phases] [--before DIR]`
(N = 10000). `--before DIR` runs each matrix once more with the package of another source tree
(DIR holding `fragbench/`, e.g. `git archive COMMIT src | tar -x -C /tmp/before` then
`--before /tmp/before/src`), right after this tree's, on the same corpus and load. Results go
to benchmarks/RESULTS.md by hand; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.hotpotqa_data import generate, write  # noqa: E402

MATRIX = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import load_corpus
from fragbench.retrieval.passages import retrieve
t1 = time.perf_counter()
cases = load_corpus([Path(sys.argv[1])])
t2 = time.perf_counter()
table = retrieve(cases, SentenceGroups(), SqrtLexical(),
                 [(s, k) for s in (1, 2, 3) for k in (1, 2)])
t3 = time.perf_counter()
print(json.dumps({"imports_s": t1 - t0, "load_s": t2 - t1, "retrieve_s": t3 - t2,
                  "cases": len(cases), "rows": table.height}))
"""

PHASES = """
import json, resource, sys, time
from pathlib import Path
import polars as pl
from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import load_corpus, questions_frame, sentences_frame
from fragbench.retrieval.passages import chunk_passages, select
said = {}
def step(name, work):
    start = time.perf_counter()
    out = work()
    statm = Path("/proc/self/statm").read_text().split()
    said[name] = (time.perf_counter() - start, int(statm[1]) * 4096 / 2**20)
    return out
cases = step("load", lambda: load_corpus([Path(sys.argv[1])]))
sentences = step("sentences", lambda: sentences_frame(cases))
chunks = step("chunk", lambda: pl.concat([chunk_passages(SentenceGroups(), sentences, size)
                                          .with_columns(pl.lit(size, pl.Int32).alias("chunk_size"))
                                          for size in (1, 2, 3)], how="vertical_relaxed"))
scored = step("score", lambda: SqrtLexical().score(chunks, questions_frame(cases))
              .with_columns(pl.col("score").cast(pl.Float64)))
table = step("select", lambda: select(scored, [1, 2]))
said["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(said))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", action="store_true")
    parser.add_argument("--before", type=Path)
    options = parser.parse_args()
    python = sys.executable
    fragbench = str(Path(python).parent / "fragbench")
    with tempfile.TemporaryDirectory(prefix="fbimport-") as tmp:
        source = write(Path(tmp) / "hotpot.json", generate(options.n))
        print(f"{options.n} questions, {source.stat().st_size / 2**20:.1f} MiB of JSON; "
              f"load average {os.getloadavg()[0]:.2f}")
        for run in range(1, options.repeat + 1):
            out = Path(tmp) / f"corpus{run}"
            wall, peak = timed([fragbench, "import", "hotpotqa", str(source), "--out", str(out)])
            print(f"import run {run}: {wall:.2f} s wall, peak {peak:.0f} MiB")
            wall, peak, said = timed_out([python, "-c", MATRIX, str(out)])
            phases = json.loads(said)
            print(f"matrix run {run}: {wall:.2f} s wall (imports {phases['imports_s']:.2f}, "
                  f"load+validate {phases['load_s']:.2f}, retrieve 6 settings "
                  f"{phases['retrieve_s']:.2f}), peak {peak:.0f} MiB, {phases['cases']} cases, "
                  f"{phases['rows']} rows")
            if options.before:
                wall, peak, said = timed_out([python, "-c", MATRIX, str(out)],
                                             {**os.environ, "PYTHONPATH": str(options.before)})
                phases = json.loads(said)
                print(f"matrix run {run} with {options.before}: {wall:.2f} s wall (retrieve "
                      f"{phases['retrieve_s']:.2f}), peak {peak:.0f} MiB, {phases['rows']} rows")
            if options.phases:
                _, _, said = timed_out([python, "-c", PHASES, str(out)])
                steps = json.loads(said)
                peak = steps.pop("peak_mib")
                print(f"phases run {run}: " + ", ".join(
                    f"{name} {secs:.2f} s (then {rss:.0f} MiB)"
                    for name, (secs, rss) in steps.items()) + f"; peak {peak:.0f} MiB")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


def timed_out(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak resident memory (MiB) and stdout of one child process."""
    with tempfile.TemporaryFile() as stdout:
        start = time.perf_counter()
        child = subprocess.Popen(args, stdout=stdout, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        err = child.stderr.read().decode() if child.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{args[:3]}: failed: {err}")
        stdout.seek(0)
        return wall, usage.ru_maxrss / 1024, stdout.read().decode()


def timed(args: list[str]) -> tuple[float, float]:
    wall, peak, _ = timed_out(args)
    return wall, peak


if __name__ == "__main__":
    main()
