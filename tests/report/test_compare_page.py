"""`fragbench compare A B --html FILE`, the narrow screen summary, `differs`, and scan's state.

Pages are read back with the standard library's HTML parser (tests/report/test_browser.py drives a
real browser over them): what the DOM contract promises is checked on the parsed tree, with
the expected values taken from the series' own Parquet files, not from the page's code. The
pair page's cells are data (a JSON element) drawn by page.js: they are read from the page as
headless Chromium drew it (`drawn`, every cell on one page), the rest from the file.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.cli import run_cli
from support.hostile_pages import (
    PAGE_JS,
    hostile_series,
    key_forms,
    page_js_source,
    scripts_and_policy,
)
from support.reports import page_bytes, page_data, page_text
from support.series import loopback_series, three_series
from support.suite import CANARY_KEY

import fragbench
from fragbench.report.compare import (
    CELL,
    Comparison,
    Grid,
    compare,
    compare_grid,
    compare_series,
    differing_fields,
    grid_summary,
    summary,
)
from fragbench.testing.loopback import Server, http_error, ok

pytestmark = pytest.mark.slow

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None],
                 parent: Node | None = None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def elements(self) -> list[Node]:
        return [c for c in self.children if isinstance(c, Node)]

    def all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        """Descendants in document order, by tag and (one of their) class."""
        found = []
        for child in self.elements():
            classes = (child.attrs.get("class") or "").split()
            if (tag is None or child.tag == tag) and (cls is None or cls in classes):
                found.append(child)
            found += child.all(tag, cls)
        return found

    def one(self, tag: str | None = None, cls: str | None = None) -> Node:
        found = self.all(tag, cls)
        assert len(found) == 1, (tag, cls, len(found))
        return found[0]


class TreeBuilder(HTMLParser):
    """A tree of the page; entities and character references decoded, as a browser does."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.at = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs), self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.at.children.append(Node(tag, dict(attrs), self.at))

    def handle_endtag(self, tag: str) -> None:
        node = self.at
        while node.tag != tag:  # close what the end tag closes, as lenient parsers do
            assert node.parent is not None, f"stray </{tag}>"
            node = node.parent
        assert node.parent is not None
        self.at = node.parent

    def handle_data(self, data: str) -> None:
        self.at.children.append(data)


def parse(path: Path) -> Node:
    builder = TreeBuilder()
    builder.feed(path.read_text(encoding="utf-8"))
    builder.close()
    return builder.root


def squash(text: str) -> str:
    return " ".join(text.split())


URL_ATTRS = ("src", "href", "action", "srcset", "poster", "data", "formaction", "background")


def assert_self_contained(path: Path, doc: Node) -> None:
    """Nothing for a browser to load: no linked file, no remote script, style or font."""
    text = path.read_text(encoding="utf-8")
    for node in doc.all():
        assert node.tag not in ("link", "iframe", "object", "embed", "base"), node.tag
        for attr in URL_ATTRS:
            assert attr not in node.attrs, (node.tag, attr, node.attrs[attr])
    for node in doc.all("style") + doc.all("script"):
        assert not re.search(r"url\(|@import|fetch\(|XMLHttpRequest|import\(", node.text())
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)


def warnings_first(doc: Node) -> Node | None:
    """The warnings section, if it is the first thing in the page's body: the body opens with
    the sticky header (the report's base), and the warnings open the header."""
    header = doc.one("body").elements()[0]
    assert header.tag == "header" and "top" in header.attrs["class"].split()
    first = header.one("div", "inner").elements()[0]
    if first.tag == "section" and first.attrs.get("class") == "warnings":
        return first
    return None


def drawn(chromium: Any, path: Path) -> Node:
    """The pair page as page.js drew it in headless Chromium, 200 cells a page (every cell of
    these 72-cell pages), parsed like the file: the file holds no cell markup, only the data
    element and a note that the cells need JavaScript."""
    from support.browser import open_page

    doc = parse(path)
    assert cells(doc) == []
    assert "JavaScript" in doc.one("p", "needs-js").text()
    with open_page(chromium, path) as opened:
        opened.page.select_option("#page-size", "200")
        html: str = opened.page.evaluate("() => document.documentElement.outerHTML")
        assert opened.elsewhere() == []
    builder = TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


def cells(doc: Node) -> list[Node]:
    return doc.all("article", "cell")


def key_of(cell: Node) -> tuple[Any, ...]:
    a = cell.attrs
    return (a["data-case"], a["data-lang"], a["data-variant"], a["data-mode"],
            int(a["data-rep"] or 0))


