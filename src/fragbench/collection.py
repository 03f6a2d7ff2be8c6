"""Collection-scale retrieval: every query of a batch against every chunk of a collection.

`fragbench retrieve --collection SENTENCES --queries QUERIES --chunk-size N --top-k K --out R`.

- SENTENCES (Parquet or JSON lines): `passage` (string), `position` (integer, the sentence's
  order in its passage), `lang`, `text`. Chunks are groups of N consecutive sentences of one
  passage from its start, by position. A passage has one language: its chunks' terms drop that
  language's stopwords.
- QUERIES: `query` (string), `lang`, `text`; optionally `passage`, which restricts that query
  to the chunks of one passage (the protocol's per-passage mode is this special case: each
  question meets its own passage's chunks).
- RESULTS: one row per query and rank: `query`, `rank` (1..K), `passage`, `chunk` (0-based, in
  its passage), `score`, `tied`.

Selection is the core's, the same rule as the per-passage mode (`retrieval.select`): highest
score first, scores compared after rounding to 12 decimals (Polars' `round`, the same call);
ties go to the chunk that comes first in the collection: passages in the order they first
appear in the file, then chunk order. When fewer than K chunks score above zero, the rest of the
K are zero-score chunks in collection order. `tied`: another candidate chunk has the same
rounded score for that query.

The scorer builds an index once (`collection_index`), prepares every query once
(`collection_queries`), and scores a batch of them against the index (`collection_scores`),
returning a sparse matrix whose absent entries score zero; a scorer says it can by listing
"collection" in its `modes`. Queries go in batches, so memory is the index's
(proportional to the collection) plus one batch's scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from fragbench.errors import UsageError, first_line
from fragbench.retrieval import TIE_DECIMALS

SENTENCE_COLUMNS = {"passage": pl.String, "position": "integer", "lang": pl.String,
                    "text": pl.String}
QUERY_COLUMNS = {"query": pl.String, "lang": pl.String, "text": pl.String}
RESULT_SCHEMA = {
    "query": "the query's id, as given",
    "rank": "1..K",
    "passage": "the chunk's passage",
    "chunk": "0-based index of the chunk in its passage",
    "score": "the scorer's score",
    "tied": "another candidate chunk has the same score (rounded to 12 decimals) for this query",
}
BATCH = 64
"""Queries scored at once: bounds the memory of one batch's score matrix, which frequent terms
make nearly dense (64 queries x the chunks of the collection)."""


def _scan(source: Path | pl.DataFrame | pl.LazyFrame, what: str) -> pl.LazyFrame:
    if isinstance(source, pl.DataFrame):
        return source.lazy()
    if isinstance(source, pl.LazyFrame):
        return source
    path = Path(source)
    if not path.is_file():
        raise UsageError(f"{what} {path}: no such file; give a .parquet or .jsonl file.")
    if path.suffix == ".parquet":
        return pl.scan_parquet(path)
    if path.suffix in (".jsonl", ".ndjson"):
        return pl.scan_ndjson(path)
    raise UsageError(f"{what} {path}: unknown format; give a .parquet or .jsonl file.")


def _checked(frame: pl.LazyFrame, columns: dict[str, Any], what: str, source: Any
             ) -> pl.LazyFrame:
    name = source if isinstance(source, str | Path) else "the frame"
    try:
        schema = frame.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = first_line(exc, type(exc).__name__)
        raise UsageError(f"{what} {name}: cannot be read ({first}).") from None
    missing = [c for c in columns if c not in schema]
    if missing:
        raise UsageError(f"{what} {name}: lacks the column(s) {', '.join(missing)}; it needs "
                         f"{', '.join(columns)}.")
    for column, kind in columns.items():
        dtype = schema[column]
        ok = dtype.is_integer() if kind == "integer" else dtype == kind
        if not ok:
            raise UsageError(f"{what} {name}: column {column} is {dtype}, it must be "
                             f"{'an integer' if kind == 'integer' else kind}.")
    return frame


def chunk_collection(sentences: pl.LazyFrame, chunk_size: int) -> pl.DataFrame:
    """One row per chunk, in collection order: chunk_id, passage, chunk, lang, text."""
    rows = sentences.select("passage", "position", "lang", "text").with_row_index("_row")
    order = (rows.group_by("passage").agg(pl.col("_row").min().alias("_first"),
                                          pl.col("lang").first().alias("lang"))
             .sort("_first").with_row_index("_p").select("passage", "_p", "lang"))
    return (
        rows.drop("lang").join(order, on="passage")
        .sort("_p", "position", "_row")
        .with_columns((pl.int_range(pl.len()).over("_p") // chunk_size).cast(pl.Int64)
                      .alias("chunk"))
        .group_by("_p", "chunk", maintain_order=True)
        .agg(pl.col("passage").first(), pl.col("lang").first(),
             pl.col("text").str.join(" "))
        .sort("_p", "chunk")
        .with_row_index("chunk_id")
        .select("chunk_id", "passage", "chunk", "lang", "text")
        .collect()
    )


def select_top(scores: Any, keys: np.ndarray, row_ranges: list[tuple[int, int]], top_k: int
               ) -> list[tuple[list[int], list[float], list[bool]]]:
    """Per query row of a CSR score matrix: the top-k chunk ids within the row's candidate
    range [lo, hi), with the tie rule and the zero-score fill. `keys` are the rounded scores of
    `scores.data`.

    A few linear passes per row, whatever k: the k-th largest key splits the row into what is
    surely chosen (above it) and the ties at it, of which the first in collection order are
    chosen. Only a key equal to the k-th can tie with a chunk left out, so that count is the
    one that needs the whole row; the others are counted among the chosen.
    """
    out = []
    indptr, indices, data = scores.indptr, scores.indices, scores.data
    for row, (lo, hi) in enumerate(row_ranges):
        start, end = indptr[row], indptr[row + 1]
        ids, vals, ks = indices[start:end], data[start:end], keys[start:end]
        if lo > 0 or hi < scores.shape[1]:
            inside = (ids >= lo) & (ids < hi)
            ids, vals, ks = ids[inside], vals[inside], ks[inside]
        positive = vals != 0
        if not positive.all():
            ids, vals, ks = ids[positive], vals[positive], ks[positive]
        if len(ids) > top_k:
            kth = np.partition(ks, len(ks) - top_k)[len(ks) - top_k]
            above = np.flatnonzero(ks > kth)
            at = np.flatnonzero(ks == kth)
            at = at[np.argsort(ids[at], kind="stable")][:top_k - len(above)]
            pick = np.concatenate([above, at])
            at_count = len(np.flatnonzero(ks == kth)) if len(at) else 0
        else:
            pick, kth, at_count = np.arange(len(ids)), None, 0
        order = pick[np.lexsort((ids[pick], -ks[pick]))]
        chosen = ids[order].tolist()
        values = vals[order].tolist()
        chosen_keys = ks[order]
        same = {k: int(n) for k, n in zip(*np.unique(chosen_keys, return_counts=True),
                                             strict=True)}
        tied = [(at_count if k == kth else same[k]) > 1 for k in chosen_keys.tolist()]
        if len(chosen) < top_k:  # zero-score chunks, in collection order
            zeros = (hi - lo) - len(ids)
            taken = set(ids.tolist())
            fill = []
            candidate = lo
            while len(chosen) + len(fill) < top_k and candidate < hi:
                if candidate not in taken:
                    fill.append(candidate)
                candidate += 1
            chosen += fill
            values += [0.0] * len(fill)
            tied += [zeros > 1] * len(fill)
        out.append((chosen, values, tied))
    return out


def _check_finite(scores: Any, scorer: Any, queries: pl.DataFrame, chunks: pl.DataFrame,
                  first: int) -> None:
    """Refuse a batch whose score matrix holds NaN or inf (the per-passage mode's rule,
    `retrieval.check_scores`), naming the scorer, the query and the chunk, before anything is
    written. One pass over the stored scores of the batch."""
    finite = np.isfinite(scores.data)
    if finite.all():
        return
    from fragbench.errors import PluginError
    from fragbench.plugins import describe
    from fragbench.retrieval import FINITE_PROMISE, shown_score

    at = int(np.flatnonzero(~finite)[0])
    row = int(np.searchsorted(scores.indptr, at, side="right") - 1)
    column = int(scores.indices[at])
    shown = shown_score(float(scores.data[at]))
    passage, chunk = chunks["passage"][column], chunks["chunk"][column]
    bad = int((~finite).sum())
    more = f" ({bad} scores of this batch are)" if bad > 1 else ""
    raise PluginError(f"{describe('scorer', scorer)} gave query {queries['query'][first + row]} "
                      f"and chunk {passage} #{chunk} the score {shown}{more}; {FINITE_PROMISE} "
                      "(docs/plugins.md). Fix or uninstall that plugin.")


def retrieve_collection(sentences: Path | pl.DataFrame | pl.LazyFrame,
                        queries: Path | pl.DataFrame | pl.LazyFrame, chunk_size: int,
                        top_k: int, scorer: Any = None) -> pl.DataFrame:
    """Top-k chunks of the collection for every query (RESULT_SCHEMA)."""
    if scorer is None:
        from fragbench.plugins import registry

        scorer = registry().get("scorer", "sqrt-lexical")
    if "collection" not in getattr(scorer, "modes", ("passage",)):
        from fragbench.plugins import describe

        raise UsageError(f"{describe('scorer', scorer)} supports only the per-passage mode; "
                         "choose a scorer whose modes include collection.")
    if chunk_size < 1 or top_k < 1:
        raise UsageError("--chunk-size and --top-k must be at least 1.")
    sentences_lf = _checked(_scan(sentences, "--collection"), SENTENCE_COLUMNS, "--collection",
                            sentences)
    queries_lf = _scan(queries, "--queries")
    query_schema = _checked(queries_lf, QUERY_COLUMNS, "--queries", queries).collect_schema()
    chunks = chunk_collection(sentences_lf, chunk_size)
    restricted = "passage" in query_schema
    query_frame = queries_lf.select("query", "lang", "text",
                                    *(["passage"] if restricted else [])).collect()

    n_chunks = chunks.height
    ranges = [(0, n_chunks)] * query_frame.height
    if restricted:
        bounds = chunks.group_by("passage").agg(pl.col("chunk_id").min().alias("lo"),
                                                (pl.col("chunk_id").max() + 1).alias("hi"))
        joined = query_frame.select("passage").with_row_index("_q").join(
            bounds, on="passage", how="left").sort("_q")
        ranges = [(lo, hi) if lo is not None else (0, 0)
                  for lo, hi in zip(joined["lo"].to_list(), joined["hi"].to_list(),
                                    strict=True)]
    index = scorer.collection_index(chunks.select("chunk_id", "lang", "text"))
    prepared = scorer.collection_queries(index, query_frame.select("lang", "text"))
    picked: list[tuple[list[int], list[float], list[bool]]] = []
    for start in range(0, query_frame.height, BATCH):
        end = min(start + BATCH, query_frame.height)
        scores = scorer.collection_scores(index, prepared, slice(start, end)).tocsr()
        _check_finite(scores, scorer, query_frame, chunks, start)
        keys = pl.Series(scores.data, dtype=pl.Float64).round(TIE_DECIMALS).to_numpy()
        picked += select_top(scores, keys, ranges[start:end], top_k)

    lengths = [len(ids) for ids, _, _ in picked]
    chunk_ids = np.fromiter((i for ids, _, _ in picked for i in ids), dtype=np.int64,
                            count=sum(lengths))
    result = pl.DataFrame({
        "query": np.repeat(query_frame["query"].to_numpy(), lengths),
        "rank": np.concatenate([np.arange(1, n + 1, dtype=np.int32) for n in lengths])
        if lengths else np.array([], dtype=np.int32),
        "chunk_id": chunk_ids,
        "score": np.fromiter((v for _, vals, _ in picked for v in vals), dtype=np.float64,
                             count=len(chunk_ids)),
        "tied": np.fromiter((t for _, _, ts in picked for t in ts), dtype=bool,
                            count=len(chunk_ids)),
    }, schema_overrides={"query": pl.String, "rank": pl.Int32})
    return (result.join(chunks.select("chunk_id", "passage", "chunk"), on="chunk_id",
                        how="left", maintain_order="left")
            .select("query", "rank", "passage", "chunk", "score", "tied"))
