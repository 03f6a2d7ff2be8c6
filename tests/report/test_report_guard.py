"""No number in report.md is an aggregate over cells.

The rule. Protocol 1.0 publishes its measures split by case, language, variant, mode and
repetition, with no global score. So every number that report.md shows must be one of:

1. a value in a table row that names one cell: a call (a `call_id` column: case, language,
   variant, mode and repetition), or a passage and a retrieval setting (the availability matrix:
   case, lang, variant name the row, the setting names the column);
2. accounting in a table keyed by case, lang, variant and mode: calls planned and sent, token
   counts, USD. The three repetitions' usage added up is what the budget spends, not a measure,
   and no other kind of column may sit in such a table;
3. in "What was run": counts of calls by status, spend and budget in USD, identifiers
   (experiment, series, backend, model, endpoint with its port, the call a stop names and the
   HTTP status it got), the plan's hash, timestamps;
4. in prose: a version identifier (`checker 0.1`, `corpus 0.2`), a call's sequence number beside
   its call ID (appendix headings), the count of calls not sent, the row count of a diagnostic
   table shown below its heading;
5. inside an appendix code block: one call's raw answer, under that call's heading.

Anything else fails: a share, rate, mean or total over cells, in prose, in a table keyed by
anything coarser than a cell (say by mode), in a row whose key is not a real cell ("all"), or in
a column whose name says it aggregates. Numbers written out in words are not looked for.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.reports import aggregates


def test_the_offline_report_shows_no_aggregate(extractive: Path) -> None:
    assert aggregates(extractive) == []


def test_an_aggregate_inserted_anywhere_is_caught(extractive: Path) -> None:
    """Each insertion is one way to publish a number folded over cells; each must fail."""
    report = (extractive / "report.md").read_text(encoding="utf-8")
    citations = "## Citations that hold word for word"
    first_call_row = next(ln for ln in report.splitlines() if ln.startswith("| delay-en-A-full-r1"))
    insertions = {  # name -> (the tampered report, what the fault must quote)
        "a global share in prose": (
            report.replace(citations, f"share valid 0.97\n\n{citations}"), "share valid 0.97"),
        "a share as a list item": (
            report.replace("## Limits\n", "## Limits\n\n- share valid 97%\n"), "97%"),
        "a table split only by mode": (report.replace(
            citations, "| mode | n_valid |\n|---|---|\n| retrieval | 120 |\n\n" + citations),
            "no column names a cell"),
        "a row over all calls": (report.replace(
            first_call_row, first_call_row + "\n" + re.sub(r"^\| [^|]+", "| all", first_call_row)),
            "['all', "),
        "an aggregate column": (report.replace(
            "| call_id | parsed | n_citations |", "| call_id | parsed | share_valid |"),
            "'share_valid' names an aggregate"),
        "a row in What was run": (report.replace(
            "| state |", "| share valid | 0.97 |\n| state |"), "'share valid' = '0.97'"),
        "a measure per case/lang/variant/mode": (report.replace(
            "| calls_planned | calls_sent |", "| calls_planned | n_valid |"),
            "'n_valid' per case/lang/variant/mode"),
        "a number in a code block before the appendix": (report.replace(
            citations, "```\nvalid 0.97\n```\n\n" + citations), "valid 0.97"),
    }
    for name, (tampered, quoted) in insertions.items():
        assert tampered != report, name  # the insertion point exists
        faults = aggregates(extractive, tampered)
        assert faults and all(quoted in fault for fault in faults), (name, faults)
