"""Collection-scale retrieval: the same rule as the per-passage mode, at any scale.

Two checks of meaning: on the protocol corpus, collection mode restricted to each question's own
passage gives exactly the per-passage mode's selection, scores and tie flags; on a synthetic
bilingual collection with many ties, it gives exactly what a plain-Python reference of the
protocol's rule gives, on a few thousand random queries. The reference is written here from the
rule's words, not from fragbench's code: it decides ties on exact rationals (m^2 / n), not on
rounded floats.
"""

from __future__ import annotations

import math
import random
import unicodedata
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from support.cli import error_lines, run_cli
from support.corpora import synthetic
from support.suite import ROOT

from fragbench.corpus.cases import load_corpus
from fragbench.plugins import registry
from fragbench.retrieval.collection.engine import retrieve_collection
from fragbench.retrieval.passages import retrieve
from fragbench.text import STOPWORDS

# Over 5 s of tests in all (`make check` leaves it to `make test`: pyproject.toml's markers).
pytestmark = pytest.mark.slow


def protocol_collection() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every (case, lang, variant) passage as a passage of one collection, in a shuffled file
    order, and its question as a query restricted to it."""
    rows, queries = [], []
    for case in load_corpus([ROOT / "corpus" / "0.2"]):
        for lang, passage in case.langs.items():
            for variant, order in case.variants.items():
                pid = f"{case.id}/{lang}/{variant}"
                rows += [(pid, pos, lang, passage.facts[fid]) for pos, fid in enumerate(order)]
                queries.append((pid, lang, passage.question, pid))
    random.Random(7).shuffle(rows)  # positions, not file order, set the chunks
    first_seen = list(dict.fromkeys(r[0] for r in rows))
    queries.sort(key=lambda q: first_seen.index(q[0]))
    return (pl.DataFrame(rows, schema=["passage", "position", "lang", "text"], orient="row"),
            pl.DataFrame(queries, schema=["query", "lang", "text", "passage"], orient="row"))


@pytest.mark.parametrize(("size", "k"), [(2, 1), (2, 2), (3, 1), (3, 2)])
def test_collection_mode_equals_the_per_passage_mode(size: int, k: int) -> None:
    sentences, queries = protocol_collection()
    got = retrieve_collection(sentences, queries, size, k).sort("query", "rank")
    reg = registry()
    cases = load_corpus([ROOT / "corpus" / "0.2"])
    table = retrieve(cases, reg.get("chunker", "sentence-groups"),
                     reg.get("scorer", "sqrt-lexical"), [(size, k)])
    want = (table.filter(pl.col("selected"))
            .select(pl.format("{}/{}/{}", "case", "lang", "variant").alias("query"), "rank",
                    pl.col("chunk").cast(pl.Int64), "score", "tied")
            .sort("query", "rank"))
    assert got.height == want.height == 12 * k
    assert got.select("query", "rank", "chunk", "score", "tied").equals(want)
    assert (got["passage"] == got["query"]).all()


# -- the reference -----------------------------------------------------------------------------


def ref_terms(text: str, lang: str) -> list[str]:
    """NFKD, combining marks dropped, lowercase, runs of letters and numbers, stopwords out."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", text)
                     if not unicodedata.category(c).startswith("M")).lower()
    runs, current = [], ""
    for char in folded:
        if unicodedata.category(char)[0] in "LN":
            current += char
        elif current:
            runs.append(current)
            current = ""
    if current:
        runs.append(current)
    return [t for t in runs if t not in STOPWORDS[lang]]


