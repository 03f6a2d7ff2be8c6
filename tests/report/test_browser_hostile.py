"""Hostile answers in report.html and the compare page, read in headless Chromium (issue 14,
item 7: a page once ran a model's script and navigated to another origin).

Two loopback series answer with `hostile_pages.script_hostile`: markup of every kind (scripts,
`</script>`, `<img onerror>`, `javascript:` links, `<meta http-equiv=refresh>`, CSS `url()`,
frames, attribute break-outs), the same markup as `\\u003c…\\u003e` escapes, secret-shaped
tokens and the test key, in an answer, its extracts and cited IDs, a refusal, an unparsed
answer, a model name and the raw bodies. Their report.html (written by `fragbench run`) and
their compare page (`fragbench compare --html`) are opened with JavaScript on, and show:

- no script of an answer ran: no mark on the page, exactly one <script> element (the page's
  own, which did run: the filters are shown), no inline handler, no javascript: URL;
- the page went nowhere: no request, no navigation of any frame, no window, no dialog;
- every hostile value is on the page as text: each element's text is the stored value passed
  through the redactor, and still holds the markup's characters;
- the key is in the page in none of the forms the redactor handles.

Then the page's second wall: an answer's scripts rendered with escaping switched off (as if it
had failed) do not run, because the Content-Security-Policy allows only the page's own script,
by the hash of page.js (a hash read back from the page would allow the answer's).
And the checks themselves can fail: the same markup, not escaped, is seen doing each thing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import jinja2.runtime
import polars as pl
import pytest
from markupsafe import Markup
from support.browser import open_page, ready, settled, text_of, workspace
from support.cli import run_cli
from support.hostile_pages import ELSEWHERE, MARKERS, hostile_series, key_forms, markup, scripts
from support.reports import page_bytes, page_text
from support.suite import CANARY_KEY

from fragbench.redact import Redactor
from fragbench.report import html as report_html
from fragbench.report import pagedata
from fragbench.report.html import page_script
from fragbench.testing.loopback import Server, http_error, ok

pytestmark = pytest.mark.slow

HOSTILE_CALLS = 4
"""The calls the hostile script answers (the fourth stops the series)."""


@attrs.frozen
class Hostile:
    report: Path  # series A's report.html
    compare: Path  # the compare page of A and B
    calls: pl.DataFrame  # series A's calls.parquet, the sent ones, in plan order
    citations: pl.DataFrame  # series A's citations.parquet


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    """Two hostile series (A and B), their pages written with the key in the environment."""
    root = tmp_path_factory.mktemp("hostile")
    with pytest.MonkeyPatch.context() as mp:
        # Module scope runs before the autouse per-test ledger store: a ledger of its own.
        mp.setenv("FRAGBENCH_LEDGER_DIR", str(root / "ledgers"))
        experiment = workspace(root)
        made = []
        for name in ("hostile-a", "hostile-b"):
            with Server() as server:
                made.append(hostile_series(experiment, server, name))
        a, b = made
        page = root / "compare.html"
        compared = run_cli("compare", str(a), str(b), "--html", str(page),
                           env={"OPENAI_API_KEY": CANARY_KEY})
        assert compared.returncode == 0, compared.stderr
    calls = pl.read_parquet(a / "calls.parquet").sort("seq").filter(
        pl.col("status") != "not_sent")
    assert calls.height == HOSTILE_CALLS
    return Hostile(a / "report.html", page, calls, pl.read_parquet(a / "citations.parquet"))


@pytest.fixture
def redact(monkeypatch: pytest.MonkeyPatch) -> Any:
    """What the page must show of a stored value: the value as the redactor gives it back
    with the key in the environment (the page then escapes it)."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    return Redactor.from_env().text


# -- What the page did and holds, read in the browser -------------------------------------------


def shown_values(hostile: Hostile, which: str) -> list[tuple[str, str, str]]:
    """(what, CSS selector, stored value) of every hostile value a page shows; a refusal is
    shown after `Refused: `."""
    calls = hostile.calls.to_dicts()
    first, refused, unparsed, renamed = calls
    cites = hostile.citations.filter(pl.col("call_id") == first["call_id"]).sort(
        "citation").to_dicts()
    if which == "report":
        def at(call: dict[str, Any]) -> str:
            return f'article.call[data-call-id="{call["call_id"]}"]'
        raw = [(f"raw response {c['call_id']}", f"{at(c)} details.raw pre", c["raw_response"])
               for c in calls]
        model = [("model", f"{at(renamed)} dd[data-field=model]", renamed["model"])]
    else:
        def at(call: dict[str, Any]) -> str:
            anchor = "-".join([call["case"], call["lang"], call["variant"], call["mode"],
                               str(call["rep"])])
            return f'article.cell[id="cell-{anchor}"] div.side-a'
        raw = []
        model = []
    values = [("answer", f"{at(first)} p.answer", first["answer"]),
              ("refusal", f"{at(refused)} p.refusal", "Refused: " + refused["refusal"]),
              ("unparsed answer", f"{at(unparsed)} pre.answer", unparsed["text"]),
              *raw, *model]
    for c in cites:
        n = c["citation"]
        values.append((f"extract {n}", f"{at(first)} li.citation[data-citation='{n}'] q.extract",
                       c["extract"]))
        values.append((f"cited ID {n}", f"{at(first)} li.citation[data-citation='{n}'] "
                       ".cited-id", c["id"]))
    return values


