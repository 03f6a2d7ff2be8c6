"""report.html and the compare page, read in headless Chromium: the DOM the browser built.

The pages are written by `fragbench report` / `fragbench run` and `fragbench compare --html` to
the DOM contract (class and data- attribute names that the templates and these tests share).
Two series: the offline demo (the non-model baseline, every citation valid) and a loopback
OpenAI series stopped at call 10 by an HTTP 500, whose first nine answers carry every citation
reason, overlapping and repeated extracts, a refusal, an answer cut at the output limit and
markup in an answer (`browser.script_stopped`). What is checked against the tables, for both:

- every citation of citations.parquet is listed with its ID and reasons, and a valid or
  misattributed one is highlighted where the rule puts it: the marks whose data-citations name
  it sit in one fragment (the cited ID's for valid, the first other one holding the extract for
  misattributed), start at the extract's first occurrence and spell it exactly;
- each filter, on each of its values, shows exactly the calls the tables say, and says how many;
- the baseline's caveat is on screen at the top and at the bottom of the page, and a model
  series has none; a call never sent says so;
- without JavaScript every call is shown;
- the page makes no request: every URL other than the page's own is recorded and aborted.

A test here skips only when no Chromium is found or it cannot start (the reason is in pytest's
`-ra` summary); `make test` installs Debian's chromium as root where it is missing.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import attrs
import polars as pl
import pytest
from support.browser import ROOT, open_page, stopped_series, workspace
from support.cli import run_cli

pytestmark = pytest.mark.slow

REASON_WORDS = {"valid": "valid", "misattributed": "misattributed",
                "not_verbatim": "not verbatim", "not_supplied": "not supplied",
                "unknown_id": "unknown id", "empty_extract": "empty"}
"""Each reason as the page must say it in words (the contract's list)."""
LOCATED = ("valid", "misattributed")
FILTERS = {"filter-case": "case", "filter-lang": "lang", "filter-variant": "variant",
           "filter-mode": "mode"}
CELL = ["case", "lang", "variant", "mode", "rep"]


@attrs.frozen
class Series:
    """A series folder and the tables the page is checked against."""

    dir: Path
    calls: pl.DataFrame  # in plan order
    citations: pl.DataFrame
    status: dict[str, Any]

    @classmethod
    def read(cls, series_dir: Path) -> Series:
        return cls(series_dir,
                   pl.read_parquet(series_dir / "calls.parquet").sort("seq"),
                   pl.read_parquet(series_dir / "citations.parquet"),
                   json.loads((series_dir / "status.json").read_text(encoding="utf-8")))

    @property
    def page(self) -> Path:
        return self.dir / "report.html"

    def cited(self, call_id: str) -> list[dict[str, Any]]:
        return self.citations.filter(pl.col("call_id") == call_id).sort("citation").to_dicts()


@pytest.fixture(scope="module")
def series(extractive_once: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, Series]:
    """The demo series (a copy of the offline run, its pages rewritten by `fragbench report`),
    a second offline run (the README's compare pair) and the stopped loopback series (its page
    written by `fragbench run`). Built once for the module; the tests only read them."""
    root = tmp_path_factory.mktemp("browser")
    with pytest.MonkeyPatch.context() as mp:
        # Module scope runs before the autouse per-test ledger store: a ledger of its own.
        mp.setenv("FRAGBENCH_LEDGER_DIR", str(root / "ledgers"))
        experiment = workspace(root)
        demo = root / "outputs" / "protocol-1.0" / "extractive"
        shutil.copytree(extractive_once, demo)
        (demo / "report.html").unlink(missing_ok=True)
        written = run_cli("report", str(demo))
        assert written.returncode == 0, written.stderr
        again = run_cli("run", str(experiment), "--series", "extractive-again", "--backend",
                        "extractive", "--out", str(root / "outputs"))
        assert again.returncode == 0, again.stderr
        stopped = stopped_series(experiment)
    for made in (demo, stopped):
        assert (made / "report.html").is_file(), f"no report.html in {made}"
    return {"demo": Series.read(demo), "stopped": Series.read(stopped),
            "again": Series.read(demo.parent / "extractive-again")}


# -- What the page holds, read in the page ------------------------------------------------------

CALLS_JS = """() => [...document.querySelectorAll('article.call')].map(a => {
  const frags = [...a.querySelectorAll('ol.fragments > li.fragment')];
  const marks = [];
  frags.forEach((f, i) => {
    const seen = new Set();
    const walker = document.createTreeWalker(f, NodeFilter.SHOW_TEXT);
    let offset = 0;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const m = node.parentElement.closest('mark');
      if (m && f.contains(m) && !seen.has(m)) {
        seen.add(m);
        marks.push({fragment: i, start: offset, text: m.textContent,
                    citations: m.dataset.citations ?? null, reasons: m.dataset.reasons ?? null,
                    classes: [...m.classList]});
      }
      offset += node.data.length;
    }
  });
  const answer = a.querySelector('.answer');
  const raw = a.querySelector('details.raw');
  return {
    data: {...a.dataset}, id: a.id, text: a.innerText,
    fragments: frags.map(f => ({id: f.dataset.factId ?? null, text: f.textContent})),
    marks, allMarks: a.querySelectorAll('mark').length,
    nested: a.querySelectorAll('mark mark').length,
    citations: [...a.querySelectorAll('ol.citations > li.citation')].map(li => ({
      n: li.dataset.citation ?? null, id: li.dataset.citedId ?? null,
      reason: li.dataset.reason ?? null, folded: li.dataset.reasonFolded ?? null,
      text: li.textContent})),
    answer: answer ? answer.textContent : null,
    answerElements: answer ? answer.querySelectorAll('*').length : 0,
    raw: raw ? {summary: raw.querySelector('summary')?.textContent ?? null,
                pre: raw.querySelector('pre')?.textContent ?? null} : null,
  };
})"""

SHOWN_JS = """() => {
  const calls = [...document.querySelectorAll(arguments_selector)];
  return {
    notHidden: calls.filter(c => !c.hidden).map(c => c.dataset.callId ?? c.id),
    visible: calls.filter(c => c.getClientRects().length > 0).length,
    output: document.querySelector('output.shown')?.textContent ?? null,
  };
}"""


def one_page(page: Any) -> None:
    """report.html draws its calls a page at a time: show up to 200 (all 72) on one."""
    page.select_option("#page-size", "200")
    assert page.locator("#call-list > article.call").count() == page.evaluate(
        "() => Number(document.querySelector('output.shown').value)")


def shown(page: Any, selector: str = "article.call") -> dict[str, Any]:
    """What the page shows now: the calls (or cells) not hidden, how many are laid out at all
    (a CSS display rule can defeat `hidden`), and the counter's text."""
    return page.evaluate(SHOWN_JS.replace("arguments_selector", json.dumps(selector)))


def expected_fragment(row: dict[str, Any], ids: list[str], texts: list[str]) -> int | None:
    """Where the contract puts a located citation: valid -> the first fragment of the cited ID
    holding the extract; misattributed -> the first fragment of another ID holding it."""
    for i, (fid, text) in enumerate(zip(ids, texts, strict=True)):
        if (fid == row["id"]) is (row["reason"] == "valid") and row["extract"] in text:
            return i
    return None


def call_problems(series: Series, page: dict[str, Any], call: dict[str, Any]) -> list[str]:
    """Every way one article.call departs from the contract, as readable lines."""
    cid = call["call_id"]
    found: list[str] = []
    data = page["data"]
    want = {"callId": cid, "case": call["case"], "lang": call["lang"],
            "variant": call["variant"], "mode": call["mode"], "rep": str(call["rep"]),
            "status": call["status"]}
    for key, value in want.items():
        if data.get(key) != value:
            found.append(f"{cid}: data-{key} is {data.get(key)!r}, not {value!r}")
    if page["id"] != f"call-{cid}":
        found.append(f"{cid}: id is {page['id']!r}")
    ids, texts = call["supplied_ids"] or [], call["supplied_texts"] or []
    fragments = [(f["id"], f["text"]) for f in page["fragments"]]
    supplied = list(zip(ids, texts, strict=True))
    if fragments != supplied:
        found.append(f"{cid}: fragments {fragments} are not the supplied {supplied}")
    if page["nested"]:
        found.append(f"{cid}: {page['nested']} marks nested in marks")
    if page["allMarks"] != len(page["marks"]):
        found.append(f"{cid}: {page['allMarks'] - len(page['marks'])} marks outside fragments")

    rows = series.cited(cid)
    reasons = {r["reason"] for r in rows}
    listed = set(data.get("reasons", "").split())
    if listed != reasons:
        found.append(f"{cid}: data-reasons {sorted(listed)}, citations say {sorted(reasons)}")
    items = {li["n"]: li for li in page["citations"]}
    if len(page["citations"]) != len(rows) or len(items) != len(rows):
        found.append(f"{cid}: {len(page['citations'])} li.citation for {len(rows)} citations")
    located = {str(r["citation"]) for r in rows if r["reason"] in LOCATED}
    for m in page["marks"]:
        named = (m["citations"] or "").split()
        if not named or set(named) - located or "cite" not in m["classes"] or \
                len((m["reasons"] or "").split()) != len(named):
            found.append(f"{cid}: a mark {m} names no located citation, or its attributes "
                         "disagree")
    for row in rows:
        n, where = str(row["citation"]), f"{cid} citation {row['citation']}"
        li = items.get(n)
        if li is None:
            found.append(f"{where}: no li.citation")
            continue
        for key, value in (("id", row["id"]), ("reason", row["reason"]),
                           ("folded", row["reason_folded"])):
            if li[key] != value:
                found.append(f"{where}: li.citation {key} is {li[key]!r}, not {value!r}")
        words = " ".join(li["text"].split()).lower()
        if row["id"].lower() not in words or " ".join(row["extract"].split()).lower() not in \
                words or REASON_WORDS[row["reason"]] not in words:
            found.append(f"{where}: li.citation {li['text']!r} lacks the ID, the extract or "
                         f"{REASON_WORDS[row['reason']]!r}")
        covering = sorted((m for m in page["marks"] if n in (m["citations"] or "").split()),
                          key=lambda m: (m["fragment"], m["start"]))
        if row["reason"] not in LOCATED:
            if covering:
                found.append(f"{where}: {row['reason']} is highlighted in a fragment")
            continue
        at = expected_fragment(row, ids, texts)
        assert at is not None, (where, row)  # the measure found it there
        spots = {(m["fragment"], m["start"]) for m in covering}
        joined = "".join(m["text"] for m in covering)
        contiguous = all(a["start"] + len(a["text"]) == b["start"]
                         for a, b in itertools.pairwise(covering))
        if not covering or {f for f, _ in spots} != {at} or joined != row["extract"] or \
                not contiguous or covering[0]["start"] != texts[at].index(row["extract"]):
            found.append(f"{where} ({row['reason']} {row['id']} {row['extract']!r}): marks "
                         f"{[(m['fragment'], m['start'], m['text']) for m in covering]}, "
                         f"expected fragment {at} ({ids[at]}) at "
                         f"{texts[at].index(row['extract'])}")
            continue
        for m in covering:
            named, said = m["citations"].split(), (m["reasons"] or "").split()
            if len(said) != len(named) or said[named.index(n)] != row["reason"] or \
                    f"r-{said[0]}" not in m["classes"]:
                found.append(f"{where}: mark {m} gives another reason or colour")
    return found


def test_the_request_recorder_sees_and_blocks_every_kind_of_request(chromium: Any,
                                                                      tmp_path: Path) -> None:
    """The no-request checks below can fail: an image, a stylesheet, a CSS background and a
    script's fetch are all seen and aborted, and an embedded data: image is not a request."""
    page = tmp_path / "reaches-out.html"
    page.write_text(
        '<!doctype html><html><head><link rel="stylesheet" href="https://cdn.invalid/s.css">'
        "</head><body style=\"background: url('http://127.0.0.1:9/bg.png')\">"
        '<img src="https://example.invalid/a.png">'
        '<img src="data:image/png;base64,iVBORw0KGgo=">'
        "<script>fetch('http://127.0.0.1:9/data.json').catch(() => {})</script>"
        "</body></html>", encoding="utf-8")
    with open_page(chromium, page) as opened:
        opened.page.wait_for_load_state("networkidle")
        assert set(opened.network()) == {
            "https://cdn.invalid/s.css", "http://127.0.0.1:9/bg.png",
            "https://example.invalid/a.png", "http://127.0.0.1:9/data.json"}
        assert set(opened.blocked) == set(opened.network())
        assert opened.requests[0] == opened.url


@pytest.mark.parametrize("name", ["demo", "stopped"])
def test_every_citation_is_listed_and_highlighted_where_the_rule_puts_it(
        chromium: Any, series: dict[str, Series], name: str) -> None:
    s = series[name]
    with open_page(chromium, s.page) as opened:
        one_page(opened.page)
        pages = opened.page.evaluate(CALLS_JS)
        assert opened.network() == []
    calls = s.calls.to_dicts()
    assert [p["data"].get("callId") for p in pages] == [c["call_id"] for c in calls]
    problems = [line for p, c in zip(pages, calls, strict=True)
                for line in call_problems(s, p, c)]
    assert problems == []
    if name == "stopped":  # the scripted answers reach every rule above
        assert set(s.citations["reason"]) == set(REASON_WORDS)
        shared = [m for p in pages for m in p["marks"] if len(m["citations"].split()) > 1]
        assert {"valid", "misattributed"} <= {r for m in shared for r in m["reasons"].split()}
        assert any(m["citations"] == "3 4" for m in pages[0]["marks"])  # the same extract twice
    for p, c in zip(pages, calls, strict=True):
        if c["status"] == "not_sent":
            assert "never sent" in p["text"] and "no parsed answer" not in p["text"], p["text"]
            continue
        assert p["raw"] is not None and p["raw"]["summary"].strip() == "Raw response", p["raw"]
        if c["error"]:
            assert c["error"] in p["text"]
        for field in ("refusal", "incomplete_reason"):
            if c[field]:
                assert c[field] in p["text"], (c["call_id"], field)
        if c["parsed"]:
            assert p["answer"] is not None and c["answer"] in p["answer"]
            assert p["answerElements"] == 0  # the markup in an answer is text, not elements


@pytest.mark.parametrize("name", ["demo", "stopped"])
def test_the_filters_show_exactly_the_calls_the_tables_say(
        chromium: Any, series: dict[str, Series], name: str) -> None:
    s = series[name]
    all_ids = s.calls["call_id"].to_list()
    by_reason = {r: set(s.citations.filter(pl.col("reason") == r)["call_id"])
                 for r in s.citations["reason"].unique()}

    def expected(choice: dict[str, str]) -> list[str]:
        keep = s.calls
        for select, value in choice.items():
            if select == "filter-reason":
                keep = keep.filter(pl.col("call_id").is_in(sorted(by_reason[value])))
            else:
                keep = keep.filter(pl.col(FILTERS[select]) == value)
        return keep["call_id"].to_list()

    with open_page(chromium, s.page) as opened:
        page = opened.page
        one_page(page)

        def check(choice: dict[str, str]) -> None:
            want = expected(choice)
            now = shown(page)
            assert now["notHidden"] == want, choice
            assert now["visible"] == len(want), choice
            assert re.search(rf"(?<!\d){len(want)}(?!\d)", now["output"] or ""), now["output"]

        check({})
        assert len(all_ids) == 72
        options: dict[str, list[str]] = {}
        for select in [*FILTERS, "filter-reason"]:
            values = page.eval_on_selector(
                f"form.filters select#{select}[name={select}]",
                "s => [...s.options].map(o => o.value)")
            assert values[0] == ""  # "all"
            options[select] = values[1:]
            data = (set(by_reason) if select == "filter-reason"
                    else set(s.calls[FILTERS[select]]))
            assert set(values[1:]) == data, select
            for value in values[1:]:
                page.select_option(f"#{select}", value)
                check({select: value})
            page.select_option(f"#{select}", "")
            check({})
        # Filters combine: one case, full passages only, then back to all.
        combined = {"filter-case": options["filter-case"][0], "filter-mode": "full"}
        for select, value in combined.items():
            page.select_option(f"#{select}", value)
        check(combined)
        assert 0 < len(expected(combined)) < 72
        for select in combined:
            page.select_option(f"#{select}", "")
        check({})
        assert opened.network() == []


CAVEAT_JS = """() => {
  const c = document.querySelector('.caveat');
  const r = c.getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return {top: r.top, bottom: r.bottom, height: r.height, inner: window.innerHeight,
          scrolled: window.scrollY, onTop: hit !== null && c.contains(hit),
          header: c.closest('header') !== null, text: c.textContent};
}"""


def caveat_on_screen(page: Any) -> dict[str, Any]:
    where = page.evaluate(CAVEAT_JS)
    assert where["header"] and where["height"] > 0, where
    assert where["top"] >= 0 and where["bottom"] <= where["inner"], where
    assert where["onTop"], where  # not covered by anything
    assert "non-model baseline" in " ".join(where["text"].split()).lower(), where
    return where


@pytest.mark.parametrize("name", ["demo", "stopped"])
def test_the_baseline_caveat_stays_on_screen_and_a_model_series_has_none(
        chromium: Any, series: dict[str, Series], name: str) -> None:
    s = series[name]
    with open_page(chromium, s.page) as opened:
        page = opened.page
        html = page.evaluate("() => ({...document.documentElement.dataset,"
                             " lang: document.documentElement.lang})")
        assert {"series": s.status["series"], "experiment": s.status["experiment"],
                "state": s.status["state"], "lang": "en"}.items() <= html.items(), html
        fields = page.evaluate("() => Object.fromEntries([...document.querySelectorAll("
                               "'dl.run dd[data-field]')].map(d => [d.dataset.field, "
                               "d.textContent.trim()]))")
        assert {"plan_sha256", "backend", "endpoint", "model", "spent_usd", "state",
                "stop_reason"} <= set(fields), fields
        assert fields["state"] == s.status["state"]
        assert s.status["plan_sha256"] in fields["plan_sha256"]
        assert bool(fields["stop_reason"]) is (s.status["stop"] is not None), fields
        main = page.locator("table.availability th.main")
        assert main.count() >= 1 and "(main)" in main.first.text_content()
        if s.status["is_model"]:
            assert page.locator(".caveat").count() == 0
            assert set(s.calls["model"].drop_nulls()) <= set(fields["model"].replace(
                ",", " ").split()), fields["model"]
        else:
            assert page.locator(".caveat").count() == 1
            caveat_on_screen(page)
            page.locator("article.call").nth(40).scroll_into_view_if_needed()
            assert caveat_on_screen(page)["scrolled"] > 0
            page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
            bottom = caveat_on_screen(page)
            assert bottom["scrolled"] > 0 and bottom["scrolled"] + bottom["inner"] >= \
                page.evaluate("() => document.documentElement.scrollHeight") - 1
        assert opened.network() == []


@pytest.mark.parametrize("name", ["demo", "stopped"])
def test_the_page_reads_without_javascript(chromium: Any, series: dict[str, Series],
                                           name: str) -> None:
    """Without JavaScript: what was run, the summary tables, the availability matrix, and a
    note saying the calls, filters and search need the script (no dead control is shown)."""
    s = series[name]
    with open_page(chromium, s.page, javascript=False) as opened:
        page = opened.page
        assert page.locator("article.call").count() == 0
        note = page.locator("#calls-need-js")
        assert note.is_visible() and "72 calls are drawn by the page's own script" in \
            " ".join(note.inner_text().split())
        assert page.locator("form.filters").is_hidden()
        assert page.locator("nav.pager").first.is_hidden()
        assert page.locator("dl.run").is_visible()
        assert page.locator("table.summary-table").count() == 3
        assert page.locator("table.summary-table").first.is_visible()
        assert page.locator("table.availability").is_visible()
        assert opened.network() == []
    with open_page(chromium, s.page) as opened:  # with it, the note goes
        assert opened.page.locator("#calls-need-js").is_hidden()
        assert opened.page.locator("article.call").count() == 50


def test_no_element_points_outside_the_page(chromium: Any, series: dict[str, Series]) -> None:
    """Self-contained: every src and href is embedded data or a link within the page, and the
    markup in an answer ran nothing."""
    for s in series.values():
        with open_page(chromium, s.page) as opened:
            outside = opened.page.evaluate(
                "() => [...document.querySelectorAll('[src], [href]')]"
                ".map(e => e.getAttribute('src') ?? e.getAttribute('href'))"
                ".filter(u => !u.startsWith('data:') && !u.startsWith('#'))")
            assert outside == [], s.dir.name
            assert opened.page.locator("img[src^='data:image/']").count() >= 1
            assert opened.page.evaluate("() => document.documentElement.dataset.pwned ?? null"
                                        ) is None
            assert opened.network() == []


# -- The compare page ---------------------------------------------------------------------------

@attrs.frozen
class Compared:
    page: Path
    warnings: list[str]  # as printed on screen (unwrapped)
    table: pl.DataFrame  # fragbench.report.compare's table, in cell order
    a: Series
    b: Series


@pytest.fixture(scope="module")
def compared(series: dict[str, Series], tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Compared]:
    from fragbench.report.compare import compare

    root = tmp_path_factory.mktemp("compare-pages")
    pairs = {"demo pair": ("demo", "again"), "baseline vs stopped": ("demo", "stopped")}
    made = {}
    for label, (a, b) in pairs.items():
        html = root / f"{a}-{b}.html"
        result = run_cli("compare", str(series[a].dir), str(series[b].dir), "--html", str(html))
        assert result.returncode == 0, result.stderr
        lines, table = compare(series[a].dir, series[b].dir)
        warnings = [ln for ln in lines if ln.startswith("WARNING")]
        screen = " ".join(result.stdout.split())  # the screen wraps lines at 100 columns
        assert all(" ".join(w.split()) in screen for w in warnings), result.stdout
        made[label] = Compared(html, warnings, table, series[a], series[b])
    return made


COMPARE_JS = """() => ({
  page: document.documentElement.dataset.page ?? null,
  first: document.body.firstElementChild ? document.body.firstElementChild.outerHTML
    .slice(0, 200) : null,
  firstIsWarnings: document.body.firstElementChild?.matches('section.warnings') ?? false,
  firstText: document.body.innerText.trim().slice(0, 300),
  warnings: [...document.querySelectorAll('section.warnings p.warning')].map(p => p.textContent),
  caveats: [...document.querySelectorAll('.caveat')].map(c => c.textContent),
  cells: [...document.querySelectorAll('article.cell')].map(a => ({
    data: {...a.dataset}, note: a.querySelector('.note')?.textContent ?? null,
    sides: ['side-a', 'side-b'].map(s => {
      const d = a.querySelector('div.side.' + s);
      return d === null ? null : {text: d.innerText, citations: [...d.querySelectorAll(
        'ol.citations > li.citation')].map(li => [li.dataset.citation, li.dataset.citedId,
        li.dataset.reason])};
    }),
  })),
})"""


@pytest.mark.parametrize("label", ["demo pair", "baseline vs stopped"])
def test_the_compare_page(chromium: Any, compared: dict[str, Compared], label: str) -> None:
    c = compared[label]
    with open_page(chromium, c.page) as opened:
        page = opened.page
        # Every cell on one page (72; the page draws 50 at a time by default), drawn from data.
        page.select_option("#page-size", "100")
        got = page.evaluate(COMPARE_JS)
        assert got["page"] == "compare"
        assert not page.locator("#cells-need-js").is_visible()
        # Warnings first: the same lines as on screen, before anything else in <body> (the
        # section may sit inside a sticky header, so it is the first text a reader meets).
        assert [" ".join(w.split()) for w in got["warnings"]] == c.warnings
        if c.warnings:
            assert " ".join(got["firstText"].split()).startswith(c.warnings[0]), got["first"]
        if label == "baseline vs stopped":
            assert any("stopped at call 10" in w for w in c.warnings)
        baselines = [s for s in (c.a, c.b) if not s.status["is_model"]]
        assert len(got["caveats"]) == len(baselines)
        assert all("non-model baseline" in t.lower() for t in got["caveats"])

        rows = c.table.to_dicts()
        assert [tuple(cell["data"].get(k) for k in CELL) for cell in got["cells"]] == [
            tuple(str(r[k]) for k in CELL) for r in rows]
        for cell, row in zip(got["cells"], rows, strict=True):
            where = "-".join(str(row[k]) for k in CELL)
            assert cell["data"].get("compared") == str(row["compared"]).lower(), where
            # A compared cell differs or not, as the table says; a cell not compared neither
            # differs nor is the same (the page leaves data-differs empty for it).
            differs = {True: "true", False: "false", None: ""}[row["differs"]]
            assert cell["data"].get("differs") == differs, where
            if not row["compared"]:
                assert cell["note"] is not None and row["note"] in cell["note"], where
            call_id = f"{row['case']}-{row['lang']}-{row['variant']}-{row['mode']}-r{row['rep']}"
            for side, s in zip(cell["sides"], (c.a, c.b), strict=True):
                assert side is not None, where
                assert side["citations"] == [[str(r["citation"]), r["id"], r["reason"]]
                                             for r in s.cited(call_id)], where
        if label == "demo pair":  # the baseline is deterministic: the two runs agree
            assert all(r["compared"] and r["differs"] is False for r in rows)
        else:  # 9 calls answered before the stop, answered otherwise than the baseline
            assert sum(bool(r["compared"]) for r in rows) == 9
            assert any(r["differs"] for r in rows)

        # The filters: each value of differs, then one case, then all again (all 72 cells on
        # one page, as above).
        wanted = {"true": [r["differs"] is True for r in rows],
                  "false": [r["differs"] is False for r in rows],
                  "not-compared": [not r["compared"] for r in rows]}
        values = page.eval_on_selector("form.filters select#filter-differs[name=filter-differs]",
                                       "s => [...s.options].map(o => o.value)")
        assert values[:3] == ["", "true", "false"] and set(values) <= {"", *wanted}, values
        for value in values[1:]:
            page.select_option("#filter-differs", value)
            now = shown(page, "article.cell")
            want = sum(wanted[value])
            assert len(now["notHidden"]) == want and now["visible"] == want, value
            assert re.search(rf"(?<!\d){want}(?!\d)", now["output"] or ""), now["output"]
        page.select_option("#filter-differs", "")
        case = rows[0]["case"]
        page.select_option("#filter-case", case)
        now = shown(page, "article.cell")
        assert now["visible"] == sum(r["case"] == case for r in rows)
        page.select_option("#filter-case", "")
        assert shown(page, "article.cell")["visible"] == len(rows)
        assert opened.network() == []
    with open_page(chromium, c.page, javascript=False) as opened:
        # Without JavaScript no cell is drawn and the page says why (as report.html for calls);
        # who A and B are and the counts are still there.
        assert shown(opened.page, "article.cell")["visible"] == 0
        assert opened.page.locator("#cells-need-js").is_visible()
        assert "JavaScript" in (opened.page.text_content("#cells-need-js") or "")
        assert opened.page.locator("#series dd[data-field=experiment]").count() == 2
        assert opened.network() == []


# -- `make test` installs Chromium where it can -------------------------------------------------

def fake_bin(folder: Path, *, uid: int, apt: int | None, chromium: bool) -> Path:
    """A PATH of stand-ins: `id` answering `uid`, an `apt-get` that logs its arguments and
    exits `apt` (None: no apt-get at all), a `timeout`, and a `chromium` when asked."""
    folder.mkdir()
    # `timeout` runs what it is given (its duration dropped), as coreutils' does in time.
    tools = {"id": f'#!/bin/sh\necho {uid}\n', "timeout": '#!/bin/sh\nshift\nexec "$@"\n'}
    if apt is not None:
        tools["apt-get"] = (f'#!/bin/sh\necho "$DEBIAN_FRONTEND $*" >> "{folder}/apt.log"\n'
                            f"exit {apt}\n")
    if chromium:
        tools["chromium"] = "#!/bin/sh\nexit 0\n"
    for name, body in tools.items():
        (folder / name).write_text(body, encoding="utf-8")
        (folder / name).chmod(stat.S_IRWXU)
    return folder


@pytest.mark.parametrize(("uid", "apt", "chromium", "says", "apt_log"), [
    (0, 0, True, "", None),
    (0, 0, False, "installing Debian's chromium",
     "noninteractive update -qq\nnoninteractive install -y -qq chromium\n"),
    (0, 100, False, "apt-get could not install chromium: the browser tests will be skipped",
     "noninteractive update -qq\n"),
    (1000, 0, False, "not root: the browser tests will be skipped", None),
    (0, None, False, "no apt-get: the browser tests will be skipped", None),
], ids=["present", "installs", "apt-fails", "not-root", "no-apt"])
def test_make_installs_chromium_only_where_missing_and_root(
        tmp_path: Path, uid: int, apt: int | None, chromium: bool, says: str,
        apt_log: str | None) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    path = fake_bin(tmp_path / "bin", uid=uid, apt=apt, chromium=chromium)
    ran = subprocess.run([make, "-s", "-f", str(ROOT / "Makefile"), "chromium"], cwd=tmp_path,
                         env={"PATH": str(path), "HOME": str(tmp_path)}, capture_output=True,
                         text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert says in ran.stdout and (says or ran.stdout == ""), ran.stdout
    skipping = [ln for ln in ran.stdout.splitlines() if "will be skipped" in ln]
    assert len(skipping) == ("will be skipped" in says), ran.stdout  # one line says why
    log = path / "apt.log"
    assert (log.read_text(encoding="utf-8") if log.exists() else None) == apt_log
