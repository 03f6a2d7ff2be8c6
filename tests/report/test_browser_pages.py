"""report.html at scale, in headless Chromium: a series of 10,080 calls with case groups.

The series is the offline demo copied 140 times as tables (`scaled_pages.scale_series`, a
second or two), with cases.parquet giving each case a `type` and a `level`. Its page draws 50
calls at a time from the page's data. Checked against the tables:

- a filter (a group's value, a mode) keeps exactly the calls the tables say, across every page
  (walked with the pager to the last one), and says how many;
- the search finds a call on the last page, by its answer, by an extract and by its ID;
- the filter and search state is in the URL: a reload and the back and forward buttons give
  the same view; a link to a call on a later page draws that page;
- the summary comes first and has one table per group, its counts those of the tables.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.browser import open_page, ready
from support.scaled_pages import EXTRACT_NEEDLE, NEEDLE, middle_call, scale_series

from fragbench.report.html import write_html_report

pytestmark = pytest.mark.slow

COPIES = 140  # x 72 calls = 10,080


@pytest.fixture(scope="module")
def big(extractive_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    series = scale_series(extractive_once, tmp_path_factory.mktemp("pages") / "big", COPIES)
    write_html_report(series)
    return series


@pytest.fixture(scope="module")
def tables(big: Path) -> pl.DataFrame:
    """calls.parquet in plan order, with each call's groups."""
    calls = pl.read_parquet(big / "calls.parquet").sort("seq")
    return calls.join(pl.read_parquet(big / "cases.parquet"), on="case", how="left",
                      maintain_order="left")


def drawn(page: Any) -> list[str]:
    """The calls drawn, once the page waits for no data file."""
    ready(page)
    ids: list[str] = page.evaluate("() => [...document.querySelectorAll('#call-list > "
                                   "article.call')].map(a => a.dataset.callId)")
    return ids


def counter(page: Any) -> int:
    ready(page)
    return int(page.evaluate("() => document.querySelector('output.shown').value"))


def walk(page: Any) -> list[str]:
    """Every call the filters keep, page after page with the pager's next button."""
    seen = drawn(page)
    next_button = page.locator("nav.pager >> nth=0 >> button.next")
    while next_button.is_enabled():
        next_button.click()
        seen += drawn(page)
    return seen


def searched(page: Any, words: str) -> None:
    """Type `words` in the search box and wait until the page has drawn them."""
    page.fill("#filter-search", words)
    page.wait_for_function("q => new URLSearchParams(location.hash.slice(2)).get('q') === q",
                           arg=words)


def test_the_series_is_ten_thousand_calls(tables: pl.DataFrame, big: Path) -> None:
    """And its page holds an index of them: each call's detail is in the data files beside."""
    assert tables.height == 10_080
    data = sum(p.stat().st_size for p in big.glob("report-data/*/*.js"))
    assert (big / "report.html").stat().st_size < 1_000_000 < 20 * 1_000_000 < data


def test_a_filter_applies_across_every_page(chromium: Any, big: Path,
                                            tables: pl.DataFrame) -> None:
    want = tables.filter((pl.col("level") == "hard") & (pl.col("mode") == "full"))
    with open_page(chromium, big / "report.html") as opened:
        page = opened.page
        assert counter(page) == tables.height and len(drawn(page)) == 50
        page.select_option("#page-size", "200")
        page.select_option("#filter-group-level", "hard")
        page.select_option("#filter-mode", "full")
        assert counter(page) == want.height
        pages = page.locator("output.pages").first.text_content()
        assert pages == str(math.ceil(want.height / 200)) and int(pages) > 5
        assert walk(page) == want["call_id"].to_list()
        # every drawn call carries the group the filter asked for
        assert page.evaluate("() => [...document.querySelectorAll('article.call')]"
                             ".every(a => a.dataset.groupLevel === 'hard')")
        assert opened.elsewhere() == []


