"""report.html: the evidence call by call, checked in process against the series' own tables.

The page is parsed with the standard library's HTML parser into a small tree (no browser: the
Chromium tests drive the filters, tests/report/test_browser.py). Three series: the offline demo (a
complete non-model baseline), a loopback model series whose first answer is crafted to hold
every reason (overlapping, repeated and misattributed extracts, markup in the answer) and that
stops at call 10, and an empty one: the first call fails, so nothing is ever answered and 71
calls are never sent. The DOM checked here is the contract the browser tests and the compare
page share (`/tmp/brief`: report.html's classes and data attributes).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import run_cli
from support.hostile_pages import (
    PAGE_JS,
    cut_prefix,
    hostile_series,
    islands,
    key_forms,
    page_js_source,
    scripts_and_policy,
)
from support.reports import Node, page_bytes, page_data, page_text, parse, utf16_slice
from support.suite import CANARY_KEY

from fragbench.redact import Redactor
from fragbench.report.html import REPORT_HTML, Segment, locate, render, segments
from fragbench.testing.loopback import Handler, Server, http_error, supplied_lines

pytestmark = pytest.mark.slow


# -- A small DOM ------------------------------------------------------------------------------


# -- What a page must hold, whatever the series ------------------------------------------------

def check_page(series_dir: Path) -> Node:
    """The contract, against calls.parquet, citations.parquet and status.json; the tree."""
    page = (series_dir / REPORT_HTML).read_text(encoding="utf-8")
    doc = parse(page)
    info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
    status = json.loads((series_dir / "status.json").read_text(encoding="utf-8"))
    calls = pl.read_parquet(series_dir / "calls.parquet").sort("seq")
    citations = pl.read_parquet(series_dir / "citations.parquet")

    # Self-contained: no URL to load, nothing but #anchors and data: URIs in a link or source.
    assert "http://" not in re.sub(r">[^<]*<", "><", page)  # in no tag (text may name one)
    assert "https://" not in page
    for node in doc.walk():
        for name, value in node.attrs.items():
            if name in ("src", "href", "action", "srcset", "poster"):
                assert value.startswith(("#", "data:")), (node.tag, name, value)
        assert node.tag not in ("link", "iframe", "object", "embed", "base"), node.tag
        if node.tag == "script":
            assert "src" not in node.attrs
    html = doc.one("html")
    assert html.attrs["lang"] == "en"
    assert (html.attrs["data-series"], html.attrs["data-experiment"], html.attrs["data-state"]) \
        == (info["series"], info["experiment"], status["state"])

    # The non-model caveat, in the sticky header, only for a baseline.
    caveats = [n for n in doc.walk() if "caveat" in n.classes]
    if info["is_model"]:
        assert caveats == [] and "non-model baseline" not in page
    else:
        assert len(caveats) == 1 and "non-model baseline" in caveats[0].text()
        header = caveats[0].ancestor("header", "top")
        assert header is not None
        assert re.search(r"header\.top \{[^}]*position: sticky", page)

    # What was run.
    run = {dd.attrs["data-field"]: dd.text() for dd in doc.one("dl", "run").all("dd")}
    stop = status.get("stop") or {}
    models = sorted({m for m in calls["model"].to_list() if m})
    assert run["plan_sha256"] == info["plan_sha256"]
    assert (run["backend"], run["endpoint"], run["spent_usd"], run["state"]) == (
        info["backend"], info["endpoint"], status["spent_usd"], status["state"])
    assert run["model"] == ", ".join(models)
    assert run["stop_reason"] == stop.get("reason", "")

    # Availability: the main setting's column is marked.
    table = doc.one("table", "availability")
    mains = [th for th in table.all("th") if "main" in th.classes]
    assert len(mains) == 1 and "(main)" in mains[0].text()

    # Every planned call in the page's data, in plan order (the script draws them).
    data = page_data(series_dir / REPORT_HTML)
    assert [c["id"] for c in data["calls"]] == calls["call_id"].to_list()
    assert doc.one("div", "call-list").children == []  # nothing drawn without the script
    assert f"The {calls.height} calls are drawn by the page's own script" in page
    by_call: dict[str, list[dict[str, Any]]] = {}
    for cite in citations.sort("call_id", "citation").to_dicts():
        by_call.setdefault(cite["call_id"], []).append(cite)
    for call, row in zip(data["calls"], calls.to_dicts(), strict=True):
        check_call(data, call, row, by_call.get(row["call_id"], []))

    # Filters: the five selects, each with "all" and the values the data holds, and search.
    form = doc.one("form", "filters")
    assert "hidden" in form.attrs  # inert without JavaScript: the script shows it
    for key, column in (("case", "case"), ("lang", "lang"), ("variant", "variant"),
                        ("mode", "mode")):
        select = next(s for s in form.all("select") if s.attrs["name"] == f"filter-{key}")
        assert select.attrs["id"] == f"filter-{key}"
        assert (select.attrs["data-field"], select.attrs["data-match"],
                select.attrs["data-state"]) == (column, "exact", key)  # what the script reads
        values = [o.attrs["value"] for o in select.all("option")]
        assert values[0] == "" and sorted(values[1:]) == sorted(calls[column].unique().to_list())
    reason = next(s for s in form.all("select") if s.attrs["name"] == "filter-reason")
    occurring = set(citations["reason"].to_list())
    assert {o.attrs["value"] for o in reason.all("option")} == {"", *occurring}
    assert (reason.attrs["data-field"], reason.attrs["data-match"]) == ("reasons", "word")
    assert form.one("input").attrs["type"] == "search"
    assert form.one("output", "shown").text() == str(calls.height)

    # The legend lists the reasons that occur, and only those.
    legend = [n for n in doc.walk() if "legend" in n.classes]
    assert len(legend) == 1
    shown = {c.removeprefix("r-") for n in legend[0].walk() for c in n.classes
             if c.startswith("r-")}
    assert shown == occurring
    return doc


def fragments_of(data: dict[str, Any], call: dict[str, Any]) -> list[dict[str, Any]]:
    """A call's fragments as the script draws them: fact ID, text, and the pieces cut for
    highlighting as (start in the text, piece text, citation numbers)."""
    found = []
    for entry in call["frags"]:
        text = data["texts"][entry[1]]
        pieces, at = [], 0
        for size, numbers in (entry[2] if len(entry) > 2 else [[len(text.encode(
                "utf-16-le")) // 2, []]]):
            piece = size if isinstance(size, str) else utf16_slice(text, at, size)
            pieces.append((len("".join(p[1] for p in pieces)), piece, numbers))
            at += 0 if isinstance(size, str) else size
        assert "".join(p[1] for p in pieces) == text
        found.append({"id": entry[0], "text": text, "pieces": pieces})
    return found


def check_call(data: dict[str, Any], call: dict[str, Any], row: dict[str, Any],
               cites: list[dict[str, Any]]) -> None:
    for key in ("case", "lang", "variant", "mode", "rep", "status"):
        assert call[key] == row[key], (row["call_id"], key)
    assert [c[3] for c in call["cites"]] == [c["reason"] for c in cites]

    fragments = fragments_of(data, call)
    assert [(f["id"], f["text"]) for f in fragments] == list(
        zip(row["supplied_ids"], row["supplied_texts"], strict=True))
    if row["status"] == "not_sent":
        assert call["words"] == "never sent" and call["cites"] == []
        assert all(len(entry) == 2 for entry in call["frags"])  # nothing highlighted
        assert "raw_response" not in call
        return

    assert [(c[0], c[1], c[3], c[4], c[2]) for c in call["cites"]] == [
        (c["citation"], c["id"], c["reason"], c["reason_folded"], c["extract"]) for c in cites]
    reason_of = {c["citation"]: c["reason"] for c in cites}
    marks = [(i, start, text, numbers) for i, f in enumerate(fragments)
             for start, text, numbers in f["pieces"] if numbers]
    for _, _, _, numbers in marks:
        assert numbers == sorted(numbers) and all(n in reason_of for n in numbers)
    shown = list(zip(row["supplied_ids"], row["supplied_texts"], strict=True))
    for cite in cites:
        n = cite["citation"]
        mine = [m for m in marks if n in m[3]]
        if cite["reason"] not in ("valid", "misattributed"):
            assert mine == [], cite
            continue
        # In the one fragment the rule names, at the extract's first occurrence there.
        if cite["reason"] == "valid":
            index = next(i for i, (fid, text) in enumerate(shown)
                         if fid == cite["id"] and cite["extract"] in text)
        else:
            index = next(i for i, (fid, text) in enumerate(shown)
                         if fid != cite["id"] and cite["extract"] in text)
        assert {m[0] for m in mine} == {index}, cite
        assert "".join(m[2] for m in mine) == cite["extract"], cite
        assert mine[0][1] == shown[index][1].find(cite["extract"]), cite

    if row["parsed"]:
        assert call["answer"] == row["answer"] and call["parsed"] is True
        assert "text" not in call  # never shown beside a parsed answer (the raw holds it)
    elif row["text"]:
        assert call["text"] == row["text"]
    usage = dict(zip((u[0] for u in data["usage"]), call["usage"], strict=True))
    assert usage["input_tokens"] == ("—" if row["input_tokens"] is None
                                     else str(row["input_tokens"]))
    assert call.get("raw_response") == row["raw_response"]
    assert call.get("error") == row["error"]


# -- Highlighting, by hand ---------------------------------------------------------------------

def test_segments_cut_overlapping_and_repeated_extracts() -> None:
    text = "The quick brown fox jumps."
    # 0: "quick brown" (4..15), 1: "brown fox" (10..19), 2: "quick brown" again
    got = segments(text, [(0, 4, 15), (1, 10, 19), (2, 4, 15)])
    assert got == [Segment("The ", ()), Segment("quick ", (0, 2)),
                   Segment("brown", (0, 1, 2)), Segment(" fox", (1,)),
                   Segment(" jumps.", ())]
    assert "".join(s.text for s in got) == text
    for n, start, end in [(0, 4, 15), (1, 10, 19), (2, 4, 15)]:
        assert "".join(s.text for s in got if n in s.citations) == text[start:end]


def test_segments_nested_adjacent_and_whole() -> None:
    text = "abcdefgh"
    assert segments(text, [(3, 0, 8), (1, 2, 4)]) == [
        Segment("ab", (3,)), Segment("cd", (1, 3)), Segment("efgh", (3,))]
    assert segments(text, [(0, 0, 3), (1, 3, 8)]) == [Segment("abc", (0,)),
                                                      Segment("defgh", (1,))]
    assert segments(text, []) == [Segment(text, ())]
    assert segments(text, [(0, 2, 2)]) == [Segment(text, ())]  # an empty span marks nothing
    assert segments("", []) == []
    with pytest.raises(ValueError, match="citation 4"):
        segments(text, [(4, 6, 9)])


def test_locate_follows_the_reason() -> None:
    shown = [("F1", "alpha beta"), ("F2", "beta gamma beta"), ("F1", "beta delta"),
             ("F3", "gamma")]
    # valid: the first text of the cited ID holding it (F1 is shown twice), first occurrence
    assert locate(shown, "F1", "beta", "valid") == (0, 6)
    assert locate(shown, "F1", "delta", "valid") == (2, 5)
    # misattributed: the first text under another ID holding it
    assert locate(shown, "F1", "beta", "misattributed") == (1, 0)
    assert locate(shown, "F2", "gamma", "misattributed") == (3, 0)
    # reasons with no place in what was shown, and an empty extract
    for reason in ("not_verbatim", "not_supplied", "unknown_id", "empty_extract"):
        assert locate(shown, "F1", "beta", reason) is None
    assert locate(shown, "F1", "", "valid") is None
    assert locate(shown, "F1", "zeta", "valid") is None


# -- Three series ------------------------------------------------------------------------------

def test_the_demo_series(extractive: Path) -> None:
    doc = check_page(extractive)
    citations = pl.read_parquet(extractive / "citations.parquet")
    data = page_data(extractive / REPORT_HTML)
    assert sum(len(c["cites"]) for c in data["calls"]) == citations.height > 0
    assert len(data["calls"]) == 72
    assert {c[3] for call in data["calls"] for c in call["cites"]} == {"valid"}
    # The summary: counts by mode, language and variant (no groups recorded here).
    tables = {t.attrs["data-by"]: t for t in doc.all("table", "summary-table")}
    assert list(tables) == ["mode", "lang", "variant"]
    assert all(t.attrs["data-group"] == "false" for t in tables.values())
    assert [[c.text() for c in r.children if not isinstance(c, str)]
            for r in tables["mode"].one("tbody").all("tr")] == [
        [mode, "36", "36", "36", "36", str(n), str(n), "0"]
        for mode, n in citations.group_by("mode").len().sort("mode").iter_rows()]
    # two figures, embedded
    images = doc.all("img")
    assert len(images) == 2 and all(i.attrs["src"].startswith("data:image/png;base64,")
                                    for i in images)
    # report.md is what a reader reads; the raw answers moved here
    report = (extractive / "report.md").read_text(encoding="utf-8")
    assert "[report.html](report.html)" in report and "## Limits" in report
    assert "Non-model baseline" in report and "Appendix" not in report
    assert "## Stops and errors" in report and '{"answer"' not in report
    assert len(report.splitlines()) < 250


def test_report_rewrites_the_same_page(extractive: Path) -> None:
    page = (extractive / REPORT_HTML).read_bytes()
    (extractive / REPORT_HTML).unlink()
    result = run_cli("report", str(extractive))
    assert result.returncode == 0, result.stderr
    assert (extractive / REPORT_HTML).read_bytes() == page
    assert render(extractive) == page.decode("utf-8")


ANSWER = "Here: <script>alert('x')</script> & <b>bold</b> \"quoted\""


def crafted(handler: Handler, number: int, body: dict[str, Any]) -> None:
    """An answer holding every reason: overlapping, repeated, misattributed extracts."""
    lines = supplied_lines(body)
    (first, one), (second, two) = lines[0], lines[1]
    unshown = next(f"F{i}" for i in range(1, 7) if f"F{i}" not in {fid for fid, _ in lines})
    citations = [
        {"id": first, "extract": one[:20]},  # 0 valid
        {"id": first, "extract": one[10:35]},  # 1 valid, overlapping 0
        {"id": first, "extract": one[:20]},  # 2 valid, the same as 0
        {"id": first, "extract": two[5:30]},  # 3 misattributed: it is under the second ID
        {"id": second, "extract": "words in no sentence"},  # 4 not verbatim
        {"id": unshown, "extract": "anything"},  # 5 not supplied
        {"id": "F99", "extract": "anything"},  # 6 unknown ID
        {"id": first, "extract": "  "},  # 7 empty
        {"id": second, "extract": "<i>" + two[:5]},  # 8 markup in an extract
        {"id": second, "extract": "e"},  # 9 valid, and in the first fragment too
    ]
    assert "e" in one and "e" in two
    text = json.dumps({"answer": ANSWER, "citations": citations})
    handler.send_json(200, handler.server.shape.body(text, number=number, request=body))


def collect(experiment: Path, server: Server, name: str) -> Path:
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", name, "--backend", "openai",
                     "--out", str(out),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 3, result.stderr  # both series stop
    return out / "protocol-1.0" / name


def test_a_stopped_model_series(experiment: Path, server: Server) -> None:
    server.script[0] = crafted
    server.script[9] = http_error(500)
    series_dir = collect(experiment, server, "stopped")
    reasons = pl.read_parquet(series_dir / "citations.parquet").filter(
        pl.col("call_id") == "price-en-A-retrieval-r1")["reason"].to_list()
    assert reasons == ["valid", "valid", "valid", "misattributed", "not_verbatim",
                       "not_supplied", "unknown_id", "empty_extract", "not_verbatim", "valid"]
    doc = check_page(series_dir)
    assert doc.one("html").attrs["data-state"] == "stopped"
    page = page_text(series_dir / REPORT_HTML)  # the page, then its data files' JSON
    data = page_data(series_dir / REPORT_HTML)
    calls = {c["id"]: c for c in data["calls"]}
    statuses = [c["status"] for c in calls.values()]
    assert statuses.count("not_sent") == 62 and statuses.count("failed") == 1
    first = calls["price-en-A-retrieval-r1"]
    pieces = [(f["id"], text, numbers) for f in fragments_of(data, first)
              for _, text, numbers in f["pieces"]]
    # overlapping and repeated extracts: one segment covered by 0, 1 and 2, none nested
    assert [0, 1, 2] in [numbers for _, _, numbers in pieces]
    misattributed = [(fid, text) for fid, text, numbers in pieces if numbers == [3]]
    cited = first["cites"][3]
    assert misattributed and cited[3] == "misattributed"
    assert misattributed[0][0] != cited[1] and cited[5] == misattributed[0][0]
    # markup from the model is in the data as text, its < escaped: no element can start
    assert "<script>alert" not in page and "<b>bold" not in page and "<i>" not in page
    assert "\\u003cscript\\u003ealert('x')\\u003c/script\\u003e" in page
    assert first["answer"] == ANSWER
    scripts, _ = scripts_and_policy(page)
    assert scripts and all("alert" not in s for s in scripts)
    # the failed call says why; the stop is named, and linked
    failed = next(c for c in calls.values() if c["status"] == "failed")
    assert (failed["failure"], failed["http_status"]) == ("http_error", 500)
    assert failed["stop_reason"] == "technical_failure"
    stop_link = next(dd for dd in doc.one("dl", "run").all("dd")
                     if dd.attrs["data-field"] == "stop_call")
    assert stop_link.one("a").attrs["href"] == f"#call-{failed['id']}"


def test_an_empty_series(experiment: Path, server: Server) -> None:
    """The first call fails: nothing is ever answered, the other 71 are never sent."""
    server.script[0] = http_error(500)
    series_dir = collect(experiment, server, "empty")
    assert pl.read_parquet(series_dir / "citations.parquet").height == 0
    doc = check_page(series_dir)
    data = page_data(series_dir / REPORT_HTML)
    assert all(c["cites"] == [] and all(len(f) == 2 for f in c["frags"]) for c in data["calls"])
    statuses = [c["status"] for c in data["calls"]]
    assert statuses.count("failed") == 1 and statuses.count("not_sent") == 71
    assert "No citation was recorded" in doc.one("p", "legend").text()
    report = (series_dir / "report.md").read_text(encoding="utf-8")
    assert "71 planned calls were not sent (the series stopped)." in report
    assert "| price-en-A-retrieval-r1 | failed | technical_failure |" in report


def test_jinja2_is_imported_only_to_write_a_page() -> None:
    """The report modules themselves import no Jinja2 (`--help`, `plugins` and `report --help`
    are covered with the other heavy libraries in test_plugins)."""
    done = subprocess.run([sys.executable, "-c", "import sys, fragbench.report.html, "
                           "fragbench.report.compare_html; print('jinja2' in sys.modules)"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_policy_allows_the_template_script_alone(experiment: Path, server: Server) -> None:
    """On a page full of hostile answers: exactly one <script> element, page.js as committed,
    and the Content-Security-Policy allows that script alone, by the sha256 of page.js's own
    bytes (never of something read from the page), and what it adds itself ('strict-dynamic':
    its data files beside the page; a script element in the page's markup is never one)."""
    path = hostile_series(experiment, server) / REPORT_HTML
    page = path.read_text(encoding="utf-8")
    scripts, policy = scripts_and_policy(page)
    assert scripts == [PAGE_JS.read_text(encoding="utf-8")]
    assert policy["script-src"] == page_js_source()
    assert policy["default-src"] == "'none'" and "unsafe" not in policy["script-src"]
    # page.js, and the calls' index as data (application/json: never run, whatever it holds)
    assert page.count("<script") == 2 and len(islands(page)) == 1
    assert page.count('<script type="application/json" id="fragbench-calls">') == 1
    # the answers' markup is in the data files beside it, as escaped data (each one call of
    # fragbenchData with a string: page_data reads every one of them)
    assert len(page_data(path)["calls"]) == 72
    data = page_text(path)
    assert "\\u003cscript\\u003e" in data and "onerror=" in data


def test_every_value_is_redacted_then_escaped(extractive: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A table holding the key (a series recorded before the key was a secret here, a table
    written by hand) never puts it on the page: each value goes through the redactor, in
    every form it handles, then through the escape; the rest of the value is shown."""
    forms = list(key_forms().items())
    calls = pl.read_parquet(extractive / "calls.parquet")
    first, second = calls.sort("seq")["call_id"][:2]
    shown = ("answer", "raw_response", "model", "refusal", "error", "incomplete_reason")
    values = {column: f"{column} <b>{' '.join(v for _, v in forms[i::len(shown)])}</b> "
                      f"\\u003cscript\\u003e {i}"
              for i, column in enumerate(shown)}
    # A key cut in two: this piece is found only where it ends a value (here the answer of
    # the second call; a redactor of the whole page would never see it there).
    calls = calls.with_columns(pl.when(pl.col("call_id") == second)
                               .then(pl.lit(f"cut here: {cut_prefix()}"))
                               .otherwise(pl.col("answer")).alias("answer"))
    calls = calls.with_columns(pl.when(pl.col("call_id") == first).then(pl.lit(value))
                               .otherwise(pl.col(column)).alias(column)
                               for column, value in values.items())
    calls.write_parquet(extractive / "calls.parquet")
    citations = pl.read_parquet(extractive / "citations.parquet")
    mine = pl.col("call_id") == first
    assert citations.filter(mine).height >= 1
    citations.with_columns(
        pl.when(mine).then(pl.lit(f"extract {forms[3][1]}")).otherwise(pl.col("extract"))
        .alias("extract"),
        pl.when(mine).then(pl.lit(forms[4][1])).otherwise(pl.col("id")).alias("id"),
    ).write_parquet(extractive / "citations.parquet")

    result = run_cli("report", str(extractive), env={"OPENAI_API_KEY": CANARY_KEY})
    assert result.returncode == 0, result.stderr
    data = page_bytes(extractive / REPORT_HTML)  # the page and every data file beside it
    text = data.decode("utf-8") + page_text(extractive / REPORT_HTML)  # and their JSON
    for form, value in [*forms, ("cut at a value's end", cut_prefix())]:
        assert value not in text, form
    assert CANARY_KEY.lower() not in text.lower()
    assert "<b>" not in text  # each value's markup is escaped in the data
    calls = {c["id"]: c for c in page_data(extractive / REPORT_HTML)["calls"]}
    assert calls[second]["answer"] == "cut here: [redacted]"
    call = calls[first]
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    redact = Redactor.from_env().text
    for column in ("answer", "raw_response", "refusal", "error", "incomplete_reason"):
        assert call[column] == redact(values[column]), column
        assert call[column].startswith(f"{column} <b>[redacted]"), column
    assert "model <b>[redacted]" in call["usage"][0]
    cites = call["cites"]
    assert cites and all(c[1] == redact(forms[4][1]) for c in cites)
    assert all(c[2] == redact(f"extract {forms[3][1]}") for c in cites)
