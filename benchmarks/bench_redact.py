"""Redaction throughput, before and after issue 14 (item 3: linear time), in MB/s.

Every record written goes through `Redactor.value`, and a raw response body is its largest
string: a slow redactor delays recording an answer that was paid for. This script times
`Redactor.text` on bodies of 1, 4 and 16 MB (plain prose, and an OpenAI Responses body whose
answer is JSON held in a JSON string, with `\\n`, `\\"` and `\\u` escapes), each holding the key
once, with 3 secrets in the environment, for the redactor of a given commit (`--before`, loaded
from `git show REV:src/fragbench/redact.py` into a temporary module) and the working tree's.
Target: at least 20 MB/s after, and the time per MB flat from 1 to 16 MB.

    .venv/bin/python benchmarks/bench_redact.py [--sizes 1 4 16] [--repeat 3] [--before d66cd6c]
    .venv/bin/python benchmarks/bench_redact.py --skip-before   # the working tree's alone

The old redactor takes 3 to 9 s per MB here: at the default sizes its runs take about 9 minutes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
MB = 1_000_000
KEY = "sk-proj-" + "Zq3vN8xLw2Rt5yKm9pQa1sBd4fGh7jCe" * 5  # about the length of a real key
SECRETS = {"OPENAI_API_KEY": KEY, "FRAGBENCH_BENCH_TOKEN": "opaque-credential-4417-zulu-8831",
           "OPENAI_ORG_ID": "org-AbCdEfGhIjKlMnOpQrStUv"}
WORDS = ["the", "retrieval", "of", "a", "passage", "cites", "its", "source", "sentence", "while",
         "answers", "quote", "evidence", "from", "chunks", "scored", "by", "bm25", "across",
         "languages", "café", "naïve", "über", "résumé"]


def prose(size: int, rng: random.Random) -> str:
    """`size` characters of lines of words, the key once in the middle."""
    out: list[str] = []
    total = 0
    while total < size:
        line = " ".join(rng.choice(WORDS) for _ in range(12)) + ".\n"
        out.append(line)
        total += len(line)
    out.insert(len(out) // 2, f"The key you sent is {KEY}.\n")
    return "".join(out)[:size]


def json_body(size: int, rng: random.Random, ascii_only: bool = False) -> str:
    """A Responses API body of about `size` characters: the answer is JSON in a JSON string
    (a `\\n` every line). As the API sends it, in UTF-8; or, `ascii_only`, with every
    non-ASCII character as a `\\uXXXX` escape (twice escaped: 7 characters each)."""
    answer = json.dumps({"answer": prose(size - 600, rng), "citations": ["c1", "c2"]},
                        ensure_ascii=ascii_only)
    body = {"id": "resp_0123", "object": "response", "status": "completed", "model": "gpt-x",
            "output": [{"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": answer, "annotations": []}]}],
            "usage": {"input_tokens": 400, "output_tokens": size // 4, "total_tokens": 0}}
    return json.dumps(body, ensure_ascii=ascii_only)


def escaped_body(size: int, rng: random.Random) -> str:
    return json_body(size, rng, ascii_only=True)


BODIES = {"plain": prose, "JSON": json_body, "JSON, \\u-escaped": escaped_body}


def load_before(rev: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{rev}:src/fragbench/redact.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="bench-redact-"))
    path = folder / "redact_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("redact_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(redact: Callable[[str], str], body: str, repeat: int) -> tuple[float, float, bool]:
    """(median wall seconds, median CPU seconds, whether the key is gone)."""
    walls, cpus = [], []
    out = body
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        out = redact(body)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), KEY not in out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16], help="MB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per body (after)")
    parser.add_argument("--before", default="d66cd6c", help="commit of the old redactor")
    parser.add_argument("--skip-before", action="store_true")
    args = parser.parse_args()
    os.environ.update(SECRETS)
    from fragbench import redact as after

    sides: list[tuple[str, ModuleType, int]] = [("after", after, args.repeat)]
    if not args.skip_before:
        sides.insert(0, (f"before ({args.before})", load_before(args.before), 1))
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} load {os.getloadavg()[0]:.2f}, "
          f"CPython {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("| redactor | body | MB | runs | median s | CPU s | MB/s | s per MB | key gone |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, module, repeat in sides:
        redactor = module.Redactor.from_env()
        for kind, make in BODIES.items():
            for size in args.sizes:
                body = make(size * MB, random.Random(size))
                mb = len(body.encode("utf-8")) / MB
                wall, cpu, gone = timed(redactor.text, body, repeat)
                print(f"| {name} | {kind} | {mb:.1f} | {repeat} | {wall:.3f} | {cpu:.3f} | "
                      f"{mb / wall:.1f} | {wall / mb:.3f} | {'yes' if gone else 'NO'} |",
                      flush=True)
    print(f"# load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
