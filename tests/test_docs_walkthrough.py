"""The two worked examples, followed from an empty folder as a reader would (see walkthrough):
a chunker and a backend written from the docs install, register, pass the test kit's contract
checks and run a series.

Real subprocesses: what is under test is the install into an environment and plugin discovery
from it, which an in-process run (whose plugins are already loaded) cannot show.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from support.suite import ROOT
from support.walkthrough import follow

from fragbench.testing.loopback import Server, ok

pytestmark = pytest.mark.slow


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
    # The chunker returns Int64 (int_ranges); the table is written as docs/tables.md says.
    assert {c: str(retrieval.schema[c]) for c in ("chunk", "start", "end")} == {
        "chunk": "Int32", "start": "Int32", "end": "Int32"}
    # Section 4: stride windows overlap (each starts before the previous one ends), declared.
    stride = pl.read_parquet(tmp_path / "fragbench" / "stride.parquet").filter(
        pl.col("top_k") == 2).sort("case", "lang", "variant", "chunk")
    follows = stride.with_columns(pl.col("end").shift(1).over("case", "lang", "variant")
                                  .alias("previous_end")).drop_nulls("previous_end")
    assert (follows["start"] < follows["previous_end"]).all() and follows.height > 0
    assert (stride["start"] == stride["chunk"] * 60).all()  # every size // 2 characters


def test_adding_a_backend_from_scratch(tmp_path: Path) -> None:
    with Server("chat") as provider:
        provider.default = ok(model="mini-1")
        ran = follow(ROOT / "docs" / "adding-a-backend.md", tmp_path,
                     replace={"http://127.0.0.1:8000/v1": provider.base_url},
                     stop="## A second example")  # the second: tests/test_docs_gemini.py
        assert len(provider.requests) == 72  # one request per planned call, no more
    assert any("passed" in r.stdout for r in ran)  # the kit's fault suite ran and passed
    assert "72 of 72 calls sent" in ran[-1].stdout
    series = tmp_path / "fragbench" / "outputs" / "mini-chat" / "mini-chat" / "mini-chat"
    calls = pl.read_parquet(series / "calls.parquet")
    assert calls["status"].unique().to_list() == ["completed"]
    assert calls["cost_usd"].is_not_null().all()
    # The fake key the doc exports is redacted from everything written.
    for path in series.rglob("*"):
        if path.is_file():
            assert b"mc-your-key" not in path.read_bytes(), path
