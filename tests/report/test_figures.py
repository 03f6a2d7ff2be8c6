"""The report's figures render, honestly, for a complete, a stopped and an empty series.

Every image is opened (PNG decoded, SVG read): it must be a real picture, name its series, and
for a non-model baseline carry the caveat in the image itself and in the PNG's metadata, so that
a copied file keeps it. The same tables must give the same files byte for byte.

Each promise of the figures has its test, reading the drawn Figure's artists (texts, patches,
their SVG ids), not pixels: the main setting marked on the heatmap
(test_the_main_setting_is_marked_where_the_calls_were_given); small multiples, case x language,
modes and variants side by side, three repetitions as three bars of counts
(test_small_multiples_one_bar_per_call); the series name and the caveat in every image
(figure_texts, in the tests of a complete, a stopped and an empty series); only the categories
that occur in the legend (legend, in the same three); calls never sent shown as such
(test_calls_with_nothing_to_count_keep_their_kind); integer count axes
(test_the_count_axis_is_integer); beyond a readable size, counts summed by group, each row or
bar saying how many passages or calls it holds, every PNG at most 1 MB
(test_beyond_a_readable_size_the_figures_sum_by_group).
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from matplotlib import image
from matplotlib.colors import to_rgb
from PIL import Image
from support.cli import run_cli, run_process
from support.series import collect

from fragbench.report.figures import (
    OUTLINE,
    REASON_COLORS,
    USED,
    draw_availability,
    draw_citation_outcomes,
    draw_citation_totals,
    drawing,
)
from fragbench.testing.loopback import Server, http_error, ok

pytestmark = pytest.mark.slow

NAMES = ("availability", "citations")


def figure_texts(series_dir: Path, note: str | None = None) -> dict[str, str]:
    """Check that each figure decodes and is a real picture, with the series name, the caveat
    of a non-model baseline and, on the citation figure, the `note` of a stopped series, drawn
    and in its metadata; return each SVG's text."""
    info = json.loads((series_dir / "series.json").read_text(encoding="utf-8"))
    report = (series_dir / "report.md").read_text(encoding="utf-8")
    texts = {}
    for name in NAMES:
        assert f"](figures/{name}.png)" in report
        png = series_dir / "figures" / f"{name}.png"
        pixels = image.imread(png)
        assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 500
        colours = np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0).shape[0]
        assert colours > 20, (name, colours)  # not blank: text, marks, antialiasing
        with Image.open(png) as im:
            title = im.text["Title"]  # kept by any copy of the file, with the picture
        svg = (series_dir / "figures" / f"{name}.svg").read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg and svg.rstrip().endswith(
            "</svg>")
        # drawn, as SVG text (the end of the banner's first line, its second line) ...
        assert f"series {info['series']}</text>" in svg
        assert (">non-model baseline (" in svg) is (not info["is_model"])
        # ... and in the files' metadata
        for text in (title, svg.split("<dc:title>")[1].split("</dc:title>")[0]):
            assert f"series {info['series']}" in text
            assert ("non-model baseline" in text) is (not info["is_model"])
        if name == "citations" and note is not None:
            assert f">{note}</text>" in svg and note in title
        texts[name] = svg
    return texts


def read(series_dir: Path) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    names = ("availability", "citations", "citations_per_call", "calls")
    tables = {n: pl.read_parquet(series_dir / f"{n}.parquet") for n in names}
    return tables, json.loads((series_dir / "series.json").read_text(encoding="utf-8"))


def outcomes(tables: dict[str, pl.DataFrame], info: dict[str, Any]) -> Any:
    with drawing():
        return draw_citation_outcomes(tables["citations"], tables["citations_per_call"],
                                      tables["calls"], info)


def legend(fig: Any) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def marks(fig: Any) -> dict[str, Any]:
    """SVG id (`CALL_ID.reason` or `CALL_ID.never-sent` ...) -> the bar drawn for it."""
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}


def texts(ax: Any, label: str) -> list[str]:
    return [t.get_text() for t in ax.texts if t.get_label() == label]


