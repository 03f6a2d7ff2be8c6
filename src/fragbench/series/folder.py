"""A recorded series on disk, and the tables derived from it.

A series folder holds what was recorded while collecting: `plan.json` (a copy of the frozen
plan), `series.json` (who collected, with what backend and endpoint), `facts.parquet`,
`retrieval.parquet` and the append-only `journal.jsonl`. Every other table (`calls.parquet`, the
measures' tables) is derived from those alone, so `fragbench measure` rebuilds them at any time
with no call, byte for byte.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl

from fragbench.budget.money import usd
from fragbench.columns import MONEY_PRECISION, MONEY_SCALE, MONEY_TYPE
from fragbench.errors import PluginError, SeriesError, first_line
from fragbench.files import Plan, write_atomically, write_synced
from fragbench.interfaces import MeasureInput
from fragbench.memory import release_freed_memory
from fragbench.series.answers import parse_answer
from fragbench.series.journal import (
    CHAIN_FIELDS,
    FORMAT_FIELD,
    JOURNAL_FILE,
    SURROGATE_ESCAPE,
    chain_note,
    exact_money,
    read_journal,
    spent,
    valid_unicode,
)
from fragbench.series.measure_tables import RECORDED_TABLES, held_columns
from fragbench.tables import PARQUET_ERRORS, parquet_problem

# Money columns are exact decimals, never floats: a float sum drifts (0.0030239999999999976
# for 0.003024) where the journal and status.json are exact. Scale 18 holds every amount the
# frozen prices can give (a rate with a few decimals per 10^6 tokens needs about 8) with room
# to spare; precision 38 (the most Parquet's 128-bit decimals hold) leaves 20 integer digits.
MONEY = pl.Decimal(MONEY_PRECISION, MONEY_SCALE)
INT64_MAX = 2**63 - 1


def money(amount: str | int | Decimal | None, where: str) -> Decimal | None:
    """An amount recorded as a decimal string (or Decimal), made fit for a MONEY column.

    Polars would silently round an amount finer than the scale and turn one beyond the
    precision into null; either would break the promise that table sums are exact, so such an
    amount is refused, naming it and `where` it was found. A float is refused too: it has
    already lost the exact value.
    """
    if amount is None:
        return None
    if isinstance(amount, float | bool):
        raise SeriesError(f"{where}: {amount!r} is a float, not a decimal amount; money is "
                          "recorded as decimal strings.")
    fitted = exact_money(amount)
    if fitted is None:
        raise SeriesError(f"{where}: {amount} USD does not fit the money columns' "
                          f"{MONEY_TYPE} (at most {MONEY_SCALE} decimals and "
                          f"{MONEY_PRECISION - MONEY_SCALE} integer digits); refusing to round "
                          "it.")
    return fitted


CALLS_SCHEMA: dict[str, tuple[Any, str]] = {
    "call_id": (pl.String, "planned call ID: case-lang-variant-mode-rREP"),
    "seq": (pl.Int32, "position in the frozen schedule, from 1"),
    "case": (pl.String, "case ID"),
    "lang": (pl.String, "language code"),
    "variant": (pl.String, "sentence order"),
    "mode": (pl.String, "retrieval or full"),
    "rep": (pl.Int32, "repetition, from 1"),
    "backend": (pl.String, "backend plugin name"),
    "is_model": (pl.Boolean, "false for a non-model baseline"),
    "status": (pl.String, "completed, incomplete, failed, cancelled, queued, in_progress, "
                          "interrupted (sent, outcome never recorded) or not_sent"),
    "stop_reason": (pl.String, "on the call where the series stopped: technical_failure, "
                               "changed_model, unknown_cost, budget, cannot_record, "
                               "interrupted; null elsewhere"),
    "stop_detail": (pl.String, "why, in words"),
    "failure": (pl.String, "technical failure kind: http_error, timeout, connection, bad_body, "
                           "bad_response"),
    "http_status": (pl.Int32, "HTTP status of a failed request, or of a body that arrived "
                              "for a call whose outcome was never recorded"),
    "error": (pl.String, "error message (the provider's, or the failure's)"),
    "model": (pl.String, "model as returned"),
    "service_tier": (pl.String, "service tier as returned"),
    "request_id": (pl.String, "provider request ID"),
    "input_tokens": (pl.Int64, "usage.input_tokens"),
    "cached_tokens": (pl.Int64, "usage.input_tokens_details.cached_tokens"),
    "cache_write_tokens": (pl.Int64, "usage.input_tokens_details.cache_write_tokens"),
    "output_tokens": (pl.Int64, "usage.output_tokens (reasoning included)"),
    "reasoning_tokens": (pl.Int64, "usage.output_tokens_details.reasoning_tokens"),
    "cost_usd": (MONEY, f"usage-based cost, USD ({MONEY_TYPE}); null when unknown"),
    "cost_unknown": (pl.String, "why the cost is unknown, if it is"),
    "reserved_usd": (MONEY, f"the call's reservation, USD ({MONEY_TYPE}); null when not sent"),
    "counted_usd": (MONEY, f"what the budget counts, USD ({MONEY_TYPE}): the cost if known, "
                           "else the reservation or, if larger, the usage at the frozen rates"),
    "supplied_ids": (pl.List(pl.String), "fact IDs given to the model, in the order shown"),
    "supplied_texts": (pl.List(pl.String), "the text shown under each supplied ID, in the same "
                                           "order: its sentence, or under a span chunker the "
                                           "characters of it inside the selected span (a cut "
                                           "fact's fragment)"),
    "request_sha256": (pl.String, "sha256 of the exact request text, as frozen"),
    "parsed": (pl.Boolean, "the answer text is valid JSON for the schema"),
    "parse_error": (pl.String, "why not"),
    "answer": (pl.String, "the parsed answer"),
    "citations": (pl.List(pl.Struct({"id": pl.String, "extract": pl.String})),
                  "the parsed citations, in order"),
    "refusal": (pl.String, "refusal text, if the model refused"),
    "incomplete_reason": (pl.String, "incomplete_details.reason"),
    "text": (pl.String, "the raw answer text"),
    "raw_response": (pl.String, "the raw response body (JSON), never a header: the outcome's "
                                "own, else the body as it arrived (journaled once, also for "
                                "a call whose outcome was never recorded), if it did"),
    "redacted": (pl.Boolean, "a secret was redacted from this call's recorded outcome: its "
                             "text may differ from what came back (a citation may no longer "
                             "hold word for word); null when not sent"),
}


def write_parquet(frame: pl.DataFrame, path: Path) -> None:
    """Atomic: a crash or a full disk leaves the old file or the new one, never half of one."""
    write_atomically(path, frame.write_parquet)


def write_json(value: Any, path: Path) -> None:
    """Durable and atomic: written beside and fsync'ed, then renamed into place; a failure
    (a full disk) leaves the old file or none, no temporary file, and an OSError naming
    `path`. Text that is not valid Unicode is escaped (`fragbench.series.journal.valid_text`)."""
    data = (json.dumps(valid_unicode(value), ensure_ascii=False, indent=2) + "\n").encode()
    write_atomically(path, lambda tmp: write_synced(tmp, data))


def require_series(series_dir: Path) -> None:
    """Refuse, before anything is read or written, a folder that is not a recorded series."""
    if not (series_dir / "series.json").is_file():
        what = "no such folder" if not series_dir.exists() else "no series.json in it"
        raise SeriesError(f"{series_dir}: is not a series folder ({what}); point to "
                          "OUT/<experiment>/<series>, e.g. outputs/demo/protocol-1.0/extractive.")



def read_json(path: Path) -> Any:
    """A series' JSON file (series.json, status.json, plan.json, measures.json), its text made
    valid Unicode (`fragbench.series.journal.valid_text`: a hand edit's `\\ud83d` never breaks a
    table or a report); one line naming the file when it cannot be read."""
    return _json_of(path, _bytes_of(path))


def _bytes_of(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SeriesError(f"{path}: cannot be read as JSON ({exc}); is this a series folder?") \
            from None


def _json_of(path: Path, data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
        value = json.loads(text)
        # A surrogate can come only from a \\uD800-\\uDFFF escape (the text is UTF-8): a file
        # with none (every file fragbench writes) skips the walk, which costs a Python call
        # per string of a large plan.
        return valid_unicode(value) if SURROGATE_ESCAPE.search(text) else value
    except ValueError as exc:  # UnicodeDecodeError is one
        raise SeriesError(f"{path}: cannot be read as JSON ({exc}); is this a series folder?") \
            from None


def series_state(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The series' state, its stop record (or None) and what it spent.

    `complete` (an end record), `stopped` (a stop record), or `interrupted`: a stop of reason
    `interrupted` (Ctrl-C or SIGTERM; the call in flight was recorded first), or neither an
    end nor a stop record (the process died or the disk filled)."""
    stop = next((r for r in records if r.get("type") == "stop"), None)
    ended = any(r.get("type") == "end" for r in records)
    if ended:
        state = "complete"
    elif stop is not None and stop.get("reason") != "interrupted":
        state = "stopped"
    else:
        state = "interrupted"
    return {"state": state, "stop": stop, "spent_usd": usd(spent(records))}


