"""The documented schema of every table a series holds; renders docs/tables.md.

`python -m fragbench.schemas > docs/tables.md` regenerates the page; a test checks that the
page is current and that every column of every table written is documented.
"""

from __future__ import annotations

from fragbench.builtin.availability import AVAILABILITY_SCHEMA, CALL_AVAILABILITY_SCHEMA
from fragbench.builtin.citations import CITATIONS_SCHEMA, PER_CALL_SCHEMA
from fragbench.builtin.completeness import COMPLETENESS_SCHEMA, USAGE_SCHEMA
from fragbench.retrieval import RETRIEVAL_SCHEMA
from fragbench.series import CALLS_SCHEMA

FACTS_SCHEMA = {
    "case": "case ID",
    "lang": "language code",
    "fact_id": "fact ID",
    "text": "the sentence",
    "is_condition": "whether the fact carries one of the case's conditions",
}

TABLES: list[tuple[str, str, dict[str, str]]] = [
    ("facts", "recorded: the corpus as used, one row per fact and language", FACTS_SCHEMA),
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

INTRO = """# Tables of a series

A series folder is `OUT/<experiment>/<series>/` (`OUT` is `outputs` unless `--out` says
otherwise). What was recorded while collecting: `plan.json` (a copy of the frozen plan),
`series.json` (backend, label, whether it is a model, endpoint, budget, plan hash, start time),
`facts.parquet`, `retrieval.parquet` and `journal.jsonl`. Derived from those alone, and rebuilt
byte for byte by `fragbench measure`: `calls.parquet`, every measure's tables (primary ones in
the folder, diagnostic ones under `diagnostics/`), `measures.json` (which table comes from which
measure, of which kind), `status.json` (complete, stopped or interrupted, the stop, the spend),
and `report.md` with `figures/`.

Load them with Polars: `fragbench.scan("outputs/protocol-1.0")["calls"]` is a LazyFrame over
every series, with `experiment` and `series` columns. No table holds a global score.

Money columns (`*_usd`) are exact decimals, Polars `Decimal(38, 18)` (Parquet's 128-bit
decimal), built from the journal's decimal strings and never through a float, so a sum such as
`pl.col("counted_usd").sum()` equals `status.json`'s `spent_usd` to the last digit. An amount
needing more than 18 decimals or 20 integer digits is refused with its value named, never
rounded. `fragbench.scan` refuses a table whose money is not of that type (rebuild it with
`fragbench measure`); the report shows money as plain decimals (`0.003024`).

## journal.jsonl

Append-only, one JSON object per line, each fsync'ed before the collector goes on: `header`,
then per call `reserve` (before the request leaves) and `outcome` (after it returns), then
`stop` or `end`. A torn last line (a crash mid-write) is ignored when reading; a `reserve`
without its `outcome` counts as spent at its whole reservation. No key, header or account
identifier is ever written.
"""


def render() -> str:
    out = [INTRO]
    for name, about, schema in TABLES:
        out += [f"## {name}.parquet", "", about[0].upper() + about[1:] + ".", "",
                "| column | meaning |", "|---|---|"]
        out += [f"| `{column}` | {meaning} |" for column, meaning in schema.items()]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
