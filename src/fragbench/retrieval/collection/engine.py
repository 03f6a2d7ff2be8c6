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

A scorer may also offer two optional methods (docs/plugins.md), which the built-in
`sqrt-lexical` has: `collection_index_sentences` (on one machine the sentences are then read a
slice at a time and the chunks' text is never joined: `chunk_plan`, `local_chunks`,
`local_tops`) and `collection_top_k` (every query's top-k by compiled loops,
`fragbench.retrieval.collection.kernels`, held to the same rule and to the same finite-score check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from fragbench.errors import UsageError, first_line
from fragbench.retrieval.passages import TIE_DECIMALS
from fragbench.tables import PARQUET_ERRORS, parquet_problem

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



COLLECTION_MISSING = ("collection mode needs numba and scipy, which are not installed: pip "
                      "install 'fragbench[collection]'.")
"""Collection mode's compiled loops and sparse products are an extra (`fragbench[collection]`,
also in `fragbench[ray]`): per-passage retrieval, protocol 1.0's, imports neither."""


def require_collection_packages() -> None:
    """UsageError (exit 2), in one line saying what to install, where numba or scipy is
    missing: checked before anything is read or computed."""
    try:
        import numba  # noqa: F401
        import scipy.sparse  # noqa: F401
    except ImportError:
        raise UsageError(COLLECTION_MISSING) from None

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
        # The whole file's schema: a value of another type late in the file then gives the
        # column a type `_checked` refuses, where the first rows' schema would fail at compute.
        return pl.scan_ndjson(path, infer_schema_length=None)
    raise UsageError(f"{what} {path}: unknown format; give a .parquet or .jsonl file.")


def unreadable(what: str, source: Any, exc: BaseException, fix: str) -> UsageError:
    """The one line for an input that Polars could not read: a Parquet file said to be not a
    readable Parquet file (`tables.parquet_problem`: damaged, truncated or not Parquet, its
    footer or its data), with what to do about it; a JSON lines file or a frame "cannot be
    read", the first line of Polars' words, then `fix`."""
    name = source if isinstance(source, str | Path) else "the frame"
    if isinstance(source, str | Path) and Path(source).suffix == ".parquet":
        return UsageError(f"{what} {name}: {parquet_problem(exc)}; check that it is the file "
                          "you meant, or write it again.")
    return UsageError(f"{what} {name}: cannot be read ({first_line(exc, type(exc).__name__)})"
                      f"{fix}.")


def _checked(frame: pl.LazyFrame, columns: dict[str, Any], what: str, source: Any
             ) -> pl.LazyFrame:
    name = source if isinstance(source, str | Path) else "the frame"
    try:
        schema = frame.collect_schema()
    except PARQUET_ERRORS as exc:
        raise unreadable(what, source, exc, "") from None
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


MAX_ROWS = (1 << 31) - 1
"""Most sentences, chunks or queries of one run (or one Ray shard): row and chunk ids are
int32 in the compiled loops and the postings, so more would wrap silently."""


def check_count(count: int, what: str) -> None:
    """Refuse, in one line, a count of rows or chunks that int32 ids cannot number
    (`MAX_ROWS`). Every path calls it: `read_inputs` (sentences and queries), `shard_tops`
    (the chunks any scorer indexes, a Ray shard's included), `chunk_plan`."""
    if count > MAX_ROWS:
        raise UsageError(f"{what}: {count} rows; at most {MAX_ROWS} in one run or one shard "
                         "(split the input, or use --engine ray with more --shards).")


def _strict(source: Any, frame: pl.LazyFrame) -> pl.LazyFrame | None:
    """For a JSON lines file, the file again with the schema enforced (string columns read as
    Categorical, which refuses a number where Polars' String would turn it into text,
    `"text": 5` into "5"): every value must then be read once to be checked. None for a
    typed source (Parquet, a frame): its values are of its columns' types."""
    if not isinstance(source, str | Path) or Path(source).suffix == ".parquet":
        return None
    schema = frame.collect_schema()
    return pl.scan_ndjson(Path(source), schema={
        c: pl.Categorical if t == pl.String else t for c, t in schema.items()})


def _check_values(source: Any, frame: pl.LazyFrame, columns: list[str], required: list[str],
                  what: str) -> int:
    """One streaming pass: the row count (checked, `check_count`), or one line naming the
    file when a value of `columns` cannot be read as its column's type (JSON lines: every
    value is read; Parquet: only the `required` columns) or a row lacks a value in one of the
    `required` columns (how many rows, and the first, counting from 1)."""
    name = source if isinstance(source, str | Path) else "the frame"
    strict = _strict(source, frame)
    read = columns if strict is not None else required
    strict = (strict if strict is not None else frame).select(columns)
    missing = pl.any_horizontal(pl.col(required).is_null())
    try:
        # Each read column's null count: each of its values is parsed (checked).
        rows, empty, *_ = strict.select(
            pl.len().alias("_rows"), missing.sum().alias("_missing"),
            pl.col(read).null_count()).collect(engine="streaming").row(0)
        first = None
        if empty:
            first = (strict.with_row_index("_at").filter(missing).head(1)
                     .collect(engine="streaming"))
    except PARQUET_ERRORS as exc:
        raise unreadable(what, source, exc, "; fix that value") from None
    if first is not None:
        row = first.row(0, named=True)
        lacking = [c for c in required if row[c] is None]
        raise UsageError(f"{what} {name}: {empty} row(s) lack a value in "
                         f"{' or '.join(required)}; the first is row {row['_at'] + 1} (counting "
                         f"from 1), which lacks {', '.join(lacking)}. Give every row a value "
                         "in each of these columns.")
    check_count(rows, f"{what} {name}")
    return int(rows)


def chunk_collection(sentences: pl.LazyFrame, chunk_size: int) -> pl.DataFrame:
    """One row per chunk, in collection order: chunk_id, passage, chunk, lang, text, first.

    `first` is the input row of the passage's first sentence: (first, chunk) is the chunk's
    place in the collection order, whatever part of the collection a frame holds (the Ray
    engine's shards keep it from the input's row index, numbered before anything is split)."""
    columns = ["passage", "position", "lang", "text"]
    if "_row" in sentences.collect_schema():
        rows = sentences.select(*columns, pl.col("_row").cast(pl.Int64))
    else:
        rows = sentences.select(*columns).with_row_index("_row")
    order = (rows.group_by("passage").agg(pl.col("_row").min().alias("first"),
                                          pl.col("lang").first().alias("lang"))
             .sort("first").select("passage", "first", "lang"))
    return (
        rows.drop("lang").join(order, on="passage")
        .sort("first", "position", "_row")
        .with_columns((pl.int_range(pl.len()).over("first") // chunk_size).cast(pl.Int64)
                      .alias("chunk"))
        .group_by("first", "chunk", maintain_order=True)
        .agg(pl.col("passage").first(), pl.col("lang").first(),
             pl.col("text").str.join(" "))
        .sort("first", "chunk")
        .with_row_index("chunk_id")
        .select("chunk_id", "passage", "chunk", "lang", "text",
                pl.col("first").cast(pl.Int64))
        .collect()
    )


SLICE = 32_768
"""Input rows read at once when the text is streamed (`chunk_plan`, `_text_batches`)."""


def chunk_plan(sentences: pl.LazyFrame, chunk_size: int) -> tuple[pl.DataFrame, np.ndarray]:
    """`chunk_collection`'s chunks without their text (chunk_id, passage, chunk, lang, first),
    and the chunk of each input row, in input order: what a scorer with
    `collection_index_sentences` needs, read from the small columns alone, `SLICE` rows at a
    time for the passage ids (interned by compiled loops, `fragbench.retrieval.collection.kernels`).

    The same chunks: passages numbered in order of their first input row (`first`, whose
    language is the passage's), each one's sentences ordered by (position, input row), a
    chunk every `chunk_size` of them; chunks numbered in order of (first, chunk)."""
    from fragbench.retrieval.collection import kernels

    rows = sentences.select(pl.len()).collect().item()
    check_count(rows, "--collection")
    keys = kernels.Vocabulary()
    group = np.empty(rows, dtype=np.int32)
    names, langs, firsts = [], [], []
    for start in range(0, rows, SLICE):
        part = sentences.select("passage", "lang").slice(start, SLICE).collect()
        # Keys: "\x01" + the id (never empty; never null: `read_inputs` refuses that).
        raw = part.select(pl.lit("\x01") + pl.col("passage")).to_series()
        if raw.null_count():  # a caller that skipped `read_inputs`: the loops need ids
            raise UsageError("--collection: a sentence without passage; check the input "
                             "with read_inputs.")
        lengths = raw.str.len_bytes().cast(pl.Int64).to_numpy()
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.frombuffer(raw.str.join("").cast(pl.Binary).item(), dtype=np.uint8)
        before = keys.size
        ids = group[start:start + part.height]
        row = 0
        while (row := kernels.intern_rows(keys.arrays(), data, offsets, row, ids)) \
                < part.height:
            keys.grow(int(lengths[row]))
        new = np.flatnonzero(ids >= before)
        new = new[np.unique(ids[new], return_index=True)[1]]  # each new passage's first row
        names.append(part["passage"].gather(new))
        langs.append(part["lang"].gather(new))
        firsts.append(new + start)
    position = sentences.select("position").collect().to_series()
    if position.null_count():
        raise UsageError("--collection: a sentence without position; check the input with "
                         "read_inputs.")
    position = position.to_numpy()
    if position.dtype == np.uint64:
        # Positions only order a passage's sentences: flipping the top bit maps UInt64 onto
        # Int64 keeping the order (a cast would refuse values of 2**63 and more).
        position = (position ^ np.uint64(1 << 63)).view(np.int64)
    else:
        position = position.astype(np.int64, copy=False)
    chunk_of_row, chunk_group, chunk_number = kernels.plan_chunks(
        group, position, keys.size, chunk_size)
    del group, position
    take = pl.Series(chunk_group)
    first = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
    chunks = pl.DataFrame({
        "chunk_id": np.arange(len(chunk_group), dtype=np.int64),
        "passage": pl.concat(names).gather(take) if names else pl.Series([], dtype=pl.String),
        "chunk": chunk_number,
        "lang": pl.concat(langs).gather(take) if langs else pl.Series([], dtype=pl.String),
        "first": first[chunk_group].astype(np.int64),
    })
    return chunks, chunk_of_row


def _text_batches(sentences: pl.LazyFrame, rows: int, size: int = SLICE) -> Any:
    """The input's `text` in input order, `size` rows at a time (a Parquet scan reads only
    the row groups of each slice)."""
    for start in range(0, rows, size):
        yield sentences.select("text").slice(start, size).collect().to_series()


def select_top(scores: Any, keys: np.ndarray, row_ranges: list[tuple[int, int]], top_k: int
               ) -> list[tuple[list[int], list[float], list[float], list[int], int]]:
    """Per query row of a CSR score matrix: the top-k chunk ids within the row's candidate
    range [lo, hi), with the tie rule and the zero-score fill. `keys` are the rounded scores of
    `scores.data`.

    Each row gives (chunk ids, scores, keys, at_key, positives): `at_key` is, for each chosen
    chunk, how many candidate chunks of the row have its key (scored chunks and zero-score
    chunks counted apart); the first `positives` chosen are scored, the rest the zero-score
    fill in collection order.

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
        counts = [at_count if k == kth else same[k] for k in chosen_keys.tolist()]
        key_list = chosen_keys.tolist()
        positives = len(chosen)
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
            key_list += [0.0] * len(fill)
            counts += [zeros] * len(fill)
        out.append((chosen, values, key_list, counts, positives))
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
    from fragbench.retrieval.passages import FINITE_PROMISE, shown_score

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


TOPS_SCHEMA = {
    "query": pl.UInt32, "shard": pl.Int32, "zero": pl.Boolean, "key": pl.Float64,
    "score": pl.Float64, "first": pl.Int64, "chunk": pl.Int64, "passage": pl.String,
    "at_key": pl.Int64,
}
"""One shard's top-k (`shard_tops`), what `merge_tops` needs to give the one-machine result:
`query` (the query's row in the queries frame), `shard`, `zero` (a zero-score fill row), `key`
(the score rounded to 12 decimals), `score`, `first` and `chunk` (the chunk's place in the
collection order), `passage`, `at_key` (how many candidate chunks of the shard have this row's
key, scored and zero-score chunks counted apart)."""


def scorer_for_collection(scorer: Any = None) -> Any:
    """The scorer to use (`sqrt-lexical` by default), refused in one line unless it has the
    collection mode."""
    if scorer is None:
        from fragbench.plugins import registry

        scorer = registry().get("scorer", "sqrt-lexical")
    if "collection" not in getattr(scorer, "modes", ("passage",)):
        from fragbench.plugins import describe

        raise UsageError(f"{describe('scorer', scorer)} supports only the per-passage mode; "
                         "choose a scorer whose modes include collection.")
    return scorer


def read_inputs(sentences: Path | pl.DataFrame | pl.LazyFrame,
                queries: Path | pl.DataFrame | pl.LazyFrame
                ) -> tuple[pl.LazyFrame, pl.DataFrame]:
    """The sentences (checked, lazy) and the queries (checked, read: query, lang, text and,
    when given, passage), or one line naming the file and what is wrong: a missing column, a
    column of another type (anywhere in a JSON lines file), a value that cannot be read, a
    sentence without passage or position (it would be lost or misplaced), a query without
    query id, more rows than `MAX_ROWS`.

    Missing values that have a meaning: a missing `text` is an empty sentence or query (no
    terms; the sentence keeps its place in its chunk); a missing `lang` is a language without
    a stopword list (none dropped; a passage's language is its first sentence's); a
    restricted query's missing `passage` gives it no candidates."""
    sentences_lf = _checked(_scan(sentences, "--collection"), SENTENCE_COLUMNS, "--collection",
                            sentences)
    _check_values(sentences, sentences_lf, list(SENTENCE_COLUMNS), ["passage", "position"],
                  "--collection")
    # Only the columns read: any other, a `_row` of the user's above all, never reaches the
    # chunking (`chunk_collection` orders by `_row` when a frame has one: the Ray engine's
    # shards, numbered by the driver), so both engines order the same input the same way.
    sentences_lf = sentences_lf.select(*SENTENCE_COLUMNS)
    queries_lf = _scan(queries, "--queries")
    query_schema = _checked(queries_lf, QUERY_COLUMNS, "--queries", queries).collect_schema()
    _check_values(queries, queries_lf, list(QUERY_COLUMNS), ["query"], "--queries")
    restricted = "passage" in query_schema
    query_frame = queries_lf.select("query", "lang", "text",
                                    *(["passage"] if restricted else [])).collect()
    return sentences_lf, query_frame


def query_ranges(chunks: pl.DataFrame, query_frame: pl.DataFrame) -> list[tuple[int, int]]:
    """Each query's candidate chunk ids [lo, hi) among `chunks`: all of them, or its own
    passage's when the queries have a `passage` column ((0, 0) when this frame lacks it)."""
    if "passage" not in query_frame.columns:
        return [(0, chunks.height)] * query_frame.height
    bounds = chunks.group_by("passage").agg(pl.col("chunk_id").min().alias("lo"),
                                            (pl.col("chunk_id").max() + 1).alias("hi"))
    joined = query_frame.select("passage").with_row_index("_q").join(
        bounds, on="passage", how="left").sort("_q")
    return [(lo, hi) if lo is not None else (0, 0)
            for lo, hi in zip(joined["lo"].to_list(), joined["hi"].to_list(), strict=True)]


def shard_tops(chunks: pl.DataFrame, query_frame: pl.DataFrame, top_k: int, scorer: Any,
               shard: int = 0) -> pl.DataFrame:
    """The top-k of every query among `chunks` (TOPS_SCHEMA), the tie rule applied within them.

    `chunks` is `chunk_collection`'s frame, or any part of it made of whole passages, in
    collection order, with `chunk_id` numbered 0.. in that order. The scorer's index is built
    on these chunks alone, so a scorer may be sharded only when a chunk's score depends on the
    chunk and the query alone (the built-in `sqrt-lexical` does)."""
    check_count(chunks.height, "chunks")
    index = scorer.collection_index(chunks.select("chunk_id", "lang", "text"))
    return _tops_with(index, chunks, query_frame, top_k, scorer, shard)


def _tops_with(index: Any, chunks: pl.DataFrame, query_frame: pl.DataFrame, top_k: int,
               scorer: Any, shard: int) -> pl.DataFrame:
    """`shard_tops` with the scorer's index of `chunks` already built."""
    ranges = query_ranges(chunks, query_frame)
    prepared = scorer.collection_queries(index, query_frame.select("lang", "text"))
    fast = getattr(scorer, "collection_top_k", None)
    found = fast(index, prepared, ranges, top_k) if fast is not None else None
    if found is not None:
        rows = _top_k_rows(found, scorer, query_frame, chunks, shard)
    else:
        rows = _batched_rows(index, prepared, scorer, query_frame, chunks, ranges, top_k,
                             shard)
    # chunk_id is the chunk's row in `chunks` (numbered 0..n-1 in order): a gather, where a
    # join would hash every chunk of the collection for a few rows per query.
    places = chunks.select("first", "chunk", "passage").gather(rows["chunk_id"])
    return (pl.concat([rows, places], how="horizontal")
            .select(*TOPS_SCHEMA).cast(TOPS_SCHEMA))  # type: ignore[arg-type]


def _top_k_rows(found: Any, scorer: Any, query_frame: pl.DataFrame, chunks: pl.DataFrame,
                shard: int) -> pl.DataFrame:
    """The rows of a scorer's own `collection_top_k` (ids, scores, keys, at_key, zero:
    queries x width arrays, each query's first `lengths[q]` in use), its scores held to the
    same promise as `collection_scores`' (finite)."""
    ids, scores, keys, at_key, zero, lengths = found
    used = np.arange(ids.shape[1])[None, :] < np.asarray(lengths)[:, None]
    bad = used & ~np.isfinite(scores)
    if bad.any():
        from scipy import sparse

        q, r = (int(x[0]) for x in np.nonzero(bad))
        one = sparse.csr_matrix(([float(scores[q, r])], ([0], [int(ids[q, r])])),
                                shape=(1, chunks.height))
        _check_finite(one, scorer, query_frame, chunks, q)
    total = int(used.sum())
    return pl.DataFrame({
        "query": np.repeat(np.arange(ids.shape[0], dtype=np.uint32), np.asarray(lengths)),
        "shard": np.full(total, shard, dtype=np.int32),
        "zero": zero[used],
        "key": keys[used],
        "score": scores[used],
        "chunk_id": ids[used].astype(np.int64),
        "at_key": at_key[used].astype(np.int64),
    })


def _batched_rows(index: Any, prepared: Any, scorer: Any, query_frame: pl.DataFrame,
                  chunks: pl.DataFrame, ranges: list[tuple[int, int]], top_k: int,
                  shard: int) -> pl.DataFrame:
    """The rows of the plugin protocol's way: a sparse score matrix per batch of queries
    (`collection_scores`), checked finite, rounded, and selected (`select_top`)."""
    picked: list[tuple[list[int], list[float], list[float], list[int], int]] = []
    for start in range(0, query_frame.height, BATCH):
        end = min(start + BATCH, query_frame.height)
        scores = scorer.collection_scores(index, prepared, slice(start, end)).tocsr()
        _check_finite(scores, scorer, query_frame, chunks, start)
        keys = pl.Series(scores.data, dtype=pl.Float64).round(TIE_DECIMALS).to_numpy()
        picked += select_top(scores, keys, ranges[start:end], top_k)
    lengths = [len(ids) for ids, *_ in picked]
    total = sum(lengths)

    def flat(field: int, dtype: Any) -> np.ndarray:
        return np.fromiter((v for row in picked for v in row[field]), dtype=dtype, count=total)

    return pl.DataFrame({
        "query": np.repeat(np.arange(query_frame.height, dtype=np.uint32), lengths),
        "shard": np.full(total, shard, dtype=np.int32),
        "zero": np.fromiter((r >= row[4] for row in picked for r in range(len(row[0]))),
                            dtype=bool, count=total),
        "key": flat(2, np.float64),
        "score": flat(1, np.float64),
        "chunk_id": flat(0, np.int64),
        "at_key": flat(3, np.int64),
    })


def merge_tops(tops: list[pl.DataFrame], query_ids: pl.Series, top_k: int) -> pl.DataFrame:
    """The collection's top-k per query (RESULT_SCHEMA) from the shards' top-k: exactly the
    one-machine result.

    The global top-k lies within the union of the shards' top-k. Order: scored chunks by key,
    highest first, then zero-score chunks; ties in collection order (first, chunk). `tied`:
    the shards' counts at the chosen key, summed over the shards, exceed one (a shard that has
    chunks at a chosen key but returned none of them had k chunks above it, so that key could
    not be chosen)."""
    union = pl.concat(tops) if tops else pl.DataFrame(schema=TOPS_SCHEMA)
    counts = (union.group_by("query", "zero", "key", "shard").agg(pl.col("at_key").first())
              .group_by("query", "zero", "key").agg(pl.col("at_key").sum().alias("_n")))
    best = (union.sort(["query", "zero", "key", "first", "chunk"],
                       descending=[False, False, True, False, False])
            .with_columns((pl.int_range(pl.len()).over("query") + 1).cast(pl.Int32)
                          .alias("rank"))
            .filter(pl.col("rank") <= top_k))
    names = query_ids.cast(pl.String).to_frame("_id").with_row_index("query")
    return (best.join(counts, on=["query", "zero", "key"], how="left", maintain_order="left")
            .join(names.cast({"query": pl.UInt32}), on="query", how="left",
                  maintain_order="left")
            .select(pl.col("_id").alias("query"), "rank", "passage", "chunk", "score",
                    (pl.col("_n") > 1).alias("tied")))


def retrieve_collection(sentences: Path | pl.DataFrame | pl.LazyFrame,
                        queries: Path | pl.DataFrame | pl.LazyFrame, chunk_size: int,
                        top_k: int, scorer: Any = None) -> pl.DataFrame:
    """Top-k chunks of the collection for every query (RESULT_SCHEMA), on this machine: the
    whole collection as one shard."""
    scorer = scorer_for_collection(scorer)
    if chunk_size < 1 or top_k < 1:
        raise UsageError("--chunk-size and --top-k must be at least 1.")
    sentences_lf, query_frame = read_inputs(sentences, queries)
    chunks, chunk_of_row = local_chunks(sentences_lf, chunk_size, [scorer])
    tops = local_tops(sentences_lf, chunks, chunk_of_row, query_frame, top_k, scorer)
    return merge_tops([tops], query_frame["query"], top_k)


def local_chunks(sentences: pl.LazyFrame, chunk_size: int, scorers: list[Any]
                 ) -> tuple[pl.DataFrame, np.ndarray | None]:
    """The chunks for `local_tops` with these scorers, on this machine: `chunk_plan`'s (no
    text, and each input row's chunk) when every scorer can index sentences
    (`collection_index_sentences`) and the input has no `_row` of its own; otherwise
    `chunk_collection`'s, text joined (and None). The sentences are `read_inputs`' (no
    missing value)."""
    if (all(hasattr(s, "collection_index_sentences") for s in scorers)
            and "_row" not in sentences.collect_schema()):
        return chunk_plan(sentences, chunk_size)
    return chunk_collection(sentences, chunk_size), None


def local_tops(sentences: pl.LazyFrame, chunks: pl.DataFrame, chunk_of_row: np.ndarray | None,
               query_frame: pl.DataFrame, top_k: int, scorer: Any) -> pl.DataFrame:
    """`shard_tops` of the whole collection (one shard) from `local_chunks`' chunks: with
    `chunk_of_row`, the scorer indexes the sentences, streamed from the input, and the chunks'
    text is never joined (the same index: `collection_index_sentences`)."""
    if chunk_of_row is None:
        return shard_tops(chunks, query_frame, top_k, scorer)
    index = scorer.collection_index_sentences(_text_batches(sentences, len(chunk_of_row)),
                                              chunk_of_row, chunks["lang"])
    return _tops_with(index, chunks, query_frame, top_k, scorer, 0)