def calls_table(plan: dict[str, Any], info: dict[str, Any],
                records: list[dict[str, Any]], facts: pl.DataFrame | None = None,
                consume: bool = False) -> pl.DataFrame:
    """One row per planned call, sent or not, from the plan and the journal.

    `supplied_texts` comes from the plan where it lists them (a span chunker's plan); a plan
    that does not showed each supplied ID its whole sentence, taken from `facts` (case, lang,
    fact_id, text) when given, else left null.

    A call sent whose outcome was never recorded (a crash) is `interrupted`, counted at its
    reservation; if its body had arrived (a `received` record), `raw_response` and
    `http_status` show it, so that what was paid for can be read. Every string is made valid
    Unicode (`fragbench.series.journal.valid_text`: an old or hand-written journal, or an answer
    whose JSON escapes a lone surrogate, never breaks the table), and a token count a
    64-bit column cannot hold (a hostile server's) is null, its raw body keeping it.

    `consume`: each body a row takes (BODY_FIELDS of the call's `received` and `outcome`
    records) is removed from its record as the row is made, so that a body is held by the
    records or by the rows of the frame being built, never by both for every call at once
    (`derive_tables`, which drops the rest with `drop_bodies`)."""
    by_type: dict[str, dict[str, dict[str, Any]]] = {
        t: {} for t in ("reserve", "received", "outcome", "stop")}
    for r in records:  # the last record of a kind for a call wins, as it always has
        kind = by_type.get(r.get("type"))  # type: ignore[arg-type]
        if kind is not None:
            kind[r["call_id"]] = r
    reserves, received = by_type["reserve"], by_type["received"]
    outcomes, stops = by_type["outcome"], by_type["stop"]
    planned = {entry["id"] for entry in plan["schedule"]}
    touched = (reserves.keys() | received.keys() | outcomes.keys() | stops.keys()) & planned
    # Python work only for the calls the journal names (sent, or where the series stopped):
    # a planned call never sent is a row of the plan's columns and nulls, whatever the plan's
    # size, so the table's cost follows the calls sent.
    def rows() -> Iterator[dict[str, Any]]:
        for cid in touched:
            outcome, arrived = outcomes.get(cid), received.get(cid, {})
            yield _recorded_row(cid, outcome, reserves.get(cid), arrived, stops.get(cid, {}))
            if consume:
                for record in (outcome or {}, arrived):
                    for field in BODY_FIELDS:
                        record.pop(field, None)

    schema = {"call_id": pl.String, **{k: CALLS_SCHEMA[k][0] for k in RECORDED_COLUMNS}}
    # A frame per ROWS_AT_ONCE rows: Python's dicts for every call at once, and Polars' copy of
    # them, were the derivation's peak (some 370 MiB at 10,000 calls).
    parts = []
    for part in _batched(rows(), ROWS_AT_ONCE):
        parts.append(pl.DataFrame(part, schema=schema))
        if consume and len(parts) % TRIM_EVERY == 0:
            # The bodies consumed so far are free in the C heap, which Polars' allocator does
            # not draw on: handed back, the frame's next parts can use those pages.
            release_freed_memory()
    planned_frame = _planned_frame(plan["schedule"])
    table = (planned_frame.with_columns(_in_plan_order(planned_frame, parts, schema))
             .with_columns(pl.col("status").fill_null("not_sent"),
                           pl.lit(info["backend"], pl.String).alias("backend"),
                           pl.lit(info["is_model"], pl.Boolean).alias("is_model"))
             .select(pl.col(k).cast(dtype) for k, (dtype, _) in CALLS_SCHEMA.items()))
    return table if facts is None else _sentences_where_unlisted(table, facts)