def side(cell: Node, letter: str) -> Node:
    return cell.one("div", f"side-{letter}")


def citations_of(series_dir: Path) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Cell key -> that call's citations.parquet rows, in answer order."""
    calls = pl.read_parquet(series_dir / "calls.parquet", columns=["call_id", *CELL])
    rows = pl.read_parquet(series_dir / "citations.parquet").join(calls, on="call_id")
    found: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows.sort("call_id", "citation").to_dicts():
        found.setdefault(tuple(row[c] for c in CELL), []).append(row)
    return found


def assert_citations_shown(page_side: Node, expected: list[dict[str, Any]]) -> None:
    shown = page_side.all("li", "citation")
    assert [(li.attrs["data-citation"], li.attrs["data-cited-id"], li.attrs["data-reason"],
             li.attrs["data-reason-folded"]) for li in shown] == \
        [(str(r["citation"]), r["id"], r["reason"], r["reason_folded"]) for r in expected]
    for li, row in zip(shown, expected, strict=True):
        assert li.one("q", "extract").text() == row["extract"]


def unwrap(lines: list[str]) -> list[str]:
    """Screen lines with the wrapped ones (continued on indented lines) joined again."""
    joined: list[str] = []
    for line in lines:
        if line.startswith("    ") and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return joined


def summary_of(stdout: str) -> tuple[list[str], list[str], str]:
    """The screen output: lines before the column heading, the cell lines, the closing line."""
    lines = stdout.splitlines()
    # Every line fits 100 columns but one naming a path the test does not choose (its
    # temporary folder, longer as pytest's numbering grows).
    fitted = [line for line in lines if " written to /" not in line]
    assert all(len(line) <= 100 for line in fitted), max(fitted, key=len)
    head = next(i for i, line in enumerate(lines) if re.match(r"differs +status A / B ", line))
    end = next(i for i, line in enumerate(lines) if re.match(r"\d+ cells: ", line))
    return lines[:head], lines[head + 1:end], lines[end]


def test_demo_pair_page_all_compared_none_differs(chromium: Any, extractive: Path,
                                                  tmp_path: Path) -> None:
    again = extractive.parent / "extractive-again"
    shutil.copytree(extractive, again)
    page, out = tmp_path / "cmp.html", tmp_path / "cmp.parquet"
    result = run_cli("compare", str(extractive), str(again), "--html", str(page),
                     "--out", str(out))
    assert result.returncode == 0, result.stderr
    before, cell_lines, closing = summary_of(result.stdout)
    assert before == ["A: extractive (extractive, NON-MODEL BASELINE)",
                      "B: extractive (extractive, NON-MODEL BASELINE)"]
    assert len(cell_lines) == 72 and all(line.startswith("same  ") for line in cell_lines)
    assert cell_lines[0].split() == ["same", "completed", "/", "completed", "2", "/", "2",
                                     "delay", "en", "A", "full", "r1"]
    assert closing == "72 cells: 72 compared, of which 0 differ and 72 are the same; " \
                      "0 not compared."
    table = pl.read_parquet(out)
    assert table["compared"].all() and table["differs"].to_list() == [False] * 72

    doc = parse(page)
    assert_self_contained(page, doc)
    html = doc.one("html")
    assert html.attrs["data-page"] == "compare"
    assert doc.all("section", "warnings") == [] and warnings_first(doc) is None
    assert len(doc.all(cls="caveat")) == 2
    assert all("non-model baseline" in c.text() for c in doc.all(cls="caveat"))
    shown = cells(drawn(chromium, page))
    assert [key_of(c) for c in shown] == [tuple(r[c] for c in CELL)
                                          for r in table.to_dicts()]
    assert {(c.attrs["data-compared"], c.attrs["data-differs"]) for c in shown} == \
        {("true", "false")}
    assert all(c.all(cls="note") == [] for c in shown)
    expected = citations_of(extractive)
    for cell in shown:  # the same call's citations, side by side, as citations.parquet has them
        assert_citations_shown(side(cell, "a"), expected[key_of(cell)])
        assert_citations_shown(side(cell, "b"), expected[key_of(cell)])
    # Filters: one select per contract name, each with "all" and the values of the data.
    form = doc.one("form", "filters")
    assert "hidden" in form.attrs  # shown by the script only: without it, nothing inert
    selects = {s.attrs["id"]: [o.attrs["value"] for o in s.all("option")]
               for s in form.all("select")}
    assert selects["filter-case"] == ["", "delay", "hosting", "price"]
    assert selects["filter-lang"] == ["", "en", "fr"]
    assert selects["filter-mode"] == ["", "full", "retrieval"]
    assert selects["filter-differs"] == ["", "true", "false"]
    assert selects["filter-compared"] == ["", "true", "false"]
    assert form.one("output", "shown").text() == "72"


