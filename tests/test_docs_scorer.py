"""docs/writing-a-scorer.md, followed word for word from an empty folder (see walkthrough): a
BM25 scorer written from the page installs, registers, passes the test kit, and is frozen and
run in an experiment; its scores in the series' retrieval table are BM25's, by a plain-Python
reading of the formula. And the float bugs the page warns of, planted in its own code, are
caught by the kit.

Real subprocesses: what is under test is the install into an environment and plugin discovery
from it, which an in-process run (whose plugins are already loaded) cannot show.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import polars as pl
import pytest
from support.suite import ROOT
from support.walkthrough import blocks, follow

from fragbench.testing import check_scorer

pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "writing-a-scorer.md"
CODE = "../fragbench-bm25/src/fragbench_bm25/__init__.py"


def reference_bm25(table: pl.DataFrame, questions: dict[tuple[str, str], str]
                   ) -> dict[tuple[str, str, str, int, int], float]:
    """BM25 as the page states it, read row by row: per passage and chunk size, n chunks,
    avgdl their mean word count, df the chunks holding a term; terms are lowercased runs of
    letters and digits; a chunk's score sums its question's distinct terms' weights."""
    k1, b = 1.2, 0.75
    chunks = table.filter(pl.col("top_k") == pl.col("top_k").min()).select(
        "case", "lang", "variant", "chunk_size", "chunk", "text").rows()
    passages: dict[tuple[str, str, str, int], list[tuple[int, list[str]]]] = {}
    for case, lang, variant, size, chunk, text in chunks:
        passages.setdefault((case, lang, variant, size), []).append(
            (chunk, re.findall(r"\w+", text.lower())))
    scores = {}
    for (case, lang, variant, size), rows in passages.items():
        n = len(rows)
        avgdl = sum(len(words) for _, words in rows) / n
        df = Counter(term for _, words in rows for term in set(words))
        asked = set(re.findall(r"\w+", questions[(case, lang)].lower()))
        for chunk, words in rows:
            tf = Counter(words)
            total = 0.0
            for term in sorted(asked & set(tf)):
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                total += idf * tf[term] * (k1 + 1) / (
                    tf[term] + k1 * (1 - b + b * len(words) / avgdl))
            scores[(case, lang, variant, size, chunk)] = total
    return scores


def test_writing_a_scorer_from_scratch(tmp_path: Path) -> None:
    ran = follow(DOC, tmp_path)
    assert any("2 passed" in r.stdout for r in ran)  # the kit's check and the hand-worked score
    series = tmp_path / "fragbench" / "outputs" / "bm25" / "bm25" / "extractive"
    table = pl.read_parquet(series / "retrieval.parquet")
    plan = (tmp_path / "fragbench" / "experiments" / "bm25" / "experiment.json").read_text(
        encoding="utf-8")
    assert '"scorer": "bm25"' in plan and '"origin": "fragbench-bm25"' in plan
    assert table["score"].is_finite().all() and (table["score"] > 0).any()
    from fragbench.corpus.cases import load_corpus

    cases = load_corpus([tmp_path / "fragbench" / "corpus" / "0.2"])
    questions = {(c.id, lang): p.question for c in cases for lang, p in c.langs.items()}
    expected = reference_bm25(table, questions)
    got = {(r["case"], r["lang"], r["variant"], r["chunk_size"], r["chunk"]): r["score"]
           for r in table.iter_rows(named=True)}
    assert set(got) == set(expected) and len(expected) == 60
    for key, score in expected.items():
        assert math.isclose(got[key], score, rel_tol=1e-12, abs_tol=1e-15), key
    # The selection is the core's, on these scores: the best chunk of each passage is rank 1.
    best = (table.filter(pl.col("top_k") == 1)
            .sort("score", descending=True).group_by("case", "lang", "variant", "chunk_size")
            .agg(pl.col("rank").first()))
    assert best["rank"].to_list() == [1] * best.height


def module_from_doc(tmp_path: Path, name: str, replace: tuple[str, str] | None) -> ModuleType:
    """The page's scorer module, with one line changed (a planted bug), imported under `name`."""
    [code] = [b.text for b in blocks(DOC) if b.file == CODE]
    if replace is not None:
        assert code.count(replace[0]) == 1, replace[0]
        code = code.replace(*replace)
    path = tmp_path / f"{name}.py"
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


@pytest.mark.parametrize(("old", "new", "promise"), [
    # The weights of a chunk's terms summed in whatever order the join returned them.
    ('pl.col("part").sort_by("term").sum()', 'pl.col("part").sum()',
     "(batch-consistent|deterministic)"),
    # The passage's mean length taken as a sum of fractions: floats, added in row order.
    ('pl.col("dl").mean().over(PASSAGE).alias("avgdl")',
     '(pl.col("dl") / pl.len().over(PASSAGE)).sum().over(PASSAGE).alias("avgdl")',
     "batch-consistent"),
    # Normalised by the best score of the whole batch (another passage's).
    (".with_columns(pl.col(\"score\").fill_null(0.0))",
     ".with_columns(pl.col(\"score\").fill_null(0.0))"
     ".with_columns(pl.col(\"score\") / (1.0 + pl.col(\"score\").max()))",
     "batch-consistent"),
    # Normalised by the passage's best: 0/0 where no chunk holds a term of the question.
    (".with_columns(pl.col(\"score\").fill_null(0.0))",
     ".with_columns(pl.col(\"score\").fill_null(0.0))"
     ".with_columns(pl.col(\"score\") / pl.col(\"score\").max().over(PASSAGE))",
     "a finite score for every chunk"),
], ids=["terms-in-row-order", "mean-as-float-sum", "batch-max", "passage-max"])
def test_the_kit_catches_a_float_bug_planted_in_the_pages_scorer(tmp_path: Path,
                                                                   old: str, new: str,
                                                                   promise: str) -> None:
    """The terms summed in row order is even nondeterministic (a hash join's order varies
    from call to call); the mean as a float sum differs only when the rows come reversed."""
    check_scorer(module_from_doc(tmp_path, "bm25_as_written", None).BM25())
    planted = module_from_doc(tmp_path, "bm25_planted", (old, new)).BM25()
    with pytest.raises(AssertionError, match=rf"scorer 'bm25' breaks its contract \({promise}\)"):
        check_scorer(planted)
