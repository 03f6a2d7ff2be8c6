"""The documented schema of every table a series holds; renders docs/tables.md.

`python -m fragbench.schemas > docs/tables.md` regenerates the page; tests check that the page
is current and that every table written has exactly the documented columns, each of the
documented Polars type (tests/test_tables_doc.py reads the page itself, so a hand edit that
drifts from the files fails too).

The meanings live beside the code that computes each table. A measure's types are what the
measure declares (`Measure.tables`, checked whenever its tables are written); the recorded
tables' types are declared here (calls.parquet's come from `CALLS_SCHEMA`).
"""

from __future__ import annotations

from fragbench.builtin.availability import (
    AVAILABILITY_SCHEMA,
    CALL_AVAILABILITY_SCHEMA,
    Availability,
)
from fragbench.builtin.citations import CITATIONS_SCHEMA, PER_CALL_SCHEMA, Citations
from fragbench.builtin.completeness import (
    COMPLETENESS_SCHEMA,
    USAGE_SCHEMA,
    Completeness,
    UsageMeasure,
)
from fragbench.columns import IDS, PASSAGE_TYPES
from fragbench.retrieval.passages import RETRIEVAL_SCHEMA
from fragbench.series.folder import CALLS_SCHEMA
from fragbench.series.measure_tables import type_name

FACTS_SCHEMA = {
    "case": "case ID",
    "lang": "language code",
    "fact_id": "fact ID",
    "text": "the sentence",
    "is_condition": "whether the fact carries one of the case's conditions",
}

QUESTIONS_SCHEMA = {
    "case": "case ID",
    "lang": "language code",
    "question": "the case's question in that language, as the calls asked it",
}

TABLES: list[tuple[str, str, dict[str, str]]] = [
    ("facts", "recorded: the corpus as used, one row per fact and language", FACTS_SCHEMA),
    ("questions", "recorded: each case's question, one row per case and language (shown in "
     "report.html's call cards; series recorded before issue 26 have none)", QUESTIONS_SCHEMA),
    ("retrieval", "recorded: the sensitivity matrix, one row per chunk of every case x "
     "language x variant x setting, selected or not (also what `fragbench retrieve` writes); "
     "the main setting is one of its rows. `n_terms` and `matched_terms` come from the "
     "sqrt-lexical scorer", {**RETRIEVAL_SCHEMA,
                             "n_terms": "(sqrt-lexical) the chunk's term count, repeats counted",
                             "matched_terms": "(sqrt-lexical) distinct question terms found"}),
    ("calls", "derived from the journal: one row per planned call, sent or not",
     {k: v for k, (_, v) in CALLS_SCHEMA.items()}),
    ("availability", "measure `availability` (primary): per case x language x variant x "
     "retrieval setting, plus the full passage", AVAILABILITY_SCHEMA),
    ("call_availability", "measure `availability` (primary): per planned call",
     CALL_AVAILABILITY_SCHEMA),
    ("citations", "measure `citations` (primary): one row per citation of every parsed answer",
     CITATIONS_SCHEMA),
    ("citations_per_call", "measure `citations` (primary): per planned call", PER_CALL_SCHEMA),
    ("completeness", "measure `completeness` (primary): per planned call", COMPLETENESS_SCHEMA),
    ("usage", "measure `usage` (primary): per cell (case x language x variant x mode)",
     USAGE_SCHEMA),
]

MEASURE_TYPES: dict[str, dict[str, str]] = {
    **Availability.tables, **Citations.tables, **Completeness.tables, **UsageMeasure.tables}
"""The built-in measures' tables, as each measure declares them (`Measure.tables`): the one
source, read by the core when it checks what a measure returns and by this page."""

TYPES: dict[str, dict[str, str]] = {
    "facts": {"case": "String", "lang": "String", "fact_id": "String", "text": "String",
              "is_condition": "Boolean"},
    "questions": {"case": "String", "lang": "String", "question": "String"},
    "retrieval": {**PASSAGE_TYPES, "chunk_size": "Int32", "top_k": "Int32", "chunk": "Int32",
                  "fact_ids": IDS, "whole_fact_ids": IDS, "cut_fact_ids": IDS,
                  "score": "Float64", "rank": "Int32", "selected": "Boolean",
                  "tied": "Boolean", "text": "String", "start": "Int32", "end": "Int32",
                  "n_terms": "Int64", "matched_terms": IDS},
    "calls": {name: type_name(dtype) for name, (dtype, _) in CALLS_SCHEMA.items()},
    **MEASURE_TYPES,
}
"""Table -> column -> its Polars type as `type_name` writes it (`"List(String)"`), the way a
measure declares its tables; `IDS` and `PASSAGE_TYPES` are `fragbench.columns`' (type names,
not Polars types). tests/test_tables_doc.py checks them against the files of a baseline, a
model, and an empty series."""


