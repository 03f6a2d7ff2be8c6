"""Collection mode's inputs through the real CLI: every bad input is one line naming the file,
exit 2, nothing written (review of issue 17, items 1-4).

- UInt64 positions of 2**63 and more, and negative positions, only order sentences;
- a value of another type late in a JSON lines file (after the rows Polars would infer a
  schema from), in the collection or the queries;
- a row without passage, position, lang or text (or a query without query, lang or text);
- the int32 bound on row and chunk counts, on every path (checked by calling the check).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli

from fragbench.errors import UsageError
from fragbench.retrieval.collection import engine as coll

SENTENCES = {"passage": ["a", "a", "b", "a"], "lang": ["en"] * 4,
             "text": ["delivery takes days", "returns take weeks", "delivery is free",
                      "days of delivery"]}
QUERIES = [{"query": "q1", "lang": "en", "text": "delivery days"}]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _retrieve(tmp_path: Path, collection: Path, queries: Path, out: Path, *extra: str):
    return run_cli("retrieve", "--collection", str(collection), "--queries", str(queries),
                   "--chunk-size", "1", "--top-k", "4", "--out", str(out), *extra)


@pytest.mark.parametrize("positions", [
    pl.Series([2**63 + 5, 1, 0, 2**64 - 1], dtype=pl.UInt64),
    pl.Series([3, 1, 0, 2], dtype=pl.UInt64),
    pl.Series([-(2**63), -1, 0, 5], dtype=pl.Int64),
])
def test_positions_of_any_integer_type_only_order_sentences(tmp_path: Path,
                                                           positions: pl.Series) -> None:
    """The table is the one of small Int64 positions in the same order."""
    ranks = positions.rank("ordinal").cast(pl.Int64) - 1
    got = {}
    for name, pos in (("given", positions), ("small", ranks)):
        path = tmp_path / f"{name}.parquet"
        pl.DataFrame({**SENTENCES, "position": pos}).write_parquet(path)
        out = tmp_path / f"{name}.csv"
        ran = _retrieve(tmp_path, path, _jsonl(tmp_path / "q.jsonl", QUERIES), out)
        assert ran.returncode == 0, ran.stderr
        got[name] = pl.read_csv(out)
    assert got["given"].equals(got["small"])
    assert got["given"].height == 4


def _rows(n: int = 300) -> list[dict]:
    return [{"passage": f"p{i // 3}", "position": i % 3, "lang": "en",
             "text": f"delivery word{i}"} for i in range(n)]


@pytest.mark.parametrize(("which", "column", "value"), [
    ("collection", "position", "x"), ("collection", "text", 5),
    ("queries", "text", 5), ("queries", "query", {"a": 1}), ("queries", "lang", 7)])
def test_a_bad_value_late_in_a_jsonl_file_is_one_line(tmp_path: Path, which: str,
                                                      column: str, value: object) -> None:
    sentences, queries = _rows(), [dict(QUERIES[0], query=f"q{i}") for i in range(300)]
    bad = sentences if which == "collection" else queries
    bad[250][column] = value
    collection = _jsonl(tmp_path / "s.jsonl", sentences)
    query_file = _jsonl(tmp_path / "q.jsonl", queries)
    out = tmp_path / "out.csv"
    ran = _retrieve(tmp_path, collection, query_file, out)
    assert ran.returncode == 2, ran.stderr
    [line] = error_lines(ran.stderr)
    named = collection if which == "collection" else query_file
    assert line.startswith(f"fragbench: --{which} {named}: "), line
    assert not out.exists()
    # A sweep's folder is left as it was.
    folder = tmp_path / "sweep"
    folder.mkdir()
    ran = run_cli("retrieve", "--collection", str(collection), "--queries", str(query_file),
                  "--chunk-size", "1,2", "--top-k", "1", "--out", str(folder))
    assert ran.returncode == 2 and len(error_lines(ran.stderr)) == 1, ran.stderr
    assert list(folder.iterdir()) == []


def test_a_compute_error_of_polars_is_one_line(tmp_path: Path) -> None:
    """A Polars error while computing (here: the file changes after it was checked) is one
    line naming --collection, exit 2, nothing written."""
    path = tmp_path / "s.jsonl"
    _jsonl(path, _rows())
    real = coll.read_inputs

    def then_broken(sentences, queries):
        found = real(sentences, queries)
        rows = _rows()
        rows[200]["position"] = "x"
        _jsonl(path, rows)
        return found

    coll.read_inputs, saved = then_broken, coll.read_inputs
    try:
        out = tmp_path / "o.csv"
        ran = _retrieve(tmp_path, path, _jsonl(tmp_path / "q.jsonl", QUERIES), out)
    finally:
        coll.read_inputs = saved
    assert ran.returncode == 2, ran.stderr
    [line] = error_lines(ran.stderr)
    assert line.startswith(f"fragbench: --collection {path}: cannot be read"), line
    assert not out.exists()


@pytest.mark.parametrize("column", ["passage", "position"])
@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_a_sentence_without_passage_or_position_is_refused(tmp_path: Path, column: str,
                                                           suffix: str) -> None:
    """Rows without passage would be dropped, without position put first: refused, with the
    count and the first row (counting from 1), on both engines (`read_inputs`)."""
    rows = _rows(40)
    for at in (7, 30):
        rows[at][column] = None
    path = tmp_path / f"s{suffix}"
    if suffix == ".parquet":
        pl.DataFrame(rows).write_parquet(path)
    else:
        _jsonl(path, rows)
    out = tmp_path / "o.csv"
    ran = _retrieve(tmp_path, path, _jsonl(tmp_path / "q.jsonl", QUERIES), out)
    assert ran.returncode == 2, ran.stderr
    [line] = error_lines(ran.stderr)
    assert line == (f"fragbench: --collection {path}: 2 row(s) lack a value in passage or "
                    "position; the first is row 8 (counting from 1), which lacks "
                    f"{column}. Give every row a value in each of these columns.")
    assert not out.exists()
    with pytest.raises(UsageError, match="row 8 "):
        coll.retrieve_collection(pl.DataFrame(rows), pl.DataFrame(QUERIES), 2, 1)


def test_a_query_without_id_is_refused(tmp_path: Path) -> None:
    queries = [dict(QUERIES[0], query=f"q{i}") for i in range(5)]
    queries[3]["query"] = None
    query_file = _jsonl(tmp_path / "q.jsonl", queries)
    ran = _retrieve(tmp_path, _jsonl(tmp_path / "s.jsonl", _rows(9)), query_file,
                    tmp_path / "o.csv")
    assert ran.returncode == 2
    [line] = error_lines(ran.stderr)
    assert line.startswith(f"fragbench: --queries {query_file}: 1 row(s) lack a value in "
                           "query; the first is row 4 (counting from 1)"), line


def test_missing_text_is_empty_and_missing_lang_has_no_stopwords() -> None:
    """A missing text is an empty sentence (or query) that keeps its place; a missing lang is
    a language without a stopword list: the same table as "" and "xx"."""
    sentences = pl.DataFrame({"passage": ["a", "a", "a", "b", "b"], "position": [0, 1, 2, 0, 1],
                              "lang": [None, "en", "en", "en", None],
                              "text": ["the delivery", None, "days", "the days", "of"]})
    queries = pl.DataFrame({"query": ["q1", "q2", "q3"], "lang": [None, "en", "en"],
                            "text": ["the days", None, "delivery of"]})
    filled_s = sentences.with_columns(pl.col("lang").fill_null("xx"), pl.col("text").fill_null(""))
    filled_q = queries.with_columns(pl.col("lang").fill_null("xx"), pl.col("text").fill_null(""))
    for size in (1, 2):
        got = coll.retrieve_collection(sentences, queries, size, 3)
        assert got.equals(coll.retrieve_collection(filled_s, filled_q, size, 3))
        assert got.height == 9
    # passage a (lang missing: "the" is a term there) scores for q1's "the"; b drops it.
    one = coll.retrieve_collection(sentences, queries, 3, 1)
    assert one.row(0)[:4] == ("q1", 1, "a", 0)


def test_counts_past_int32_are_refused_on_every_path(monkeypatch: pytest.MonkeyPatch) -> None:
    coll.check_count(coll.MAX_ROWS, "x")
    with pytest.raises(UsageError, match=r"^--collection f: 2147483648 rows; at most "):
        coll.check_count(2**31, "--collection f")
    # Every path reaches the check: read_inputs (sentences, queries), shard_tops (any
    # scorer's index: the fallback path, plugins, Ray shards), chunk_plan.
    seen = []

    def counting(count: int, what: str) -> None:
        seen.append(what.split(" ")[0])

    monkeypatch.setattr(coll, "check_count", counting)
    sentences = pl.DataFrame({**SENTENCES, "position": [0, 1, 0, 2]})
    lf, queries = coll.read_inputs(sentences, pl.DataFrame(QUERIES))
    chunks, rows = coll.local_chunks(lf, 2, [coll.scorer_for_collection()])
    coll.local_tops(lf, chunks, rows, queries, 1, coll.scorer_for_collection())
    coll.shard_tops(coll.chunk_collection(lf, 2), queries, 1, coll.scorer_for_collection())
    # read_inputs twice; chunk_plan; the built-in's collection_index_sentences (local path);
    # shard_tops, then the built-in's collection_index (any other path).
    assert seen == ["--collection", "--queries", "--collection", "sentences", "chunks",
                    "chunks"]


@pytest.mark.parametrize("missing", ["numba", "scipy"])
def test_collection_mode_without_its_extra_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """numba and scipy are `fragbench[collection]`'s (a first install has neither): without
    one, `retrieve --collection` is one line naming the extra, exit 2, before anything is read
    or written."""
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    if missing == "scipy":
        monkeypatch.setitem(sys.modules, "scipy.sparse", None)
    collection = tmp_path / "sentences.parquet"
    pl.DataFrame(SENTENCES).with_columns(pl.int_range(4).alias("position")).write_parquet(
        collection)
    out = tmp_path / "out.parquet"
    ran = _retrieve(tmp_path, collection, _jsonl(tmp_path / "q.jsonl", QUERIES), out)
    assert ran.returncode == 2
    assert error_lines(ran.stderr) == [f"fragbench: {coll.COLLECTION_MISSING}"]
    assert not out.exists()