def _in_plan_order(planned: pl.DataFrame, parts: list[pl.DataFrame],
                   schema: dict[str, Any]) -> list[pl.Series]:
    """The recorded rows' columns (`parts`, emptied here; but call_id) row for row with
    `planned`, null where a planned call has no recorded row: a left join, gathered a column at
    a time, each source column let go once its copy is made, so that the recorded columns (the
    bodies among them) are held once and one column more, not twice as a join of the whole
    frame holds them."""
    recorded = pl.concat(parts) if parts else pl.DataFrame(schema=schema)
    parts.clear()  # the concatenation shares their buffers: only `recorded` holds them now
    where = (planned.select("call_id")
             .join(recorded.select("call_id").with_row_index("_at"), on="call_id", how="left",
                   maintain_order="left")
             .get_column("_at"))
    columns = []
    for name in recorded.columns[1:]:
        columns.append(recorded.get_column(name).gather(where))
        recorded = recorded.drop(name)
    return columns


ROWS_AT_ONCE = 2_000
"""How many calls' journal rows `calls_table` turns into a frame at a time."""
TRIM_EVERY = 5
"""Frames of ROWS_AT_ONCE rows between two `release_freed_memory` while `calls_table` consumes
the bodies (each about a tenth of a second at 100,000 calls)."""


