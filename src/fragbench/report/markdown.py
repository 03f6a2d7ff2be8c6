"""`fragbench report`: a Markdown report of a recorded series, with its figures and, beside
it, report.html (`fragbench.report.html`).

report.md is what a reader reads: what was run, availability, citations per call, stops and
errors, usage per cell, a section per other primary measure (`report_data.measure_sections`: its
tables' first rows, or its own `summary`), secondary diagnostics, limits. The evidence call by call
(fragments, highlighted extracts, answers, raw responses) is in report.html, and every table in
the series folder.

Everything comes from the series folder's tables; nothing is recomputed differently for the
report, and nothing is summed into a global score: tables stay split by case, language, mode and
variant, with each repetition shown apart (`report.data.repetitions_phrase` says how many).
The limits are the experiment's own (config.toml's `limits`), else the general ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from fragbench.builtin.citations import FOLDED_LEVEL, REASONS
from fragbench.files import plan_sha256, write_text_atomically
from fragbench.redact import Redactor, secrets_in_env
from fragbench.report.data import (  # shared with report.html; tests read them here
    SHOWN_ROWS,
    MeasureSection,
    limits,
    load_tables,
    measure_sections,
    plain_cell,
    reason_counts,
    repetitions_phrase,
    rows_said,
    with_case_groups,
)
from fragbench.report.figures import figure_words, has_cuts, setting_order
from fragbench.report.html import REPORT_HTML, write_html_report
from fragbench.series.folder import (
    FIGURES_DIR,
    MEASURES_FILE,
    read_json,
    read_plan,
    read_table,
    series_subfolder,
)
from fragbench.series.journal import JOURNAL_FILE, read_journal

REPORT_FILE = "report.md"
TABLE_ROWS = 200
"""A per-call or per-case table in report.md shows every row up to this many (protocol 1.0's
72 calls and 12 passages, whole); beyond, it shows the same counts summed by the experiment's
groups (language, variant, mode, and the corpus's case groups), then its first TABLE_ROWS rows,
and names the Parquet table (and report.html) that holds every row. A table of 100,000 rows is
not read in a Markdown file, and writing one would make the report's cost follow the plan."""

_REPORT_REDACTOR: contextvars.ContextVar[Redactor | None] = contextvars.ContextVar(
    "report_redactor", default=None)


@contextlib.contextmanager
def _one_redactor() -> Iterator[None]:
    """While a report is written, every value is redacted by one Redactor of the secrets the
    environment held when it began (reading the environment for each of 100,000 cells cost
    more than the report)."""
    token = _REPORT_REDACTOR.set(_redactor(tuple(secrets_in_env())))
    try:
        yield
    finally:
        _REPORT_REDACTOR.reset(token)


def _current_redactor() -> Redactor:
    return _REPORT_REDACTOR.get() or _redactor(tuple(secrets_in_env()))


# `&` first, so that the entities made for `<` and `>` are not escaped again.
_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


@functools.lru_cache(maxsize=4)
def _redactor(secrets: tuple[str, ...]) -> Redactor:
    """One Redactor per set of secrets (building one compiles its patterns; a report inserts
    thousands of values)."""
    return Redactor(secrets)


def markdown_text(text: str) -> str:
    """A value made safe where report.md inserts it, in a table cell or a heading: first
    redacted (every secret of the environment, `fragbench.redact`), then made inert: `<`, `>`
    and `&` as entities (no tag, comment or entity from a value reaches a Markdown renderer),
    `\\`, `|`, `[` and `]` escaped (no cell split, no link or image), and any run of line
    breaks or control characters as one space (one line). A Markdown viewer shows the text as
    it was. The page is never transformed after it is put together."""
    text = _current_redactor().text(text)
    for char, entity in _ENTITIES:
        text = text.replace(char, entity)
    for char in "\\|[]":
        text = text.replace(char, "\\" + char)
    return _BREAKS.sub(" ", text)


def code_span(text: str) -> str:
    """A name (a measure's, a table's) as a Markdown code span where report.md inserts it:
    redacted, on one line, between backtick runs longer than any inside it (CommonMark's
    rule), so no value can close the span early; nothing in a code span is markup."""
    text = _BREAKS.sub(" ", _current_redactor().text(text))
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(value: Any) -> str:
    return markdown_text(plain_cell(value))


def markdown_table(frame: pl.DataFrame) -> str:
    """A pipe table, its headers and cells escaped (`markdown_text`); null shows as —, an
    empty list as ∅."""
    head = "| " + " | ".join(markdown_text(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([head, rule, *rows])


def _measure_section(section: MeasureSection) -> list[str]:
    files = ", ".join(f"`{t}.parquet`" for t in section.tables)
    how = ("as the measure summarizes them" if section.own else
           f"each table's first {SHOWN_ROWS} rows")
    out = ["", f"## Measure {code_span(section.measure)}", "",
           f"A primary measure, pre-registered in the frozen plan. Its tables are in this "
           f"folder ({files}); shown here {how}.", ""]
    for shown in section.parts:
        out += [f"### {markdown_text(shown.title)} ({rows_said(shown)})", "",
                markdown_table(shown.frame) if shown.frame.width else "(no column)", ""]
    return out[:-1]


def call_times(records: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The first and last call's time (its reservation, its outcome), or None."""
    first = next((r["at"] for r in records if r.get("type") in ("reserve", "outcome")
                  and r.get("at")), None)
    last = next((r["at"] for r in reversed(records) if r.get("type") in ("reserve", "outcome")
                 and r.get("at")), None)
    return (str(first), str(last)) if first is not None and last is not None else None


def _run_section(series_dir: Path, info: dict[str, Any], status: dict[str, Any],
                 plan: dict[str, Any], calls: pl.DataFrame,
                 records: list[dict[str, Any]]) -> list[str]:
    times = call_times(records)
    models = sorted({m for m in calls["model"].to_list() if m})
    statuses = calls.group_by("status").len().sort("status")
    plan_hash = plan_sha256(plan, series_dir / "plan.json")
    rows = [
        ("experiment", info["experiment"]),
        ("series", info["series"]),
        ("backend", f"{info['label']} (`{info['backend_plugin']}`)"
         + ("" if info["is_model"] else " — **a non-model baseline**")),
        ("endpoint", info["endpoint"]),
        ("frozen plan (experiment.json) sha256", f"`{plan_hash}`"),
        ("model as returned", ", ".join(models) or "—"),
        ("first and last call", f"{times[0]} → {times[1]}" if times else "no call"),
        ("calls", f"{calls.height} planned; " + ", ".join(
            f"{s} {n}" for s, n in statuses.iter_rows())),
        ("series spend", f"{status['spent_usd']} USD (known costs, plus whole reservations "
                         "where a cost is unknown)"),
    ]
    budget = plan["budget"]
    if info.get("budget"):
        # The report reads nothing outside the series folder, so that `measure` rebuilds it
        # byte for byte anywhere: the budget's balance lives in its ledger (`fragbench plan`).
        rows.append(("budget", f"draws on budget `{info['budget']}` (ceiling "
                               f"{budget['ceiling_usd']} USD, prior "
                               f"{budget['prior_spend_usd']} USD); its balance, with every "
                               "series drawing on it, is in its ledger: `fragbench plan`"))
    else:
        rows.append(("budget", "draws on no budget (no cost)"))
    stop = status.get("stop")
    state = status["state"]
    rows.append(("state", state if not stop else
                 f"**stopped at call {stop['seq']} ({stop['call_id']}): {stop['reason']}** — "
                 f"{stop['detail']}"))
    if state == "interrupted":
        rows.append(("note", "the collector was interrupted: the last call's outcome is "
                             "unknown and counted at its reservation"))
    out = ["## What was run", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_cell(v)} |" for k, v in rows]
    return out


def availability_matrix(availability: pl.DataFrame) -> pl.DataFrame:
    """One row per case x language x variant, one column per setting: `n/N: IDs` (condition
    IDs supplied whole), followed by `; cut c: IDs` where c more were supplied only cut."""
    if "n_conditions_cut" not in availability.columns:
        availability = availability.with_columns(
            pl.lit(0, pl.Int32).alias("n_conditions_cut"),
            pl.lit([], dtype=pl.List(pl.String)).alias("conditions_cut"))
    labelled = availability.with_columns(
        pl.when(pl.col("mode") == "full").then(pl.lit("full"))
        .otherwise(pl.format("{}/{}", "chunk_size", "top_k")
                   + pl.when(pl.col("main_setting")).then(pl.lit(" (main)")).otherwise(
                       pl.lit(""))).alias("setting"),
        (pl.format("{}/{}", "n_conditions_supplied", "n_conditions")
         + pl.when(pl.col("n_conditions_supplied") > 0)
         .then(pl.lit(": ") + pl.col("conditions_supplied").list.join(" "))
         .otherwise(pl.lit(""))
         + pl.when(pl.col("n_conditions_cut") > 0)
         .then(pl.format("; cut {}: {}", "n_conditions_cut",
                         pl.col("conditions_cut").list.join(" ")))
         .otherwise(pl.lit(""))).alias("value"),
    )
    order = setting_order(labelled)
    wide = labelled.pivot(on="setting", index=["case", "lang", "variant"], values="value")
    return wide.select("case", "lang", "variant", *order)


def _citations_section(tables: dict[str, pl.DataFrame], calls: pl.DataFrame,
                       not_sent: int, groups: pl.DataFrame | None = None) -> list[str]:
    """Per sent call: how many citations, how many hold word for word, and why each other one
    does not (exact level), with the typographic level beside it, never merged."""
    per_call = (tables["citations_per_call"]
                .join(calls.select("call_id", "status"), on="call_id", maintain_order="left")
                .filter(pl.col("status") != "not_sent")
                .sort("case", "lang", "mode", "variant", "rep"))
    reasons = reason_counts(tables["citations"])
    missing = [r for r in REASONS if r not in reasons.columns]
    reasons = reasons.with_columns(pl.lit(None, pl.UInt32).alias(r) for r in missing)
    exact = per_call.join(reasons, on="call_id", how="left", maintain_order="left").with_columns(
        pl.when(pl.col("parsed")).then(pl.col(r).fill_null(0)) for r in REASONS)
    left_out = (" Calls never sent are left out: nothing was measured (see Stops and errors)."
                if not_sent else "")
    return ["", "## Citations that hold word for word", "",
            "Exact level: the extract must be an exact substring of the text shown under the "
            "cited ID (no case, space, quote or accent folding). A valid extract does not show "
            "that it supports the whole answer. Calls without a parsed answer show — (nothing "
            f"measured), never zero.{left_out} `n_valid_folded` is the typographic level, "
            f"reported beside and never merged: it folds only typographic variants "
            f"({FOLDED_LEVEL}). Each extract highlighted in the fragment that holds it: "
            f"[{REPORT_HTML}]({REPORT_HTML}).", "",
            f"![{figure_words(tables)['citations']}]({FIGURES_DIR}/citations.png)", "",
            *capped_table(exact, "calls sent", "citations_per_call.parquet", groups,
                          ["parsed", "n_citations", "n_valid", "n_invalid", *REASONS,
                           "n_valid_folded"],
                          first=exact.select(
                              "call_id", "parsed", "n_citations", "n_valid", "n_invalid",
                              *REASONS, "n_valid_folded", "conditions_cited_validly",
                              "supplied_conditions_not_cited"))]


def _stops_section(completeness: pl.DataFrame, calls: pl.DataFrame, not_sent: int,
                   groups: pl.DataFrame | None = None) -> list[str]:
    """Only the calls that did not simply complete with a parsed answer: a stop, a failure, an
    interruption, a refusal, an answer cut short or not parsed. Calls never sent are counted in
    one line (report.html lists each)."""
    rows = (completeness
            .join(calls.select("call_id", "parse_error"), on="call_id", maintain_order="left")
            .filter(pl.col("stop_reason").is_not_null()
                    | ((pl.col("status") != "not_sent")
                       & ((pl.col("status") != "completed") | ~pl.col("parsed").fill_null(False)
                          | pl.col("refused").fill_null(False)
                          | pl.col("incomplete_reason").is_not_null()
                          | pl.col("error").is_not_null()))))
    out = ["", "## Stops and errors", ""]
    if rows.height:
        out += ["Every call sent that did not complete with a parsed answer, or where the "
                "series stopped; each is shown in full in the HTML report.", "",
                *capped_table(rows, "calls", "completeness.parquet", groups, [],
                              first=rows.select(
                                  "call_id", "status", "stop_reason", "answered", "parsed",
                                  "parse_error", "refused", "incomplete_reason", "error"))]
    else:
        out.append("Every call sent completed with a parsed answer: no stop, failure, refusal, "
                   "answer cut short or unparsed.")
    if not_sent:
        out += ["", f"{not_sent} planned calls were not sent (the series stopped)."]
    return out


def write_report(series_dir: Path, tables: dict[str, pl.DataFrame] | None = None,
                 records: list[dict[str, Any]] | None = None,
                 plan: dict[str, Any] | None = None) -> Path:
    """Write report.md, what a reader reads (what was run, availability, citations per call,
    stops and errors, usage, limits), its figures, and report.html beside it: the evidence
    call by call (fragments, highlighted extracts, answers, raw responses).

    `tables` are the tables `measure` and `run` just derived (else read from the folder) and
    `records` the journal they were derived from (else read once here), so that a command
    reads the journal once; `plan` the series' plan.json, when the caller holds it (else read
    here, once for both pages)."""
    if records is None:
        journal = series_dir / JOURNAL_FILE
        records = read_journal(journal) if journal.exists() else []
    if plan is None:
        plan = read_plan(series_dir)
    with _one_redactor():
        return _write_report(series_dir, tables, records, plan)


def _write_report(series_dir: Path, tables: dict[str, pl.DataFrame] | None,
                  records: list[dict[str, Any]], plan: dict[str, Any]) -> Path:
    from fragbench.report.figures import availability_heatmap, citation_outcomes

    info = read_json(series_dir / "series.json")
    status = read_json(series_dir / "status.json")
    manifest = read_json(series_dir / MEASURES_FILE)
    # The tables `measure` and `run` just derived, or the recorded ones, read once for both
    # pages.
    tables = load_tables(series_dir) if tables is None else tables
    groups = (read_table(series_dir, "cases", "cases.parquet")
              if (series_dir / "cases.parquet").is_file() else None)
    calls = tables["calls"]
    not_sent = calls.filter(pl.col("status") == "not_sent").height
    figures = series_subfolder(series_dir, FIGURES_DIR)  # a link there is refused

    title = f"# {info['experiment']} · series `{info['series']}`"
    out = [title, ""]
    if not info["is_model"]:
        out += [f"> **Non-model baseline.** `{info['backend']}` is an offline reference that "
                "answers with the supplied sentences sharing a term with the question. Nothing "
                "here is a model's result.", ""]
    reps = repetitions_phrase(plan)
    out += ["Measures, not a verdict: every table is split by case, language, mode and variant"
            f"{f', {reps}' if reps else ''}. Null and adverse results are published as they "
            "are.", "",
            "The evidence call by call (the fragments each call was shown with every extract "
            "highlighted where it is, the answers, each citation's reason, usage and the raw "
            f"responses) is in [{REPORT_HTML}]({REPORT_HTML}), one file that opens offline. "
            "Every table is in this folder (`calls.parquet`, `citations.parquet`, "
            "`availability.parquet`, …), documented in fragbench's `docs/tables.md`.", ""]
    out += _run_section(series_dir, info, status, plan, calls, records)

    if "availability" in tables:
        availability_heatmap(tables["availability"], figures / "availability", info, groups)
        retrieval = plan["parameters"]["retrieval"]
        cuts = (" A span chunker cuts sentences: `cut c: IDs` follows when c more condition "
                "IDs were supplied only cut (part of the sentence, a fragment under its ID), "
                "never counted as supplied." if has_cuts(tables["availability"]) else "")
        out += ["", "## Retrieval: condition IDs available before the model", "",
                f"The sensitivity matrix (chunk size / top-k; chunker `{retrieval['chunker']}`, "
                "its chunk size in its own unit), every setting published together; the calls "
                "use the main setting. Each cell: condition IDs supplied whole / the case's "
                f"condition IDs, by exact ID.{cuts} No generation, no cost.", "",
                f"![{figure_words(tables)['availability']}]({FIGURES_DIR}/availability.png)",
                ""]
        out += _availability_tables(tables["availability"], groups)
    if "citations" in tables:
        citation_outcomes(tables["citations"], tables["citations_per_call"], calls,
                          figures / "citations", info, groups)
        out += _citations_section(tables, calls, not_sent, groups)
    if "completeness" in tables:
        out += _stops_section(tables["completeness"], calls, not_sent, groups)
    if "usage" in tables:
        out += ["", "## Usage and cost per cell", "",
                "Token sums over the calls with a known usage; `counted_usd` is what the budget "
                "counts (unknown costs at their whole reservation). Each call's own usage and "
                f"cost: [{REPORT_HTML}]({REPORT_HTML}).", ""]
        usage = tables["usage"]
        out += capped_table(usage, "cells", "usage.parquet", groups,
                            [c for c, t in usage.schema.items()
                             if t.is_numeric() and c not in ("rep",)])

    for section in measure_sections(manifest, tables):
        out += _measure_section(section)

    diagnostics = [e for e in manifest if e["kind"] == "diagnostic"]
    out += ["", "## Secondary diagnostics", ""]
    if diagnostics:
        out += ["Secondary diagnostics only, not measures of truth; kept apart from the "
                "primary measures above (tables under `diagnostics/`).", ""]
        for entry in diagnostics:
            frame = tables[entry["table"]]
            out += [f"### {markdown_text(entry['table'])} (measure {code_span(entry['measure'])}, "
                    f"{frame.height} rows)",
                    "", markdown_table(frame.head(50)), ""]
    else:
        out += ["None was run; docs/plugins.md says how to plug a checker in as a diagnostic "
                "measure."]

    out += ["", "## Limits", ""] + [f"- {line}" for line in limits(plan)]
    out += ["", f"Every answer as it came, and every raw response: [{REPORT_HTML}]({REPORT_HTML})."]
    path = series_dir / REPORT_FILE
    write_text_atomically(path, "\n".join(out) + "\n")
    write_html_report(series_dir, tables, records=records, plan=plan)
    return path


GROUP_KEYS = ("lang", "variant", "mode")
"""The experiment's own groups a large table is summed by, when its rows carry them."""


def _with_groups(frame: pl.DataFrame, groups: pl.DataFrame | None) -> tuple[pl.DataFrame,
                                                                            list[str]]:
    """`frame` with the corpus's case groups joined on `case` (`with_case_groups`), and the
    keys to sum it by: the case groups, then language, variant and mode (those it has)."""
    frame, keys = with_case_groups(frame, groups)
    return frame, [*keys, *(k for k in GROUP_KEYS if k in frame.columns)]


def capped_table(frame: pl.DataFrame, what: str, parquet: str, groups: pl.DataFrame | None,
                 sums: list[str], first: pl.DataFrame | None = None) -> list[str]:
    # Decimal money sums stay exact (Polars sums decimals as decimals); booleans sum as counts.
    """A table whole when it has at most TABLE_ROWS rows; beyond, its `sums` columns summed
    (and its rows counted) by the experiment's groups (`_with_groups`), then its first
    TABLE_ROWS rows (of `first` when given: the same rows shown another way), naming
    `parquet`, the table that holds every row."""
    shown = frame if first is None else first
    if frame.height <= TABLE_ROWS:
        return [markdown_table(shown)]
    joined, keys = _with_groups(frame, groups)
    summed = (joined.group_by(keys).agg(pl.len().alias(what.replace(" ", "_")),
                                        *(pl.col(c).sum() for c in sums))
              .sort(keys) if keys else None)
    out = [f"{frame.height:,} {what}: too many to read one by one here. "]
    if summed is not None:
        out[0] += (f"Their counts summed by {', '.join(keys)} (how many {what}, then each "
                   "count's sum over them; a sum of counts, not a score):")
        out += ["", markdown_table(summed), ""]
    out += [f"The first {TABLE_ROWS} of the {frame.height:,}; every row is in `{parquet}` in "
            f"this folder, and every call in [{REPORT_HTML}]({REPORT_HTML}).", "",
            markdown_table(shown.head(TABLE_ROWS))]
    return out


def _availability_tables(availability: pl.DataFrame, groups: pl.DataFrame | None
                         ) -> list[str]:
    """The sensitivity matrix, one row per passage, whole up to TABLE_ROWS passages; beyond,
    the condition IDs supplied whole summed per setting by the experiment's groups, then the
    matrix's first rows."""
    matrix = availability_matrix(availability)
    if matrix.height <= TABLE_ROWS:
        return [markdown_table(matrix)]
    per_setting = availability.with_columns(
        pl.when(pl.col("mode") == "full").then(pl.lit("full"))
        .otherwise(pl.format("{}/{}", "chunk_size", "top_k")).alias("setting"))
    joined, keys = _with_groups(per_setting.drop("mode"), groups)
    keys = [*keys, "setting"]
    summed = (joined.group_by(keys)
              .agg(pl.len().alias("passages"),
                   pl.col("n_conditions_supplied").sum().alias("conditions_supplied_whole"),
                   pl.col("n_conditions").sum().alias("conditions"))
              .sort(keys))
    return [f"{matrix.height:,} passages (case, language, variant): too many to read one by "
            f"one here. The condition IDs supplied whole, summed per setting by "
            f"{', '.join(keys[:-1])}: passages, condition IDs supplied whole, condition IDs in "
            "all (a sum of counts, not a score):", "", markdown_table(summed), "",
            f"The first {TABLE_ROWS} passages; every passage and setting is in "
            "`availability.parquet` in this folder.", "",
            markdown_table(matrix.head(TABLE_ROWS))]
