"""docs/tables.md against the files: every table a series writes has exactly the documented
columns, in the documented order, each of the documented Polars type, and every documented
table is written, for the offline baseline, a model series (the real openai SDK against the
loopback server) and a series whose first call failed (empty measures: the types must hold
with no row to infer them from).

The page is read as a reader reads it (its Markdown tables), not through the dicts that render
it, so a hand edit that drifts from the files fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from support.series import loopback_series
from support.suite import ROOT

from fragbench.schemas import type_name
from fragbench.testing.loopback import Server, http_error

PAGE = ROOT / "docs" / "tables.md"
ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \| .+ \|$")


def documented() -> dict[str, list[tuple[str, str]]]:
    """Table -> [(column, type)] in the page's order, from each `## NAME.parquet` section."""
    tables: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            current = heading.removesuffix(".parquet") if heading.endswith(".parquet") else None
            if current is not None:
                tables[current] = []
        elif current is not None and line.startswith("| `"):
            match = ROW.match(line)
            assert match, f"a column row without its type: {line}"
            tables[current].append((match[1], match[2]))
    return tables


def written(series_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """Table -> [(column, type)] of every primary or recorded table the series wrote."""
    entries = json.loads((series_dir / "measures.json").read_text(encoding="utf-8"))
    paths = {e["table"]: e["path"] for e in entries if e["kind"] != "diagnostic"}
    paths |= {"retrieval": "retrieval.parquet", "facts": "facts.parquet",
              "questions": "questions.parquet"}
    return {name: [(column, type_name(dtype)) for column, dtype in
                   pl.read_parquet_schema(series_dir / rel).items()]
            for name, rel in paths.items()}


def check(series_dir: Path) -> None:
    docs, files = documented(), written(series_dir)
    assert sorted(files) == sorted(docs)  # no table undocumented, none documented but absent
    for name, columns in files.items():
        assert columns == docs[name], name  # names, order and types, both ways


def test_the_page_lists_every_table_with_typed_columns() -> None:
    docs = documented()
    assert {"calls", "citations", "citations_per_call", "availability", "retrieval",
            "facts"} <= set(docs)
    assert all(docs.values())
    types = dict(docs["calls"])
    assert types["counted_usd"] == "Decimal(38, 18)"
    assert types["citations"] == "List(Struct(id: String, extract: String))"
    assert [c for c, _ in docs["citations"][:6]] == ["call_id", "case", "lang", "variant",
                                                      "mode", "rep"]


def test_the_baseline_series_matches_the_page(extractive: Path) -> None:
    check(extractive)


@pytest.mark.parametrize("first_call_fails", [False, True], ids=["complete", "empty"])
def test_a_model_series_matches_the_page(experiment: Path, server: Server,
                                         first_call_fails: bool) -> None:
    if first_call_fails:
        server.script[0] = http_error(500)  # nothing answered: empty citation tables
    series_dir = loopback_series(experiment, server, "openai")
    calls = pl.read_parquet(series_dir / "calls.parquet")
    assert (calls["status"] == "completed").sum() == (0 if first_call_fails else 72)
    check(series_dir)