def test_a_complete_baseline_series(extractive: Path) -> None:
    svg = figure_texts(extractive)
    assert "(main)" in svg["availability"]  # the setting the calls used
    assert "full passage" in svg["availability"]
    # only the reasons that occur are in the legend; no call is missing
    assert legend(outcomes(*read(extractive))) == ["valid"]
    for reason in set(REASON_COLORS) - {"valid"}:
        assert reason not in svg["citations"]
    assert "never sent" not in svg["citations"] and "not parsed" not in svg["citations"]
    assert "stopped" not in svg["citations"] and "incomplete" not in svg["citations"]


def test_a_stopped_series(experiment: Path, server: Server) -> None:
    server.script[2] = ok(text="this is not JSON")  # sent, answered, not parsed
    server.script[3] = ok(text=json.dumps({"answer": "x", "citations": [
        {"id": "F99", "extract": "nothing like it"}]}))  # an ID never supplied
    server.script[6] = http_error(500)  # stops at call 7: 65 calls never sent
    result, series_dir = collect(experiment, server, series="stopped")
    assert result.returncode == 3, result.stderr
    calls = pl.read_parquet(series_dir / "calls.parquet")
    assert calls.filter(pl.col("status") == "not_sent").height == 65
    svg = figure_texts(series_dir, note="stopped at call 7 of 72 (technical_failure): 65 "
                                        "calls never sent")["citations"]
    assert legend(outcomes(*read(series_dir))) == [
        "valid", "unknown_id", "never sent", "sent, no answer", "answered, not parsed"]
    for name in legend(outcomes(*read(series_dir))):
        assert f">{name}<" in svg, name
    assert "nothing sent" in svg  # whole panels with nothing sent say so


def test_an_empty_series(experiment: Path, server: Server) -> None:
    server.script[0] = http_error(500)  # the first call fails: nothing answered, ever
    result, series_dir = collect(experiment, server, series="empty")
    assert result.returncode == 3, result.stderr
    assert pl.read_parquet(series_dir / "citations.parquet").height == 0
    svg = figure_texts(series_dir, note="stopped at call 1 of 72 (technical_failure): 71 "
                                        "calls never sent")["citations"]
    assert legend(outcomes(*read(series_dir))) == ["never sent", "sent, no answer"]
    assert ">never sent<" in svg and ">sent, no answer<" in svg
    for reason in REASON_COLORS:  # no citation, so no reason in the legend
        assert f">{reason}<" not in svg
    assert svg.count(">nothing sent<") == 5  # the sixth panel holds the failed call


def test_the_main_setting_is_marked_where_the_calls_were_given(extractive: Path) -> None:
    availability = read(extractive)[0]["availability"]
    info = read(extractive)[1]
    settings = ["size 2 · top 1", "size 2 · top 2", "size 3 · top 1", "size 3 · top 2",
                "full passage"]

    def marked(table: pl.DataFrame) -> tuple[list[int], list[str], list[str]]:
        """Outlined columns (each outline spanning every row), column labels, bold ones."""
        with drawing():
            (ax,) = draw_availability(table, info).axes
        outlines = [p for p in ax.patches if p.get_label() == USED]
        assert all(p.get_edgecolor()[:3] == to_rgb(OUTLINE) for p in outlines)
        assert all(p.get_height() == 12 for p in outlines)  # one outline over the 12 passages
        labels = [t for t in ax.texts if t.get_label() == "setting"]
        return (sorted(round(p.get_x() + 0.5) for p in outlines),
                [t.get_text() for t in labels],
                [t.get_text() for t in labels if t.get_fontweight() == "bold"])

    columns, labels, bold = marked(availability)
    assert columns == [2, 4]  # size 3 · top 1 (the frozen plan's) and the full passage
    assert labels == [*settings[:2], "size 3 · top 1\n(main)", *settings[3:]]
    assert bold == ["size 3 · top 1\n(main)"]
    # It follows the table, not a fixed column: mark size 2 · top 2 as the main setting.
    moved = availability.with_columns(pl.when(pl.col("mode") == "full").then(True).otherwise(
        (pl.col("chunk_size") == 2) & (pl.col("top_k") == 2)).alias("main_setting"))
    columns, labels, bold = marked(moved)
    assert columns == [1, 4] and bold == ["size 2 · top 2\n(main)"]