INTRO = """# Tables of a series

A series folder is `OUT/<experiment>/<series>/` (`OUT` is `outputs` unless `--out` says
otherwise). What was recorded while collecting: `plan.json` (a copy of the frozen plan),
`series.json` (backend, label, whether it is a model, endpoint, budget, plan hash, start time,
and `"journal": "chained"`: its journal is hash-chained, below), `facts.parquet`,
`questions.parquet`, `retrieval.parquet` and `journal.jsonl`. Derived from those alone, and
rebuilt byte for byte by `fragbench measure`: `calls.parquet`, every measure's tables
(primary ones in the folder, diagnostic ones under `diagnostics/`), `measures.json` (which
table comes from which measure, of which kind), `status.json` (complete, stopped or
interrupted, the stop, the spend), `report.md` with `figures/`, and `report.html` with its
data folder `report-data/<digest>/` (each call's detail and the search texts, as script files
the page loads: copy the page with its folder).

Load them with Polars: `fragbench.scan("outputs/protocol-1.0")["calls"]` is a LazyFrame over
every series, with `experiment` and `series` columns. No table holds a global score. A measure
never names a table `calls`, `cases`, `questions`, `facts` or `retrieval` (in any case):
`measure`, `run` and the test kit refuse such a declaration, which would overwrite what the
series recorded.

Money columns (`*_usd`) are exact decimals, Polars `Decimal(38, 18)` (Parquet's 128-bit
decimal), built from the journal's decimal strings and never through a float, so a sum such as
`pl.col("counted_usd").sum()` equals `status.json`'s `spent_usd` to the last digit. An amount
needing more than 18 decimals or 20 integer digits is refused with its value named, never
rounded. A measure plugin's money is held to the same type: `measure` and `run` refuse, before
any table is written, a table whose money is not of that type (or that breaks the types the
measure declares in `tables`), `export` refuses one, and `fragbench.scan` refuses one written
before (rebuild it with `fragbench measure`); the report shows money as plain decimals
(`0.003024`).

Each table below gives every column's Polars type. `List(String)` is a list of strings;
`Decimal(38, 18)` is exact money; a column may hold nulls whatever its type (each meaning says
when).

## Exporting: CSV and JSON lines

`fragbench export SERIES_DIR --format csv|jsonl [--out DIR]` writes every table the series
lists in `measures.json` (calls, each measure's tables; a diagnostic's go under
`diagnostics/`, as in the series), plus `retrieval` and `facts`, one file each named after
the table, into `DIR` (default `SERIES_DIR/export/`). The columns, their order and their rows
are the Parquet tables'; only the encoding changes:

- money (`Decimal(38, 18)`) is written as exact decimal text, never a float: `"0.003024"`
  (a JSON string in JSON lines, so that no reader turns it into a binary float);
- in CSV, a `List(String)` of IDs is space-joined (`F1 F3`, an empty list `""`); a list whose
  items are texts that may hold spaces (`supplied_texts`), and any other nested value
  (`calls.citations`), is a JSON array in the cell (`[]` when empty); a null is an empty cell,
  so that a null list (an answer that did not parse: nothing measured) and an empty one (a
  parsed answer citing nothing) stay apart;
- in CSV, a text cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is
  written with a leading apostrophe (`'=...`), which spreadsheets show as text instead of
  running it as a formula: answers, extracts and cited IDs are a model's untrusted text (a
  cell `=IMPORTDATA("http://...")` would fetch a URL when opened); JSON lines keep it as is;
- in JSON lines every value keeps its JSON shape (lists, objects, numbers, `null`); an empty
  table is an empty file.

The export is written into a staging folder beside `DIR`, which then takes its place in one
rename: a failure (a full disk, a folder that cannot be written) leaves `DIR` as it was, an
earlier export included. `DIR` holds a `.fragbench-export` marker: an earlier export is
replaced whole (no stale file of another format stays), and a folder holding anything else is
refused.

## journal.jsonl

Append-only, one JSON object per line, each fsync'ed before the collector goes on: `header`,
then per call `reserve` (before the request leaves), `received` (the body as it arrived,
before anything parses it) and `outcome` (after it returns), then `stop` or `end`. A torn last
line (a crash mid-write) is ignored when reading; a `reserve` without its `outcome` counts as
spent at its whole reservation (the call is `interrupted` in calls.parquet, which shows its
received body if there is one). No key, header or account identifier is ever written.

Every line is valid UTF-8: text that is not valid Unicode (a lone surrogate such as a JSON
`\\ud83d` in an answer) is kept as the six characters of its escape, `\\ud83d`, in the journal
and in every table, also when read from an older journal. A journal is checked when read, like
the ledger: a line that is not a record fragbench writes (an unknown type; an amount that is
not a non-negative decimal string with at most 18 decimals and 20 integer digits; a status
that is not text of at most 100 characters; a stop reason other than technical_failure,
changed_model, unknown_cost, budget, cannot_record, interrupted; a call or position that the
frozen plan does not have; a second reservation or outcome of one call; a call after the
series' stop or end) is refused in one line naming the file and the line number: restore the
journal from your backup. Nothing is rebuilt from it.

Every line is chained and sealed: it opens with `prev`, the sha256 of the exact bytes of the
line before it (64 zeros for the first), and ends with `sha256`, the sha256 of its own text
without that field. An edited line, or a line deleted, inserted or moved, is refused the same
way, at the first line that breaks the chain. The header says `"journal": "chained"` too, as
does the budget ledger's `series` record of a billed run: a journal one of them says was
chained is refused when it is not (its chain stripped). A torn line is closed by the next
writer's `repair` record, which chains to the last whole line and names the torn bytes
(`torn_sha256`, `torn_bytes`). A journal written before the chain (no line has `prev` or
`sha256`) is read as before, with a note that its edits cannot be detected; one that mixes both
is refused.
"""