def copy_series(series_dir: Path, name: str) -> Path:
    """A copy of a recorded series under another name (its tables unchanged)."""
    copy = series_dir.parent / name
    shutil.copytree(series_dir, copy)
    for file in ("series.json", "status.json"):
        info = json.loads((copy / file).read_text(encoding="utf-8"))
        (copy / file).write_text(json.dumps({**info, "series": name}), encoding="utf-8")
    return copy


def test_conditions_cited_validly_are_compared_as_sets(extractive: Path) -> None:
    again = copy_series(extractive, "extractive-again")
    path = again / "citations_per_call.parquet"
    per_call = pl.read_parquet(path)
    assert per_call["conditions_cited_validly"].list.len().max() >= 2
    per_call.with_columns(pl.col("conditions_cited_validly").list.reverse()).write_parquet(path)
    _, table = compare(extractive, again)
    assert table["differs"].to_list() == [False] * 72  # the same conditions, in another order
    first = per_call["call_id"][0]
    per_call.with_columns(
        pl.when(pl.col("call_id") == first).then(pl.col("conditions_cited_validly").list.head(1))
        .otherwise(pl.col("conditions_cited_validly"))).write_parquet(path)
    _, table = compare(extractive, again)
    key = tuple(per_call.filter(pl.col("call_id") == first).select(CELL).row(0))
    assert table.filter(pl.col("differs")).select(CELL).rows() == [key]


def test_a_cell_differing_only_in_invalid_citations_differs(extractive: Path) -> None:
    """README: a cell differs when "its valid or invalid citation counts" differ. Here one
    call of the copy cites one more sentence invalidly: its valid citations, the conditions
    it cites validly, its status and whether it parsed are the same as the original's. That
    cell, and only it, differs (pair and grid), and the field named is the invalid count."""
    again = copy_series(extractive, "extractive-again")
    path = again / "citations_per_call.parquet"
    per_call = pl.read_parquet(path)
    first = per_call["call_id"][0]
    one_more = pl.col("call_id") == first
    per_call.with_columns(pl.when(one_more).then(pl.col(c) + 1).otherwise(pl.col(c)).alias(c)
                          for c in ("n_invalid", "n_citations")).write_parquet(path)
    key = tuple(per_call.filter(one_more).select(CELL).row(0))
    comparison = compare_series(extractive, again)
    table = comparison.table
    row = table.filter(pl.struct(CELL) == pl.lit(dict(zip(CELL, key, strict=True)))).row(
        0, named=True)
    assert row["n_valid_a"] == row["n_valid_b"] and row["n_invalid_a"] + 1 == row["n_invalid_b"]
    assert table.filter(pl.col("differs")).select(CELL).rows() == [key]
    assert [f for f in differing_fields(table) if f] == [["n_invalid"]]
    grid = compare_grid([extractive, extractive, again])
    assert grid.table.filter(pl.col("differs")).select(CELL).rows() == [key]


def synthetic_pair(cells: list[tuple[str, bool | None]]) -> Comparison:
    """A comparison of made-up cells (case name, differs; None: not compared), for the
    terminal's layout alone."""
    info = {"series": "s", "label": "l", "is_model": False}
    rows = [{"case": case, "lang": "en", "variant": "A", "mode": "full", "rep": 1,
             "compared": differs is not None, "differs": differs,
             "status_a": "completed", "status_b": "completed" if differs is not None else None,
             "n_valid_a": 3, "n_valid_b": 2 if differs else 3,
             "note": "" if differs is not None else "cell absent from B"}
            for case, differs in cells]
    return Comparison(Path("a"), Path("b"), info, info, [], pl.DataFrame(rows))


