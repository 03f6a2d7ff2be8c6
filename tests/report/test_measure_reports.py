"""Every primary measure's tables appear in report.md and report.html: the built-ins keep their
sections; any other primary measure gets a section of its own, by default its tables (the
first rows, the row count said), or the titled frames of its own `summary(tables)`, drawn by
the core: every value redacted and escaped, never markup from a plugin.

One series is run for the module (in process, the offline baseline) with two plugin measures
listed in the experiment's `measures` and refrozen: `cell-cost` (default rendering) and
`notes` (a summary whose title, column and values hold markup and a key).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.browser import open_page, settled, text_of
from support.cli import refreeze, run_cli
from support.measure_plugin import Install, cell_cost, installer
from support.reports import parse
from support.suite import CANARY_KEY, COMMITTED_EXPERIMENTS, ROOT

from fragbench.report.html import REPORT_HTML
from fragbench.report.markdown import SHOWN_ROWS

pytestmark = pytest.mark.slow

HOSTILE = (f'<script>window.__pwned = 1</script> {CANARY_KEY} '
           '<img src=x onerror="window.__pwned = 2">')
NOTES = f'''
import polars as pl
from fragbench.hookspecs import hookimpl


class Notes:
    name = "notes"
    api_version = "1.0"
    kind = "primary"
    tables = {{"notes": {{"case": "String", "lang": "String", "note": "String"}}}}

    def compute(self, data):
        return {{"notes": data.facts.select("case", "lang").unique(maintain_order=True)
                 .with_columns(pl.lit({HOSTILE!r}).alias("note"))}}

    def summary(self, tables):
        return [("Notes <b>per case</b>",
                 tables["notes"].head(2).rename({{"note": "<i>note</i> & [link](x)"}}))]


@hookimpl
def register_measures(register):
    register(Notes())
'''


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("measure-reports")
    for name in COMMITTED_EXPERIMENTS:
        shutil.copytree(ROOT / "experiments" / name, root / "experiments" / name,
                        ignore=shutil.ignore_patterns("outputs"))
    shutil.copytree(ROOT / "corpus", root / "corpus")
    experiment = root / "experiments" / "protocol-1.0"
    with pytest.MonkeyPatch.context() as monkeypatch:
        install: Install
        for install in installer(root, monkeypatch):
            install("fragbench-cell-cost", cell_cost())
            install("fragbench-notes", NOTES)
            refreeze(experiment, '"completeness", "usage"]',
                     '"completeness", "usage", "cell-cost", "notes"]')
            result = run_cli("run", str(experiment), "--series", "extractive", "--out",
                             str(root / "outputs"), env={"OPENAI_API_KEY": CANARY_KEY})
            assert result.returncode == 0, result.stderr
            yield root / "outputs" / "protocol-1.0" / "extractive"


def test_a_plugin_measure_is_shown_by_default_in_both_reports(series: Path) -> None:
    table = pl.read_parquet(series / "cell_cost.parquet")
    assert table.height > SHOWN_ROWS  # so that "the first rows" is what is shown
    report = (series / "report.md").read_text(encoding="utf-8")
    primary = report.split("## Secondary diagnostics")[0]
    assert "## Measure `cell-cost`" in primary
    heading = f"### cell_cost ({table.height} rows, the first {SHOWN_ROWS} shown)"
    assert heading in primary
    shown = primary.split(heading)[1].split("\n## ")[0].strip().splitlines()
    assert shown[0] == "| " + " | ".join(table.columns) + " |"
    assert len(shown) == 2 + SHOWN_ROWS
    first = table.row(0, named=True)
    assert shown[2].startswith(f"| {first['case']} | {first['lang']} | {first['variant']} |")
    # The built-ins keep their sections, and get no second one.
    for builtin in ("availability", "citations", "usage", "completeness"):
        assert f"## Measure `{builtin}`" not in report
    assert "## Usage and cost per cell" in report

    page = parse((series / REPORT_HTML).read_text(encoding="utf-8"))
    [section] = [s for s in page.all("section", "measure")
                 if s.attrs["data-measure"] == "cell-cost"]
    [html_table] = section.all("table", "measure-table")
    assert [th.text() for th in html_table.all("th")] == table.columns
    rows = html_table.all("tr")[1:]
    assert len(rows) == SHOWN_ROWS
    assert [td.text() for td in rows[0].all("td")][:4] == [
        first["case"], first["lang"], first["variant"], first["mode"]]
    assert f"{table.height} rows, the first {SHOWN_ROWS} shown" in section.text()


def test_a_measure_summary_is_drawn_by_the_core_redacted_and_escaped(series: Path) -> None:
    report = (series / "report.md").read_text(encoding="utf-8")
    assert "## Measure `notes`" in report
    # Its title, its frames (not its tables); in report.md as text, never markup: `<`, `>`,
    # `&` as entities and `[`, `]` escaped, in the heading, the header and the cells alike.
    assert "### Notes &lt;b&gt;per case&lt;/b&gt; (2 rows)" in report
    assert "| case | lang | &lt;i&gt;note&lt;/i&gt; &amp; \\[link\\](x) |" in report
    # Redacted where it is inserted, then escaped: the mark is text too (`\[redacted\]`).
    assert report.count('| &lt;script&gt;window.__pwned = 1&lt;/script&gt; \\[redacted\\] '
                        '&lt;img src=x onerror="window.__pwned = 2"&gt; |') == 2
    assert "<b>" not in report and "<i>" not in report and "[link]" not in report
    assert "<script" not in report and "<img" not in report
    text = (series / REPORT_HTML).read_text(encoding="utf-8")
    assert CANARY_KEY not in text and CANARY_KEY not in report
    assert "<script>window.__pwned" not in text and "<img src=x" not in text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt; [redacted]" in text
    [section] = [s for s in parse(text).all("section", "measure")
                 if s.attrs["data-measure"] == "notes"]
    assert "Notes <b>per case</b>" in section.one("h3").text()
    assert [th.text() for th in section.all("th")] == ["case", "lang", "<i>note</i> & [link](x)"]
    cells = [td.text() for td in section.all("td")]
    assert cells.count(HOSTILE.replace(CANARY_KEY, "[redacted]")) == 2


def test_a_plugin_measures_hostile_value_reads_as_text_in_the_browser(chromium: Any,
                                                                       series: Path) -> None:
    with open_page(chromium, series / REPORT_HTML) as opened:
        dom = settled(opened)
        assert dom["marks"] == [None, None]  # nothing of the value ran
        assert dom["handlers"] == [] and dom["foreign"] == []
        shown = text_of(opened.page,
                        'section[data-measure="notes"] table.measure-table td:last-child')
        assert shown == HOSTILE.replace(CANARY_KEY, "[redacted]")
        title = text_of(opened.page, 'section[data-measure="notes"] h3')
        assert title is not None and title.startswith("Notes <b>per case</b>")
        assert opened.elsewhere() == []


def test_a_measure_name_cannot_close_its_code_span() -> None:
    """A measure's name goes into report.md's headings as a code span whose backtick run is
    longer than any run in the name, on one line: nothing in it becomes markup."""
    from fragbench.report.markdown import code_span

    assert code_span("cell-cost") == "`cell-cost`"
    assert code_span("a`<b>`c") == "``a`<b>`c``"
    assert code_span("``x") == "``` ``x ```"
    assert code_span("two\nlines") == "`two lines`"