def reference(rows: list[tuple[str, int, str, str]], queries: list[tuple[str, str, str]],
              size: int, k: int) -> list[tuple[str, int, str, int, bool, Fraction]]:
    order: dict[str, list[tuple[int, str, str]]] = {}
    for passage, position, lang, text in rows:
        order.setdefault(passage, []).append((position, lang, text))
    chunks = []  # (passage, chunk, distinct terms by language, term count)
    for passage, sentences in order.items():
        sentences.sort()
        for c in range(0, len(sentences), size):
            group = sentences[c:c + size]
            words = [t for _, lang, text in group for t in ref_terms(text, lang)]
            chunks.append((passage, c // size, set(words), len(words)))
    out = []
    for query, lang, text in queries:
        wanted = set(ref_terms(text, lang))
        scored = []
        for index, (passage, chunk, words, n) in enumerate(chunks):
            m = len(wanted & words)
            exact = Fraction(m * m, n) if n else Fraction(0)  # score^2, exactly
            scored.append((exact, index, passage, chunk))
        ranked = sorted(scored, key=lambda s: (-s[0], s[1]))[:k]
        for rank, (exact, _, passage, chunk) in enumerate(ranked, start=1):
            tied = sum(1 for s in scored if s[0] == exact) > 1
            out.append((query, rank, passage, chunk, tied, exact))
    return out


@pytest.mark.parametrize(("size", "k"), [(2, 3), (3, 10)])
def test_collection_mode_equals_the_reference_ties_included(size: int, k: int) -> None:
    rows, queries = synthetic(20261130 + size, passages=60)
    got = retrieve_collection(
        pl.DataFrame(rows, schema=["passage", "position", "lang", "text"], orient="row"),
        pl.DataFrame(queries, schema=["query", "lang", "text"], orient="row"), size, k)
    want = reference(rows, queries, size, k)
    assert got.height == len(want) == 3000 * k
    ties = 0
    for row, (query, rank, passage, chunk, tied, exact) in zip(got.iter_rows(named=True), want,
                                                               strict=True):
        assert (row["query"], row["rank"], row["passage"], row["chunk"], row["tied"]) == \
            (query, rank, passage, chunk, tied), (row, query, rank, passage, chunk, tied)
        assert math.isclose(row["score"] ** 2, float(exact), rel_tol=1e-12, abs_tol=1e-15)
        ties += tied
    assert ties > 1000  # the collection really exercises the tie rule


def test_the_cli_reads_parquet_or_jsonl_and_writes_every_format(tmp_path: Path) -> None:
    sentences, queries = protocol_collection()
    sentences.write_ndjson(tmp_path / "s.jsonl")
    queries.drop("passage").write_parquet(tmp_path / "q.parquet")
    outputs = []
    for suffix in (".parquet", ".csv", ".jsonl"):
        out = tmp_path / f"r{suffix}"
        result = run_cli("retrieve", "--collection", str(tmp_path / "s.jsonl"), "--queries",
                         str(tmp_path / "q.parquet"), "--chunk-size", "3", "--top-k", "2",
                         "--out", str(out))
        assert result.returncode == 0, result.stderr
        assert f"24 results for 12 queries, written to {out}" in result.stdout + result.stderr
        outputs.append({".parquet": pl.read_parquet, ".csv": pl.read_csv,
                        ".jsonl": pl.read_ndjson}[suffix](out))
    for frame in outputs:
        assert frame.columns == ["query", "rank", "passage", "chunk", "score", "tied"]
        assert frame.height == 24
    # Unrestricted, a question may find another passage's chunk: the whole collection competes.
    assert outputs[0].filter(pl.col("rank") == 1)["passage"].n_unique() <= 12


def test_one_result_for_one_query_is_said_in_the_singular(tmp_path: Path) -> None:
    sentences, queries = protocol_collection()
    sentences.write_parquet(tmp_path / "s.parquet")
    queries.head(1).write_parquet(tmp_path / "q.parquet")
    result = run_cli("retrieve", "--collection", str(tmp_path / "s.parquet"), "--queries",
                     str(tmp_path / "q.parquet"), "--top-k", "1", "--out",
                     str(tmp_path / "r.parquet"))
    assert result.returncode == 0, result.stderr
    assert "1 result for 1 query, written to" in result.stdout + result.stderr


@pytest.mark.parametrize(("change", "words"), [
    (lambda f: f.drop("position"), "lacks the column(s) position"),
    (lambda f: f.with_columns(pl.col("position").cast(pl.String)), "column position is"),
])
def test_bad_collection_input_is_one_line(tmp_path: Path, change, words: str) -> None:  # type: ignore[no-untyped-def]
    sentences, queries = protocol_collection()
    change(sentences).write_parquet(tmp_path / "s.parquet")
    queries.write_parquet(tmp_path / "q.parquet")
    result = run_cli("retrieve", "--collection", str(tmp_path / "s.parquet"), "--queries",
                     str(tmp_path / "q.parquet"), "--out", str(tmp_path / "r.parquet"))
    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert words in line and "s.parquet" in line
    assert not (tmp_path / "r.parquet").exists()


def test_a_row_index_given_with_the_input_sets_the_collection_order() -> None:
    """A frame read back in another order (as Ray's blocks come back) carries the input's row
    index, `_row`: the chunks come out in the order of that index, not of the frame's rows."""
    from fragbench.retrieval.collection.engine import chunk_collection

    rows, _ = synthetic(11, passages=30)
    frame = pl.DataFrame(rows, schema=["passage", "position", "lang", "text"], orient="row")
    want = chunk_collection(frame.lazy(), 2)
    shuffled = frame.with_row_index("_row").sample(fraction=1.0, shuffle=True, seed=3)
    got = chunk_collection(shuffled.lazy(), 2)
    assert not shuffled["_row"].is_sorted()
    assert got.drop("first").equals(want.drop("first"))
    assert got["first"].equals(want["first"])


def test_a_row_index_column_in_the_user_s_file_does_not_reorder_the_collection() -> None:
    """`_row` is the engines' own column (the Ray engine's shards carry the input's row
    numbers in it): one in the user's file, here numbering the rows backwards, is not read, so
    ties still go to the chunk first in the file, as on the Ray engine."""
    from fragbench.retrieval.collection.engine import retrieve_collection

    rows, queries = synthetic(11, passages=30)
    frame = pl.DataFrame(rows, schema=["passage", "position", "lang", "text"], orient="row")
    asked = pl.DataFrame(queries[:200], schema=["query", "lang", "text"], orient="row")
    want = retrieve_collection(frame, asked, 2, 3)
    backwards = frame.with_columns(pl.int_range(pl.len(), 0, -1).alias("_row"))
    assert retrieve_collection(backwards, asked, 2, 3).equals(want)
    assert want["tied"].sum() > 10  # the order decides many rows
