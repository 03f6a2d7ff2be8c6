"""A recorded series: its journal, and every table derived from it.

In: a series folder (`plan.json`, `series.json`, `journal.jsonl`, `facts.parquet`,
`retrieval.parquet`). Out: the calls table and the measures' tables (`folder.derive_tables`),
the journal read back and checked (`journal.read_journal`), many series as Polars LazyFrames
(`scan.scan`, which `fragbench.scan` is), exports (`export`).

- `journal`: the append-only, hash-chained journal (`Journal`, `read_journal`);
- `answers`: a model's answer parsed, bounded and non-recursive;
- `measure_tables`: how a measure declares its tables, and the checks of what it returns;
- `folder`: the series folder and its derived tables (`derive_tables`, `calls_table`);
- `scan`: every series at or under a folder, one LazyFrame per table;
- `export`: the tables out as CSV or Parquet.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "Journal": "journal",
    "read_journal": "journal",
    "derive_tables": "folder",
    "calls_table": "folder",
    "read_table": "folder",
    "SkippedSeries": "scan",
})