def test_a_wrapped_line_never_carries_a_verdict_onto_the_next_cell() -> None:
    """Cells whose names fill the screen: their lines wrap. Every line that starts at the
    margin opens with its own cell's verdict (differs, same or not compared) and holds its
    counts; what wraps, indented, is the rest of that cell's name (the last column), never a
    verdict or a count that could be read as the next cell's. The pair and the grid alike."""
    long = ["x" * 70 + "-one", "y" * 75 + "-two", "z" * 80 + "-three"]
    comparison = synthetic_pair([(long[0], True), (long[1], False), (long[2], None)])
    grid = Grid([Path("a"), Path("b")], [comparison.info_a] * 2, [], comparison.table.rename(
        {"status_a": "status_S1", "status_b": "status_S2", "n_valid_a": "n_valid_S1",
         "n_valid_b": "n_valid_S2"}).with_columns(
        pl.lit(0).alias("n_invalid_S1"), pl.lit(0).alias("n_invalid_S2")))
    counts = {"pair": ["3 / 2", "3 / 3", "3 / 3"],
              "grid": ["3v/0x  completed 2v/0x", "3v/0x  completed 3v/0x", "3v/0x  absent"]}
    for kind, lines in (("pair", summary(comparison)), ("grid", grid_summary(grid))):
        assert all(len(line) <= 100 for line in lines)
        body = lines[3:-1]  # after A/B (S1/S2) and the heading, before the counts
        assert any(ln.startswith("    ") for ln in body)  # the long cells did wrap
        opened = [ln for ln in body if not ln.startswith("    ")]
        verdicts = [re.match(r"(differs|same|not compared)  ", ln) for ln in opened]
        assert [m.group(1) if m else None for m in verdicts] == [
            "differs", "same", "not compared"], kind
        for line in body:
            if line.startswith("    "):
                assert not re.search(r"differs|same|not compared|[0-9] / [0-9]|[0-9]v/", line)
        joined = unwrap(body)
        for row, name, count in zip(joined, long, counts[kind], strict=True):
            assert count in row and row.endswith(f"{name} en A full r1"), (kind, row)


def test_long_lines_wrap_within_100_columns(extractive: Path) -> None:
    name = "extractive-" + "with-a-long-name-" * 6
    again = copy_series(extractive, name.rstrip("-"))
    result = run_cli("compare", str(extractive), str(again))
    assert result.returncode == 0, result.stderr
    before, cell_lines, _ = summary_of(result.stdout)  # every line within 100 columns
    assert len(before) == 3 and before[2].startswith("    ")
    # A word longer than a line is cut where the line ends, with no character lost.
    assert len(before[1]) == 100
    assert before[1] + before[2].strip() == \
        f"B: {name.rstrip('-')} (extractive, NON-MODEL BASELINE)"
    assert len(cell_lines) == 72


