"""Documentation of the key columns that many tables share (docs/tables.md)."""

from __future__ import annotations

import re

MONEY_SCALE = 18
"""The decimals of every money column: the config refuses prices whose per-token amount is not
exact at this scale, so that every cost is."""
MONEY_PRECISION = 38
"""The most a Parquet 128-bit decimal holds: 20 integer digits beside the scale."""
PLAIN_AMOUNT = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)
"""An amount as `fragbench.budget.money.usd` writes it and a config, a journal or a ledger holds it:
ASCII digits, maybe a point and more; never a sign, an exponent, a space, an underscore or
another script's digits (all of which Decimal() reads). `fullmatch` it. Here, with the money
columns, because config, journal and ledger all import this module and it imports none."""

ANSWERED = ("completed", "incomplete")
"""The call statuses that brought back an answer (kept, measured, collection goes on); any
other status of a sent call is a technical failure."""

PASSAGE_COLUMNS = {
    "case": "case ID",
    "lang": "language code",
    "variant": "sentence order",
}

PASSAGE = list(PASSAGE_COLUMNS)
"""The passage key, in the order every table sorts by: case, language, sentence order."""

CALL_COLUMNS = {
    "call_id": "planned call ID",
    **PASSAGE_COLUMNS,
    "mode": "retrieval or full",
    "rep": "repetition",
}

# Column types as a measure declares them (`Measure.tables`): the names
# `fragbench.series.measure_tables.type_name` gives Polars types, as strings, so that a plugin
# module
# imports no Polars when fragbench starts.
MONEY_DTYPE = f"Decimal({MONEY_PRECISION}, {MONEY_SCALE})"
"""The one type of every money column (a name ending in `_usd`), as a measure declares it
(`fragbench.series.folder.MONEY` is the same as a Polars type)."""
MONEY_TYPE = f"{MONEY_DTYPE}, exact"
"""The same type in a column's description (docs/tables.md)."""
IDS = "List(String)"
"""A list of fact IDs (or of short codes): space-joined in an exported CSV."""
KEY_COLUMNS = ("case", "lang")
"""Every measure table keys its rows by at least these (no global score: test kit)."""
PASSAGE_TYPES = {"case": "String", "lang": "String", "variant": "String"}
CALL_TYPES = {"call_id": "String", **PASSAGE_TYPES, "mode": "String", "rep": "Int32"}

RESERVED_COLUMNS = frozenset({
    "answer", "answered", "backend", "cache_write_tokens", "cached_tokens", "call_id",
    "calls_cost_unknown", "calls_planned", "calls_sent", "case", "chunk", "chunk_size",
    "citation", "citations", "conditions", "conditions_cited_validly", "conditions_cut",
    "conditions_missing", "conditions_supplied", "cost_unknown", "cost_usd", "counted_usd",
    "cut_fact_ids", "end", "error", "extract", "fact_id", "fact_ids", "failure", "http_status",
    "id", "incomplete_reason", "input_tokens", "is_condition", "is_model", "lang",
    "main_setting", "matched_terms", "mode", "model", "n_citations", "n_conditions",
    "n_conditions_cut", "n_conditions_supplied", "n_invalid", "n_terms", "n_valid",
    "n_valid_folded", "others_supplied", "output_tokens", "parse_error", "parsed", "rank",
    "raw_response", "reason", "reason_folded", "reasoning_tokens", "redacted", "refusal",
    "question", "refused", "rep", "request_id", "request_sha256", "reserved_usd", "score",
    "selected",
    "seq", "service_tier", "start", "status", "stop_detail", "stop_reason",
    "supplied_conditions_not_cited", "supplied_conditions_not_cited_validly", "supplied_ids",
    "supplied_texts", "text", "tied", "top_k", "valid", "valid_folded", "valid_ids", "variant",
    "whole_fact_ids",
})
"""Every column of the tables the core documents (`fragbench.schemas.TYPES`: facts, retrieval,
calls and the built-in measures' tables), which no corpus group key may take
(`fragbench.corpus.columnar.reserved_group_keys`). Written out here, not read from `schemas`
(which imports the built-in measures, the retrieval and the series): the corpus sits below
them all. tests/corpus/test_corpus_columnar.py checks it equals TYPES' columns, so a table's new
column fails there until it is added."""