def test_small_multiples_one_bar_per_call(extractive: Path) -> None:
    tables, info = read(extractive)
    fig = outcomes(tables, info)
    per_call = tables["citations_per_call"]
    cases, langs = ["delay", "hosting", "price"], ["en", "fr"]
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == [f"{c} · {lang}" for c in cases for lang in langs]
    grid = {(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start): ax
            for ax in panels}
    drawn = marks(fig)
    order = [(m, v, r) for m in ("retrieval", "full") for v in ("A", "B") for r in (1, 2, 3)]
    for i, case in enumerate(cases):
        for j, lang in enumerate(langs):
            ax = grid[(i, j)]
            mine = per_call.filter(pl.col("case") == case, pl.col("lang") == lang)
            by_cell = {(r["mode"], r["variant"], r["rep"]): r for r in mine.to_dicts()}
            bars = [drawn[f"{by_cell[k]['call_id']}.valid"] for k in order]
            assert all(b.axes is ax for b in bars)  # each call in its own panel
            x = [b.get_x() + b.get_width() / 2 for b in bars]
            assert x == sorted(x) and len(set(x)) == 12  # left to right: mode, variant, rep
            # the repetitions side by side, a gap between groups
            assert [round(b - a, 6) for a, b in pairwise(x)] == \
                [1, 1, 2, 1, 1, 2, 1, 1, 2, 1, 1]
            # a count per call, never a rate: each bar's height is its citations
            assert [b.get_height() for b in bars] == [by_cell[k]["n_valid"] for k in order]
    bottom = grid[(2, 0)]
    assert texts(bottom, "group") == ["retrieval\nA", "retrieval\nB", "full\nA", "full\nB"]


def test_calls_with_nothing_to_count_keep_their_kind(experiment: Path, server: Server) -> None:
    server.script[2] = ok(text="this is not JSON")  # answered, not parsed
    server.script[9] = http_error(500)  # sent, no answer; the series stops: 62 never sent
    result, series_dir = collect(experiment, server, series="stopped")
    assert result.returncode == 3, result.stderr
    tables, info = read(series_dir)
    calls = tables["calls"]
    drawn = marks(outcomes(tables, info))
    kinds = {kind: {gid.rsplit(".", 1)[0] for gid in drawn if gid.endswith(f".{kind}")}
             for kind in ("never-sent", "no-answer", "not-parsed", "valid")}
    status = dict(zip(calls["call_id"], calls["status"], strict=True))
    assert kinds["never-sent"] == {c for c, s in status.items() if s == "not_sent"}
    assert len(kinds["never-sent"]) == 62
    assert kinds["no-answer"] == {calls["call_id"][9]}  # failed: not "never sent"
    assert kinds["not-parsed"] == {calls["call_id"][2]}
    assert len(kinds["valid"]) == 8  # the eight parsed answers, each one citation
    assert sum(len(v) for v in kinds.values()) == 72  # every planned call has its mark
    svg = (series_dir / "figures" / "citations.svg").read_text(encoding="utf-8")
    for kind, ids in kinds.items():  # the SVG carries the same ids
        assert all(f'id="{c}.{kind}"' in svg for c in ids), kind


def test_the_count_axis_is_integer(extractive: Path) -> None:
    tables, info = read(extractive)

    def labels(citations: pl.DataFrame) -> list[int]:
        fig = outcomes({**tables, "citations": citations}, info)
        left = [ax for ax in fig.axes if texts(ax, "count")]
        assert len(left) == 3  # numbered once per row of panels
        (values,) = {tuple(texts(ax, "count")) for ax in left}
        assert all(v.isdigit() for v in values), values  # no 0.5, no 2.0
        return [int(v) for v in values]

    # Up to 5 citations a call in the baseline: every count from 0 to 5.
    assert labels(tables["citations"]) == [0, 1, 2, 3, 4, 5]
    # At most one a call: 0 and 1, no fractions in between.
    assert labels(tables["citations"].filter(pl.col("citation") == 0)) == [0, 1]
    # 23 on one call: still whole numbers, evenly spaced from 0, up to the top.
    one = tables["citations"].filter(pl.col("call_id") == tables["calls"]["call_id"][0])
    many = pl.concat([tables["citations"], *[one] * 10])
    most = many.group_by("call_id").len()["len"].max()
    ticks = labels(many)
    steps = {b - a for a, b in pairwise(ticks)}
    assert ticks[0] == 0 and len(steps) == 1 and ticks[-1] + steps.pop() > most


