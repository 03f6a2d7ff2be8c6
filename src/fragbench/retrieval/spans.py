"""Chunks as spans of the passage: what the core derives from a chunker's output.

A chunker returns whole sentences (the original interface, `output` absent or "sentences") or
spans of the passage's text (`output = "spans"`): character offsets into the passage, its
sentences in passage order joined by one space (`corpus.PASSAGE_SEPARATOR`). Either way the core
turns the output into the same chunk columns, so that scoring, selection and every measure read
one shape:

- `fact_ids`: every fact the chunk touches (shares at least one character with), passage order;
- `whole_fact_ids`: those whose whole sentence is inside the chunk;
- `cut_fact_ids`: those the chunk cuts (only part of the sentence is inside);
- `text`: for spans, the passage's characters start..end-1; for sentences, as the chunker said;
- `start`, `end`: the span (null for a sentence chunker, whose chunk need not be one stretch).

A sentence chunker's facts are all whole, so its tables are what they were before spans existed,
with whole_fact_ids = fact_ids and cut_fact_ids empty.

What a call is given under a span chunker (`supplied`): for each selected chunk in chunk order,
each fact it touches in passage order, under its fact ID, with only the characters of the
sentence inside the span. A cut fact appears as its fragment, as a real pipeline would hand a
model the chunk's text; a fact two selected chunks cut appears twice, once per chunk, as a fact
of two overlapping sentence chunks does. For a sentence chunker this is exactly the sentences of
the selected chunks, as before.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from fragbench.columns import PASSAGE
from fragbench.corpus.cases import PASSAGE_SEPARATOR
from fragbench.errors import PluginError
from fragbench.interfaces import CHUNK_OUTPUTS

DERIVED = ("fact_ids", "whole_fact_ids", "cut_fact_ids", "text", "start", "end")
"""Columns the core adds to (or derives for) every chunk."""

SPAN_CONTRACT = ("a span chunker returns one row per chunk with case, lang, variant (strings), "
                 "chunk, start and end (integers), 0 <= start < end <= the passage's length in "
                 "characters, one row per chunk index of a passage")

_IDS = pl.List(pl.String)


def chunker_output(chunker: Any, who: str) -> str:
    """The chunker's declared output, "sentences" when it declares none (every chunker written
    before spans existed); anything else is refused, naming the plugin."""
    output = getattr(chunker, "output", "sentences")
    if output not in CHUNK_OUTPUTS:
        raise PluginError(f"{who} declares output = {output!r}; a chunker's output is "
                          f"{' or '.join(repr(o) for o in CHUNK_OUTPUTS)} (docs/plugins.md). "
                          "Fix or uninstall that plugin.")
    return str(output)


def passages_frame(sentences: pl.DataFrame) -> pl.DataFrame:
    """case, lang, variant, passage (the text offsets count in), length (in characters)."""
    return (
        sentences.sort([*PASSAGE, "position"])
        .group_by(PASSAGE, maintain_order=True)
        .agg(pl.col("text").str.join(PASSAGE_SEPARATOR).alias("passage"))
        .with_columns(pl.col("passage").str.len_chars().cast(pl.Int64).alias("length"))
    )


def check_spans(frame: pl.DataFrame, sentences: pl.DataFrame, who: str) -> None:
    """Refuse spans the core cannot read, in one line naming the plugin and the first bad row.

    The columns and dtypes are checked before this (`interfaces.check_frame`); here: no null,
    every span in a passage it was given, 0 <= start < end <= the passage's length, and one row
    per chunk index of a passage (selection ties go by chunk index).
    """
    def refuse(problem: str) -> PluginError:
        return PluginError(f"{who} returned {problem}; {SPAN_CONTRACT} (docs/plugins.md). "
                           "Fix or uninstall that plugin.")

    columns = [*PASSAGE, "chunk", "start", "end"]
    nulls = [c for c in columns if frame[c].null_count()]
    if nulls:
        raise refuse(f"null values in {', '.join(nulls)}")
    spans = (
        frame.select(*PASSAGE, *[pl.col(c).cast(pl.Int64) for c in ("chunk", "start", "end")])
        .join(passages_frame(sentences).select(*PASSAGE, "length"), on=PASSAGE, how="left",
              maintain_order="left")
    )

    def first(bad: pl.DataFrame, what: str) -> PluginError:
        row = bad.row(0, named=True)
        where = f"{row['case']} {row['lang']} {row['variant']} chunk {row['chunk']}"
        more = f" (and {bad.height - 1} more)" if bad.height > 1 else ""
        return refuse(f"{what}: {where} [{row['start']}, {row['end']}){more}")

    unknown = spans.filter(pl.col("length").is_null())
    if unknown.height:
        raise first(unknown, "a span of no passage it was given")
    outside = spans.filter(~((pl.col("start") >= 0) & (pl.col("start") < pl.col("end"))
                             & (pl.col("end") <= pl.col("length"))))
    if outside.height:
        row = outside.row(0, named=True)
        raise first(outside, f"a span outside 0 <= start < end <= {row['length']} (the "
                             "passage's length)")
    repeated = spans.filter(pl.struct(*PASSAGE, "chunk").is_duplicated())
    if repeated.height:
        raise first(repeated, "two spans with one chunk index")


def from_spans(spans: pl.DataFrame, sentences: pl.DataFrame) -> pl.DataFrame:
    """A span chunker's (checked) output with the derived columns.

    A fact is touched when it shares a character with the span (sentence start < span end and
    span start < sentence end), whole when its sentence lies inside the span, cut when touched
    and not whole. Columns the chunker returned under a derived name are replaced; any other
    column it returned is kept, as for a sentence chunker.
    """
    indexed = (
        spans.drop([c for c in DERIVED if c in spans.columns and c not in ("start", "end")])
        .with_columns(pl.col("start", "end").cast(pl.Int32))
        .with_row_index("_row")
    )
    facts = sentences.select(*PASSAGE, "position", "fact_id", pl.col("start").alias("_s"),
                             pl.col("end").alias("_e"))
    touched = (pl.col("_s") < pl.col("end")) & (pl.col("start") < pl.col("_e"))
    whole = (pl.col("start") <= pl.col("_s")) & (pl.col("_e") <= pl.col("end"))
    lists = (
        indexed.select("_row", *PASSAGE, "start", "end")
        .join(facts, on=PASSAGE)
        .sort("_row", "position")
        .group_by("_row", maintain_order=True)
        .agg(
            pl.col("fact_id").filter(touched).alias("fact_ids"),
            pl.col("fact_id").filter(whole).alias("whole_fact_ids"),
            pl.col("fact_id").filter(touched & ~whole).alias("cut_fact_ids"),
        )
    )
    passages = passages_frame(sentences).select(*PASSAGE, "passage")
    derived = (
        indexed.join(lists, on="_row", how="left")
        .join(passages, on=PASSAGE, how="left")
        .with_columns(
            pl.col("passage").str.slice(pl.col("start"), pl.col("end") - pl.col("start"))
            .alias("text"),
            *[pl.col(c).fill_null(pl.lit([], dtype=_IDS))
              for c in ("fact_ids", "whole_fact_ids", "cut_fact_ids")],
        )
        .sort("_row")
    )
    first = [*PASSAGE, "chunk", "fact_ids", "text", "whole_fact_ids", "cut_fact_ids", "start",
             "end"]
    rest = [c for c in spans.columns if c not in first]
    return derived.select(*first, *rest)


def from_sentences(chunks: pl.DataFrame) -> pl.DataFrame:
    """A sentence chunker's (checked) output with the derived columns: every fact whole, no
    span. Its own columns are untouched."""
    return chunks.with_columns(
        pl.col("fact_ids").alias("whole_fact_ids"),
        pl.lit([], dtype=_IDS).alias("cut_fact_ids"),
        pl.lit(None, pl.Int32).alias("start"),
        pl.lit(None, pl.Int32).alias("end"),
    )


def supplied(table: pl.DataFrame, sentences: pl.DataFrame, chunk_size: int, top_k: int
             ) -> dict[tuple[str, str, str], list[tuple[str, str]]]:
    """(case, lang, variant) -> the (fact ID, text) pairs a retrieval call is given at one
    setting of the retrieval table: per selected chunk in chunk order, per fact it touches in
    passage order, the characters of the fact's sentence inside the chunk's span (the whole
    sentence when the chunk has no span, as a sentence chunker's)."""
    sentence = sentences.select(*PASSAGE, "fact_id", "text", pl.col("start").alias("_s"),
                                pl.col("end").alias("_e"))
    lo = pl.max_horizontal("start", "_s")
    hi = pl.min_horizontal("end", "_e")
    pieces = (
        table.filter(pl.col("selected"), pl.col("chunk_size") == chunk_size,
                     pl.col("top_k") == top_k)
        .sort([*PASSAGE, "chunk"])
        .select(*PASSAGE, "start", "end", pl.col("fact_ids").alias("fact_id"))
        .explode("fact_id")
        .drop_nulls("fact_id")
        .join(sentence, on=[*PASSAGE, "fact_id"], how="left", maintain_order="left")
        .select(*PASSAGE, "fact_id",
                pl.when(pl.col("start").is_null()).then(pl.col("text"))
                .otherwise(pl.col("text").str.slice(lo - pl.col("_s"), hi - lo))
                .alias("text"))
        .group_by(PASSAGE, maintain_order=True)
        .agg("fact_id", "text")
    )
    return {(c, lang, v): list(zip(ids, texts, strict=True))
            for c, lang, v, ids, texts in pieces.iter_rows()}


def coverage_problems(chunks: pl.DataFrame, sentences: pl.DataFrame) -> list[str]:
    """Where a chunker that declares no `overlap` breaks its promise, one line per passage.

    `chunks` are the core's chunks (`retrieval.read_chunks`: derived columns included) of
    one chunk size. Without overlap, the chunks in chunk order must hold each sentence exactly
    once, in passage order (sentence output), or be disjoint spans in passage order that leave
    out nothing but whitespace (span output: a token window may leave out the space between
    two windows, never a word). Empty when the promise holds; in passage order otherwise.

    Whole-frame operations only (a join and a few window expressions, no Python loop over
    passages), so that `freeze`, `plan` and `run` can afford it on every chunk size of a large
    corpus; only the passages that break the promise are read row by row, to word the lines.
    """
    # A stable sort: chunk numbers that tie (refused later, by `numbering_problems`) keep the
    # chunker's row order rather than an arbitrary one, so the words do not change run to run.
    ordered = chunks.sort([*PASSAGE, "chunk"], maintain_order=True)
    spans = ordered.filter(pl.col("start").is_not_null())
    problems = _sentence_problems(ordered.filter(pl.col("start").is_null()), sentences)
    if spans.height:
        problems += _span_problems(spans, sentences)
    return problems


def passage_problems(chunks: pl.DataFrame, sentences: pl.DataFrame) -> list[str]:
    """Every passage it was given has at least one chunk, and no chunk names a passage it was
    not given: one line per passage that breaks it, in passage order (empty when it holds).
    Two anti-joins on the passages' keys, whatever the size of the corpus."""
    given = sentences.select(PASSAGE).unique()
    named = chunks.select(PASSAGE).unique()
    bad = pl.concat([
        given.join(named, on=PASSAGE, how="anti").with_columns(pl.lit("no chunk").alias("_what")),
        named.join(given, on=PASSAGE, how="anti")
        .with_columns(pl.lit("chunks of a passage it was not given").alias("_what")),
    ]).sort(PASSAGE, nulls_last=True)
    return [f"{case} {lang} {variant}: {what}" for case, lang, variant, what in bad.iter_rows()]


SHOWN_NUMBERS = 12
"""How many of a badly numbered passage's chunk numbers a line shows."""


def numbering_problems(chunks: pl.DataFrame) -> list[str]:
    """Each passage's chunks are numbered exactly 0, 1, ..., n-1 (in any row order): one line
    per passage that breaks it, in passage order (empty when it holds). One group-by (count,
    minimum, maximum, distinct and null count of `chunk` per passage); only the passages that
    break it are read again, to word the lines."""
    number = pl.col("chunk").cast(pl.Int64)
    stats = chunks.group_by(PASSAGE).agg(
        pl.len().cast(pl.Int64).alias("_n"),  # a count is unsigned: n - 1 must not wrap
        number.min().fill_null(-1).alias("_lo"),
        number.max().fill_null(-1).alias("_hi"),
        number.n_unique().cast(pl.Int64).alias("_distinct"),
        number.null_count().alias("_nulls"),
    )
    bad = stats.filter((pl.col("_lo") != 0) | (pl.col("_hi") != pl.col("_n") - 1)
                       | (pl.col("_distinct") != pl.col("_n")) | (pl.col("_nulls") > 0))
    if not bad.height:
        return []
    shown = (
        chunks.join(bad.select(*PASSAGE, "_n"), on=PASSAGE)
        .group_by(PASSAGE)
        .agg(pl.col("_n").first(), number.sort(nulls_last=True).head(SHOWN_NUMBERS)
             .alias("_numbers"))
        .sort(PASSAGE, nulls_last=True)
    )
    lines = []
    for case, lang, variant, n, numbers in shown.iter_rows():
        listed = ", ".join("null" if x is None else str(x) for x in numbers)
        more = ", ..." if n > len(numbers) else ""
        lines.append(f"{case} {lang} {variant}: its {n} chunks are numbered {listed}{more}, "
                     f"not 0 to {n - 1}")
    return lines


def covered_problems(chunks: pl.DataFrame, sentences: pl.DataFrame) -> list[str]:
    """What a chunker that declares `overlap = True` still promises: every sentence of each
    passage in at least one chunk (sentence output), or every character but white space in at
    least one span (span output). One line per passage that breaks it, in passage order.
    Whole-frame: an anti-join of the passage's sentences against the facts the chunks hold, or
    the gaps between the spans sorted by start (each span against the furthest end before it).
    """
    spans = chunks.filter(pl.col("start").is_not_null())
    problems = _lost_sentences(chunks.filter(pl.col("start").is_null()), sentences)
    if spans.height:
        problems += _span_problems(spans, sentences, overlap=True)
    return problems


def _lost_sentences(chunks: pl.DataFrame, sentences: pl.DataFrame) -> list[str]:
    if not chunks.height:
        return []
    held = (chunks.select(*PASSAGE, pl.col("fact_ids").alias("fact_id")).explode("fact_id")
            .drop_nulls("fact_id").unique())
    lost = (
        sentences.join(chunks.select(PASSAGE).unique(), on=PASSAGE)
        .join(held, on=[*PASSAGE, "fact_id"], how="anti")
        .sort([*PASSAGE, "position"])
        .group_by(PASSAGE, maintain_order=True)
        .agg("fact_id")
    )
    return [f"{case} {lang} {variant}: {' '.join(ids)} in no chunk"
            for case, lang, variant, ids in lost.iter_rows()]


def _sentence_problems(ordered: pl.DataFrame, sentences: pl.DataFrame) -> list[str]:
    """Each sentence once, in passage order: the i-th fact the chunks hold, in chunk order, is
    the passage's sentence at position i, and they hold as many as the passage has."""
    if not ordered.height:
        return []
    held = (
        ordered.select(*PASSAGE, pl.col("fact_ids").alias("fact_id"))
        .explode("fact_id")
        .drop_nulls("fact_id")
        .with_columns(pl.int_range(pl.len()).over(PASSAGE).alias("_i"))
    )
    positions = sentences.select(*PASSAGE, "fact_id", pl.col("position").cast(pl.Int64))
    counts = sentences.group_by(PASSAGE).agg(pl.len().cast(pl.Int64).alias("_n"))
    out_of_place = (
        held.join(positions, on=[*PASSAGE, "fact_id"], how="left")
        .filter(pl.col("position").is_null() | (pl.col("position") != pl.col("_i")))
        .select(PASSAGE)
    )
    miscounted = (
        ordered.select(PASSAGE).unique()
        .join(held.group_by(PASSAGE).agg(pl.len().cast(pl.Int64).alias("_held")), on=PASSAGE,
              how="left")
        .join(counts, on=PASSAGE, how="left")
        .filter(pl.col("_held").fill_null(0) != pl.col("_n").fill_null(0))
        .select(PASSAGE)
    )
    bad = pl.concat([out_of_place, miscounted]).unique()
    if not bad.height:
        return []
    order = (sentences.join(bad, on=PASSAGE).sort([*PASSAGE, "position"])
             .group_by(PASSAGE, maintain_order=True)
             .agg(pl.col("fact_id").alias("_expected")))
    grouped = (
        ordered.join(bad, on=PASSAGE, maintain_order="left")
        .group_by(PASSAGE, maintain_order=True)
        .agg(pl.col("fact_ids").list.explode(keep_nulls=False, empty_as_null=False)
             .alias("_got"))
        .join(order, on=PASSAGE, how="left", maintain_order="left")
        .sort(PASSAGE)
    )
    return [f"{case} {lang} {variant}: the chunks hold {' '.join(got)}, not each sentence once "
            f"in passage order ({' '.join(expected or [])})"
            for case, lang, variant, got, expected in grouped.iter_rows()]


def _span_problems(spans: pl.DataFrame, sentences: pl.DataFrame, overlap: bool = False
                   ) -> list[str]:
    """Disjoint spans in passage order that leave out only white space: each span starts at
    or after the previous one's end (0 for the first), nothing but white space between them,
    and nothing but white space after the last. The first break of each passage is named.

    With `overlap`, only the white-space rule: the spans sorted by start, each gap is what
    lies between a span's start and the furthest end of the spans before it."""
    passages = passages_frame(sentences)
    edges = spans.select(*PASSAGE, pl.col("chunk").cast(pl.Int64),
                         pl.col("start").cast(pl.Int64), pl.col("end").cast(pl.Int64))
    if overlap:
        edges = edges.sort([*PASSAGE, "start", "chunk"])
    reach = pl.col("end").cum_max() if overlap else pl.col("end")
    edges = edges.with_columns(reach.shift(1, fill_value=0).over(PASSAGE).alias("_lo"),
                               pl.int_range(pl.len()).over(PASSAGE).alias("_i"))
    last = pl.col("end").max() if overlap else pl.col("end").last()
    tails = (
        edges.group_by(PASSAGE).agg(last.alias("_lo"), pl.len().cast(pl.Int64).alias("_i"))
        .join(passages.select(*PASSAGE, pl.col("length").alias("start")), on=PASSAGE)
        .with_columns(pl.lit(None, pl.Int64).alias("chunk"))
    )
    gaps = (
        pl.concat([edges.select(*PASSAGE, "chunk", "_lo", "start", "_i"),
                   tails.select(*PASSAGE, "chunk", "_lo", "start", "_i")])
        .join(passages.select(*PASSAGE, "passage"), on=PASSAGE, how="left")
        .with_columns(
            ((pl.col("start") < pl.col("_lo")) & pl.lit(not overlap)).alias("_overlap"),
            pl.col("passage").str.slice(pl.col("_lo"),
                                        (pl.col("start") - pl.col("_lo")).clip(lower_bound=0))
            .alias("_gap"),
        )
        .filter(pl.col("_overlap") | pl.col("_gap").str.contains(r"\S"))
        .sort([*PASSAGE, "_i"])
        .group_by(PASSAGE, maintain_order=True)
        .first()
    )
    problems = []
    for row in gaps.iter_rows(named=True):
        where = f"{row['case']} {row['lang']} {row['variant']}"
        lo, hi = row["_lo"], row["start"]
        if row["_overlap"]:
            problems.append(f"{where}: chunk {row['chunk']} starts at {hi}, before the previous "
                            f"chunk ends ({lo}): spans overlap or are out of order")
        else:
            problems.append(f"{where}: characters {lo}..{hi - 1} ({row['_gap']!r}) are in no "
                            "chunk")
    return problems