def expected_differs(a: Path, b: Path) -> dict[tuple[Any, ...], bool]:
    """`differs` worked out from the two series' tables, in plain Python."""
    def by_cell(series_dir: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
        calls = pl.read_parquet(series_dir / "calls.parquet", columns=["call_id", "status"])
        per_call = pl.read_parquet(series_dir / "citations_per_call.parquet")
        return {tuple(r[c] for c in CELL): r
                for r in per_call.join(calls, on="call_id").to_dicts()}

    side_a, side_b = by_cell(a), by_cell(b)
    result = {}
    for key, ra in side_a.items():
        rb = side_b[key]
        result[key] = any(ra[f] != rb[f] for f in ("status", "parsed", "n_valid", "n_invalid")) \
            or set(ra["conditions_cited_validly"] or []) != \
            set(rb["conditions_cited_validly"] or [])
    return result


def test_model_series_beside_the_baseline_differs_where_the_tables_do(
        chromium: Any, extractive: Path, experiment: Path, server: Server, tmp_path: Path) -> None:
    openai = loopback_series(experiment, server, "openai")
    page, out = tmp_path / "cmp.html", tmp_path / "cmp.jsonl"
    result = run_cli("compare", str(extractive), str(openai), "--html", str(page),
                     "--out", str(out))
    assert result.returncode == 0, result.stderr
    _, cell_lines, closing = summary_of(result.stdout)
    expected = expected_differs(extractive, openai)
    n_differ = sum(expected.values())
    assert 0 < n_differ < 72  # both kinds occur
    assert closing == f"72 cells: 72 compared, of which {n_differ} differ and " \
                      f"{72 - n_differ} are the same; 0 not compared."
    assert [line.split()[0] for line in cell_lines] == \
        ["differs" if expected[k] else "same" for k in sorted(expected)]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {tuple(r[c] for c in CELL): r["differs"] for r in rows} == expected

    # One cell by hand: the loopback model cites the first supplied sentence by its first five
    # words (one valid citation); the extractive baseline cites every supplied condition. In
    # delay/en/A/full/r1 it cites F5 and F6 (the demo page test shows it), so valid 2 / 1.
    doc = parse(page)
    assert_self_contained(page, doc)
    assert len(doc.all(cls="caveat")) == 1 and "A, extractive" in doc.one(cls="caveat").text()
    doc = drawn(chromium, page)
    cell = next(c for c in cells(doc) if key_of(c) == ("delay", "en", "A", "full", 1))
    assert cell.attrs["data-compared"] == "true" and cell.attrs["data-differs"] == "true"
    assert [li.attrs["data-cited-id"] for li in side(cell, "a").all("li", "citation")] == \
        ["F5", "F6"]
    calls = pl.read_parquet(openai / "calls.parquet").filter(
        pl.col("call_id") == "delay-en-A-full-r1").to_dicts()[0]
    first_id, first_text = calls["supplied_ids"][0], calls["supplied_texts"][0]
    (only,) = side(cell, "b").all("li", "citation")
    assert only.attrs["data-cited-id"] == first_id and only.attrs["data-reason"] == "valid"
    assert only.one("q", "extract").text() == " ".join(first_text.split()[:5])
    assert side(cell, "b").one(cls="answer").text() == "See the cited sentence."
    assert "valid citations" in cell.one(cls="differing").text()
    cell_of = "delay en A full r1"
    line = next(ln for ln in cell_lines if " ".join(ln.split()[-5:]) == cell_of)
    assert line.split()[0] == "differs" and line.split()[4:7] == ["2", "/", "1"]
    for cell in cells(doc):
        assert cell.attrs["data-differs"] == str(expected[key_of(cell)]).lower()


def test_stopped_series_warns_first_and_marks_cells_not_compared(
        chromium: Any, extractive: Path, experiment: Path, server: Server, tmp_path: Path) -> None:
    server.script[9] = http_error(500)
    stopped = loopback_series(experiment, server, "openai-stopped")
    page = tmp_path / "cmp.html"
    result = run_cli("compare", str(extractive), str(stopped), "--html", str(page))
    assert result.returncode == 0, result.stderr
    before, cell_lines, closing = summary_of(result.stdout)
    warnings = unwrap(before)[:-2]  # then who is A, who is B
    assert warnings[0].startswith("WARNING: series B, openai-stopped, is stopped at call 10")
    assert warnings[1] == "WARNING: 63 of 72 cells are not compared (each says why); " \
                          "they are never counted as compared."
    not_compared = [ln for ln in cell_lines if ln.startswith("not compared  ")]
    assert len(not_compared) == 63
    assert sum(" completed / not_sent " in ln for ln in not_compared) == 62
    assert sum(" completed / failed " in ln for ln in not_compared) == 1
    n_differ = sum(ln.startswith("differs  ") for ln in cell_lines)
    assert closing == f"72 cells: 9 compared, of which {n_differ} differ and {9 - n_differ} " \
                      "are the same; 63 not compared."

    doc = parse(page)
    assert_self_contained(page, doc)
    assert warnings_first(doc) is not None  # before anything else, the same lines as on screen
    first = warnings_first(doc)
    assert [squash(p.text()) for p in first.all("p", "warning")] == warnings
    missing = [c for c in cells(drawn(chromium, page)) if c.attrs["data-compared"] == "false"]
    assert len(missing) == 63
    for cell in missing:
        assert cell.attrs["data-differs"] == ""  # not compared: neither same nor different
        status_b = side(cell, "b").attrs["data-status"]
        assert cell.one("p", "note").text() == f"not compared: A completed, B {status_b}"
        if status_b == "not_sent":
            assert side(cell, "b").one(cls="status").text() == "never sent"
            assert side(cell, "b").all("li", "citation") == []
    assert {side(c, "b").attrs["data-status"] for c in missing} == {"not_sent", "failed"}
    failed = next(c for c in missing if side(c, "b").attrs["data-status"] == "failed")
    call = pl.read_parquet(stopped / "calls.parquet").filter(pl.col("seq") == 10).row(
        0, named=True)
    assert call["failure"] == "http_error" and call["http_status"] == 500 and call["error"]
    assert side(failed, "b").one(cls="error").text() == f"http_error (HTTP 500): {call['error']}"


def test_markup_in_an_answer_is_shown_as_text(chromium: Any, extractive: Path, experiment: Path,
                                              server: Server, tmp_path: Path) -> None:
    answer = "<script>alert('answer')</script> & <b>bold</b> \"quoted\""
    extract = "<img src=x onerror=alert(1)>"
    server.script[0] = ok(text=json.dumps({"answer": answer, "citations": [
        {"id": "<i>F1</i>", "extract": extract}]}))
    openai = loopback_series(experiment, server, "openai")
    first = pl.read_parquet(openai / "calls.parquet").filter(pl.col("seq") == 1).to_dicts()[0]
    page = tmp_path / "cmp.html"
    result = run_cli("compare", str(extractive), str(openai), "--html", str(page))
    assert result.returncode == 0, result.stderr
    doc = parse(page)
    assert_self_contained(page, doc)
    # The page's own script and its data element, nothing from the answer: in the file and
    # in the page page.js drew.
    assert [s.attrs.get("type") for s in doc.all("script")] == ["application/json", None]
    doc = drawn(chromium, page)
    assert [s.attrs.get("type") for s in doc.all("script")] == ["application/json", None]
    assert doc.all("img") == [] and doc.all("b") == [] and doc.all("i") == []
    cell = next(c for c in cells(doc) if key_of(c) == tuple(first[c] for c in CELL))
    assert side(cell, "b").one(cls="answer").text() == answer
    (citation,) = side(cell, "b").all("li", "citation")
    assert citation.attrs["data-cited-id"] == "<i>F1</i>"
    assert citation.attrs["data-reason"] == "unknown_id"
    assert citation.one("q", "extract").text() == extract
    # The answer is in the data files beside the page, its markup as \u escapes
    # (pagedata.island), and nowhere in the page itself.
    assert json.dumps(answer)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e").replace(
        "&", "\\u0026") in page_text(page)
    assert "alert('answer')" not in page.read_text(encoding="utf-8")


