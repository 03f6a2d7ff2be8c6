"""`fragbench compare A B --html FILE`: two series side by side as one self-contained page.

One article per cell, in the comparison table's order, each with side A and side B: the call's
status, counts, answer and citations (citations.parquet rows), so the same call's citations sit
next to each other. A cell not compared says why (`data-differs` is then empty: it is neither
the same nor different); the warnings come first, as on screen. The page extends the report's
base template (report_html.environment()): no URL to load, its one script allowed by its hash,
and every value the page prints redacted and then escaped, one value at a time, by that
environment, and every value of its cells' data redacted one at a time (`cell_data`; an answer
may hold markup and a key); the rendered page is never rewritten. The pair page loads its data
files beside it (below), nothing else; so does the grid page.

At scale (issue 16): the pair and the grid page use report.html's pager, filters, search and
URL state (page.js `pagedList`, one code path): with JavaScript, one page of the cells that
match (PAIR_PAGE_SIZE, GRID_PAGE_SIZE) is shown and the rest hidden, the filters and the
search (each cell's text, case ignored) look at every cell, and the state is the URL's
fragment (`#?differs=true&q=…&page=N&per=N`); a link to a cell (#cell-…) shows its page.
The pair page's cells are data, as report.html's calls are (issue 26): the page holds their
index, one `<script type="application/json" id="fragbench-cells">` element (`cell_index`: what
the filters compare and each cell's anchor), and each cell's detail and search text is in the
data files beside the page, `<page stem>-data/<digest>/` (`cell_data`, `search_text`;
fragbench.report.pagedata), every value redacted one at a time before it is written; page.js
(`pairPage`) draws a page at a time with textContent only, loading the files it needs.
Without JavaScript the page shows who A and B are, the counts and the warnings, and says the
cells need JavaScript (the comparison table, `--out`, holds every cell). The grid page's rows
are data the same way (`grid_data`, `grid_search_text`), drawn by the same page.js code; both
pages write their files through `cell_files`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from fragbench.budget.money import usd
from fragbench.report import pagedata
from fragbench.report.compare import (
    CELL,
    Comparison,
    differing_fields,
    grid_differing_fields,
    side_name,
)
from fragbench.report.html import PAGE_SIZES, Redact, memoized
from fragbench.series.folder import read_table, tables_of

TEMPLATE = "compare.html.j2"
PAIR_PAGE_SIZE = 50
"""Cells a pair page shows at once (with JavaScript; report_html.PAGE_SIZES to choose from)."""
GRID_PAGE_SIZE = 100
"""Rows a grid page shows at once (a row is one line per cell)."""
FIELD_WORDS = {
    "status": "status",
    "parsed": "parsed",
    "n_valid": "valid citations",
    "n_invalid": "invalid citations",
    "conditions_cited_validly": "conditions cited validly",
}
"""How the page names the fields `differs` looks at (compare.DIFFERS_ON)."""
DETAIL = ["call_id", "answer", "text", "parse_error", "refusal", "incomplete_reason", "error",
          "failure", "http_status"]
"""What a side shows of its call beyond the comparison table (calls.parquet columns)."""


def _details(series_dir: Path) -> tuple[dict[tuple[Any, ...], dict[str, Any]], list[str]]:
    """Cell key -> what the call recorded (answer, errors) and its citations in answer order
    (none when the series has no citations measure: nothing was measured, which the side's
    counts show as —); and every distinct model as returned. Each file is read once."""
    calls = read_table(series_dir, "calls", "calls.parquet", [*CELL, *DETAIL, "model"])
    citations: dict[str, list[dict[str, Any]]] = {}
    for name, rel in tables_of(series_dir, recorded=False):
        if name == "citations":
            rows = read_table(series_dir, name, rel).select(
                "call_id", "citation", "id", "extract", "reason", "reason_folded",
            ).sort("call_id", "citation").to_dicts()
            for row in rows:
                citations.setdefault(row["call_id"], []).append(row)
    details = {tuple(row[c] for c in CELL): {**row, "citations": citations.get(row["call_id"],
                                                                                [])}
               for row in calls.to_dicts()}
    return details, sorted(m for m in calls["model"].unique().to_list() if m is not None)


def _side(row: dict[str, Any], letter: str, name: str, detail: dict[str, Any] | None
          ) -> dict[str, Any]:
    """One side of a cell, ready for the template (which redacts and escapes every value):
    counts from the comparison table, the rest from the call's own record."""
    suffix = f"_{letter.lower()}"
    status = row[f"status{suffix}"]
    cost = row[f"cost_usd{suffix}"]
    side: dict[str, Any] = {
        "letter": letter,
        "series": name,
        "status": status or "",
        "status_words": {None: "absent", "not_sent": "never sent"}.get(status, status),
        "present": status is not None,
        "sent": status not in (None, "not_sent"),
        "parsed": row[f"parsed{suffix}"],
        "n_citations": row[f"n_citations{suffix}"],
        "n_valid": row[f"n_valid{suffix}"],
        "n_invalid": row[f"n_invalid{suffix}"],
        "conditions": row[f"conditions_cited_validly{suffix}"],
        "cost": None if cost is None else usd(cost),
        "citations": [],
        **dict.fromkeys(DETAIL),
    }
    if detail is None:
        return side
    side.update({key: detail[key] for key in DETAIL if isinstance(detail[key], str)})
    side["http_status"] = detail["http_status"]
    side["citations"] = [
        {"citation": c["citation"], "id": c["id"] or "", "extract": c["extract"] or "",
         "reason": c["reason"], "reason_folded": c["reason_folded"]}
        for c in detail["citations"]]
    return side


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return " ".join(value) if value else "none"
    return str(value)