@pytest.mark.parametrize("which", ["report", "compare"])
def test_hostile_answers_run_nothing_go_nowhere_and_read_as_text(
        chromium: Any, hostile: Hostile, redact: Any, which: str) -> None:
    path = hostile.report if which == "report" else hostile.compare
    with open_page(chromium, path) as opened:
        dom = settled(opened)
        assert opened.elsewhere() == []
        assert dom["marks"] == [None, None]
        assert dom["scripts"] == [page_script().source]
        assert dom["islands"] == (["fragbench-calls"] if which == "report"
                                  else ["fragbench-cells"])
        assert dom["filtersShown"]  # the page's own script ran
        assert dom["handlers"] == [] and dom["links"] == [] and dom["foreign"] == []
        assert dom["metas"] == [] and dom["styles"] == 1 and dom["styled"] == []

        page = opened.page
        if which == "compare":  # the pair page draws its cells from data: every cell at once
            page.select_option("#page-size", "200")
        hostile_text = 0
        for what, selector, stored in shown_values(hostile, which):
            if stored is None:  # a value the page does not show (never for these calls)
                continue
            shown = text_of(page, selector)
            assert shown == redact(stored), f"{what} ({selector})"
            hostile_text += any(m in shown for m in MARKERS)
        assert hostile_text >= 5  # the markup is there, as text
        if which == "compare":  # the cells a search of markup finds are drawn as text too
            page.fill("#filter-search", "<script>")
            page.wait_for_function("() => location.hash.includes('q=')")
            ready(page)
            assert 0 < page.locator("article.cell").count() <= HOSTILE_CALLS
            again = [(w, sel, v) for w, sel, v in shown_values(hostile, which)
                     if v is not None and page.locator(sel.split(" div.")[0]).count()]
            assert len(again) >= 3
            for what, selector, stored in again:
                assert text_of(page, selector) == redact(stored), f"{what} ({selector})"
            dom = settled(opened)
            assert dom["marks"] == [None, None] and dom["handlers"] == []
            assert dom["links"] == [] and dom["foreign"] == [] and dom["styled"] == []
        model = text_of(page, "dl.run dd[data-field=model]") or ""
        assert redact(hostile.calls["model"][-1]) in model
        assert all(m in model for m in ("<script>", "onerror=", "javascript:"))
        assert opened.elsewhere() == []


def values_read_as_text(page: Any, hostile: Hostile, redact: Any) -> int:
    """Every hostile value of the calls drawn now is the stored value, redacted, as text;
    how many of them hold markup."""
    drawn = set(page.evaluate("() => [...document.querySelectorAll('article.call')]"
                              ".map(a => a.dataset.callId)"))
    held = 0
    for what, selector, stored in shown_values(hostile, "report"):
        if stored is None or selector.split('"')[1] not in drawn:
            continue
        assert text_of(page, selector) == redact(stored), f"{what} ({selector})"
        held += any(m in stored for m in MARKERS)
    return held