def test_hostile_answers_one_script_allowed_by_its_hash_and_no_key(
        extractive: Path, experiment: Path, server: Server, tmp_path: Path) -> None:
    """The baseline beside a series of hostile answers (markup plain and as escapes, tokens,
    the key in every form the redactor handles): the page's one <script> is page.js, the
    policy allows it alone by the sha256 of page.js's bytes, and the key is on it in no form,
    even where the series' table holds it (written by hand, or before it was a secret here)."""
    hostile = hostile_series(experiment, server)
    forms = " ".join(key_forms().values())
    calls = pl.read_parquet(hostile / "calls.parquet")
    calls.with_columns(pl.when(pl.col("seq") <= 4).then(pl.concat_str(pl.col(c), pl.lit(forms)))
                       .otherwise(pl.col(c)).alias(c) for c in ("answer", "refusal", "text",
                                                                 "model")
                       ).write_parquet(hostile / "calls.parquet")
    page = tmp_path / "hostile.html"
    result = run_cli("compare", str(extractive), str(hostile), "--html", str(page),
                     env={"OPENAI_API_KEY": CANARY_KEY})
    assert result.returncode == 0, result.stderr
    text = page.read_text(encoding="utf-8")
    scripts, policy = scripts_and_policy(text)
    assert scripts == [PAGE_JS.read_text(encoding="utf-8")]
    assert policy["script-src"] == page_js_source() and policy["default-src"] == "'none'"
    assert text.count("<script") == 2  # page.js and the cells' index
    assert '<script type="application/json" id="fragbench-cells">' in text
    # the answers' markup, as escapes in the data files (each one call of fragbenchData)
    assert len(page_data(page, "cells")["cells"]) == 72
    text = page_bytes(page).decode("utf-8") + page_text(page)  # every byte written
    assert "\\u003cscript\\u003e" in text and "onerror=" in text
    for form, value in key_forms().items():
        assert value not in text, form
    assert CANARY_KEY.lower() not in text.lower()
    doc = parse(page)  # (assert_self_contained reads text too: here the text names URLs)
    assert all(not set(URL_ATTRS) & set(node.attrs) for node in doc.all())
    assert doc.all("img") == [] and doc.all("a") == [] and doc.all("svg") == []
    assert [m.attrs["http-equiv"] for m in doc.all("meta") if "http-equiv" in m.attrs] == [
        "Content-Security-Policy"]


