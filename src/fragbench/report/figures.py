"""The report's figures, as PNG and SVG, drawn by matplotlib without a browser or a screen.

Every image names its series, and a non-model baseline says so in the image itself (and in the
files' metadata), so that a copied PNG keeps the caveat; a series that stopped or is incomplete
says so in its citation figure's banner too. Both formats are written with fixed metadata, so
that the same tables give the same files byte for byte.

In the SVG, each call's marks carry its call ID (`id="price-en-A-retrieval-r1.valid"`, one per
reason, or `.never-sent`, `.no-answer`, `.not-parsed` for a call with no count to draw): a
reader of the SVG, or a test, finds any call's bar without reading pixels.

Size: a figure is drawn per case only up to what a person can read (READABLE_ROWS heatmap rows,
READABLE_PANELS citation panels); beyond, the same figure sums its counts by the experiment's
groups (the corpus's case groups, then language and variant; a grouping with more rows than
readable is dropped for the next coarser one, down to a single row) and says how many passages
or calls each row or bar holds. The per-case numbers are then in report.md's tables and the
Parquet files. So a figure's size, and its drawing time, do not grow with the calls.

Speed (`fragbench report` must stay well under a second, and matplotlib's import alone is
about 0.3 s): each figure is drawn once per format on a bare Figure and the Agg canvas (no
pyplot); the layout is set in inches, with no layout engine and no `bbox_inches="tight"` (each
costs one more full draw); labels are plain texts, not axis ticks (about five times cheaper
each); glyphs are rendered unhinted; and SVG text is written as text (`svg.fonttype = none`):
searchable, and no glyph outlines to build. benchmarks/bench_figures.py times them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from fragbench.columns import ANSWERED
from fragbench.files import write_atomically
from fragbench.report.data import reason_counts, with_case_groups

# Exact-level citation reasons, bottom to top of a stack; only those that occur are drawn.
REASON_COLORS = {
    "valid": "#1b7837",
    "misattributed": "#f1a340",
    "not_verbatim": "#d73027",
    "not_supplied": "#762a83",
    "unknown_id": "#4d4d4d",
    "empty_extract": "#bababa",
}
# A call with no count to draw shades its whole slot, top to bottom, with no outline: a
# background, not a bar (its height is not a count). Three kinds, never merged: a call never
# sent is no result at all; one sent that brought no answer is a failure; one answered but not
# parsed is the model's.
NOT_SENT = {"facecolor": "none", "edgecolor": "#a6a6a6", "hatch": "////", "linewidth": 0}
NO_ANSWER = {"facecolor": "#f0f0f0", "edgecolor": "#525252", "hatch": "\\\\\\\\", "linewidth": 0}
NOT_PARSED = {"facecolor": "#fde0dd", "edgecolor": "#d6604d", "hatch": "xx", "linewidth": 0}
SLOTS = {  # legend label -> (style, the suffix of its marks' SVG id)
    "never sent": (NOT_SENT, "never-sent"),
    "sent, no answer": (NO_ANSWER, "no-answer"),
    "answered, not parsed": (NOT_PARSED, "not-parsed"),
}
MODES = ("retrieval", "full")
OUTLINE = "#e66101"  # the cells the calls used: visible on light and dark greens alike
USED = "cells the calls used"  # the outlines' label (not drawn; for readers of the Figure)
DPI = 110  # the PNG's
READABLE_ROWS = 48  # heatmap rows (case · language · variant) drawn one per passage, at most
READABLE_PANELS = 24  # citation panels (case x language) drawn one per case, at most
PAD, LINE, TITLE_SIZE = 0.08, 0.2, 10  # inches; the banner's line height; its font size
RC = {
    "figure.autolayout": False,
    "figure.constrained_layout.use": False,
    "font.size": 9,
    "text.hinting": "no_hinting",  # text draws a third faster; at 110 dpi it reads the same
    "svg.hashsalt": "fragbench",
    "svg.fonttype": "none",
    "hatch.linewidth": 0.6,
}


def banner(info: dict[str, Any], what: str, note: str | None = None) -> str:
    """The image's title: what it shows and the series; then the caveat of a non-model
    baseline, and a note (a stopped or incomplete series), each on a line of its own."""
    lines = [f"{what} · {info['experiment']} · series {info['series']}"]
    if not info["is_model"]:
        lines.append(f"non-model baseline ({info['label']}): not a model's result")
    if note:
        lines.append(note)
    return "\n".join(lines)


def setting_order(labelled: pl.DataFrame) -> list[str]:
    """Retrieval settings (a `setting` column) by chunk size then top-k, then `full`."""
    retrieval = labelled.filter(pl.col("mode") == "retrieval").sort("chunk_size", "top_k")
    return [*retrieval["setting"].unique(maintain_order=True).to_list(), "full"]


def has_cuts(availability: pl.DataFrame) -> bool:
    """Whether any condition was supplied only cut (a span chunker's fragment); tables written
    before span chunkers existed have no such column, and none was."""
    return "n_conditions_cut" in availability.columns and bool(
        availability["n_conditions_cut"].fill_null(0).max() or 0)


@contextmanager
def drawing() -> Iterator[None]:
    import matplotlib

    with matplotlib.rc_context(RC):
        yield


def _figure(width: float, height: float) -> Any:
    """A figure drawn straight on the Agg canvas: no pyplot (its import and its global figure
    registry cost more than drawing), and no layout engine: the layout is set in inches below
    from the labels' lengths, since a constrained layout (or `bbox_inches="tight"`) costs one
    more full draw, with every text measured, on top of the two saves."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _width(text: str, size: float) -> float:
    """A generous estimate of a line's width in inches (DejaVu Sans averages about 0.6 em)."""
    return max(len(line) for line in text.split("\n")) * 0.62 * size / 72


def _save(fig: Any, stem: Path) -> list[Path]:
    """PNG and SVG, the banner (caveat and note included) as each file's title. Each is
    written beside and renamed into place, as every file of a series is: a link standing at
    its name is replaced, never written through."""
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    title = fig.get_suptitle().replace("\n", " — ")
    write_atomically(paths[0], lambda tmp: fig.savefig(
        tmp, format="png", dpi=DPI, metadata={"Software": None, "Title": title}))
    write_atomically(paths[1], lambda tmp: fig.savefig(
        tmp, format="svg", metadata={"Date": None, "Creator": None, "Title": title}))
    return paths


def _title(fig: Any, info: dict[str, Any], what: str, note: str | None = None) -> None:
    """The banner at the top, dark red for a non-model baseline."""
    fig.suptitle(banner(info, what, note), y=1 - PAD / fig.get_figheight(), va="top",
                 fontsize=TITLE_SIZE, linespacing=1.4,
                 color="black" if info["is_model"] else "#8c1010")


def _title_height(info: dict[str, Any], note: str | None = None) -> float:
    """The banner's height in inches: one line per line of it."""
    return PAD + len(banner(info, "", note).split("\n")) * LINE


def grouped_keys(frame: pl.DataFrame, groups: pl.DataFrame | None, after: tuple[str, ...],
                 limit: int) -> tuple[pl.DataFrame, list[str]]:
    """`frame` with the corpus's case groups joined on `case`, and the keys to sum it by: the
    case groups then `after` (those `frame` has); while they make more than `limit`
    combinations, the case groups are dropped, then the keys of `after` from the first, down
    to none (one row for everything)."""
    frame, keys = with_case_groups(frame, groups)
    rest = [k for k in after if k in frame.columns]
    for candidate in ([*keys, *rest], *(rest[i:] for i in range(len(rest) + 1))):
        if not candidate or frame.select(candidate).n_unique() <= limit:
            return frame, candidate
    return frame, []  # not reached: the empty candidate always fits


def _key_label(row: dict[str, Any], keys: list[str]) -> str:
    """A summed row's name: its keys' values (a missing group value as `—`)."""
    return " · ".join("—" if row[k] is None else str(row[k]) for k in keys) or "all"


def figure_words(tables: dict[str, pl.DataFrame]) -> dict[str, str]:
    """Each figure's name in words, for its caption and alternative text: per passage, per
    call, or summed by group (beyond a readable size)."""
    words = {"availability": "Condition IDs supplied per setting",
             "citations": "Citation outcomes per call"}
    if "availability" in tables and not passages_readable(tables["availability"]):
        words["availability"] += ", summed by group"
    if "citations_per_call" in tables and not calls_readable(tables["citations_per_call"]):
        words["citations"] = "Citation outcomes summed by group"
    return words


def passages_readable(availability: pl.DataFrame) -> bool:
    """Whether the heatmap draws one row per passage (case, language, variant)."""
    return availability.select("case", "lang", "variant").n_unique() <= READABLE_ROWS


def availability_heatmap(availability: pl.DataFrame, stem: Path, info: dict[str, Any],
                         groups: pl.DataFrame | None = None) -> list[Path]:
    """Draw `draw_availability` and write it as `stem`.png and `stem`.svg."""
    with drawing():
        return _save(draw_availability(availability, info, groups), stem)


def _availability_rows(table: pl.DataFrame, groups: pl.DataFrame | None
                       ) -> tuple[pl.DataFrame, str | None]:
    """One row per passage and setting (`passage` naming it) while the passages are readable;
    beyond, the counts summed by the experiment's groups, each row named with its keys and
    how many passages it sums; and the keys' words (None per passage)."""
    columns = ("passage", "setting", "n_conditions_supplied", "n_conditions",
               "n_conditions_cut", "main_setting")
    if passages_readable(table):
        return table.with_columns(
            pl.format("{} {} {}", "case", "lang", "variant").alias("passage")
        ).select(columns), None
    joined, keys = grouped_keys(table, groups, ("lang", "variant"), READABLE_ROWS)
    summed = (joined.group_by(*keys, "setting", maintain_order=True)
              .agg(pl.len().alias("passages"),
                   *(pl.col(c).sum() for c in columns[2:5]), pl.col("main_setting").any()))
    if keys:
        summed = summed.sort(keys, maintain_order=True, nulls_last=True)
    names = [f"{_key_label(r, keys)} ({r['passages']:,} passages)"
             for r in summed.select(*keys, "passages").to_dicts()]
    return (summed.with_columns(pl.Series("passage", names)).select(columns),
            ", ".join(keys) or "all passages together")


def draw_availability(availability: pl.DataFrame, info: dict[str, Any],
                      groups: pl.DataFrame | None = None) -> Any:
    """Case x language x variant against every retrieval setting (and the full passage): how
    many of the case's condition IDs were supplied whole, each cell labelled n/total; the cells
    the calls used (the main setting, the full passage) are outlined, and the main setting's
    column is named `(main)` in bold. Where a span chunker supplied conditions only cut, the
    cell says so under its label (`+c cut`) and is hatched; its colour still counts whole
    conditions only. Beyond READABLE_ROWS passages, one row per group of the experiment's
    (`grouped_keys`: the corpus's `groups`, language, variant), its cells the sums over its
    passages, its name saying how many. Returns the Figure (call inside `drawing()` for the
    saved look)."""
    from matplotlib.patches import Rectangle

    cuts = has_cuts(availability)
    if not cuts:
        availability = availability.with_columns(pl.lit(0, pl.Int32).alias("n_conditions_cut"))

    table = availability.with_columns(
        pl.when(pl.col("mode") == "full").then(pl.lit("full"))
        .otherwise(pl.format("size {} · top {}", "chunk_size", "top_k")).alias("setting"))
    settings = setting_order(table)
    shown, summed_by = _availability_rows(table, groups)
    passages = shown["passage"].unique(maintain_order=True).to_list()
    rows = {(r["passage"], r["setting"]): r for r in shown.to_dicts()}
    main = {r["setting"] for r in rows.values() if r["main_setting"] and r["setting"] != "full"}
    grid = [[rows[(p, s)]["n_conditions_supplied"] / max(rows[(p, s)]["n_conditions"], 1)
             for s in settings] for p in passages]
    ticks = [f"{s}\n(main)" if s in main else ("full passage" if s == "full" else s)
             for s in settings]
    caption = ("n/N: condition IDs supplied / the case's condition IDs (exact ID) · "
               "outlined: what the calls were given")
    if cuts:
        caption = ("n/N: condition IDs supplied whole / the case's condition IDs (exact ID) · "
                   "+c cut, hatched: c more only cut (a fragment) · outlined: what the calls "
                   "were given")
    if summed_by is not None:
        caption = (f"each row sums its passages (by {summed_by}; every passage is in "
                   "availability.parquet) · " + caption.replace("the case's", "their cases'"))
    row_h = 0.42 if cuts else 0.3  # inches per row: two lines of label in a cell with cuts
    what = "Condition IDs supplied before the model"
    # Inches: the banner, the cells, then two lines of tick labels and the caption; the grid
    # is centred when the caption or the banner is the widest line.
    labels_w = _width(max(passages, key=len), 9) + 0.15
    widest = max(len(f"{r['n_conditions_supplied']:,}/{r['n_conditions']:,}")
                 for r in rows.values())
    cell_w = max(1.15, max(_width(t, 9) for t in ticks) + 0.1, _width("0" * widest, 9) + 0.2)
    grid_w = labels_w + cell_w * len(settings) + 0.15
    top, bottom = _title_height(info) + 0.1, 0.75
    width = max(grid_w, _width(caption, 8) + 0.3,
                _width(banner(info, what), TITLE_SIZE) + 0.3)
    left = labels_w + (width - grid_w) / 2
    height = top + row_h * len(passages) + bottom
    fig = _figure(width, height)
    ax = fig.add_axes((left / width, bottom / height, cell_w * len(settings) / width,
                       row_h * len(passages) / height))
    # A mesh, not an image: cell edges fall exactly on pixels, with no resampling seams.
    ax.pcolormesh([j - 0.5 for j in range(len(settings) + 1)],
                  [i - 0.5 for i in range(len(passages) + 1)], grid, cmap="Greens",
                  vmin=0, vmax=1)
    ax.set_xlim(-0.5, len(settings) - 0.5)
    ax.set_ylim(len(passages) - 0.5, -0.5)
    for i, p in enumerate(passages):
        for j, s in enumerate(settings):
            row = rows[(p, s)]
            label = f"{row['n_conditions_supplied']:,}/{row['n_conditions']:,}"
            if row["n_conditions_cut"]:
                label += f"\n+{row['n_conditions_cut']:,} cut"
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                       edgecolor="#8c6d31", linewidth=0))
            ax.text(j, i, label, ha="center", va="center",
                    color="white" if grid[i][j] > 0.6 else "black")
    for j, s in enumerate(settings):  # the cells the calls used: one outline per run
        used = [rows[(p, s)]["main_setting"] for p in passages] + [False]
        start = None
        for i, flag in enumerate(used):
            if flag and start is None:
                start = i
            elif not flag and start is not None:
                ax.add_patch(Rectangle((j - 0.5, start - 0.5), 1, i - start, fill=False,
                                       edgecolor=OUTLINE, linewidth=2.2, clip_on=False,
                                       label=USED))
                start = None
    # Row and column labels as plain text: an axis's tick machinery costs several times a
    # text per label, and a heatmap needs no tick marks.
    ax.set_axis_off()
    for i, p in enumerate(passages):
        ax.text(-0.6, i, p, ha="right", va="center", label="passage")
    below = ax.get_xaxis_transform()
    for j, (s, label) in enumerate(zip(settings, ticks, strict=True)):
        ax.text(j, -0.1 / (row_h * len(passages)), label, transform=below, ha="center",
                va="top", fontweight="bold" if s in main else "normal", label="setting")
    fig.text(0.5, PAD / height, caption, ha="center", va="bottom", fontsize=8)
    _title(fig, info, what)
    return fig


