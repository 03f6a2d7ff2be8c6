"""Retrieval: chunk every passage, score every chunk, select the top-k of each passage.

One code path for every setting: the main setting is a row of the sensitivity matrix, never a
separate computation. Selection belongs to the core, not the scorer: rank by score (highest
first), ties to the chunk that comes first in the passage. Scores are compared after rounding to
12 decimals, so that two ratios equal on paper but a last bit apart in floating point (1/sqrt(2)
and 3/sqrt(18)) count as tied.

A chunker returns whole sentences or character spans of the passage (`fragbench.retrieval.spans`):
either way the core checks the output against the interface the chunker declares and derives the
same chunk columns (fact_ids, whole_fact_ids, cut_fact_ids, text, start, end), so scoring, selection
and the measures never ask which kind of chunker made a chunk.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from fragbench.columns import PASSAGE
from fragbench.corpus.cases import Case, questions_frame, sentences_frame
from fragbench.errors import PluginError
from fragbench.interfaces import (
    CHUNK_COLUMNS,
    SCORE_DTYPES,
    SPAN_COLUMNS,
    Chunker,
    Scorer,
    check_frame,
)
from fragbench.plugins import call_plugin, describe
from fragbench.retrieval.spans import (
    SPAN_CONTRACT,
    check_spans,
    chunker_output,
    coverage_problems,
    covered_problems,
    from_sentences,
    from_spans,
    numbering_problems,
    passage_problems,
)

TIE_DECIMALS = 12

RETRIEVAL_SCHEMA = {
    "case": "case ID",
    "lang": "language code of the passage",
    "variant": "sentence order (A, B, ...)",
    "chunk_size": "the chunk size asked of the chunker, in its unit (sentences for a sentence "
                  "chunker such as sentence-groups; word tokens for token-window)",
    "top_k": "chunks kept per passage",
    "chunk": "0-based index of the chunk in passage order",
    "fact_ids": "fact IDs of every sentence the chunk holds or, for a span chunker, touches "
                "(whole or cut), passage order (space-joined in CSV)",
    "whole_fact_ids": "those of fact_ids whose whole sentence is in the chunk (a sentence "
                      "chunker's: all of them)",
    "cut_fact_ids": "those of fact_ids the chunk cuts: only part of the sentence is in it (a "
                    "sentence chunker's: none)",
    "score": "the scorer's score",
    "rank": "1..top_k for selected chunks, null otherwise",
    "selected": "whether the chunk is among the top_k",
    "tied": "whether another chunk of the same passage and chunk size has the same score",
    "text": "the chunk's sentences joined by one space; for a span chunker, the passage's "
            "characters start..end-1 (the passage is its sentences joined by one space)",
    "start": "a span chunker's chunk: its first character's 0-based offset in the passage; null "
             "for a sentence chunker (its chunk need not be one stretch of text)",
    "end": "a span chunker's chunk: one past its last character (end exclusive); null for a "
           "sentence chunker",
}


CHUNKER_CONTRACT = ("a chunker returns one row per chunk with case, lang, variant (strings), "
                    "chunk (integer), fact_ids (list of strings) and text (string)")
SCORER_CONTRACT = ("a scorer returns the chunks it was given, one row each, with a numeric "
                   "score column")


INT32_MAX = 2**31 - 1
OVERLAP_PROMISE = {"sentences": "every sentence once and in order",
                   "spans": "every character once and in order"}
"""The promise a chunker that does not declare `overlap = True` makes, by its output: the
words the core's refusal and the test kit's failure both use."""
COVERED_PROMISE = {"sentences": "every sentence at least once (overlap = True)",
                   "spans": "every character at least once (overlap = True)"}
"""What a chunker that declares `overlap = True` still promises, by its output (white space
aside for spans)."""
PASSAGES_PROMISE = "every passage it was given, and no other"
NUMBERING_PROMISE = "chunks numbered 0.. in passage order"
FINITE_PROMISE = ("a score is a finite number (not NaN, inf or null), which selection can rank; "
                  "a division by zero gives NaN or inf (such as by the best score of a passage "
                  "in which no chunk holds a term of its question)")


def read_chunks(chunker: Chunker, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
    """One chunk size's chunks of every passage, as the core reads them: the chunker's output,
    checked against its declared interface (naming the plugin), with the derived columns
    (`fragbench.retrieval.spans`): fact_ids, whole_fact_ids, cut_fact_ids, text, start, end.
    `chunk`,
    `start` and `end` are Int32 whatever integer type the chunker returned (the retrieval
    table's types, docs/tables.md); a chunk number outside Int32 is refused. The overlap
    promise is not checked here (`chunk_passages` does)."""
    who = describe("chunker", chunker)
    output = chunker_output(chunker, who)
    frame = call_plugin("chunker", chunker, "chunk", sentences, size)
    check_frame(frame, SPAN_COLUMNS if output == "spans" else CHUNK_COLUMNS, who,
                SPAN_CONTRACT if output == "spans" else CHUNKER_CONTRACT)
    _check_chunk_numbers(frame, who)
    frame = frame.with_columns(pl.col("chunk").cast(pl.Int32))
    if output == "spans":
        check_spans(frame, sentences, who)
        return from_spans(frame, sentences)
    return from_sentences(frame)


def _check_chunk_numbers(frame: pl.DataFrame, who: str) -> None:
    low, high = frame["chunk"].min(), frame["chunk"].max()
    if (low is not None and low < -INT32_MAX - 1) or (high is not None and high > INT32_MAX):
        bad = frame.filter((pl.col("chunk") > INT32_MAX) | (pl.col("chunk") < -INT32_MAX - 1))
        row = bad.row(0, named=True)
        raise PluginError(f"{who} numbered a chunk of {row['case']}/{row['lang']}/"
                          f"{row['variant']} {row['chunk']}, beyond what the retrieval "
                          f"table's Int32 chunk column holds ({INT32_MAX}); chunks are "
                          "numbered 0, 1, 2, ... in passage order (docs/plugins.md). Fix or "
                          "uninstall that plugin.")


def chunk_problems(chunks: pl.DataFrame, sentences: pl.DataFrame, output: str,
                   overlap: bool) -> tuple[str, list[str]]:
    """The first promise the chunks (`read_chunks`'s, of one chunk size) break, with one line
    per passage that breaks it, in passage order; `("", [])` when they keep them all. The
    promises, in the order they are checked (the test kit checks the same, in the same words):

    1. `PASSAGES_PROMISE`: every passage given has a chunk, no chunk names another
       (`fragbench.retrieval.spans.passage_problems`);
    2. coverage: without `overlap`, `OVERLAP_PROMISE`
    (`fragbench.retrieval.spans.coverage_problems`:
       each sentence, or each non-white-space character, once and in passage order); with it,
       `COVERED_PROMISE` (`fragbench.retrieval.spans.covered_problems`: each at least once);
    3. `NUMBERING_PROMISE`: each passage's chunks numbered exactly 0..n-1
       (`fragbench.retrieval.spans.numbering_problems`).

    Coverage comes before numbering because its words say more (which sentences or characters
    were lost) when a chunker that drops a chunk also leaves a gap in the numbers. Every check is
    a few whole-frame joins and group-bys, cheap beside scoring (benchmarks/RESULTS.md)."""
    covered = (COVERED_PROMISE[output], covered_problems) if overlap else \
        (OVERLAP_PROMISE[output], coverage_problems)
    checks = ((PASSAGES_PROMISE, passage_problems), covered,
              (NUMBERING_PROMISE, lambda c, _: numbering_problems(c)))
    for promise, check in checks:
        problems = check(chunks, sentences)
        if problems:
            return promise, problems
    return "", []


def at_size(size: int, problems: list[str]) -> str:
    """`at size 2 kit-museum en A: no chunk (and 1 more passages)`: how the core's refusal
    and the kit's failure both say where a promise broke."""
    more = f" (and {len(problems) - 1} more passages)" if len(problems) > 1 else ""
    return f"at size {size} {problems[0]}{more}"


def chunk_passages(chunker: Chunker, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
    """`read_chunks`, held to the promises of `chunk_problems` (the test kit's own rules:
    every passage given and no other; each sentence, or non-white-space character, once and
    in order, or at least once with `overlap = True`; chunks numbered 0..n-1). A chunker that
    breaks one is refused in one line naming the plugin, the promise and the first passage
    that breaks it, before anything is scored or written (`freeze`, `plan`, `run` and
    `retrieve` all read chunks through here)."""
    chunks = read_chunks(chunker, sentences, size)
    overlap = getattr(chunker, "overlap", False) is True
    output = "spans" if chunks["start"].null_count() < chunks.height else "sentences"
    promise, problems = chunk_problems(chunks, sentences, output, overlap)
    if not problems:
        return chunks
    who = describe("chunker", chunker)
    where = at_size(size, problems)
    if promise == OVERLAP_PROMISE[output]:
        raise PluginError(f"{who} declares no overlap = True, so it promises {promise}, but "
                          f"{where}; declare overlap = True if its chunks are meant to share "
                          "them (docs/plugins.md), or fix or uninstall that plugin.")
    raise PluginError(f"{who} promises {promise}, but {where} (docs/plugins.md). Fix or "
                      "uninstall that plugin.")


def shown_score(score: float | None) -> str:
    """A score that breaks `FINITE_PROMISE` as a refusal shows it: `null`, `NaN`, `inf` or
    `-inf` (the words of `check_scores` and of the collection's batch check)."""
    return "null" if score is None else "NaN" if score != score else str(float(score))


def check_scores(scored: pl.DataFrame, who: str) -> None:
    """Refuse a score the core cannot rank: null, NaN, inf or -inf, in one line naming the
    plugin, the first such chunk (case/lang/variant, chunk size, chunk number) and the
    promise. Whole-column expressions: free beside the scoring itself."""
    values = pl.col("score").cast(pl.Float64)
    bad = scored.filter(values.is_null() | ~values.is_finite())
    if not bad.height:
        return
    row = bad.sort([*PASSAGE, "chunk_size", "chunk"]).row(0, named=True)
    shown = shown_score(row["score"])
    more = f" ({bad.height} of {scored.height} chunks score so)" if bad.height > 1 else ""
    raise PluginError(f"{who} gave chunk {row['case']}/{row['lang']}/{row['variant']} size "
                      f"{row['chunk_size']} #{row['chunk']} the score {shown}{more}; "
                      f"{FINITE_PROMISE} (docs/plugins.md). Fix or uninstall that plugin.")


def score_chunks(
    cases: list[Case],
    chunker: Chunker,
    scorer: Scorer,
    chunk_sizes: list[int],
    langs: list[str] | None = None,
) -> pl.DataFrame:
    """Chunks of every passage at every chunk size, scored in one batch. Each plugin's output
    is checked against its documented columns and promises, naming the plugin, before the core
    reads it: the chunks (`chunk_passages`), then the scores (`check_scores`)."""
    sentences = sentences_frame(cases, langs)
    frames = [chunk_passages(chunker, sentences, size)
              .with_columns(pl.lit(size, pl.Int32).alias("chunk_size"))
              for size in chunk_sizes]
    chunks = pl.concat(frames, how="vertical_relaxed")
    scored = call_plugin("scorer", scorer, "score", chunks, questions_frame(cases, langs))
    who = describe("scorer", scorer)
    check_frame(scored, {**{c: (str(chunks.schema[c]),) for c in chunks.columns},
                         "score": SCORE_DTYPES}, who, SCORER_CONTRACT)
    if scored.height != chunks.height:
        raise PluginError(f"{who} returned {scored.height} rows for {chunks.height} chunks; "
                          f"{SCORER_CONTRACT} (docs/plugins.md). Fix or uninstall that plugin.")
    check_scores(scored, who)
    return scored.with_columns(pl.col("score").cast(pl.Float64))


def select(scored: pl.DataFrame, top_ks: list[int]) -> pl.DataFrame:
    """One row per chunk and top-k: rank, selected and tied, ordered for reading (by case,
    lang, variant, chunk_size, top_k, chunk)."""
    group = [*PASSAGE, "chunk_size"]
    ranked = scored.with_columns(
        pl.col("score").round(TIE_DECIMALS).alias("_key"),
    ).with_columns(
        (pl.len().over([*group, "_key"]) > 1).alias("tied"),
        pl.struct(-pl.col("_key"), pl.col("chunk"))
        .rank("ordinal")
        .over(group)
        .cast(pl.Int32)
        .alias("_order"),
    )
    rows, top_k = _reading_order(ranked, group, sorted(top_ks))
    table = (
        ranked[rows]
        .with_columns(pl.Series("top_k", top_k, dtype=pl.Int32))
        .with_columns(pl.when(pl.col("_order") <= pl.col("top_k")).then(pl.col("_order"))
                      .alias("rank"))
        .with_columns(pl.col("rank").is_not_null().alias("selected"))
    )
    first = ["case", "lang", "variant", "chunk_size", "top_k", "chunk", "fact_ids",
             "whole_fact_ids", "cut_fact_ids", "score", "rank", "selected", "tied"]
    rest = [c for c in table.columns if c not in first and not c.startswith("_")]
    return table.select(first + rest)


def _reading_order(ranked: pl.DataFrame, group: list[str],
                   top_ks: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The row of `ranked` and the top-k of each row of the table, in reading order: each
    passage and chunk size's chunks in order, once per top-k (ascending).

    The chunks are sorted once and the copies for each top-k placed by arithmetic, rather
    than the table (top-k times longer, its list columns included) sorted on string keys:
    the same order (the keys are distinct: chunks are numbered 0..n-1 in each passage and
    size), in less time and memory (benchmarks/RESULTS.md)."""
    n = ranked.height
    order = ranked.select(pl.arg_sort_by([*group, "chunk"])).to_series()
    first = ranked.select(group)[order].select(
        pl.any_horizontal([pl.col(c).ne_missing(pl.col(c).shift(1)) for c in group])
    ).to_series().to_numpy()
    starts = np.flatnonzero(first)  # where each passage and chunk size begins, sorted
    lengths = np.diff(np.append(starts, n))
    which = np.repeat(np.arange(len(starts)), lengths)
    within = np.arange(n) - starts[which]
    rows = np.empty(len(top_ks) * n, dtype=np.int64)
    top_k = np.empty(len(top_ks) * n, dtype=np.int32)
    for i, k in enumerate(top_ks):
        at = len(top_ks) * starts[which] + i * lengths[which] + within
        rows[at] = order.to_numpy()
        top_k[at] = k
    return rows, top_k


def retrieve(
    cases: list[Case],
    chunker: Chunker,
    scorer: Scorer,
    settings: list[tuple[int, int]],
    langs: list[str] | None = None,
) -> pl.DataFrame:
    """The retrieval table for every (chunk_size, top_k) setting."""
    sizes = sorted({s for s, _ in settings})
    scored = score_chunks(cases, chunker, scorer, sizes, langs)
    top_ks = sorted({k for _, k in settings})
    table = select(scored, top_ks)
    if len(set(settings)) == len(sizes) * len(top_ks):
        return table  # every (chunk_size, top_k) pair wanted: no row to drop, no copy to make
    wanted = pl.DataFrame(settings, schema={"chunk_size": pl.Int32, "top_k": pl.Int32},
                          orient="row")
    return table.join(wanted, on=["chunk_size", "top_k"], how="semi", maintain_order="left")