_CELL_KEY: list[tuple[str, str, str]] = [
    ("case", "String", "case ID"),
    ("lang", "String", "language code"),
    ("variant", "String", "sentence order"),
    ("mode", "String", "retrieval or full"),
    ("rep", "Int32", "repetition, 1-based"),
]
"""The columns that name a cell and repetition, first in both of compare's tables."""
_COMPARE_PAIR: list[tuple[str, str, str]] = [*_CELL_KEY,
    ("compared", "Boolean", "both sides answered (completed or incomplete) the same request"),
    ("differs", "Boolean",
     "a compared cell's status, parsed, valid or invalid citation count, "
     "or set of conditions cited validly differ; null when not compared"),
    ("status_a", "String", "side A's call status; null when the cell is absent from A"),
    ("status_b", "String", "idem, side B"),
    ("parsed_a", "Boolean", "side A's answer parsed; null when not measured"),
    ("parsed_b", "Boolean", "idem, side B"),
    ("n_citations_a", "Int32", "side A's citations"),
    ("n_citations_b", "Int32", "idem, side B"),
    ("n_valid_a", "Int32", "side A's valid citations (exact level)"),
    ("n_valid_b", "Int32", "idem, side B"),
    ("n_invalid_a", "Int32", "side A's other citations"),
    ("n_invalid_b", "Int32", "idem, side B"),
    ("conditions_cited_validly_a", "List(String)",
     "the conditions side A cites validly "
     "(compared as a set)"),
    ("conditions_cited_validly_b", "List(String)", "idem, side B"),
    ("cost_usd_a", "Decimal(38, 18)", "side A's call cost, USD (never part of `differs`)"),
    ("cost_usd_b", "Decimal(38, 18)", "idem, side B"),
    ("note", "String", "why a cell is not compared (empty when it is)"),
]
_COMPARE_GRID: list[tuple[str, str, str]] = [*_CELL_KEY,
    ("compared", "Boolean", "every series answered the same request"),
    ("differs", "Boolean", "any series differs from S1 as for two; null when not compared"),
    ("status_S<i>", "String", "series i's call status; null when absent"),
    ("parsed_S<i>", "Boolean", "its answer parsed"),
    ("n_valid_S<i>", "Int32", "its valid citations"),
    ("n_invalid_S<i>", "Int32", "its other citations"),
    ("conditions_cited_validly_S<i>", "List(String)", "the conditions it cites validly"),
]


def _compare_table(rows: list[tuple[str, str, str]]) -> str:
    return "\n".join(["| column | type | meaning |", "|---|---|---|",
                      *(f"| `{c}` | `{t}` | {m} |" for c, t, m in rows)])


COMPARE_OUT = "\n".join([
    """## compare --out: series cell by cell

`fragbench compare A B --out FILE` (`.parquet`, `.csv` or `.jsonl`) writes one row per planned
cell and repetition, in cell order, and beside it, once, `FILE.json` (`cmp.csv` ->
`cmp.csv.json`): who each side is and the warnings the terminal prints first. The table has
no warning column: a warning is about a series, not a cell, and was the same on every row.

Two series: each side's columns end in `_a` or `_b` (sides A and B, as on screen and on the
page).
""",
    _compare_table(_COMPARE_PAIR),
    """
More than two series: the sides are S1, S2, … in the order given (as on screen and on the
page), each with its five columns, in that order; `differs` is against S1.
""",
    _compare_table(_COMPARE_GRID),
    """
`FILE.json`: `sides`, one object per side in order (`side`: `A`, `B` or `S1`, `S2`, …, the
suffix of its columns; `experiment`, `series`, `folder`, `label`, `is_model`, `state`,
`stop_reason`); `warnings`, the lines the terminal prints first (a stopped or incomplete series,
different frozen plans, the cells not compared), an empty list when there is none; `counts`
of cells (`cells`, `compared`, `differing`, `same`, `not_compared`; no score).
""",
])
"""`compare --out`'s tables (not a series' tables: `fragbench.report.compare` writes them),
documented on the same page; tests/report/test_compare_page.py holds them to it."""


def render() -> str:
    out = [INTRO]
    for name, about, schema in TABLES:
        types = TYPES[name]
        out += [f"## {name}.parquet", "", about[0].upper() + about[1:] + ".", "",
                "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{column}` | `{type_name(types[column])}` | {meaning} |"
                for column, meaning in schema.items()]
        out.append("")
    out.append(COMPARE_OUT)
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