def test_the_search_finds_a_call_on_the_last_page(chromium: Any, big: Path,
                                                  tables: pl.DataFrame) -> None:
    last = tables["call_id"][-1]
    middle = tables.row(middle_call(COPIES), named=True)
    with open_page(chromium, big / "report.html") as opened:
        page = opened.page
        assert last not in drawn(page)
        searched(page, NEEDLE.upper())  # case is ignored
        assert drawn(page) == [last] and counter(page) == 1
        assert NEEDLE in page.locator(f'article.call[data-call-id="{last}"] p.answer'
                                      ).text_content()
        searched(page, middle["call_id"])
        assert drawn(page) == [middle["call_id"]]
        searched(page, EXTRACT_NEEDLE)  # the extract of one citation of that call
        assert drawn(page) == [middle["call_id"]]
        assert opened.elsewhere() == []


def test_the_state_is_in_the_url_reload_back_and_forward(chromium: Any, big: Path,
                                                         tables: pl.DataFrame) -> None:
    bridge = tables.filter(pl.col("type") == "bridge")
    with open_page(chromium, big / "report.html") as opened:
        page = opened.page
        page.select_option("#filter-group-type", "bridge")
        page.click("nav.pager >> nth=0 >> button.next")
        page.click("nav.pager >> nth=0 >> button.next")
        third = drawn(page)
        assert third == bridge["call_id"][100:150].to_list()
        url = page.url
        assert "group-type=bridge" in url and "page=3" in url
        page.reload()
        assert page.input_value("#filter-group-type") == "bridge"
        assert page.locator("output.page").first.text_content() == "3"
        assert drawn(page) == third and counter(page) == bridge.height
        page.go_back()  # page 2
        assert drawn(page) == bridge["call_id"][50:100].to_list()
        page.go_back()  # page 1
        page.go_back()  # no filter
        assert page.input_value("#filter-group-type") == "" and counter(page) == tables.height
        page.go_forward()
        assert page.input_value("#filter-group-type") == "bridge"
        assert drawn(page) == bridge["call_id"][:50].to_list()
        # A link to a call on a later page (the stop link's kind) draws its page.
        target = tables["call_id"][72 * 109 + 5]  # a comparison case: hidden by the filter
        page.evaluate("id => { location.hash = '#call-' + id; }", target)
        page.wait_for_selector(f'article.call[id="call-{target}"]')
        assert page.input_value("#filter-group-type") == ""  # it was hidden: filters cleared
        assert opened.elsewhere() == []


def test_a_call_in_the_last_data_file_opens_from_its_url(chromium: Any, big: Path,
                                                         tables: pl.DataFrame) -> None:
    """The page opened at `#call-ID` of its very last call: that call's page is drawn from the
    one data file that holds it (the last of 101; no other is read), its card shows the
    question and every fragment it was shown; nothing is asked for outside the series
    folder. Then a call of the first file, by a link: that file is read too, and only it."""
    last = tables.row(-1, named=True)
    question = pl.read_parquet(big / "questions.parquet").filter(
        (pl.col("case") == last["case"]) & (pl.col("lang") == last["lang"]))["question"][0]
    with open_page(chromium, big / "report.html", fragment=f"#call-{last['call_id']}") as opened:
        page = opened.page
        card = page.locator(f'article.call[id="call-{last["call_id"]}"]')
        assert card.locator("span.question-text").text_content() == question
        assert card.locator("li.fragment").evaluate_all(
            "li => li.map(e => [e.dataset.factId, e.textContent])") == [
            list(pair) for pair in zip(last["supplied_ids"], last["supplied_texts"],
                                       strict=True)]
        assert page.locator("output.page").first.text_content() == "202"  # of 50 calls
        files = [u.rsplit("/", 1)[1] for u in opened.own()]
        assert files == ["calls-0101.js"], files  # the one file holding that page
        first = tables["call_id"][3]
        page.evaluate("id => { location.hash = '#call-' + id; }", first)
        page.wait_for_selector(f'article.call[id="call-{first}"]')
        assert [u.rsplit("/", 1)[1] for u in opened.own()] == ["calls-0101.js",
                                                                "calls-0001.js"]
        assert opened.elsewhere() == []
        folder = big.resolve().as_uri() + "/"
        assert all(u.startswith(folder) for u in opened.requests), opened.requests