def _batched(items: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    while part := list(itertools.islice(items, size)):
        yield part


PLANNED_COLUMNS = ("call_id", "seq", "case", "lang", "variant", "mode", "rep",
                   "supplied_ids", "supplied_texts", "request_sha256")
"""The calls table's columns taken from the plan's schedule, for every planned call."""
RECORDED_COLUMNS = tuple(k for k in CALLS_SCHEMA
                         if k not in PLANNED_COLUMNS and k not in ("backend", "is_model"))
"""Its columns taken from the journal, for the calls it names (null for the others)."""


def _planned_frame(schedule: list[dict[str, Any]]) -> pl.DataFrame:
    """The schedule's columns as a frame (`supplied_texts` only where a span chunker's plan
    lists them). The plan's strings are valid Unicode: a series' plan.json is read through
    `read_json`, and a frozen plan is written by fragbench from TOML and Parquet, which cannot
    hold a lone surrogate."""
    fields = {"call_id": "id", **{k: k for k in PLANNED_COLUMNS if k != "call_id"}}
    return pl.DataFrame(
        {column: [entry.get(key) for entry in schedule] for column, key in fields.items()},
        schema={k: CALLS_SCHEMA[k][0] for k in PLANNED_COLUMNS})


def _recorded_row(cid: str, outcome: dict[str, Any] | None, res: dict[str, Any] | None,
                  arrived: dict[str, Any], stop: dict[str, Any]) -> dict[str, Any]:
    """One call's columns from its journal records, each string made valid Unicode."""
    out = outcome or {}
    usage = {k: v if isinstance(v, int) and -INT64_MAX <= v <= INT64_MAX else None
             for k, v in (out.get("usage") or {}).items()}
    status = out.get("status") if out else "interrupted" if res else None
    raw = out.get("raw") if out.get("raw") is not None else arrived.get("raw")
    where = f"{JOURNAL_FILE}, call {cid}"
    reserved = money(res["reserved_usd"], f"{where}, reserved_usd") if res else None
    known = money(out.get("cost_usd"), f"{where}, cost_usd")
    recorded = out.get("counted_usd", out.get("cost_usd"))
    counted = money(recorded, f"{where}, counted_usd") if recorded is not None else reserved
    text = out.get("text")
    parsed = parse_answer(text) if out else None
    row: dict[str, Any] = {
        "call_id": cid, "status": status,
        "stop_reason": stop.get("reason"), "stop_detail": stop.get("detail"),
        "failure": out.get("failure"),
        "http_status": out.get("http_status") if out else arrived.get("http_status"),
        "error": out.get("error"), "model": out.get("model"),
        "service_tier": out.get("service_tier"), "request_id": out.get("request_id"),
        "input_tokens": usage.get("input_tokens"), "cached_tokens": usage.get("cached_tokens"),
        "cache_write_tokens": usage.get("cache_write_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "reasoning_tokens": usage.get("reasoning_tokens"),
        "cost_usd": known, "cost_unknown": out.get("cost_unknown"),
        "reserved_usd": reserved, "counted_usd": counted,
        "parsed": parsed.parsed if parsed else None,
        "parse_error": parsed.error if parsed else None,
        "answer": parsed.answer if parsed else None,
        "citations": parsed.citations if parsed else None,
        "refusal": out.get("refusal"), "incomplete_reason": out.get("incomplete_reason"),
        "text": out.get("text"), "raw_response": raw,
        "redacted": bool(out.get("redacted") or arrived.get("redacted"))
        if out or arrived else None,
    }
    # The records are `read_journal`'s, valid already; only an answer parsed from text that
    # escapes a surrogate can bring one in.
    return valid_unicode(row) if isinstance(text, str) and SURROGATE_ESCAPE.search(text) \
        else row


def _sentences_where_unlisted(calls: pl.DataFrame, facts: pl.DataFrame) -> pl.DataFrame:
    """Fill a null `supplied_texts` with the whole sentence of each supplied ID."""
    whole = (
        calls.with_row_index("_row")
        .filter(pl.col("supplied_texts").is_null())
        .select("_row", "case", "lang", pl.col("supplied_ids").alias("fact_id"))
        .explode("fact_id")
        .drop_nulls("fact_id")
        .join(facts.select("case", "lang", "fact_id", "text"), on=["case", "lang", "fact_id"],
              how="left", maintain_order="left")
        .group_by("_row", maintain_order=True)
        .agg(pl.col("text").alias("_whole"))
    )
    # Joined on the two columns it reads, and the one column it makes put back: a join of the
    # whole table would copy every column (the bodies too) for one.
    texts = (
        calls.select("supplied_ids", "supplied_texts").with_row_index("_row")
        .join(whole, on="_row", how="left", maintain_order="left")
        .select(pl.coalesce(
            "supplied_texts", "_whole",
            pl.when(pl.col("supplied_ids").is_not_null())  # nothing supplied, nothing shown
            .then(pl.lit([], dtype=pl.List(pl.String)))).alias("supplied_texts"))
    )
    return calls.with_columns(texts.to_series())


MEASURES_FILE = "measures.json"
class MeasureFailed(PluginError):
    """A measure failed, or its output broke its contract (`fragbench.series.measure_tables`), while
    its tables were derived; none was written. `what` names the measure and what went wrong,
    in one sentence without what to do, so that `fragbench run` can say what to do after a
    series was collected."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}; nothing was written: fix or uninstall that plugin.")
        self.what = what


def _measured(measure: Any, data: MeasureInput) -> dict[str, pl.DataFrame]:
    """A measure's tables, checked before anything is written against what the measure
    declares (`fragbench.series.measure_tables.output_problem`: declared tables only, each with its
    declared columns and types, money as exact decimals; its summary, if it has one, titled
    frames keyed by case and language with exact money). A failure inside the plugin, or
    output that breaks the contract, is a `MeasureFailed`: one line naming the measure and its
    distribution, the table, the column, the type found and the type promised."""
    from fragbench.plugins import describe
    from fragbench.series.measure_tables import (
        declaration_problem,
        given_input,
        output_problem,
        read_hint,
    )

    who = describe("measure", measure)
    problem = declaration_problem(measure)
    if problem is not None:
        raise MeasureFailed(f"{who} {problem[1]}")

    def call(method: str, *args: Any) -> Any:
        try:
            return getattr(measure, method)(*args)
        except Exception as exc:
            raise MeasureFailed(f"{who} failed: {type(exc).__name__}: {first_line(exc)}"
                                f"{read_hint(measure, exc)}") from exc

    # Each measure is given only the columns it declares it reads (`reads`), whatever the
    # others read or the core holds: a column it forgot fails here, on every series alike.
    tables = call("compute", given_input(measure, data))
    problem = output_problem(measure, tables, call)
    if problem is not None:
        raise MeasureFailed(f"{who}: {problem[1]}")
    return tables


DIAGNOSTICS_DIR = "diagnostics"
FIGURES_DIR = "figures"
"""The report's figures (`fragbench.report.markdown.write_report` draws them)."""
WRITTEN_FOLDERS = (DIAGNOSTICS_DIR, FIGURES_DIR)
"""The folders inside a series that `measure`, `report` and `run` write files into."""


def refuse_linked_folder(series_dir: Path, name: str) -> None:
    """Refuse SERIES/name when it is a symbolic link, as a linked series folder is refused: the
    files written into it would land in the folder it points to. A file there is refused too.
    One line naming it; called before anything is written."""
    folder = series_dir / name
    if folder.is_symlink():
        raise SeriesError(f"{folder}: is a symbolic link, not the series' {name} folder (what "
                          "is written there would land where it points); remove the link and "
                          "run again (nothing was written).")
    if folder.exists() and not folder.is_dir():
        raise SeriesError(f"{folder}: is a file, not the series' {name} folder; remove it and "
                          "run again (nothing was written).")


def series_subfolder(series_dir: Path, name: str) -> Path:
    """SERIES/name, made when missing; refused as `refuse_linked_folder` says."""
    refuse_linked_folder(series_dir, name)
    folder = series_dir / name
    folder.mkdir(exist_ok=True)
    refuse_linked_folder(series_dir, name)  # one made meanwhile is refused all the same
    return folder


def _plan_measures(plan: dict[str, Any], where: str, extra_diagnostics: tuple[str, ...] = ()
                   ) -> list[tuple[str, Any]]:
    """(name, measure) for every measure the plan names, then each of `extra_diagnostics` it
    does not; a primary measure asked for as a diagnostic, a measure of another kind, or one
    whose declaration is not usable (`declaration_problem`), is refused."""
    from fragbench.plugins import registry

    reg = registry()
    measures = [(name, reg.get("measure", name, where=where))
                for name in plan["parameters"]["measures"]]
    for name in extra_diagnostics:
        measure = reg.get("measure", name, where="--diagnostic")
        if measure.kind != "diagnostic":
            raise SeriesError(f"--diagnostic {name}: {name} is a primary measure; primary "
                              "measures are pre-registered in the frozen plan.")
        if name not in dict(measures):
            measures.append((name, measure))
    from fragbench.plugins import describe
    from fragbench.series.measure_tables import declaration_problem

    for name, measure in measures:
        if measure.kind not in ("primary", "diagnostic"):
            raise SeriesError(f"measure {name} declares kind {measure.kind!r}; a measure is "
                              "primary or diagnostic.")
        # Checked before anything reads a declaration (`held_columns` reads `reads`).
        problem = declaration_problem(measure)
        if problem is not None:
            raise MeasureFailed(f"{describe('measure', measure)} {problem[1]}")
    return measures


def _all_measured(plan: dict[str, Any], facts: pl.DataFrame, retrieval: pl.DataFrame,
                  calls: pl.DataFrame, where: str, extra_diagnostics: tuple[str, ...] = (),
                  measures: list[tuple[str, Any]] | None = None
                  ) -> tuple[dict[str, pl.DataFrame], list[dict[str, str]]]:
    """Every table of every measure the plan names (and of `extra_diagnostics`), each checked
    (`_measured`), with the manifest that lists them; nothing is written here, so a measure
    refused leaves every table as it was. `measures`: `_plan_measures`' list, when the caller
    has it."""
    from fragbench.plugins import describe

    main = plan["parameters"]["retrieval"]
    data = MeasureInput(facts=facts, retrieval=retrieval, calls=calls,
                        main_setting=(main["chunk_size"], main["top_k"]))
    tables: dict[str, pl.DataFrame] = {"calls": calls}
    manifest: list[dict[str, str]] = [{"table": "calls", "measure": "", "kind": "record",
                                       "path": "calls.parquet"}]
    if measures is None:
        measures = _plan_measures(plan, where, extra_diagnostics)
    for name, measure in measures:
        for table_name, frame in _measured(measure, data).items():
            if table_name.lower() in {t.lower() for t in tables}:  # one file on some disks
                raise MeasureFailed(f"{describe('measure', measure)} returns a table "
                                    f"{table_name!r} that another measure also returns; "
                                    "rename it in one of them")
            tables[table_name] = frame
            folder = "" if measure.kind == "primary" else f"{DIAGNOSTICS_DIR}/"
            manifest.append({"table": table_name, "measure": name, "kind": measure.kind,
                             "path": f"{folder}{table_name}.parquet"})
    return tables, manifest


def check_measures(plan: dict[str, Any], facts: pl.DataFrame, retrieval: pl.DataFrame,
                   backend: str, is_model: bool) -> None:
    """Run every measure the frozen plan names on the series as it stands before its first
    call (each planned call not sent) and check its tables, writing nothing: `fragbench run`
    calls it before anything is sent, so that a measure that breaks its table promise (an
    undeclared table or column, a type other than declared, money that is not an exact
    decimal) is refused before a series is spent. A measure that breaks it only on answered
    calls is refused after collecting, when the tables are derived: then no table is written,
    the journal keeps what was paid for, and `fragbench measure` rebuilds them once the measure
    is fixed."""
    calls = calls_table(plan, {"backend": backend, "is_model": is_model}, [], facts)
    _all_measured(plan, facts, retrieval, calls, "the frozen plan (experiment.json)")


def write_status(series_dir: Path, info: dict[str, Any] | None = None,
                 records: list[dict[str, Any]] | None = None) -> None:
    """Write status.json (`series_state`: complete, stopped or interrupted, the stop, the
    spend) from series.json and the journal alone (read when not given): no measure goes into
    it, so a series whose measure fails still says what it spent."""
    if info is None:
        info = read_json(series_dir / "series.json")
    if records is None:
        journal = series_dir / JOURNAL_FILE
        records = read_journal(journal) if journal.exists() else []
    write_json({**info, **series_state(records)}, series_dir / "status.json")


def read_plan(series_dir: Path) -> Plan:
    """The series' plan.json (as `read_json` reads it) with the hash of its bytes: a command
    reads it once and hands it to what it calls (at 100,000 calls it is some 200 MB of JSON),
    and the reports show the hash without reading the file again."""
    path = series_dir / "plan.json"
    data = _bytes_of(path)
    value = _json_of(path, data)
    if not isinstance(value, dict):
        raise SeriesError(f"{path}: holds a JSON {type(value).__name__}, not a plan; is this a "
                          "series folder?")
    return Plan.parsed(data, value)


def journal_records(series_dir: Path, plan: dict[str, Any] | None = None
                    ) -> list[dict[str, Any]]:
    """The series' journal read and checked once (`read_journal`, against the plan's calls;
    a stripped chain refused: `refuse_stripped_chain`), for every table and page a command
    derives from it; [] when it has none. `plan`: the series' plan.json, when the caller holds
    it already (else read here)."""
    require_series(series_dir)
    journal = series_dir / JOURNAL_FILE
    if not journal.exists():
        return []
    plan = read_plan(series_dir) if plan is None else plan
    info = read_json(series_dir / "series.json")
    # Read first, so that the file is opened once; a journal refused, or read but carrying no
    # chain, is then asked whether its chain was stripped (that refusal says more).
    try:
        records = read_journal(journal, {c["id"]: c["seq"] for c in plan["schedule"]})
    except SeriesError:
        refuse_stripped_chain(series_dir, info)
        raise
    if unchained(records):
        refuse_stripped_chain(series_dir, info)
    return records


@contextlib.contextmanager
def without_cycle_sweeps() -> Iterator[None]:
    """Python's cycle collector paused while a series' tables and reports are derived, and
    restored as it was after. The journal's records and the plan are millions of objects that
    live for the whole command and hold no cycle; every full sweep walks them all, and at
    100,000 calls the sweeps were about a fifth of the derivation. Reference counting still
    frees everything meanwhile; only garbage in cycles waits for the end of the block."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


BODY_FIELDS = ("raw", "text")
"""What `drop_bodies` removes: a response's body and its answer text, as the journal holds them
(the calls table has them as `raw_response` and `text`)."""


def drop_bodies(records: list[dict[str, Any]]) -> None:
    """Remove each `received` and `outcome` record's body and answer text (BODY_FIELDS), in
    place, once the calls table holds them: what is read from the records afterwards (the
    series' state, its spend, the calls' times, which calls were sent) never needs them."""
    for record in records:
        if record.get("type") in ("received", "outcome"):
            for field in BODY_FIELDS:
                record.pop(field, None)


def unchained(records: list[dict[str, Any]]) -> bool:
    """Whether a journal read back predates the chain: its first record carries none of the
    chain's fields (`read_journal` refuses one that mixes both)."""
    return bool(records) and not any(field in records[0] for field in CHAIN_FIELDS)


def derive_tables(series_dir: Path, extra_diagnostics: tuple[str, ...] = (),
                  records: list[dict[str, Any]] | None = None,
                  plan: dict[str, Any] | None = None) -> dict[str, pl.DataFrame]:
    """Rebuild calls.parquet and every measure's tables from what the series recorded.

    Primary measures' tables go in the series folder; diagnostic measures' tables in
    `diagnostics/`, never beside them. `measures.json` lists which table came from which
    measure, of which kind. `extra_diagnostics` adds diagnostic measures that the frozen plan
    did not name (a diagnostic never changes what was collected, so it needs no new plan).
    Every measure's tables are computed and checked before any table is written (status.json,
    the journal's state, is written first; the calls table waits in STAGED_CALLS). Each
    measure is given the columns it declares it reads (`reads`), and the calls table returned
    lacks the bodies (`BODY_COLUMNS`) no measure reads: calls.parquet holds them. `records`:
    the journal as `journal_records` read it, when the caller already holds it (the command
    reads it once); else read here. Once the calls table holds the response bodies, they are
    dropped from `records` (`drop_bodies`): the caller's list afterwards says what each call
    was and cost, not what came back (so that a large series holds its bodies once). `plan`:
    the series' plan.json, when the caller holds it (else read here).
    """
    require_series(series_dir)
    for name in WRITTEN_FOLDERS:  # measure writes both (the report, after it): none a link
        refuse_linked_folder(series_dir, name)
    plan = read_plan(series_dir) if plan is None else plan
    if records is None:
        records = journal_records(series_dir, plan)
    info = read_json(series_dir / "series.json")
    facts = read_table(series_dir, "facts", "facts.parquet")
    where = f"{series_dir}/plan.json"
    measures = _plan_measures(plan, where, extra_diagnostics)
    declared = [measure for _, measure in measures]
    calls = calls_table(plan, info, records, facts, consume=True)
    drop_bodies(records)
    release_freed_memory()  # the bodies' strings, now held by the frame alone
    # The state first (the journal's, no measure's): small, and what a person looks for when
    # a full disk refuses the rest.
    write_status(series_dir, info, records)
    # The calls table is written whole beside its place (moved there once every measure's
    # tables are made and checked), then held without the bodies no measure reads: the
    # report reads them back from the file a block of calls at a time (BODY_COLUMNS).
    staged = series_dir / STAGED_CALLS
    write_parquet(calls, staged)
    try:
        held = held_columns(declared, "calls")
        if held is not None:
            calls = calls.drop([c for c in BODY_COLUMNS if c not in held])
            release_freed_memory()
        # Read once the bodies are let go, not beside them, and only the columns the
        # measures read (a chunk's text alone is some 700 MiB at 100,000 calls).
        retrieval = _read_held(series_dir, "retrieval", held_columns(declared, "retrieval"))
        tables, manifest = _all_measured(plan, facts, retrieval, calls, where,
                                         extra_diagnostics, measures)
        del retrieval
        for entry in manifest:
            path = series_dir / entry["path"]
            if path.parent != series_dir:
                series_subfolder(series_dir, path.parent.name)
            if entry["table"] == "calls":
                staged.replace(path)
            else:
                write_parquet(tables[entry["table"]], path)
    finally:
        staged.unlink(missing_ok=True)  # refused or failed: left nowhere
    write_json(manifest, series_dir / MEASURES_FILE)
    return tables


STAGED_CALLS = "calls.parquet.staged"
"""Where `derive_tables` writes the calls table before its measures' tables are checked."""
BODY_COLUMNS = ("raw_response", "text")
"""The calls table's columns that hold what came back whole (the response body, the model's
text): what `derive_tables` hands on only where a measure reads them, and the report reads
from calls.parquet a block of calls at a time (`fragbench.report.html`)."""


def _read_held(series_dir: Path, name: str, held: set[str] | None) -> pl.DataFrame:
    """A recorded table (`<name>.parquet`), only its columns among `held` (all: None)."""
    rel = f"{name}.parquet"
    columns = None if held is None else [c for c in table_columns(series_dir, name, rel)
                                         if c in held]
    return read_table(series_dir, name, rel, columns)


def table_columns(series_dir: Path, name: str, rel: str) -> list[str]:
    """The column names of a series' table, in its order, read from its file's footer (or
    the one line `read_table` gives for a file it cannot read)."""
    try:
        return list(pl.read_parquet_schema(series_dir / rel))
    except PARQUET_ERRORS as exc:
        raise unreadable_table(series_dir, name, rel, exc) from None


def refuse_stripped_chain(series_dir: Path, info: Any) -> None:
    """Refuse a series whose journal carries no chain when it was written by a chaining
    fragbench: `series.json` says so (`"journal": "chained"`, written before the journal),
    or the budget's ledger does, in the `series` record it keeps of this series_uid (a file
    or a server shared by every series of the budget, and chained itself). Only a journal with
    no such witness (an earlier fragbench's) is read unchained, with `chain_note`'s note. The
    journal's own header says so too (`read_journal` refuses that). What this cannot catch: a
    stripper who also deletes the marker from series.json and the header, of a series with no
    ledger (an unpriced one), or whose ledger cannot be read here."""
    journal = series_dir / JOURNAL_FILE
    if chain_note(journal) is None:
        return
    if isinstance(info, dict) and info.get(FORMAT_FIELD) is not None:
        witness = f"{series_dir / 'series.json'} says it was written chained"
    else:
        witness = _ledger_witness(info)
    if witness is not None:
        raise SeriesError(f"{journal}: carries no chain (no line holds prev or sha256), but "
                          f"{witness}: the chain was stripped, and the journal may have been "
                          "edited; restore it from your backup, then run the command again.")


def _ledger_witness(info: Any) -> str | None:
    """Where the budget's ledger says this series was written with a chained journal, or None
    (no budget, no such record, or a ledger that cannot be read: the next run drawing on it
    says why)."""
    # Imported here: only an unchained journal needs it (and a server's ledger, psycopg).
    from fragbench.budget.stores import ledger_for
    from fragbench.errors import FragbenchError
    from fragbench.files import file_name_problem

    budget = info.get("budget") if isinstance(info, dict) else None
    uid = info.get("series_uid") if isinstance(info, dict) else None
    if not isinstance(budget, str) or not isinstance(uid, str) or file_name_problem(budget):
        return None  # series.json names no ledger file we may read
    try:
        ledger = ledger_for(budget)
    except FragbenchError:
        return None
    ledger.audit, ledger.kept = True, []
    # A ledger that stops reading (altered after this series, or a server down) still vouches
    # for the records read before the break, as `fragbench ledger show` shows them.
    with contextlib.suppress(FragbenchError, OSError, ImportError):
        try:
            ledger.load()
        finally:
            ledger.close()
    if any(r.get("type") == "series" and r.get("series_uid") == uid
           and r.get(FORMAT_FIELD) is not None for _, r in ledger.kept or []):
        return f"the budget's ledger {ledger.where} records it as written chained"
    return None


RECORDED = tuple((name, f"{name}.parquet") for name in RECORDED_TABLES)
"""Tables recorded while collecting, which measures.json does not list (no measure may take
their names: `fragbench.series.measure_tables.RESERVED_TABLES`)."""


def tables_of(series_dir: Path, recorded: bool = True) -> list[tuple[str, str]]:
    """(table, path relative to the series folder) for every table measures.json lists, then
    (with `recorded`) the tables recorded while collecting, which it does not list."""
    require_series(series_dir)
    manifest = series_dir / MEASURES_FILE
    if not manifest.is_file():
        raise SeriesError(f"{series_dir}: no {MEASURES_FILE} (its tables were never derived); "
                          f"run `fragbench measure {series_dir}` first.")
    entries = read_json(manifest)
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("table"), str)
            and isinstance(e.get("path"), str) for e in entries):
        raise SeriesError(f"{manifest}: not a list of tables; rebuild it with "
                          f"`fragbench measure {series_dir}`.")
    for e in entries:  # readers and the export follow these paths: none may lead outside
        rel = Path(e["path"])
        if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".parquet":
            raise SeriesError(f"{manifest}: table {e['table']} has path {e['path']!r}, not a "
                              "Parquet file inside the series; rebuild it with "
                              f"`fragbench measure {series_dir}`.")
    # cases.parquet (the corpus's groups) is recorded only for a corpus that has groups.
    groups = [("cases", "cases.parquet")] if (series_dir / "cases.parquet").is_file() else []
    return [(e["table"], e["path"]) for e in entries] + (list(RECORDED) + groups if recorded
                                                         else [])


def read_table(series_dir: Path, name: str, rel: str, columns: list[str] | None = None
               ) -> pl.DataFrame:
    """One table of a series (`columns` only, when given), or one line naming its file, saying
    what is wrong (`tables.parquet_problem`: not a readable Parquet file, or cannot be read)
    and what to do: rebuild a measure's table with `fragbench measure`; restore a table
    recorded while collecting (facts, retrieval), which nothing rebuilds, from a backup."""
    try:
        return pl.read_parquet(series_dir / rel, columns=columns)
    except PARQUET_ERRORS as exc:
        raise unreadable_table(series_dir, name, rel, exc) from None


def unreadable_table(series_dir: Path, name: str, rel: str, exc: BaseException) -> SeriesError:
    """`read_table`'s one line, for any reader of a series' table (`compare.scan` too)."""
    recorded = name in (*RECORDED_TABLES, "cases")  # written by `run`, not by `measure`
    fix = ("restore it from a backup (`fragbench run` recorded it; nothing rebuilds it)"
           if recorded else f"rebuild it with `fragbench measure {series_dir}`")
    return SeriesError(f"{series_dir / rel}: table {name} {parquet_problem(exc)}; {fix}.")