def test_scan_state_filters_out_a_stopped_series(extractive: Path, experiment: Path,
                                                 server: Server) -> None:
    server.script[9] = http_error(500)
    loopback_series(experiment, server, "openai-stopped")
    tables = fragbench.scan(extractive.parent)
    series = tables["series"].sort("series").collect()
    assert series.select("series", "state", "series_stop_reason", "is_model", "calls_planned",
                         "calls_sent").rows() == [
        ("extractive", "complete", None, False, 72, 72),
        ("openai-stopped", "stopped", "technical_failure", True, 72, 10)]
    for name, frame in tables.items():  # every table carries the series' state
        columns = frame.collect_schema().names()
        assert {"experiment", "series", "state", "series_stop_reason"} <= set(columns), name
    calls = tables["calls"]
    complete = calls.filter(pl.col("state") == "complete").collect()
    assert complete["series"].unique().to_list() == ["extractive"] and complete.height == 72
    stopped = calls.filter(pl.col("state") == "stopped").collect()
    # The series' reason on every row; the calls' own stop_reason only where it stopped.
    assert stopped["series_stop_reason"].unique().to_list() == ["technical_failure"]
    assert stopped.filter(pl.col("stop_reason").is_not_null())["seq"].to_list() == [10]
    # One semi join with the series table keeps the complete model series' rows: none here.
    keep = tables["series"].filter(pl.col("state") == "complete", pl.col("is_model"))
    kept = tables["citations_per_call"].join(keep, on=["experiment", "series"], how="semi")
    assert kept.collect().height == 0
    keep = tables["series"].filter(pl.col("state") == "complete")
    kept = tables["usage"].join(keep, on=["experiment", "series"], how="semi").collect()
    assert kept["series"].unique().to_list() == ["extractive"]


def test_a_bad_html_path_is_refused_before_anything_is_written(extractive: Path,
                                                                tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("a file, not a folder", encoding="utf-8")
    out = tmp_path / "table.parquet"
    result = run_cli("compare", str(extractive), str(extractive), "--out", str(out),
                     "--html", str(blocker / "page.html"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"fragbench: --html {blocker / 'page.html'}: {blocker} is "
                                    "a file, not a folder")
    assert not out.exists()


# -- More than two series: the grid ---------------------------------------------------------------


def test_three_series_grid_on_screen_and_differs_only(extractive: Path, tmp_path: Path) -> None:
    series = [str(p) for p in three_series(extractive)]
    whole = run_cli("compare", *series, "--out", str(tmp_path / "grid.parquet"))
    assert whole.returncode == 0, whole.stderr
    lines = whole.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:3]] == ["S1", "S2", "S3"]
    assert lines[3].split() == ["differs", "S1", "S2", "S3", "cell"]
    assert len([ln for ln in lines[4:] if ln.startswith(("same  ", "differs  "))]) == 72
    assert "72 cells: 72 compared, of which 1 differ and 71 are the same" in whole.stdout
    table = pl.read_parquet(tmp_path / "grid.parquet")
    assert table.height == 72 and {"status_S1", "status_S3", "n_valid_S3"} <= set(table.columns)
    # The columns name the series as the terminal does (S1, S2, S3), never by a position from
    # 0; who each is, and the warnings, are written once beside the table.
    assert not [c for c in table.columns if re.search(r"_[0-9]+$", c)]
    named = {c.rsplit("_", 1)[1] for c in table.columns if re.search(r"_S[0-9]+$", c)}
    assert named == {ln.split(":")[0] for ln in lines[:3]} and "warning" not in table.columns
    about = json.loads((tmp_path / "grid.parquet.json").read_text(encoding="utf-8"))
    assert [f"{s['side']}: {s['series']}" for s in about["sides"]] == [
        ln.split(" (")[0] for ln in lines[:3]]
    assert about["warnings"] == [] and about["counts"]["differing"] == 1
    assert table.filter(pl.col("differs"))["case"].to_list() == ["price"]
    only = run_cli("compare", *series, "--differs-only")
    cells = [ln for ln in only.stdout.splitlines() if ln.startswith("differs  ")
             and not re.match(r"differs +S1 ", ln)]
    assert [ln.split() for ln in cells] == [
        next(ln for ln in lines if " ".join(ln.split()[-5:]) == "price en A full r2").split()]
    assert "5v/0x" in cells[0] and "4v/0x" in cells[0]
    two = run_cli("compare", series[0], series[2], "--differs-only")
    assert [" ".join(ln.split()[-5:]) for ln in two.stdout.splitlines()
            if ln.startswith("differs  ") and not re.match(r"differs +status ", ln)] == [
        "price en A full r2"]
    one = run_cli("compare", series[0])
    assert one.returncode == 2 and "two or more series" in one.stderr


