"""The kit's checks of chunkers and scorers: `check_chunker` and `check_scorer`, each run on the
kit's samples (`fragbench.testing.samples`) through the core's own reading of the plugin's
output, each failing with an AssertionError that names the promise that broke."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from fragbench.columns import PASSAGE
from fragbench.testing import samples
from fragbench.testing.promises import declared_api, fail

if TYPE_CHECKING:
    import polars as pl


# -- Chunkers -----------------------------------------------------------------------------------

def _passages(sentences: pl.DataFrame) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(case, lang, variant) -> its sentences as dicts, in passage order."""
    found: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in sentences.sort([*PASSAGE, "position"]).iter_rows(named=True):
        found.setdefault((row["case"], row["lang"], row["variant"]), []).append(row)
    return found


def _chunk(chunker: Any, who: str, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
    """The chunks as the core reads them (`fragbench.retrieval.passages.chunk_passages`): the output
    checked against the chunker's declared form (columns, types; for spans, offsets within
    the passage and one row per chunk index), with the derived columns (fact_ids, text, start,
    end, ...). Whatever the core refuses fails here, with the core's own words."""
    from fragbench.errors import PluginError
    from fragbench.retrieval.passages import read_chunks

    try:
        return read_chunks(chunker, sentences, size)
    except PluginError as exc:
        if isinstance(exc.__cause__, Exception):  # raised inside the chunker
            raise fail(who, "chunk() returns every chunk", f"chunk(sentences, {size}): "
                        f"{exc}") from exc
        raise fail(who, "documented columns and types", f"chunk(sentences, {size}): "
                    f"{exc}") from None


def _bite(key: tuple[Any, ...]) -> str:
    """What the sample case of a chunk's key is there to catch, when it is one of the cases
    that bite (`samples.BITES`)."""
    note = samples.BITES.get(key[0])
    return f" (sample case {key[0]}: {note})" if note else ""


def check_chunker(chunker: Any, sizes: tuple[int, ...] = (1, 2, 3)) -> None:
    """Check a chunker on the kit's bilingual sentences (`fragbench.testing.samples`) at each
    chunk size, through the core's own reading of its output. The samples include a passage
    of one sentence (shorter than every size) and passages of two, three and five.

    Promises checked, each failure naming it:
    - it declares the plugin API it is written for (`api_version = "1.0"`);
    - its declared form: `output` (absent, "sentences" or "spans") and the columns and types
      of that form (`fragbench.interfaces.CHUNK_COLUMNS` or `SPAN_COLUMNS`); spans within
      their passage, one per chunk index (the core's checks,
      `fragbench.retrieval.spans.check_spans`);
    - every passage it was given, and no other;
    - coverage: without `overlap = True`, every sentence of every passage exactly once and in
      order (a span chunker: disjoint spans in order that leave out nothing but white space);
      with `overlap = True`, every sentence (every non-white-space character) in at least one
      chunk;
    - numbering: each passage's chunks are numbered 0, 1, 2, ... in passage order (no chunk
      starts before the one numbered before it), each sentence chunk's sentences in passage
      order;
    - deterministic: the same input twice gives the same chunks, row order included;
    - text: a sentence chunk's `text` is its sentences joined by one space.

    The first three promises, and the numbers 0..n-1, are the core's own checks, in the core's words
    and order (`fragbench.retrieval.passages.chunk_problems`, which `freeze`, `plan`, `run` and
    `retrieve` apply too); the kit adds, row by row on its small samples, the order of the chunks
    and of each chunk's sentences, and the text.
    """
    from fragbench.retrieval.passages import OVERLAP_PROMISE, at_size, chunk_problems

    who = declared_api("chunker", chunker)
    overlap = getattr(chunker, "overlap", False) is True
    sentences = samples.sentences()
    passages = _passages(sentences)
    for size in sizes:
        first = _chunk(chunker, who, sentences, size)
        again = _chunk(chunker, who, sentences, size)
        if not first.equals(again):
            raise fail(who, "deterministic", f"chunk(sentences, {size}) twice gave two "
                        "different frames")
        output = "spans" if first["start"].null_count() < first.height else "sentences"
        promise, problems = chunk_problems(first, sentences, output, overlap)
        if problems:
            hint = (" (declare overlap = True if chunks are meant to share them)"
                    if promise == OVERLAP_PROMISE[output] else "")
            raise fail(who, promise, at_size(size, problems) + hint)
        for key, rows in _chunks_by_passage(first).items():
            _check_order(who, f"passage {'/'.join(key)} at size {size}", rows, passages[key])


def _chunks_by_passage(frame: pl.DataFrame) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(case, lang, variant) -> its chunks as dicts, in chunk order."""
    found: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in frame.sort([*PASSAGE, "chunk"]).iter_rows(named=True):
        found.setdefault((row["case"], row["lang"], row["variant"]), []).append(row)
    return found


def _check_order(who: str, where: str, rows: list[dict[str, Any]],
                 passage: list[dict[str, Any]]) -> None:
    """Chunks numbered in passage order; a sentence chunk's sentences in passage order, its
    text those sentences joined by one space."""
    position = {s["fact_id"]: s["position"] for s in passage}
    text = {s["fact_id"]: s["text"] for s in passage}
    order = " ".join(s["fact_id"] for s in passage)
    starts = []
    for row in rows:
        if row["start"] is not None:  # a span: the core checked it lies within the passage
            starts.append(row["start"])
            continue
        ids = list(row["fact_ids"] or [])
        unknown = [fid for fid in ids if fid not in position]
        if unknown or not ids:
            raise fail(who, "chunks hold the passage's sentences", f"{where}, chunk "
                        f"{row['chunk']} holds {' '.join(ids) or 'nothing'}"
                        + (f": {', '.join(unknown)} not in the passage" if unknown else ""))
        places = [position[fid] for fid in ids]
        if places != sorted(set(places)):
            raise fail(who, "sentences in passage order", f"{where}, chunk {row['chunk']} "
                        f"holds {' '.join(ids)}; the passage order is {order}")
        joined = " ".join(text[fid] for fid in ids)
        if row["text"] != joined:
            raise fail(who, "text is its sentences joined by one space", f"{where}, chunk "
                        f"{row['chunk']} has text {row['text']!r}, its sentences give "
                        f"{joined!r}")
        starts.append(places[0])
    if any(b < a for a, b in itertools.pairwise(starts)):
        raise fail(who, "chunks numbered 0.. in passage order", f"{where}, the chunks start "
                    f"at {starts} (sentence positions or character offsets) in the order of "
                    "their numbers")


# -- Scorers ------------------------------------------------------------------------------------

def _check_columns(frame: Any, columns: dict[str, tuple[str, ...]], who: str, what: str) -> None:
    from fragbench.errors import PluginError
    from fragbench.interfaces import check_frame

    try:
        check_frame(frame, columns, who, what)
    except PluginError as exc:
        raise fail(who, "documented columns and types", str(exc)) from None


def _call_scorer(scorer: Any, who: str, chunks: pl.DataFrame, questions: pl.DataFrame
                 ) -> pl.DataFrame:
    from fragbench.interfaces import SCORE_DTYPES
    from fragbench.retrieval.passages import SCORER_CONTRACT

    try:
        scored = scorer.score(chunks, questions)
    except Exception as exc:
        raise fail(who, "score() returns every chunk with a score", f"score() raised "
                    f"{type(exc).__name__}: {exc}") from exc
    _check_columns(scored, {**{c: (str(chunks.schema[c]),) for c in chunks.columns},
                            "score": SCORE_DTYPES}, who, SCORER_CONTRACT)
    return scored


def _scores(frame: pl.DataFrame, who: str, chunks: pl.DataFrame
            ) -> dict[tuple[Any, ...], float]:
    """Chunk key -> score; fails unless `frame` holds each chunk it was given exactly once,
    unchanged, with a finite score."""
    key_columns = [*PASSAGE, "chunk_size", "chunk"]
    given = {tuple(r[c] for c in key_columns): r for r in chunks.iter_rows(named=True)}
    found: dict[tuple[Any, ...], float] = {}
    for row in frame.iter_rows(named=True):
        key = tuple(row[c] for c in key_columns)
        if key not in given:
            raise fail(who, "returns the chunks it got", f"a row for chunk {key}, which it "
                        "was not given")
        if key in found:
            raise fail(who, "returns the chunks it got, one row each", f"chunk {key} twice")
        changed = [c for c in chunks.columns if row[c] != given[key][c]]
        if changed:
            raise fail(who, "returns the chunks it got", f"chunk {key} comes back with "
                        f"{', '.join(changed)} changed")
        score = row["score"]
        if score is None or (isinstance(score, float) and not math.isfinite(score)):
            raise fail(who, "a finite score for every chunk", f"chunk {key} scores "
                        f"{score!r}{_bite(key)}; NaN or inf is what a division by zero (or "
                        "the log of zero) gives")
        found[key] = score
    lost = [k for k in given if k not in found]
    if lost:
        raise fail(who, "returns the chunks it got", f"{len(lost)} of {len(given)} chunks "
                    f"are missing, {lost[0]} first")
    return found


def _same_scores(who: str, promise: str, how: str, expected: dict[tuple[Any, ...], float],
                 got: dict[tuple[Any, ...], float]) -> None:
    for key, score in expected.items():
        if got[key] != score:
            raise fail(who, promise, f"{how}, chunk {key} scores {got[key]!r}; the first "
                        f"call, all chunks at once, gave {score!r}")


def check_scorer(scorer: Any, sizes: tuple[int, ...] = (2, 3)) -> None:
    """Check a scorer on the kit's questions and chunks, as the core builds them (the derived
    columns and `chunk_size` included), twice over: whole sentences (the built-in
    sentence-groups chunker at `sizes`) and spans that cut sentences (the kit's
    `samples.CharacterWindows`).

    The samples include the cases that bite (`samples.BITES`): passages in which no chunk
    holds a term of the question (every score zero), questions with no term once stopwords
    are dropped or none at all, and one-sentence passages.

    Promises checked: it declares the plugin API it is written for; it returns the chunks it
    got, each once and unchanged, with a numeric, finite score (no NaN, inf or null: a scorer
    that divides by its passage's best score fails on a passage where every chunk scores
    zero) (the core's column check too); deterministic (the same call twice gives the
    same scores); batch-consistent (each passage and chunk size scored alone, and the rows
    given in reverse order, give each chunk the same score as all at once: selection must not
    depend on what else was in the batch). Scores are compared exactly: the core ranks on them
    rounded to 12 decimals, and a last-bit difference can fall on either side of a rounding.
    """
    who = declared_api("scorer", scorer)
    questions = samples.questions()
    for chunks in (samples.chunks(sizes), samples.chunks(sizes, samples.CharacterWindows())):
        form = "span chunks" if chunks["start"].null_count() == 0 else "sentence chunks"
        whole = _scores(_call_scorer(scorer, who, chunks, questions), who, chunks)
        again = _scores(_call_scorer(scorer, who, chunks, questions), who, chunks)
        _same_scores(who, "deterministic", f"{form} scored a second time", whole, again)
        reverse = chunks.reverse()
        _same_scores(who, "batch-consistent", f"{form} with the rows in reverse order", whole,
                     _scores(_call_scorer(scorer, who, reverse, questions), who, reverse))
        for (case, lang, variant, size), part in chunks.group_by(
                [*PASSAGE, "chunk_size"], maintain_order=True):
            alone = _scores(_call_scorer(scorer, who, part, questions), who, part)
            _same_scores(who, "batch-consistent", f"{form} of passage {case}/{lang}/{variant} "
                         f"at size {size} scored alone", {k: whole[k] for k in alone}, alone)
