"""report.html's data files (fragbench.report.pagedata): the page holds an index of the calls,
their detail is in a folder beside it, and the two are written all or nothing.

- the page's own size follows the number of calls listed (a few bytes each, the index), never
  what a call holds: answers a hundred times longer leave it the same length, and ten times
  the calls add only the index's bytes, while the data files grow with both;
- the folder is named for the digest of what it holds: the same tables give the same page and
  the same folder, byte for byte; other tables a new folder, the old one removed once the page
  names the new one, and nothing else left beside them;
- a write that fails (a data file, or the page itself) leaves the old page and its folder as
  they were, and no temporary folder.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from support.reports import island, page_data
from support.scaled_pages import scale_series

from fragbench.report import pagedata
from fragbench.report.html import REPORT_DATA, REPORT_HTML, write_html_report

pytestmark = pytest.mark.slow


def folders(series: Path) -> list[str]:
    """What the page's writes leave beside it: everything in report-data/ but its lock, and
    any temporary folder."""
    root = series / REPORT_DATA
    return sorted([*(f"{REPORT_DATA}/{p.name}" for p in root.iterdir() if p.name != ".lock"),
                   *(p.name for p in series.iterdir() if p.name.endswith(".tmp"))])


def snapshot(series: Path) -> dict[str, bytes]:
    """The page and every file of its data folders, by path."""
    files = [series / REPORT_HTML, *(p for name in folders(series)
                                     for p in sorted((series / name).iterdir()))]
    return {str(p.relative_to(series)): p.read_bytes() for p in files}


def test_the_page_holds_an_index_its_size_never_what_a_call_holds(
        extractive_once: Path, tmp_path: Path) -> None:
    few, many = (scale_series(extractive_once, tmp_path / f"x{n}", n) for n in (1, 10))
    longer = scale_series(extractive_once, tmp_path / "longer", 10)
    calls = pl.read_parquet(longer / "calls.parquet")
    padding = " and so on" * 100  # every answer and raw response 1,000 characters longer
    calls.with_columns(pl.col("answer") + padding, pl.col("raw_response") + padding
                       ).write_parquet(longer / "calls.parquet")
    sizes = {}
    for series in (few, many, longer):
        page = write_html_report(series, redact=lambda text: text)
        data = sum(len(b) for name, b in snapshot(series).items() if name != REPORT_HTML)
        sizes[series.name] = (page.stat().st_size, data)
    # What a call holds: the same page, but for its data folder's name; the data grew.
    name = re.compile(r"report-data/[0-9a-f]{16}")
    assert name.sub("", (many / REPORT_HTML).read_text(encoding="utf-8")) == \
        name.sub("", (longer / REPORT_HTML).read_text(encoding="utf-8"))
    assert sizes["longer"][1] > sizes["x10"][1] + 720 * 2_000
    # Ten times the calls (72 -> 720): the page grows by its index alone, under 60 bytes a
    # call, while the data files grow ten times.
    page_growth = sizes["x10"][0] - sizes["x1"][0]
    assert 0 < page_growth < 648 * 60, page_growth
    assert sizes["x10"][1] > 9 * sizes["x1"][1]
    index = island((many / REPORT_HTML).read_text(encoding="utf-8"))
    assert index["count"] == 720 and index["ids"] == {}  # every ID as the plan names it
    assert len(page_data(many / REPORT_HTML)["calls"]) == 720


def test_the_same_tables_give_the_same_page_and_folder(extractive: Path) -> None:
    first = snapshot(extractive)
    assert len(folders(extractive)) == 1
    write_html_report(extractive)
    assert snapshot(extractive) == first
    assert folders(extractive) == sorted({n.rsplit("/", 1)[0] for n in first if "/" in n})


def test_other_tables_give_a_new_folder_and_the_old_one_goes(extractive: Path) -> None:
    [old] = folders(extractive)
    calls = pl.read_parquet(extractive / "calls.parquet")
    calls.with_columns(pl.col("answer") + " (edited)").write_parquet(
        extractive / "calls.parquet")
    write_html_report(extractive)
    [new] = folders(extractive)
    assert new != old and island((extractive / REPORT_HTML).read_text(
        encoding="utf-8"))["files"]["dir"] == new
    assert all(c["answer"].endswith(" (edited)") for c in
               page_data(extractive / REPORT_HTML)["calls"] if c.get("answer"))
    # What a reader put in the folder, not named as a data folder is, is left alone.
    mine = extractive / REPORT_DATA / "notes.txt"
    mine.write_text("a reader's own", encoding="utf-8")
    calls.write_parquet(extractive / "calls.parquet")
    write_html_report(extractive)
    assert folders(extractive) == sorted([old, f"{REPORT_DATA}/notes.txt"])


@pytest.mark.parametrize("failing", ["a data file", "the page"])
def test_a_failed_write_leaves_the_old_page_and_its_folder(
        extractive: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    before = snapshot(extractive)
    calls = pl.read_parquet(extractive / "calls.parquet")
    calls.with_columns(pl.col("answer") + " (edited)").write_parquet(
        extractive / "calls.parquet")
    if failing == "a data file":
        real = pagedata.DataFolder.add

        def add(self: pagedata.DataFolder, name: str, data: object) -> None:
            if name == "search-0001":
                raise OSError(28, "No space left on device", name)
            real(self, name, data)
        monkeypatch.setattr(pagedata.DataFolder, "add", add)
    else:
        def full(path: Path, write: object) -> None:
            raise OSError(28, "No space left on device", str(path))
        monkeypatch.setattr(pagedata, "write_atomically", full)
    with pytest.raises(OSError, match="No space left"):
        write_html_report(extractive)
    if failing == "the page":  # the new folder stays until the next write removes it
        assert len(folders(extractive)) == 2
        [stale] = [n for n in folders(extractive) if n + "/" not in "".join(before)]
        shutil.rmtree(extractive / stale)
    assert snapshot(extractive) == before  # the old page, its old folder, nothing else
    monkeypatch.undo()
    write_html_report(extractive)  # and the next write cleans up after it
    assert len(folders(extractive)) == 1


def test_a_failed_compare_page_writes_nothing(extractive: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A page whose data cannot be made (here its second table fails) leaves no trace: no
    page, no data folder, no lock, no temporary folder."""
    from fragbench.redact import Redactor
    from fragbench.report import compare_html
    from fragbench.report.compare import compare_series

    def broken(cells: object, redact: object) -> None:
        raise ValueError("made to fail")
    monkeypatch.setattr(compare_html, "cell_index", broken)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match="made to fail"):
        compare_html.write_compare_page(compare_series(extractive, extractive),
                                        out / "cmp.html", Redactor.from_env().text)
    assert list(out.iterdir()) == []