def test_three_series_grid_page(extractive: Path, tmp_path: Path) -> None:
    series = [str(p) for p in three_series(extractive)]
    page = tmp_path / "grid.html"
    done = run_cli("compare", *series, "--html", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert '<tr class="cell-row"' not in text  # the rows are data, beside the page
    rows = page_data(page, "cells")["cells"]
    assert len(rows) == 72 and [r["differs"] for r in rows].count("true") == 1
    assert [r["anchor"] for r in rows] == ["-".join(str(r[c]) for c in CELL) for r in rows]
    scripts, policy = scripts_and_policy(text)
    assert scripts == [PAGE_JS.read_text(encoding="utf-8")]
    assert policy["script-src"] == page_js_source()
    assert 'id="filter-differs"' in text and "differs only" in text


def test_grid_outlines_a_series_differing_only_in_its_conditions(extractive: Path,
                                                                  tmp_path: Path) -> None:
    """A series whose cell has the same status and counts as S1's but cites another set of
    conditions validly: the row differs (DIFFERS_ON holds that set), and that series' column
    is the one outlined, naming the field. The same conditions in another order differ in
    nothing."""
    made = three_series(extractive)
    (made[2] / "citations_per_call.parquet").unlink()  # S3: as S1 again
    shutil.copy(made[0] / "citations_per_call.parquet", made[2] / "citations_per_call.parquet")
    for index, change in ((1, "reverse"), (2, "swap")):
        path = made[index] / "citations_per_call.parquet"
        table = pl.read_parquet(path)
        many = table.filter(pl.col("conditions_cited_validly").list.len() >= 2)["call_id"][0]
        conditions = pl.col("conditions_cited_validly")
        changed = conditions.list.reverse() if change == "reverse" else \
            conditions.list.head(1).list.concat(pl.lit(["C-not-cited"]))
        table.with_columns(pl.when(pl.col("call_id") == many).then(changed)
                           .otherwise(conditions).alias("conditions_cited_validly")
                           ).write_parquet(path)
    page = tmp_path / "grid.html"
    done = run_cli("compare", *map(str, made), "--html", str(page))
    assert done.returncode == 0, done.stderr
    rows = [r for r in page_data(page, "cells")["cells"] if r["differs"] == "true"]
    assert len(rows) == 1
    outlined = [(f"S{k + 1}", " ".join(side["differing"]))
                for k, side in enumerate(rows[0]["sides"]) if side["differing"]]
    assert outlined == [("S3", "conditions_cited_validly")]


def documented_compare_tables() -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """docs/tables.md's `compare --out` section, read as a reader reads it: the pair's columns,
    the grid's (with `<i>` for a series' number), and the paragraph on FILE.json."""
    from support.suite import ROOT

    text = (ROOT / "docs" / "tables.md").read_text(encoding="utf-8")
    section = text.split("## compare --out", 1)[1].split("\n## ", 1)[0]
    tables = [re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| .+ \|$", part, re.MULTILINE)
              for part in section.split("| column | type | meaning |")[1:]]
    return tables[0], tables[1], section.split("`FILE.json`:", 1)[1]


def test_compare_out_is_what_docs_tables_says(extractive: Path, tmp_path: Path) -> None:
    """Both tables of `compare --out` (two series, and three) have exactly the columns,
    order and types docs/tables.md gives, the grid's named S1, S2, S3 as on screen; FILE.json
    holds what the page lists, each side's keys included."""
    from fragbench.schemas import type_name

    pair_doc, grid_doc, about_doc = documented_compare_tables()
    series = [str(p) for p in three_series(extractive)]
    for names, out, doc in ((series[:2], tmp_path / "pair.parquet", pair_doc),
                            (series, tmp_path / "grid.parquet", grid_doc)):
        done = run_cli("compare", *names, "--out", str(out))
        assert done.returncode == 0, done.stderr
        written = [(c, type_name(t)) for c, t in pl.read_parquet_schema(out).items()]
        n = len(names)
        fixed = [(c, t) for c, t in doc if "<i>" not in c]
        per_series = [(c, t) for c, t in doc if "<i>" in c]
        expected = fixed + [(c.replace("<i>", str(i)), t) for i in range(1, n + 1)
                            for c, t in per_series]
        assert written == expected, out.name
        about = json.loads(out.with_name(out.name + ".json").read_text(encoding="utf-8"))
        assert list(about) == ["sides", "warnings", "counts"]
        assert all(f"`{key}`" in about_doc for key in [*about, *about["sides"][0],
                                                         *about["counts"]])