def _series(letter: str, info: dict[str, Any], where: Path, models: list[str]
            ) -> dict[str, Any]:
    stop = info.get("stop") or {}
    return {"letter": letter, "name": info["series"], "experiment": info["experiment"],
            "is_model": info["is_model"], "label": info["label"], "backend": info["backend"],
            "backend_plugin": info["backend_plugin"], "endpoint": info["endpoint"],
            "state": info["state"], "stop_reason": stop.get("reason") or "",
            "plan_sha256": info["plan_sha256"], "spent_usd": info.get("spent_usd"),
            "path": str(where), "models": models}


SIDE_TEXT = ("status", "status_words", "call_id", "answer", "text", "parse_error", "refusal",
             "incomplete_reason", "error", "failure")
"""A side's text values the page shows, each redacted on its own in the data."""


def cell_data(cells: list[dict[str, Any]], redact: Redact) -> list[dict[str, Any]]:
    """The cells as the page's data (page.js `pairPage` draws them): every string redacted
    here, one value at a time (the same value once, memoized), numbers and counts already
    worded as the page shows them (`_fmt`). A citation is [number, cited ID, extract, reason,
    reason at the typographic level], as report.html's. Empty values are left out, and so is
    the answer text as it came where an answer parsed (the page shows it only where none did)."""
    red = memoized(redact)

    out = []
    for cell in cells:
        sides = []
        for side in cell["sides"]:
            view: dict[str, Any] = {k: red(side[k]) for k in SIDE_TEXT
                                    if isinstance(side[k], str) and side[k] != ""}
            view["letter"] = side["letter"]
            if side["present"]:
                view["present"] = True
            if side["sent"]:
                view["sent"] = True
                view["counts"] = [red(_fmt(side[k])) for k in (
                    "parsed", "n_citations", "n_valid", "n_invalid", "conditions", "cost")]
            if side["parsed"]:
                view["parsed"] = True
            if side["answer"] is not None:
                # The answer text as it came is shown only where nothing parsed (as before):
                # beside a parsed answer it would double the page for nothing shown.
                view["answer"] = red(side["answer"])
                view.pop("text", None)
            if side["http_status"] is not None:
                view["http_status"] = side["http_status"]
            view["cites"] = [[c["citation"], red(c["id"]), red(c["extract"]), red(c["reason"]),
                              red(c["reason_folded"])] for c in side["citations"]]
            sides.append(view)
        out.append({
            "anchor": red(cell["anchor"]), "case": red(cell["case"]), "lang": red(cell["lang"]),
            "variant": red(cell["variant"]), "mode": red(cell["mode"]), "rep": cell["rep"],
            "compared": "true" if cell["compared"] else "false",
            "differs": "" if cell["differs"] is None else ("true" if cell["differs"] else
                                                           "false"),
            "differing": [red(w) for w in cell["differing"]],
            **({"note": red(cell["note"])} if not cell["compared"] and cell["note"] else {}),
            "sides": sides,
        })
    return out