def test_hostile_values_in_search_results_and_redrawn_pages_read_as_text(
        chromium: Any, hostile: Hostile, redact: Any) -> None:
    """report.html draws its calls from data: the rows a search finds, the rows of a page
    drawn again, and a search whose own words are markup (typed, or in the URL a reload
    reads) all put the values in as text. Nothing runs, nothing leaves the page."""
    first = hostile.calls.row(0, named=True)
    with open_page(chromium, hostile.report) as opened:
        page = opened.page
        settled(opened)
        page.fill("#filter-search", "<script>")  # markup in the answers: found, as text
        page.wait_for_function("() => location.hash.includes('q=')")
        ready(page)  # the search texts loaded, the calls found drawn
        found = page.evaluate("() => [...document.querySelectorAll('article.call')]"
                              ".map(a => a.dataset.callId)")
        assert first["call_id"] in found and 0 < len(found) <= HOSTILE_CALLS
        assert values_read_as_text(page, hostile, redact) >= 3
        page.fill("#filter-search", "")
        page.wait_for_function("() => !location.hash.includes('q=')")
        page.select_option("#page-size", "25")
        page.click("nav.pager >> nth=0 >> button.next")
        ready(page)
        every = pl.read_parquet(hostile.report.parent / "calls.parquet").sort("seq")
        assert page.locator("article.call").first.get_attribute("data-call-id") == \
            every["call_id"][25]  # page 2 of 25 starts at the 26th call
        assert page.locator("output.page").first.text_content() == "2"
        page.click("nav.pager >> nth=0 >> button.prev")  # page 1 drawn again
        ready(page)
        assert values_read_as_text(page, hostile, redact) >= 3
        dom = settled(opened)
        assert dom["marks"] == [None, None] and dom["handlers"] == [] and dom["links"] == []
        assert dom["foreign"] == [] and dom["styled"] == []
        assert opened.elsewhere() == []
        # A search of markup, from the URL: the words go back into the box, as text.
        words = markup("search")
        page.evaluate("q => { location.hash = '#?' + new URLSearchParams({q}).toString(); }",
                      words)
        page.reload()
        ready(page)
        assert page.input_value("#filter-search") == words
        assert page.locator("article.call").count() == 0  # no answer holds these words
        dom = settled(opened)
        assert dom["marks"] == [None, None] and dom["handlers"] == [] and dom["links"] == []
        assert dom["foreign"] == [] and dom["metas"] == [] and dom["styles"] == 1
        assert opened.elsewhere() == []


@pytest.mark.parametrize("which", ["report", "compare"])
def test_the_key_is_in_no_page_in_any_form(hostile: Hostile, which: str) -> None:
    """The answers echo the key in every form the redactor handles; the page holds none, nor
    any data file beside it (as written, and as the JSON page.js parses)."""
    path = hostile.report if which == "report" else hostile.compare
    data = page_bytes(path)
    text = data.decode("utf-8") + page_text(path)
    for form, value in key_forms().items():
        assert value not in text, form
    assert CANARY_KEY.lower() not in text.lower()
    assert data.count(b"[redacted]") >= 5


