"""What a reader sees: the report pages and figures of a series, and series compared.

In: a series folder's tables (through `fragbench.series`). Out: `report.md`, `report.html`, the
figures' PNGs, and the compare pages. Everything a page shows is escaped where it is inserted
(`templates/`).

- `data`: the report's data, shared by both pages;
- `markdown`: `report.md` (`write_report`);
- `html`: `report.html`; `figures`: the PNGs;
- `compare`, `compare_html`: two or more series side by side.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "write_report": "markdown",
    "compare_series": "compare",
    "compare_grid": "compare",
})
