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

With `--scale`, only the import, at HotpotQA's training-set scale: N questions (default
119,000: about 540 MB of JSON, the size of `hotpot_train_v1.1.json`; these generated questions
average 40 sentences, more than HotpotQA's, so the file holds more sentences than the real one)
streamed to a file in `--tmp` (default /dev/shm) without holding them, then one `fragbench
import hotpotqa` process: its wall time and peak RSS (`wait4`), against the target of 1 GiB.

Run: `.venv/bin/python benchmarks/bench_import.py [N] [--repeat R] [--phases] [--before DIR]`
(N = 10000), or `.venv/bin/python benchmarks/bench_import.py --scale [N] [--tmp DIR]
[--lang CODE]` (`--lang`: the import without language detection). `--before DIR` runs each
matrix once more with the package of another source tree (DIR holding `fragbench/`, e.g.
`git archive COMMIT src | tar -x -C /tmp/before` then `--before /tmp/before/src`), right
after this tree's, on the same corpus and load. Results go to benchmarks/RESULTS.md by hand;
nothing is asserted.
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

from support.hotpotqa_data import generate, questions, write, write_stream  # noqa: E402

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
    parser.add_argument("n", nargs="?", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", action="store_true")
    parser.add_argument("--before", type=Path)
    parser.add_argument("--scale", action="store_true")
    parser.add_argument("--lang", help="with --scale: pass --lang (no detection)")
    parser.add_argument("--tmp", type=Path, default=Path("/dev/shm") if Path("/dev/shm").is_dir()
                        else None)
    options = parser.parse_args()
    python = sys.executable
    fragbench = str(Path(python).parent / "fragbench")
    if options.scale:
        scale(fragbench, options.n or 119_000, options.tmp, options.lang)
        return
    options.n = options.n or 10_000
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


def scale(fragbench: str, n: int, tmp: Path | None, lang: str | None) -> None:
    """One import of n generated questions, streamed to a file first (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="fbimport-scale-", dir=tmp) as folder:
        source = Path(folder) / "hotpot_train.json"
        start = time.perf_counter()
        write_stream(source, questions(n))
        print(f"{n} questions generated: {source.stat().st_size / 1e6:.0f} MB "
              f"({source.stat().st_size / 2**20:.0f} MiB) of JSON in "
              f"{time.perf_counter() - start:.0f} s; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        out = Path(folder) / "corpus"
        wall, peak = timed([fragbench, "import", "hotpotqa", str(source), "--out", str(out),
                            *(("--lang", lang) if lang else ())])
        manifest = json.loads((out / "import.json").read_text(encoding="utf-8"))
        detected = manifest["languages"].get("detected")
        sizes = {p.name: p.stat().st_size / 2**20 for p in sorted(out.iterdir())}
        print(f"import: {wall:.1f} s wall, peak RSS {peak:.0f} MiB (target 1024 MiB: "
              f"{'met' if peak < 1024 else 'NOT met'}); {manifest['cases']} cases, "
              f"{manifest['sentences']} sentences, languages {manifest['languages']['cases']}"
              + (f", lowest confidence {detected['lowest_confidence']}" if detected else
                 " (--lang)"))
        print("files: " + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in sizes.items()))
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")


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
