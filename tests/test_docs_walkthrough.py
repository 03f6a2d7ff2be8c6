"""The two worked examples, followed from an empty folder as a reader would (see walkthrough):
a chunker and a backend written from the docs install, register, pass the test kit's contract
checks and run a series.

Real subprocesses: what is under test is the install into an environment and plugin discovery
from it, which an in-process run (whose plugins are already loaded) cannot show.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from walkthrough import ROOT, follow


def test_writing_a_chunker_from_scratch(tmp_path: Path) -> None:
    ran = follow(ROOT / "docs" / "writing-a-chunker.md", tmp_path)
    assert any("passed" in r.stdout for r in ran)  # the kit's contract checks ran and passed
    series = tmp_path / "fragbench" / "outputs" / "char-window" / "char-window" / "extractive"
    retrieval = pl.read_parquet(series / "retrieval.parquet")
    assert sorted(retrieval["chunk_size"].unique().to_list()) == [120, 240]
    # Windows of characters cut sentences: some chunks hold facts only in part.
    assert retrieval["cut_fact_ids"].list.len().sum() > 0
    availability = pl.read_parquet(series / "availability.parquet")
    assert "conditions_cut" in availability.columns
    assert (series / "report.md").exists()