def test_a_script_past_escaping_still_cannot_run(chromium: Any, experiment: Path,
                                                 server: Server,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The second wall: were escaping ever to fail, the Content-Security-Policy still allows
    only the page's own script and the data files it loads itself. A model name and an answer
    holding scripts (an element, an onerror and an onload handler) are written with Jinja2's
    escape and the data's escapes switched off (as if they had failed), so that the model's
    markup lands in the page as it is, before the page's own script, and the answer's in a
    data file unescaped; none of it runs: the page's own script does (it draws the calls from
    the data files, the answer as text), and Chromium says it refused the others."""
    answer = "</script>" + scripts("answer")
    model = scripts("model")
    server.script[0] = ok(text=json.dumps({"answer": answer, "citations": []}), model=model)
    server.script[1] = http_error(500)
    out = experiment.parent.parent / "outputs"
    ran = run_cli("run", str(experiment), "--series", "past-escaping", "--backend", "openai",
                  "--out", str(out),
                  env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert ran.returncode == 3, ran.stderr
    series = out / "protocol-1.0" / "past-escaping"
    # The compiled templates take `escape` from jinja2.runtime when they are loaded (each
    # render loads them afresh): a pass-through here is escaping that failed.
    monkeypatch.setattr(jinja2.runtime, "escape", lambda value: Markup(str(value)))
    # The index and the data files are JSON escaped by pagedata.island: that fails too.
    monkeypatch.setattr(pagedata, "island", lambda data: json.dumps(data, ensure_ascii=False))
    page = report_html.write_html_report(series)
    assert model in page.read_text(encoding="utf-8")  # the first wall is down
    assert answer in page_text(page)  # and in the data files, unescaped
    with open_page(chromium, page) as opened:
        dom = settled(opened)
        assert dom["marks"] == [None, None]
        assert dom["scripts"][-1] == page_script().source and len(dom["scripts"]) >= 2
        assert len(dom["handlers"]) >= 2  # they are there: the policy stopped them
        refused = [line for line in opened.console if "Content Security Policy" in line]
        assert len(refused) >= 2, opened.console  # the script element and a handler at least
        # the page's own script still runs, and draws the answer from its data file, as text
        shown = opened.page.locator("article.call").first.locator("p.answer")
        assert shown.text_content() == answer
        assert opened.own() and opened.elsewhere() == []


def test_the_checks_see_each_thing_hostile_markup_does(chromium: Any, tmp_path: Path) -> None:
    """The checks above can fail: the same markup on a page that does not escape it (and has
    no policy) runs a script, leaves the page and makes requests, and each is seen."""
    page = tmp_path / "unescaped.html"
    page.write_text("<!doctype html><html><head></head><body><p>"
                    + markup("answer") + "</p></body></html>", encoding="utf-8")
    with open_page(chromium, page) as opened:
        opened.page.wait_for_load_state("networkidle")
        gone = opened.elsewhere()
        assert any(line.startswith("request " + ELSEWHERE) for line in gone), gone
        assert any(f"{ELSEWHERE}/answer" in line for line in gone), gone
    copy = tmp_path / "stays.html"
    shutil.copy(page, copy)
    stay = copy.read_text(encoding="utf-8").replace("location=", "void ")
    copy.write_text(stay.replace('http-equiv="refresh"', 'name="refresh"'), encoding="utf-8")
    with open_page(chromium, copy) as opened:
        dom = settled(opened)
        assert dom["marks"] == ["answer", "answer"]
        assert len(dom["scripts"]) == 2 and dom["handlers"] and dom["links"] and dom["foreign"]
        assert dom["styled"] and dom["styles"] == 1


# -- Names from the series that JavaScript or the DOM treat specially (issue 16, item 5) -------

def renamed_calls(series: Path, names: dict[int, str]) -> dict[int, str]:
    """The series with the calls at plan positions `names` (0-based) given those call IDs,
    in calls.parquet and citations.parquet; position -> old ID."""
    calls = pl.read_parquet(series / "calls.parquet").sort("seq")
    old = {i: calls["call_id"][i] for i in names}
    mapping = {old[i]: new for i, new in names.items()}
    rename = pl.col("call_id").replace(mapping)
    calls.with_columns(rename).write_parquet(series / "calls.parquet")
    citations = pl.read_parquet(series / "citations.parquet")
    citations.with_columns(rename).write_parquet(series / "citations.parquet")
    return old


def test_call_ids_named_like_object_properties_are_found_by_their_links(
        chromium: Any, extractive_once: Path, tmp_path: Path) -> None:
    """Call IDs `__proto__` and `constructor` on the second page: a link to each draws its
    page. A link to an ID no call has, named like an object's property (`toString`), is no
    call: the filters stay as they are."""
    series = tmp_path / "odd-ids"
    shutil.copytree(extractive_once, series)
    renamed_calls(series, {60: "__proto__", 61: "constructor"})
    page_file = report_html.write_html_report(series, redact=lambda text: text)
    with open_page(chromium, page_file) as opened:
        page = opened.page
        for call_id in ("__proto__", "constructor"):
            page.evaluate("id => { location.hash = '#call-' + id; }", call_id)
            page.wait_for_selector(f'article.call[id="call-{call_id}"]', state="attached")
            assert page.locator("output.page").first.text_content() == "2"
        page.evaluate("() => { location.hash = '#?mode=full'; }")
        page.wait_for_function("() => document.querySelector('#filter-mode').value === 'full'")
        drawn = page.evaluate("() => document.getElementById('call-list').dataset.drawn")
        page.evaluate("() => { location.hash = '#call-toString'; }")
        page.evaluate("() => { location.hash = '#call-hasOwnProperty-c0'; }")
        page.wait_for_function("() => location.hash === '#call-hasOwnProperty-c0'")
        assert page.input_value("#filter-mode") == "full"  # not cleared: no such call
        assert page.evaluate("() => document.getElementById('call-list').dataset.drawn") == \
            drawn  # and nothing drawn again
        assert opened.elsewhere() == []


def test_a_cases_table_with_column_names_no_group_key_may_have_draws_the_calls(
        chromium: Any, extractive_once: Path, tmp_path: Path) -> None:
    """A cases.parquet written by hand whose columns are not group keys (a space, an `=`, a
    capital, a quote): they are left out and named on the page, and the calls, the filters
    and the one valid group draw as usual."""
    series = tmp_path / "odd-groups"
    shutil.copytree(extractive_once, series)
    cases = sorted(set(pl.read_parquet(series / "calls.parquet")["case"].to_list()))
    bad = ["bad key", "x=y", "Type", 'q"uote', "1st"]
    pl.DataFrame({"case": cases, **{name: ["v"] * len(cases) for name in bad},
                  "level": ["easy"] * len(cases)}).write_parquet(series / "cases.parquet")
    page_file = report_html.write_html_report(series, redact=lambda text: text)
    with open_page(chromium, page_file) as opened:
        page = opened.page
        page.wait_for_selector("#call-list[data-drawn]", state="attached")
        assert page.locator("article.call").count() == 50
        assert page.evaluate("() => [...document.querySelectorAll('article.call')]"
                             ".every(a => a.dataset.groupLevel === 'easy')")
        assert page.locator("select[id^=filter-group-]").evaluate_all(
            "s => s.map(e => e.id)") == ["filter-group-level"]
        note = page.locator("p.skipped-groups").text_content() or ""
        assert all(f"“{name}”" in note for name in bad), note
        assert opened.elsewhere() == []
