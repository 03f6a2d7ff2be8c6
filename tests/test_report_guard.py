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

import polars as pl

RUN_ROWS = {  # "What was run": label -> what its numbers are (rule 3)
    "experiment": "identifier",
    "series": "identifier",
    "backend": "identifier",
    "endpoint": "identifier",
    "frozen plan (experiment.json) sha256": "hash",
    "model as returned": "identifier",
    "first and last call": "timestamps",
    "calls": "counts of calls",
    "series spend": "accounting",
    "budget": "accounting",
    "state": "the call a stop names",
    "note": "no number",
}
CALL_COUNTS = re.compile(r"\d+ planned; [a-z_]+ \d+(, [a-z_]+ \d+)*")
ACCOUNTING_COLUMN = re.compile(r"calls_[a-z_]+|[a-z_]*tokens|[a-z_]*usd")
SETTING_COLUMN = re.compile(r"\d+/\d+( \(main\))?|full")
AGGREGATE_NAME = re.compile(r"share|rate|mean|average|median|overall|fidelity|score|percent|%",
                            re.I)
PROSE_ALLOWED = [  # rule 4, whole lines
    re.compile(r"# \S+ · series `[^`]+`"),
    re.compile(r"### (?P<seq>\d+)\. (?P<call>\S+) — [a-z_]+"),
    re.compile(r"### \S+ \(measure `[^`]+`, \d+ rows\)"),
    re.compile(r"\d+ planned calls were not sent \(the series stopped\)\."),
    re.compile(r"!\[[^\]]*\]\(figures/[\w.-]+\)"),
]
VERSION = re.compile(r"\b(checker|corpus) \d+\.\d+\b")  # rule 4, inside a line
DIGIT = re.compile(r"\d")


def cells(line: str) -> list[str]:
    """The cells of a pipe-table line; `\\|` is a pipe inside a cell."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def check_table(block: list[str], calls: dict[str, tuple[str, ...]]) -> list[str]:
    header, rows = cells(block[0]), [cells(line) for line in block[2:]]
    passages = {key[:3] for key in calls.values()}
    blocks = set(calls.values())
    where = f"table | {' | '.join(header)} |"
    faults = [f"{where}: column {name!r} names an aggregate" for name in header
              if AGGREGATE_NAME.search(name)]
    if header == ["", ""]:
        for label, value in rows:
            kind = RUN_ROWS.get(label)
            if kind is None:
                faults.append(f"What was run: unknown row {label!r} = {value!r}")
            elif kind == "counts of calls" and not CALL_COUNTS.fullmatch(value):
                faults.append(f"What was run: calls is not counts of calls: {value!r}")
            elif kind == "no number" and DIGIT.search(value):
                faults.append(f"What was run: a number in {label!r}: {value!r}")
        return faults
    seen: set[tuple[str, ...]] = set()
    for row in rows:
        record = dict(zip(header, row, strict=True))
        if "call_id" in record:
            key: tuple[str, ...] = (record["call_id"],)
            real = record["call_id"] in calls
        elif header[:4] == ["case", "lang", "variant", "mode"]:
            key = tuple(row[:4])
            real = key in blocks
        elif header[:3] == ["case", "lang", "variant"]:
            key = tuple(row[:3])
            real = key in passages
        else:
            return [*faults, f"{where}: no column names a cell"]
        if not real or key in seen:
            faults.append(f"{where}: row {row!r} is no single cell")
        seen.add(key)
    if "call_id" not in header and header[3:4] == ["mode"]:
        faults += [f"{where}: {name!r} per case/lang/variant/mode is no accounting: it adds "
                   "up repetitions" for name in header[4:] if not ACCOUNTING_COLUMN.fullmatch(name)]
    elif "call_id" not in header:
        faults += [f"{where}: column {name!r} is no retrieval setting" for name in header[3:]
                   if not SETTING_COLUMN.fullmatch(name)]
    return faults


def aggregates(series_dir: Path, report: str | None = None) -> list[str]:
    """Every number of `report` (default: the series' report.md) that breaks the rule."""
    if report is None:
        report = (series_dir / "report.md").read_text(encoding="utf-8")
    calls = {r["call_id"]: (r["case"], r["lang"], r["variant"], r["mode"])
             for r in pl.read_parquet(series_dir / "calls.parquet").to_dicts()}
    faults: list[str] = []
    lines = report.splitlines()
    i, answer_of = 0, None  # answer_of: the call whose appendix heading came last
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if answer_of is None:
                body = "\n".join(lines[i + 1:end])
                if DIGIT.search(body):
                    faults.append(f"code block outside the appendix: {body[:80]!r}")
            i = end + 1
            continue
        if line.startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            faults += check_table(lines[i:end], calls)
            i = end
            continue
        if line.startswith("## "):
            answer_of = None
        for pattern in PROSE_ALLOWED:
            match = pattern.fullmatch(line)
            if match:
                call = match.groupdict().get("call")
                if call is not None:
                    if call not in calls:
                        faults.append(f"appendix heading of no planned call: {line!r}")
                    answer_of = call
                break
        else:
            if DIGIT.search(VERSION.sub("", line)):
                faults.append(f"prose: {line!r}")
        i += 1
    return faults


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
