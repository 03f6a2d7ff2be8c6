"""What `fragbench run` holds while it collects: each planned call's request, not the corpus
or the retrieval table it recorded before the first call (at 100,000 calls they were
gigabytes held for the whole collection, benchmarks/RESULTS.md); and while it derives the
tables, a plan without its corpus block (a third of the plan)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fragbench import run as run_module
from fragbench.corpus.cases import Case


def test_the_corpus_and_the_retrieval_table_are_let_go_before_the_first_call(
        experiment: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted in the collector's first step (every object the garbage collector tracks): no
    case of the corpus, no frame of the retrieval table, yet the series records both."""
    seen: dict[str, int] = {}
    collect = run_module.collect

    def observed(*args: Any, **kwargs: Any) -> Any:
        gc.collect()
        alive = gc.get_objects()
        seen["cases"] = sum(isinstance(o, Case) for o in alive)
        seen["retrieval"] = sum(isinstance(o, pl.DataFrame) and "matched_terms" in o.columns
                                for o in alive)
        return collect(*args, **kwargs)

    derive = run_module.derive_tables

    def deriving(*args: Any, **kwargs: Any) -> Any:
        seen["plan blocks"] = len(kwargs["plan"])
        seen["corpus"] = "corpus" in kwargs["plan"]
        return derive(*args, **kwargs)

    monkeypatch.setattr(run_module, "collect", observed)
    monkeypatch.setattr(run_module, "derive_tables", deriving)
    result = run_module.run(experiment, series="extractive", out=workspace / "outputs")
    assert result.sent == 72 and result.tables_error is None
    assert seen.pop("plan blocks") > 5
    assert seen == {"cases": 0, "retrieval": 0, "corpus": False}
    series_dir = result.series_dir
    assert pl.read_parquet(series_dir / "retrieval.parquet").height > 72
    assert pl.read_parquet(series_dir / "facts.parquet").height > 0
    assert pl.read_parquet(series_dir / "questions.parquet").height == 6