def page_context(comparison: Comparison) -> dict[str, Any]:
    """Everything the template shows, from the comparison and the two series' files."""
    from fragbench.report.html import REASON_WORDS

    (details_a, models_a), (details_b, models_b) = (_details(comparison.dir_a),
                                                    _details(comparison.dir_b))
    details = (details_a, details_b)
    names = (comparison.info_a["series"], comparison.info_b["series"])
    table = comparison.table
    cells = []
    for row, fields in zip(table.to_dicts(), differing_fields(table), strict=True):
        key = tuple(row[c] for c in CELL)
        cells.append({
            **{c: row[c] for c in CELL},
            "anchor": "-".join(str(v) for v in key),
            "compared": row["compared"],
            "differs": row["differs"],
            "differing": [FIELD_WORDS[f] for f in fields],
            "note": row["note"],
            "sides": [_side(row, "A", names[0], details[0].get(key)),
                      _side(row, "B", names[1], details[1].get(key))],
        })
    occurring = {c["reason"] for cell in cells for side in cell["sides"]
                 for c in side["citations"]}
    options = {c: sorted({str(row[c]) for row in cells}) for c in CELL if c != "rep"}
    return {
        "warnings": list(comparison.warnings),
        "series": [_series("A", comparison.info_a, comparison.dir_a, models_a),
                   _series("B", comparison.info_b, comparison.dir_b, models_b)],
        "cells": cells,
        "counts": comparison.counts,
        # (key, label, options, attribute, match): the shared filters macro's shape.
        "filters": [
            *[(c, c, options[c], f"data-{c}", "exact") for c in ("case", "lang", "variant",
                                                                  "mode")],
            ("differs", "differs", [("true", "differs"), ("false", "the same")],
             "data-differs", "exact"),
            ("compared", "compared", [("true", "compared"), ("false", "not compared")],
             "data-compared", "exact"),
        ],
        "reasons": [r for r in REASON_WORDS if r in occurring],
        "fmt": _fmt,
        "page_sizes": PAGE_SIZES,
        "page_size": PAIR_PAGE_SIZE,
    }


def search_text(cell: dict[str, Any]) -> str:
    """A cell's search text (its data's values, as page.js searches them, case ignored): the
    cell, its note, and each side's call ID, answer, unparsed text, error, refusal, cited IDs
    and extracts; a value another one already holds is left out (it would find nothing more:
    page.js looks for the words in each line)."""
    parts = [cell["case"], cell["lang"], cell["variant"], cell["mode"], cell.get("note", "")]
    for side in cell["sides"]:
        parts += [side.get(k, "") for k in ("call_id", "answer", "text", "error", "refusal")]
        for cite in side["cites"]:
            parts += [cite[1], cite[2]]
    kept: list[str] = []
    for part in parts:
        if part and not any(part in k for k in kept):
            kept.append(part)
    return "\n".join(kept)


def cell_index(cells: list[dict[str, Any]], redact: Redact) -> dict[str, Any]:
    """What the pair page itself holds of every cell (its data files hold the rest): what the
    filters compare (`fields`, by a select's data-field, dictionary-coded as report.html's
    index is) and the cell's anchor, which page.js derives (CASE-LANG-VARIANT-MODE-REP) unless
    `anchors` names it otherwise (by position). Every value redacted here."""
    import polars as pl

    from fragbench.report.html import coded

    red = memoized(redact)

    def column(name: str, of: Any) -> list[Any]:
        return coded(pl.Series(name, [of(c) for c in cells], dtype=pl.String), red)

    def flag(value: bool | None) -> str:
        return "" if value is None else ("true" if value else "false")

    fields = {f"data-{c}": column(c, lambda cell, c=c: str(cell[c]))
              for c in ("case", "lang", "variant", "mode", "rep")}
    fields["data-differs"] = column("differs", lambda cell: flag(cell["differs"]))
    fields["data-compared"] = column("compared", lambda cell: flag(cell["compared"]))
    parts = [[values[code] for code in codes] for values, codes in
             (fields[f"data-{c}"] for c in ("case", "lang", "variant", "mode", "rep"))]
    anchors = {str(n): anchor for n, (anchor, *cell) in
               enumerate(zip((red(c["anchor"]) for c in cells), *parts, strict=True))
               if anchor != "-".join(cell)}
    return {"count": len(cells), "fields": fields, "anchors": anchors}