def test_a_page_without_its_data_folder_says_so(chromium: Any, big: Path,
                                                tmp_path: Path) -> None:
    """report.html copied alone: its summary reads as ever, and where the calls would be the
    page says which folder it needs beside it; it asks for nothing but that folder's file."""
    alone = tmp_path / "report.html"
    alone.write_bytes((big / "report.html").read_bytes())
    with open_page(chromium, alone) as opened:
        page = opened.page
        assert page.evaluate("() => document.getElementById('call-list').dataset.error") == \
            "missing"
        said = page.locator("p.list-status").text_content() or ""
        folder = "report-data/" + next((big / "report-data").glob("[0-9a-f]*")).name
        assert f"{folder}/calls-0001.js" in said and f"its folder {folder}/" in said
        assert page.locator("article.call").count() == 0
        assert page.locator("section.summary dl.run").is_visible()
        assert opened.elsewhere() == []


def test_the_summary_comes_first_and_shows_each_group(chromium: Any, big: Path,
                                                      tables: pl.DataFrame) -> None:
    citations = pl.read_parquet(big / "citations.parquet")
    with open_page(chromium, big / "report.html", javascript=False) as opened:
        page = opened.page
        first = page.evaluate("() => document.querySelector('main').firstElementChild.id")
        assert first == "summary"
        got = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
            'section.summary table.summary-table[data-group=true]')].map(t => [t.dataset.by,
            [...t.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c =>
            c.textContent))]))""")
    assert list(got) == ["type", "level"]
    per_call = citations.group_by("call_id").agg(pl.len().alias("n"))
    for key in ("type", "level"):
        want = (tables.join(per_call, on="call_id", how="left")
                .group_by(key).agg(pl.len(), pl.col("n").sum()).sort(key))
        assert [[r[0], r[1], r[5]] for r in got[key]] == [
            [value, str(n), str(cited)] for value, n, cited in want.iter_rows()], key


def test_the_grid_of_three_series_shows_differs_only(chromium: Any, extractive: Path,
                                                     tmp_path: Path) -> None:
    """`compare S1 S2 S3 --html`: the "differs only" filter leaves the one differing row;
    without JavaScript no row is shown, and a note says why."""
    from support.cli import run_cli
    from support.series import three_series

    page_file = tmp_path / "grid.html"
    done = run_cli("compare", *map(str, three_series(extractive)), "--html", str(page_file))
    assert done.returncode == 0, done.stderr
    visible = "() => [...document.querySelectorAll('tr.cell-row')].filter(r => " \
              "r.getClientRects().length > 0).map(r => r.dataset.case + ' ' + r.dataset.mode)"
    with open_page(chromium, page_file) as opened:
        page = opened.page
        assert len(page.evaluate(visible)) == 72
        page.select_option("#filter-differs", "true")
        assert page.evaluate(visible) == ["price full"]
        assert page.locator("output.shown").text_content() == "1"
        assert page.locator("tr.cell-row[data-differs=true] td.side.diff").count() == 1
        assert opened.elsewhere() == []
    with open_page(chromium, page_file, javascript=False) as opened:
        assert opened.page.evaluate(visible) == []
        assert "JavaScript" in (opened.page.text_content("#cells-need-js") or "")
        assert opened.page.locator("#cells-need-js").is_visible()


# -- The compare pages at scale: three series of 10,080 calls -----------------------------------

@pytest.fixture(scope="module")
def trio(extractive_once: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from support.scaled_pages import scaled_trio

    return scaled_trio(extractive_once, tmp_path_factory.mktemp("trio"), COPIES)


def shown_rows(page: Any, selector: str) -> list[str]:
    """The ids of the items (cells or rows) the page shows now, once drawn."""
    ready(page)
    ids: list[str] = page.evaluate(
        "s => [...document.querySelectorAll(s)].filter(e => !e.hidden).map(e => e.id)",
        selector)
    return ids


def anchor(row: dict[str, Any]) -> str:
    return "cell-" + "-".join(str(row[c]) for c in ("case", "lang", "variant", "mode", "rep"))


def test_the_grid_of_three_large_series_pages_filters_searches_and_keeps_its_state(
        chromium: Any, trio: list[Path], tmp_path: Path) -> None:
    """`compare S1 S2 S3 --html` over 10,080 cells: 100 rows shown at a time; "differs only"
    keeps exactly the differing cells across every page; the search finds a cell on the last
    page; the state is in the URL (reload, back); a link to a hidden cell shows its page."""
    from support.cli import run_cli

    from fragbench.report.compare import compare_grid

    page_file = tmp_path / "grid.html"
    done = run_cli("compare", *map(str, trio), "--html", str(page_file))
    assert done.returncode == 0, done.stderr
    table = compare_grid(trio).table.to_dicts()
    assert len(table) == 10_080
    differing = [anchor(r) for r in table if r["differs"]]
    assert len(differing) == 4 * COPIES  # en/fr x A/B per copy
    with open_page(chromium, page_file) as opened:
        page = opened.page
        assert shown_rows(page, "tr.cell-row") == [anchor(r) for r in table[:100]]
        assert counter(page) == 10_080
        page.select_option("#filter-differs", "true")
        assert counter(page) == len(differing)
        assert page.locator("output.pages").first.text_content() == "6"
        seen = shown_rows(page, "tr.cell-row")
        next_button = page.locator("nav.pager >> nth=0 >> button.next")
        while next_button.is_enabled():
            next_button.click()
            seen += shown_rows(page, "tr.cell-row")
        assert seen == differing
        assert page.locator("tr.cell-row:not([hidden]) td.side.diff[data-series=S3]"
                            ).count() == len(differing) - 500
        url = page.url
        assert "differs=true" in url and "page=6" in url
        page.reload()
        assert page.input_value("#filter-differs") == "true"
        assert shown_rows(page, "tr.cell-row") == differing[500:]
        page.go_back()
        assert shown_rows(page, "tr.cell-row") == differing[400:500]
        last = table[-1]
        words = f"{last['case']} · {last['lang']} · {last['variant']}"
        page.select_option("#filter-differs", "")
        searched(page, words.upper())
        assert shown_rows(page, "tr.cell-row") == [anchor(r) for r in table
                                                   if r["case"] == last["case"]
                                                   and r["lang"] == last["lang"]
                                                   and r["variant"] == last["variant"]]
        target = anchor(table[5_000])  # hidden by the search: a link shows its page
        page.evaluate("id => { location.hash = '#' + id; }", target)
        page.wait_for_function("id => document.getElementById(id) !== null", arg=target)
        assert page.input_value("#filter-search") == ""
        assert opened.elsewhere() == []


def test_the_pair_page_of_two_large_series_pages_its_cells(chromium: Any, trio: list[Path],
                                                          tmp_path: Path) -> None:
    """`compare S1 S3 --html` over 10,080 cells, drawn from the page's data: 50 cells shown at
    a time, "differs" finds the differing cells across every page, the state survives a
    reload, and a link to a cell the filter hides shows its page."""
    from support.cli import run_cli

    from fragbench.report.compare import compare_series

    page_file = tmp_path / "pair.html"
    done = run_cli("compare", str(trio[0]), str(trio[2]), "--html", str(page_file))
    assert done.returncode == 0, done.stderr
    table = compare_series(trio[0], trio[2]).table.to_dicts()
    differing = [anchor(r) for r in table if r["differs"]]
    with open_page(chromium, page_file) as opened:
        page = opened.page
        assert shown_rows(page, "article.cell") == [anchor(r) for r in table[:50]]
        page.select_option("#page-size", "200")
        page.select_option("#filter-differs", "true")
        assert counter(page) == len(differing) == 4 * COPIES
        assert shown_rows(page, "article.cell") == differing[:200]
        page.click("nav.pager >> nth=0 >> button.next")
        page.reload()
        assert page.input_value("#filter-differs") == "true" and page.input_value(
            "#page-size") == "200"
        assert shown_rows(page, "article.cell") == differing[200:400]
        # A link to the last cell: its page, drawn from the data (the filter cleared if it hides
        # the cell).
        last = anchor(table[-1])
        page.evaluate("h => { location.hash = h; }", "#" + last)
        page.wait_for_function("id => document.getElementById(id) !== null", arg=last)
        assert page.input_value("#filter-differs") == ("true" if table[-1]["differs"] else "")
        assert last in shown_rows(page, "article.cell")
        assert opened.elsewhere() == []