def _call_marks(citations: pl.DataFrame, per_call: pl.DataFrame, calls: pl.DataFrame
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per planned call: its cell, status, whether it parsed, and its count of
    citations for each exact-level reason; and the reasons that occur, in stacking order."""
    counts = reason_counts(citations)
    reasons = [r for r in REASON_COLORS if r in counts.columns]
    marks = (per_call.select("call_id", "case", "lang", "mode", "variant", "rep", "parsed")
             .join(calls.select("call_id", "status"), on="call_id", how="left")
             .join(counts, on="call_id", how="left")
             .sort("case", "lang", "mode", "variant", "rep"))
    return marks.to_dicts(), reasons


def slot_kind(mark: dict[str, Any]) -> str | None:
    """The legend label of a call with no count to draw (None for a parsed answer)."""
    if mark["parsed"]:
        return None
    if mark["status"] == "not_sent":
        return "never sent"
    return "answered, not parsed" if mark["status"] in ANSWERED else "sent, no answer"


def state_note(calls: pl.DataFrame) -> str | None:
    """For a series that stopped, or holds calls never sent or never finished, one line that
    says so (the figure would otherwise look like a complete series with gaps)."""
    never = calls.filter(pl.col("status") == "not_sent").height
    interrupted = calls.filter(pl.col("status") == "interrupted").height
    stop = calls.filter(pl.col("stop_reason").is_not_null()).sort("seq").head(1).to_dicts()
    if stop:
        note = (f"stopped at call {stop[0]['seq']} of {calls.height} "
                f"({stop[0]['stop_reason']}): {never} calls never sent")
    elif never or interrupted:
        note = f"incomplete: {never} of {calls.height} calls never sent"
    else:
        return None
    return note + (f", {interrupted} interrupted (outcome never recorded)" if interrupted else "")


def calls_readable(per_call: pl.DataFrame) -> bool:
    """Whether the citation figure draws one bar per call (a panel per case and language)."""
    return per_call.select("case", "lang").n_unique() <= READABLE_PANELS


def citation_outcomes(citations: pl.DataFrame, per_call: pl.DataFrame, calls: pl.DataFrame,
                      stem: Path, info: dict[str, Any], groups: pl.DataFrame | None = None
                      ) -> list[Path]:
    """Draw `draw_citation_outcomes` (or, beyond READABLE_PANELS panels,
    `draw_citation_totals`) and write it as `stem`.png and `stem`.svg."""
    with drawing():
        fig = (draw_citation_outcomes(citations, per_call, calls, info)
               if calls_readable(per_call)
               else draw_citation_totals(citations, per_call, calls, info, groups))
        return _save(fig, stem)


def _call_totals(citations: pl.DataFrame, per_call: pl.DataFrame, calls: pl.DataFrame,
                 groups: pl.DataFrame | None) -> tuple[pl.DataFrame, list[str], list[str]]:
    """Per group of the experiment's (panels) and mode x variant: how many calls are planned,
    parsed, never sent, sent with no answer and answered but not parsed, and the citations of
    the parsed ones per exact-level reason, summed; the panels' keys; the reasons that occur."""
    counts = reason_counts(citations)
    reasons = [r for r in REASON_COLORS if r in counts.columns]
    marks = (per_call.select("call_id", "case", "lang", "mode", "variant", "parsed")
             .join(calls.select("call_id", "status"), on="call_id", how="left")
             .join(counts.select("call_id", *reasons), on="call_id", how="left"))
    joined, keys = grouped_keys(marks, groups, ("lang",), READABLE_PANELS)
    parsed = pl.col("parsed").fill_null(False)
    never = pl.col("status") == "not_sent"
    answered = pl.col("status").is_in(list(ANSWERED))
    totals = (joined.group_by(*keys, "mode", "variant")
              .agg(pl.len().alias("planned"), parsed.sum().alias("parsed"),
                   never.sum().alias("never sent"),
                   (~parsed & ~never & ~answered).sum().alias("sent, no answer"),
                   (~parsed & answered).sum().alias("answered, not parsed"),
                   *(pl.col(r).filter(parsed).sum() for r in reasons))
              .sort(*keys, "mode", "variant", nulls_last=True))
    return totals, keys, reasons


def draw_citation_totals(citations: pl.DataFrame, per_call: pl.DataFrame,
                         calls: pl.DataFrame, info: dict[str, Any],
                         groups: pl.DataFrame | None = None) -> Any:
    """The citation figure beyond READABLE_PANELS case x language panels: one panel per group
    of the experiment's (`grouped_keys`: the corpus's `groups`, then language), in each one
    bar per mode x variant, its citations summed over the calls with a parsed answer and
    stacked by exact-level reason (counts, never a rate); above each bar, how many calls it
    holds and how many have a parsed answer, then each kind of call with nothing to count
    (never sent, sent with no answer, answered but not parsed) that occurs, so that none is
    drawn as zero. Each bar's SVG id is `total-PANEL-MODE-VARIANT.REASON`. Returns the Figure
    (call inside `drawing()` for the saved look)."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    totals, keys, reasons = _call_totals(citations, per_call, calls, groups)
    rows = totals.to_dicts()
    panels = list(dict.fromkeys(_key_label(r, keys) for r in rows))
    bars = list(dict.fromkeys((r["mode"], r["variant"]) for r in rows))
    bars.sort(key=lambda g: (MODES.index(g[0]) if g[0] in MODES else len(MODES), g[1]))
    most = max([sum(r[x] or 0 for x in reasons) for r in rows] + [1])
    columns = min(len(panels), 3)
    lines = 2 + max([sum(1 for k in SLOTS if r[k]) for r in rows] + [0])
    what = "Citation outcomes summed by group (exact level)"
    note = state_note(calls)
    caption = (f"{per_call.height:,} calls, too many to draw one by one: summed by "
               f"{', '.join(keys) or 'all calls together'}; above each bar its calls, "
               "those parsed, and those with nothing to count; every call's counts are in "
               "citations_per_call.parquet")
    # The axis runs to the first tick at or above the tallest bar, so that every bar's height
    # reads off a numbered line (ticks cut at the tallest bar left 250,000 above the last).
    values = [int(n) for n in MaxNLocator(integer=True, nbins=4).tick_values(0, most) if n >= 0]
    ticks = [n for n in values if n < most] + [next(n for n in values if n >= most)]
    panel_w = max(3.2, 0.9 * len(bars) + 0.4)
    panel_h, gap_w, gap_h = 1.6 + 0.14 * lines, 0.3, 0.5
    # Room on the left for the widest tick label and the axis' title beside it.
    left, right, foot = 0.45 + _width(f"{ticks[-1]:,}", 10), 0.15, 0.75
    top = _title_height(info, note) + 0.55
    grid_rows = -(-len(panels) // columns)
    grid_w = panel_w * columns + gap_w * (columns - 1)
    grid_h = panel_h * grid_rows + gap_h * (grid_rows - 1)
    width = max(left + grid_w + right, _width(caption, 8) + 0.3,
                _width(banner(info, what, note), TITLE_SIZE) + 0.3)
    height = top + grid_h + foot
    headroom = 1 + 0.16 * lines  # the labels above the tallest bar
    fig = _figure(width, height)
    side = max(left, (width - grid_w) / 2)  # centred where the caption widens the figure
    axes = fig.subplots(grid_rows, columns, sharex=True, sharey=True, squeeze=False,
                        gridspec_kw={"left": side / width, "right": (side + grid_w) / width,
                                     "top": 1 - top / height, "bottom": foot / height,
                                     "wspace": gap_w / panel_w, "hspace": gap_h / panel_h})
    by_panel: dict[str, list[dict[str, Any]]] = {p: [] for p in panels}
    for r in rows:
        by_panel[_key_label(r, keys)].append(r)
    for k, ax in enumerate(ax for row in axes for ax in row):
        ax.set_axis_off()
        if k >= len(panels):
            continue
        panel = panels[k]
        mine = {(r["mode"], r["variant"]): r for r in by_panel[panel]}
        ax.hlines(ticks[1:], -0.6, len(bars) - 0.4, colors="#d9d9d9", linewidth=0.6, zorder=0)
        ax.hlines([0], -0.6, len(bars) - 0.4, colors="black", linewidth=0.8, zorder=3,
                  clip_on=False)
        for x, g in enumerate(bars):
            total = mine.get(g)
            if total is None:
                continue
            bottom = 0
            for reason in reasons:
                n = total[reason] or 0
                (bar,) = ax.bar(x, n, bottom=bottom, width=0.7, color=REASON_COLORS[reason],
                                linewidth=0)
                bar.set_gid(f"total-{k}-{g[0]}-{g[1]}.{reason}")
                bottom += n
            said = [f"{total['planned']:,} calls", f"{total['parsed']:,} parsed"]
            for kind in SLOTS:
                if total[kind]:
                    said.append(f"{total[kind]:,} {kind}")
            ax.text(x, bottom + most * 0.03, "\n".join(said), ha="center", va="bottom",
                    fontsize=7, linespacing=1.15, label="calls")
        ax.set_title(panel, fontsize=9, pad=5, y=1.0)
        if k % columns == 0:
            for n in ticks:
                ax.text(-0.02, n, f"{n:,}", transform=ax.get_yaxis_transform(), ha="right",
                        va="center", label="count")
        if k + columns >= len(panels):
            for x, g in enumerate(bars):
                ax.text(x, -0.04, "\n".join(g), transform=ax.get_xaxis_transform(),
                        ha="center", va="top", label="group")
    axes[0][0].set_ylim(0, max(most, ticks[-1]) * headroom)
    axes[0][0].set_xlim(-0.6, len(bars) - 0.4)
    handles = [Patch(color=REASON_COLORS[r], label=r) for r in reasons]
    return _framed(fig, handles, info, (what, note, caption), "citations, summed (count)",
                   (width, height, foot, grid_h))


def draw_citation_outcomes(citations: pl.DataFrame, per_call: pl.DataFrame,
                           calls: pl.DataFrame, info: dict[str, Any]) -> Any:
    """Small multiples, one panel per case (rows) x language (columns): in each, mode x variant
    side by side, each with its three repetitions as three thin bars, stacked by citation
    reason (exact level, counts on an integer scale, never a rate). A call never sent, one sent
    that brought no answer, and one answered but not parsed each shade their slot in a style
    of their own: none is drawn as zero. The legend lists only what occurs. Returns the Figure
    (call inside `drawing()` for the saved look)."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    marks, reasons = _call_marks(citations, per_call, calls)
    cases = sorted({m["case"] for m in marks})
    langs = sorted({m["lang"] for m in marks})
    groups = [(mode, variant) for mode in MODES
              for variant in sorted({m["variant"] for m in marks})]
    reps = sorted({m["rep"] for m in marks})
    slot = {g: k * (len(reps) + 1) for k, g in enumerate(groups)}  # a gap between groups
    most = max([sum(m.get(r) or 0 for r in reasons) for m in marks] + [1])
    rep_words = ", ".join(str(r) for r in reps)
    caption = (f"mode, variant; in each group the repetitions {rep_words} left to right, one "
               "bar per call (never averaged); an empty slot: a parsed answer citing nothing")
    what = "Citation outcomes per call (exact level)"
    note = state_note(calls)
    # Inches: the banner, the legend, the panels (each with its title), two lines of tick
    # labels, the caption.
    panel_w, panel_h, gap_w, gap_h = 4.0, 1.5, 0.3, 0.45
    left, right, foot = 0.7, 0.15, 0.75
    top = _title_height(info, note) + 0.55
    grid_w = panel_w * len(langs) + gap_w * (len(langs) - 1)
    grid_h = panel_h * len(cases) + gap_h * (len(cases) - 1)
    width, height = left + grid_w + right, top + grid_h + foot
    right_end = slot[groups[-1]] + len(reps) - 0.2
    counts = [int(n) for n in MaxNLocator(integer=True).tick_values(0, most) if 0 <= n <= most]
    fig = _figure(width, height)
    axes = fig.subplots(len(cases), len(langs), sharex=True, sharey=True, squeeze=False,
                        gridspec_kw={"left": left / width, "right": 1 - right / width,
                                     "top": 1 - top / height, "bottom": foot / height,
                                     "wspace": gap_w / panel_w, "hspace": gap_h / panel_h})
    used: set[str] = set()
    for i, case in enumerate(cases):
        for j, lang in enumerate(langs):
            ax = axes[i][j]
            mine = [m for m in marks if m["case"] == case and m["lang"] == lang]
            x = {m["call_id"]: slot[(m["mode"], m["variant"])] + reps.index(m["rep"])
                 for m in mine}
            drawn = [m for m in mine if m["parsed"]]
            bottom = [0] * len(drawn)
            for reason in reasons:
                heights = [m.get(reason) or 0 for m in drawn]
                bars = ax.bar([x[m["call_id"]] for m in drawn], heights, bottom=bottom,
                              width=0.8, color=REASON_COLORS[reason], linewidth=0)
                for m, bar in zip(drawn, bars, strict=True):
                    bar.set_gid(f"{m['call_id']}.{reason}")
                bottom = [a + b for a, b in zip(bottom, heights, strict=True)]
            for m in mine:
                kind = slot_kind(m)
                if kind is None:
                    continue
                used.add(kind)
                style, suffix = SLOTS[kind]
                (shade,) = ax.bar(x[m["call_id"]], most + 0.5, width=0.8, **style)
                shade.set_gid(f"{m['call_id']}.{suffix}")
            if mine and all(m["status"] == "not_sent" for m in mine):
                ax.text(0.5, 0.5, "nothing sent", transform=ax.transAxes, ha="center",
                        va="center", color="#555555",
                        bbox={"facecolor": "white", "edgecolor": "none"})
            ax.set_title(f"{case} · {lang}", fontsize=9, pad=5, y=1.0)  # not re-placed
            # No axis machinery (it costs several times a text per label): light lines at the
            # integer counts, numbered on the left panels, and the groups named once under
            # the bottom panels.
            ax.set_axis_off()
            ax.hlines(counts[1:], -0.8, right_end, colors="#d9d9d9", linewidth=0.6,
                      zorder=0)
            ax.hlines([0], -0.8, right_end, colors="black", linewidth=0.8, zorder=3,
                      clip_on=False)
            if j == 0:
                for n in counts:
                    ax.text(-0.015, n, str(n), transform=ax.get_yaxis_transform(),
                            ha="right", va="center", label="count")
            if i == len(cases) - 1:
                for g in groups:
                    ax.text(slot[g] + (len(reps) - 1) / 2, -0.04, "\n".join(g),
                            transform=ax.get_xaxis_transform(), ha="center", va="top",
                            label="group")
    axes[0][0].set_ylim(0, most + 0.5)
    axes[0][0].set_xlim(-0.8, right_end)
    handles = [Patch(color=REASON_COLORS[r], label=r) for r in reasons]
    handles += [Patch(**style, label=kind) for kind, (style, _) in SLOTS.items()
                if kind in used]
    return _framed(fig, handles, info, (what, note, caption), "citations in the answer (count)",
                   (width, height, foot, grid_h))


def _framed(fig: Any, handles: list[Any], info: dict[str, Any],
            words: tuple[str, str | None, str], counted: str,
            inches: tuple[float, float, float, float]) -> Any:
    """A citation figure's frame: the legend under the banner (when anything is drawn), the
    count axis's name, the caption, the banner; `words` is (what, note, caption), `inches`
    (width, height, foot, grid height)."""
    what, note, caption = words
    width, height, foot, grid_h = inches
    if handles:
        fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8,
                   frameon=False, handlelength=1.6, columnspacing=1.4, borderaxespad=0,
                   bbox_to_anchor=(0.5, 1 - (_title_height(info, note) + 0.05) / height))
    fig.text(0.12 / width, (foot + grid_h / 2) / height, counted,
             rotation=90, ha="left", va="center")
    fig.text(0.5, PAD / height, caption, ha="center", va="bottom", fontsize=8)
    _title(fig, info, what, note)
    return fig