def shards(items: list[Any]) -> Iterator[list[Any]]:
    """`items` a data file's worth (pagedata.SHARD_CALLS) at a time."""
    for start in range(0, len(items), pagedata.SHARD_CALLS):
        yield items[start:start + pagedata.SHARD_CALLS]


def cell_files(folder: pagedata.DataFolder, parts: Iterable[list[dict[str, Any]]],
               search: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """Both compare pages' data files: each part of cells' views as a `cells` file, and
    their search texts (`search` of each view) as `search` files; what the page's index
    says of them."""
    searched: list[str] = []
    for number, views in enumerate(parts, start=1):
        folder.add(pagedata.shard_name("cells", number), {"cells": views})
        searched += [search(view) for view in views]
    size = pagedata.SEARCH_CALLS
    for number, start in enumerate(range(0, len(searched), size), start=1):
        folder.add(pagedata.shard_name("search", number), searched[start:start + size])
    return {"dir": folder.name, "cells": pagedata.SHARD_CALLS, "search": size}


def render(comparison: Comparison, redact: Redact,
           folder: pagedata.DataFolder | None = None) -> str:
    """The page as text, each value redacted by `redact` (the CLI's redactor) before it is
    escaped, its cells' data files written into `folder` (without one, only hashed: the text
    is the page's as `write_compare_page` writes it). Jinja2 is imported by
    report_html.environment(), only here."""
    return _page(page_context(comparison), redact, folder)


def _page(context: dict[str, Any], redact: Redact, folder: pagedata.DataFolder | None) -> str:
    """The page of `page_context`'s context, its cells' data files written into `folder`."""
    from markupsafe import Markup

    from fragbench.report.html import REASON_HELP, REASON_SYMBOLS, REASON_WORDS, environment

    if folder is None:
        folder = pagedata.DataFolder(None)
    cells = context.pop("cells")
    data = {**cell_index(cells, redact),
            "files": cell_files(folder, [cell_data(part, redact) for part in shards(cells)],
                                search_text),
            "series": [redact(s["name"]) for s in context["series"]],
            "reasons": {r: [REASON_WORDS[r], REASON_HELP[r], REASON_SYMBOLS[r]]
                        for r in REASON_WORDS}}
    # The one value inserted as it is: JSON of values each redacted in cell_index, its <, >,
    # & and line separators escaped for a script element (pagedata.island).
    context["island"] = Markup(pagedata.island(data))
    context["data_dir"] = folder.name
    return environment(redact).get_template(TEMPLATE).render(context)


def write_compare_page(comparison: Comparison, path: Path, redact: Redact) -> None:
    """Write the page and its data folder beside it, all or nothing (`pagedata.writing`): a
    failed write leaves no half page, nor a page naming a folder that is not there; tables
    that cannot be read leave nothing at all (they are read before anything is written)."""
    context = page_context(comparison)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pagedata.writing(path) as folder:
        folder.publish(_page(context, redact, folder))


GRID_TEMPLATE = "compare_grid.html.j2"


def _grid_side(row: dict[str, Any], name: str, fields: list[str]) -> dict[str, Any]:
    """One series' column of a grid row (its columns FIELD_<name>, name S1, S2, …)."""
    status = row[f"status_{name}"]
    return {"status": status or "",
            "words": {None: "absent", "not_sent": "never sent"}.get(status, status),
            "parsed": _fmt(row[f"parsed_{name}"]),
            "valid": _fmt(row[f"n_valid_{name}"]), "invalid": _fmt(row[f"n_invalid_{name}"]),
            "conditions": _fmt(row[f"conditions_cited_validly_{name}"]),
            "differs": bool(fields), "differing": fields,
            "differing_words": [FIELD_WORDS[f] for f in fields]}


def grid_context(grid: Any) -> dict[str, Any]:
    """What the grid page shows: the warnings, who each column is, and per cell its verdict
    and per series its status, whether it parsed and its citation counts (compare.Grid). A
    series' column is outlined (`differs`) when any of compare.DIFFERS_ON differs from S1's,
    the conditions cited validly compared as sets (`compare.grid_differing_fields`), and its
    `differing` names which: a row that says "differs" always has a column outlined."""
    n = len(grid.infos)
    rows = []
    for row, fields in zip(grid.table.to_dicts(), grid_differing_fields(grid), strict=True):
        rows.append({
            **{c: row[c] for c in CELL},
            "anchor": "-".join(str(row[c]) for c in CELL),
            "compared": row["compared"], "differs": row["differs"],
            "sides": [_grid_side(row, side_name(i), fields[i]) for i in range(n)],
        })
    options = {c: sorted({str(r[c]) for r in rows}) for c in CELL if c != "rep"}
    return {
        "warnings": list(grid.warnings),
        "series": [_series(side_name(i), info, where, [])
                   for i, (info, where) in enumerate(zip(grid.infos, grid.dirs, strict=True))],
        "rows": rows,
        "counts": grid.counts,
        "filters": [
            ("differs", "differs only", [("true", "differs"), ("false", "the same")],
             "data-differs", "exact"),
            *[(c, c, options[c], f"data-{c}", "exact") for c in ("case", "lang", "variant",
                                                                  "mode")],
            ("compared", "compared", [("true", "compared"), ("false", "not compared")],
             "data-compared", "exact"),
        ],
        "page_sizes": PAGE_SIZES,
        "page_size": GRID_PAGE_SIZE,
    }


def grid_data(rows: list[dict[str, Any]], redact: Redact) -> list[dict[str, Any]]:
    """Grid rows as the grid page's data files hold them (page.js `gridPage` draws them):
    every string redacted here, one value at a time, as `cell_data`'s are."""
    red = memoized(redact)
    return [{"anchor": red(r["anchor"]), "case": red(r["case"]), "lang": red(r["lang"]),
             "variant": red(r["variant"]), "mode": red(r["mode"]), "rep": r["rep"],
             "compared": "true" if r["compared"] else "false",
             "differs": "" if r["differs"] is None else ("true" if r["differs"] else "false"),
             "sides": [{**{k: red(side[k]) for k in ("status", "words", "parsed", "valid",
                                                     "invalid", "conditions")},
                        "differing": [red(f) for f in side["differing"]],
                        "differing_words": [red(w) for w in side["differing_words"]]}
                       for side in r["sides"]]}
            for r in rows]


def grid_search_text(row: dict[str, Any]) -> str:
    """A grid row's search text: what the row reads (its cell, its verdict, each series'
    status and counts), as page.js searches it, case ignored."""
    verdict = ("not compared" if row["compared"] != "true" else
               "differs" if row["differs"] == "true" else "the same")
    parts = [f"{row['case']} · {row['lang']} · {row['variant']} · {row['mode']} · "
             f"r{row['rep']}", verdict]
    for side in row["sides"]:
        parts.append(side["words"] or "")
        if side["status"] and side["status"] != "not_sent":
            parts.append(f"parsed {side['parsed']} · valid {side['valid']} · not valid "
                         f"{side['invalid']} · conditions {side['conditions']}")
    return "\n".join(parts)


def write_grid_page(grid: Any, path: Path, redact: Redact) -> None:
    """The grid of more than two series as a page and its data folder beside it (the compare
    page's base, script and escaping; its rows are data, as the pair page's cells are), all or
    nothing (`pagedata.writing`)."""
    from markupsafe import Markup

    from fragbench.report.html import environment

    context = grid_context(grid)
    rows = context.pop("rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    with pagedata.writing(path) as folder:
        data = {**cell_index(rows, redact),
                "files": cell_files(folder, (grid_data(part, redact) for part in shards(rows)),
                                    grid_search_text),
                "series": [redact(s["letter"]) for s in context["series"]]}
        # The one value inserted as it is (pagedata.island), as on the pair page.
        context["island"] = Markup(pagedata.island(data))
        context["data_dir"] = folder.name
        folder.publish(environment(redact).get_template(GRID_TEMPLATE).render(context))
