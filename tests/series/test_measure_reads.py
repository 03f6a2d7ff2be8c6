"""A measure's optional `reads`: it is given the columns it names and no other, the core holds
no body no measure reads (calls.parquet keeps them, and report.html's cards read them from
there a block at a time), a column read but not named fails in one line, in the core and in
the kit alike, and a declaration that is not one is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from support.measure_plugin import Install, installer

from fragbench.report import html, pagedata
from fragbench.report.data import load_tables
from fragbench.series import folder
from fragbench.series.folder import BODY_COLUMNS, STAGED_CALLS, MeasureFailed, derive_tables
from fragbench.testing import check_measure

SEEN = '''
import polars as pl
from fragbench.hookspecs import hookimpl


class Seen:
    name = "seen-columns"
    api_version = "1.0"
    kind = "diagnostic"
    tables = {"seen": {"case": "String", "lang": "String", "table": "String",
                       "columns": "String"}}
    READS_LINE

    def compute(self, data):
        given = [(name, ",".join(getattr(data, name).columns))
                 for name in ("calls", "retrieval", "facts") if getattr(data, name) is not None]
        COMPUTE_LINE
        return {"seen": pl.DataFrame({"case": ["*"] * len(given), "lang": ["*"] * len(given),
                                      "table": [t for t, _ in given],
                                      "columns": [c for _, c in given]})}


@hookimpl
def register_measures(register):
    register(Seen())
'''


def seen(reads: str = "", compute: str = "pass") -> str:
    return SEEN.replace("READS_LINE", reads or "pass").replace("COMPUTE_LINE", compute)


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    yield from installer(tmp_path, monkeypatch)


def given(series_dir: Path) -> dict[str, list[str]]:
    table = pl.read_parquet(series_dir / "diagnostics" / "seen.parquet")
    return {r["table"]: r["columns"].split(",") if r["columns"] else []
            for r in table.to_dicts()}


def test_a_measure_is_given_the_columns_it_reads_and_the_core_holds_no_body(
        extractive: Path, install: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    install("fragbench-seen", seen(
        'reads = {"calls": ("status", "lang", "case", "no_such_column"), '
        '"retrieval": ("selected",)}'))
    read: dict[str, list[str] | None] = {}
    read_table = folder.read_table

    def reading(series_dir: Path, name: str, rel: str, columns: list[str] | None = None
                ) -> pl.DataFrame:
        read[name] = columns
        return read_table(series_dir, name, rel, columns)

    monkeypatch.setattr(folder, "read_table", reading)
    tables = derive_tables(extractive, extra_diagnostics=("seen-columns",))
    # The retrieval table's columns some measure reads (availability's, and this one's
    # `selected`), in the file's order: not the chunks' text or terms.
    assert read["retrieval"] == ["case", "lang", "variant", "chunk_size", "top_k", "chunk",
                                 "fact_ids", "whole_fact_ids", "selected"]
    # Those named that the table has, in the table's order; the facts (not named) none.
    assert given(extractive) == {"calls": ["case", "lang", "status"],
                                 "retrieval": ["selected"], "facts": []}
    # Every measure declares its reads, none a body: the table handed on has none...
    assert not set(BODY_COLUMNS) & set(tables["calls"].columns)
    # ...and calls.parquet has them all, the rest as handed on; nothing left staged.
    written = pl.read_parquet(extractive / "calls.parquet")
    assert written.drop(BODY_COLUMNS).equals(tables["calls"], null_equal=True)
    assert written["raw_response"].drop_nulls().len() == 72
    assert not (extractive / STAGED_CALLS).exists()


@pytest.mark.parametrize(("reads", "kept"), [
    ('reads = {"calls": ("case", "lang", "raw_response")}', ["raw_response"]),
    ("", list(BODY_COLUMNS)),  # no `reads`: the measure is given (and the core holds) all
])
def test_a_body_a_measure_reads_is_held_for_it(extractive: Path, install: Install,
                                               reads: str, kept: list[str]) -> None:
    install("fragbench-seen", seen(reads))
    tables = derive_tables(extractive, extra_diagnostics=("seen-columns",))
    assert [c for c in BODY_COLUMNS if c in tables["calls"].columns] == kept
    assert set(kept) <= set(given(extractive)["calls"])


def test_a_column_read_but_not_named_fails_in_one_line_and_writes_nothing(
        extractive: Path, install: Install) -> None:
    install("fragbench-seen", seen('reads = {"calls": ("case", "lang")}',
                                   'data.calls.select("status")'))
    before = {p.name: p.read_bytes() for p in extractive.iterdir() if p.is_file()}
    with pytest.raises(MeasureFailed) as caught:
        derive_tables(extractive, extra_diagnostics=("seen-columns",))
    said = str(caught.value)
    assert "measure 'seen-columns'" in said and "ColumnNotFoundError" in said, said
    assert "`reads`" in said and "\n" not in said, said
    assert {p.name: p.read_bytes() for p in extractive.iterdir() if p.is_file()} == before


COUNTED = {"counted": {"case": "String", "lang": "String", "calls": "UInt32"}}


class Counted:
    """A measure for the kit: counts the calls per case and language."""
    name = "counted"
    api_version = "1.0"
    kind = "diagnostic"
    tables = COUNTED

    def __init__(self, reads: object, column: str = "status") -> None:
        self.reads = reads
        self.column = column

    def compute(self, data: object) -> dict[str, pl.DataFrame]:
        calls = data.calls  # type: ignore[attr-defined]
        if calls is None:
            return {}
        table = (calls.select("case", "lang", self.column).group_by("case", "lang")
                 .agg(pl.len().alias("calls")).sort("case", "lang"))
        return {"counted": table}


def test_the_kit_gives_a_measure_the_columns_it_reads_as_the_core_does() -> None:
    check_measure(Counted({"calls": ("case", "lang", "status")}))
    check_measure(Counted(None))  # no `reads`: given everything
    with pytest.raises(AssertionError) as caught:
        check_measure(Counted({"calls": ("case", "lang")}))
    assert "ColumnNotFoundError" in str(caught.value) and "`reads`" in str(caught.value)


@pytest.mark.parametrize(("reads", "says"), [
    (["calls"], "declares reads list, not a dict"),
    ({"answers": ("case",)}, "declares reads of a table 'answers'"),
    ({"calls": "case"}, "declares reads of calls that are not a list of column names"),
    ({"calls": ("case", "a|b")}, "declares reads of calls that are not a list of column names"),
    ({"calls": ("case", 3)}, "declares reads of calls that are not a list of column names"),
])
def test_a_reads_that_is_no_declaration_is_refused(reads: object, says: str) -> None:
    with pytest.raises(AssertionError) as caught:
        check_measure(Counted(reads))
    assert says in str(caught.value), caught.value


def test_the_cards_read_the_bodies_from_calls_parquet_a_block_at_a_time(
        extractive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 8 calls, files of 4 (the 72 calls in 9 blocks): the page made from the
    table without its bodies is the page made from the whole table, data files included
    (render's text names the data folder by their hash)."""
    monkeypatch.setattr(pagedata, "SHARD_CALLS", 4)
    monkeypatch.setattr(html, "BODY_BLOCK", 8)
    bodiless = load_tables(extractive)
    assert not set(BODY_COLUMNS) & set(bodiless["calls"].columns)
    whole = {**bodiless, "calls": pl.read_parquet(extractive / "calls.parquet")}
    page = html.render(extractive, bodiless)
    assert page == html.render(extractive, whole)
    # The bodies are in it: the page without them would differ.
    blank = {**bodiless, "calls": whole["calls"].with_columns(
        pl.lit(None, pl.String).alias(c) for c in BODY_COLUMNS)}
    assert page != html.render(extractive, blank)


def test_a_calls_parquet_changed_under_the_report_is_refused(extractive: Path) -> None:
    from fragbench.errors import SeriesError

    bodiless = load_tables(extractive)
    path = extractive / "calls.parquet"
    pl.read_parquet(path).reverse().write_parquet(path)
    with pytest.raises(SeriesError) as caught:
        html.render(extractive, bodiless)
    assert f"{path}: its calls are not those of the calls table" in str(caught.value)


def test_a_reads_that_is_no_declaration_is_refused_before_the_core_reads_it(
        extractive: Path, install: Install) -> None:
    """The core reads every measure's `reads` to choose what it holds: a malformed one is the
    declaration's one-line refusal, never a traceback, and no table is written."""
    install("fragbench-seen", seen('reads = {"calls": None}'))
    before = (extractive / "calls.parquet").read_bytes()
    with pytest.raises(MeasureFailed) as caught:
        derive_tables(extractive, extra_diagnostics=("seen-columns",))
    assert "declares reads of calls that are not a list of column names" in str(caught.value)
    assert (extractive / "calls.parquet").read_bytes() == before
    assert not (extractive / STAGED_CALLS).exists()