def test_the_same_tables_give_the_same_files(extractive: Path) -> None:
    figures = extractive / "figures"
    before = {p.name: p.read_bytes() for p in figures.iterdir()}
    assert set(before) == {f"{n}.{ext}" for n in NAMES for ext in ("png", "svg")}
    for path in figures.iterdir():
        path.unlink()
    assert run_cli("report", str(extractive)).returncode == 0  # in this process
    assert {p.name: p.read_bytes() for p in figures.iterdir()} == before
    result = run_process("measure", str(extractive))  # in another process
    assert result.returncode == 0, result.stderr
    assert {p.name: p.read_bytes() for p in figures.iterdir()} == before


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An offline series of 100 generated HotpotQA questions (400 calls, 200 passages, 100
    case x language panels): beyond what each figure draws one by one."""
    from support.hotpotqa_data import generate, offline_series

    return offline_series(tmp_path_factory.mktemp("large"), generate(100))


def test_beyond_a_readable_size_the_figures_sum_by_group(large: Path) -> None:
    from fragbench.report.figures import READABLE_PANELS, READABLE_ROWS

    tables, info = read(large)
    groups = pl.read_parquet(large / "cases.parquet")
    passages = tables["availability"].select("case", "lang", "variant").n_unique()
    assert passages > READABLE_ROWS
    with drawing():
        heat = draw_availability(tables["availability"], info, groups)
    [ax] = heat.axes
    rows = texts(ax, "passage")
    # one row per group (type, level, language, variant), each saying how many passages
    assert 1 < len(rows) <= READABLE_ROWS
    counted = [int(r.rsplit("(", 1)[1].split(" passages")[0].replace(",", "")) for r in rows]
    assert sum(counted) == passages
    assert not any(r.startswith(tables["availability"]["case"][0]) for r in rows)
    panels = tables["citations_per_call"].select("case", "lang").n_unique()
    assert panels > READABLE_PANELS
    with drawing():
        fig = draw_citation_totals(tables["citations"], tables["citations_per_call"],
                                   tables["calls"], info, groups)
    said = [t for ax in fig.axes for t in texts(ax, "calls")]
    calls_said = sum(int(t.split(" calls")[0].replace(",", "")) for t in said)
    assert calls_said == tables["calls"].height  # every call in exactly one bar
    assert len([ax for ax in fig.axes if ax.get_title()]) <= READABLE_PANELS
    valid = tables["citations"].filter(pl.col("reason") == "valid").height
    drawn = sum(p.get_height() for p in marks(fig).values() if p.get_gid().endswith(".valid"))
    assert drawn == valid  # summed citations, never a rate
    # the count axis is numbered up to a line at or above the tallest bar, evenly from 0
    tallest = max(p.get_y() + p.get_height() for p in marks(fig).values())
    [numbered] = [ax for ax in fig.axes if texts(ax, "count")][:1]
    ticks = [int(t.replace(",", "")) for t in texts(numbered, "count")]
    assert ticks[0] == 0 and ticks[-1] >= tallest > ticks[-2]
    assert len({b - a for a, b in pairwise(ticks)}) == 1
    assert numbered.get_ylim()[1] >= ticks[-1]
    # the report's files are these figures, each PNG small enough to open anywhere
    for name in NAMES:
        assert (large / "figures" / f"{name}.png").stat().st_size <= 1_000_000
    svg = (large / "figures" / "citations.svg").read_text(encoding="utf-8")
    assert "Citation outcomes summed by group" in svg and "too many to draw one by one" in svg
    report = (large / "report.md").read_text(encoding="utf-8")
    assert "![Citation outcomes summed by group](figures/citations.png)" in report
