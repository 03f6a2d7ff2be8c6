"""What the core's output checks cost on a large corpus (issue 15, item 4): the chunk promises
the test kit checks too (`fragbench.retrieval.passages.chunk_problems`: every passage given and no
other, `fragbench.retrieval.spans.passage_problems`; the overlap promise, `coverage_problems`, or
with overlap declared every sentence or character at least once, `covered_problems`; chunks numbered
0..n-1, `numbering_problems`) on every chunk of 1,000,000 sentences, sentence chunks and span
chunks, beside reading the chunks (`fragbench.retrieval.passages.read_chunks`) and scoring them; and
the finite-score check (`fragbench.retrieval.passages.check_scores`). Results go to
benchmarks/RESULTS.md.

`--before COMMIT` also times `coverage_problems` as it was at COMMIT (the row-by-row version),
loaded from git into a module of its own.

The span chunker is a vectorised one of its own, not the kit's `samples.CharacterWindows`: that
one walks each passage in a Python loop (fine on the kit's few samples), which on 166,666
passages would time the sample chunker rather than the core's checks.

Run: `.venv/bin/python benchmarks/bench_coverage.py [n_sentences] [--before c981c86^]`.
Tests never assert timings; this script only reports them.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
from bench_retrieval import synthetic

from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.scorers import SqrtLexical
from fragbench.corpus.cases import PASSAGE_SEPARATOR
from fragbench.retrieval.passages import check_scores, chunk_problems, read_chunks
from fragbench.retrieval.spans import (
    coverage_problems,
    covered_problems,
    numbering_problems,
    passage_problems,
)

PASSAGE = ["case", "lang", "variant"]


class Windows:
    """Consecutive windows of `size` characters: span chunks with no gap or overlap."""

    name = "bench-windows"
    api_version = "1.0"
    output = "spans"

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        lengths = sentences.group_by(PASSAGE).agg(pl.col("end").max().alias("length"))
        return (
            lengths.with_columns(pl.int_ranges(0, pl.col("length"), size).alias("start"))
            .explode("start").sort([*PASSAGE, "start"])
            .with_columns(pl.int_range(pl.len()).over(PASSAGE).alias("chunk"),
                          pl.min_horizontal(pl.col("start") + size, pl.col("length"))
                          .alias("end"))
            .select(*PASSAGE, "chunk", "start", "end")
        )


def with_offsets(sentences: pl.DataFrame) -> pl.DataFrame:
    """The start and end columns the core adds (`corpus.sentences_frame`)."""
    length = pl.col("text").str.len_chars().cast(pl.Int32)
    return sentences.with_columns(
        (length + len(PASSAGE_SEPARATOR)).cum_sum().over(PASSAGE).alias("_next")
    ).with_columns((pl.col("_next") - length - len(PASSAGE_SEPARATOR)).alias("start"),
                   (pl.col("_next") - len(PASSAGE_SEPARATOR)).alias("end")).drop("_next")


def old_version(commit: str) -> Any:
    source = subprocess.run(["git", "show", f"{commit}:src/fragbench/retrieval/spans.py"],
                            check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "spans_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("spans_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.coverage_problems


def timed(what: str, call: Any) -> Any:
    start = time.perf_counter()
    result = call()
    print(f"{what}: {time.perf_counter() - start:.2f} s", flush=True)
    return result


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 1_000_000
    before = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
    sentences, questions = synthetic(n)
    sentences = with_offsets(sentences)
    print(f"sentences={sentences.height} passages={sentences['case'].n_unique()}")
    old = old_version(before) if before else None
    for chunker, size in ((SentenceGroups(), 3), (Windows(), 240)):
        chunks = timed(f"{chunker.name} read_chunks size {size}",
                       lambda c=chunker, s=size: read_chunks(c, sentences, s))
        print(f"  chunks={chunks.height}")
        found = timed("  coverage_problems (now)", lambda c=chunks: coverage_problems(c,
                                                                                  sentences))
        assert found == [], found[:3]
        for what, check in (("passage_problems", lambda c: passage_problems(c, sentences)),
                            ("numbering_problems", numbering_problems),
                            ("covered_problems (overlap = True)",
                             lambda c: covered_problems(c, sentences))):
            found = timed(f"  {what}", lambda c=chunks, f=check: f(c))
            assert found == [], found[:3]
        output = "spans" if chunker.name == "bench-windows" else "sentences"
        assert timed("  chunk_problems (all, no overlap)", lambda c=chunks, o=output:
                     chunk_problems(c, sentences, o, False)) == ("", [])
        if old is not None:
            timed(f"  coverage_problems (at {before})", lambda c=chunks: old(c, sentences))
        if chunker.name == "sentence-groups":
            scored = timed("  score (sqrt-lexical)", lambda c=chunks, s=size: SqrtLexical().score(
                c.with_columns(pl.lit(s, pl.Int32).alias("chunk_size")), questions))
            timed("  check_scores", lambda s=scored: check_scores(s, "scorer 'sqrt-lexical'"))


if __name__ == "__main__":
    main()
