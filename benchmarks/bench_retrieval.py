"""Speed of the retrieval path and of the CLI start-up. Results go to benchmarks/RESULTS.md.

Targets (on the project machine: 2 cores, 24 GiB):
- chunk + score + select 1,000,000 sentences (one setting) in under 60 s;
- `fragbench --help` in under 1 s (lazy imports: no Polars, no SDK at start-up).

Run: `make bench` (or `.venv/bin/python benchmarks/bench_retrieval.py [n_sentences]`).
Tests never assert timings; this script only reports them.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time

import polars as pl

from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.retrieval.passages import select

WORDS = [
    "price", "discount", "order", "delivery", "hosting", "data", "backup", "support", "express",
    "business", "day", "week", "holiday", "invoice", "VAT", "customer", "region", "server",
    "copy", "flyer", "poster", "only", "unless", "before", "after", "until", "without",
    "except", "the", "of", "a", "to", "in", "for", "on", "with",
]


def synthetic(n_sentences: int, per_passage: int = 6, seed: int = 7) -> tuple[pl.DataFrame,
                                                                              pl.DataFrame]:
    rng = random.Random(seed)
    n_passages = n_sentences // per_passage
    sentences = pl.DataFrame({
        "case": [f"c{i // per_passage}" for i in range(n_passages * per_passage)],
        "lang": ["en"] * (n_passages * per_passage),
        "variant": ["A"] * (n_passages * per_passage),
        "position": [i % per_passage for i in range(n_passages * per_passage)],
        "fact_id": [f"F{i % per_passage + 1}" for i in range(n_passages * per_passage)],
        "text": [" ".join(rng.choices(WORDS, k=18)) for _ in range(n_passages * per_passage)],
    }).with_columns(pl.col("position").cast(pl.Int32))
    questions = pl.DataFrame({
        "case": [f"c{i}" for i in range(n_passages)],
        "lang": ["en"] * n_passages,
        "question": [" ".join(rng.choices(WORDS, k=10)) + "?" for _ in range(n_passages)],
    })
    return sentences, questions


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    sentences, questions = synthetic(n)
    start = time.perf_counter()
    chunks = SentenceGroups().chunk(sentences, 3).with_columns(pl.lit(3, pl.Int32)
                                                               .alias("chunk_size"))
    scored = SqrtLexical().score(chunks, questions)
    table = select(scored, [1])
    retrieval_s = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fragbench", "--help"], check=True,
                   capture_output=True)
    help_s = time.perf_counter() - start
    print(f"sentences={n} chunks={table.height} retrieval_seconds={retrieval_s:.2f} "
          f"help_seconds={help_s:.2f}")


if __name__ == "__main__":
    main()
