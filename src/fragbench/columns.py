"""Documentation of the key columns that many tables share (docs/tables.md)."""

from __future__ import annotations

import re

MONEY_DECIMALS = 18
"""The scale of every money column: the config refuses prices whose per-token amount is not
exact at it, so that every cost is."""
MONEY_PRECISION = 38
"""The most a Parquet 128-bit decimal holds: 20 integer digits beside the scale."""
MONEY_SCALE = MONEY_DECIMALS  # the config refuses prices that are not exact at this scale
MONEY_TYPE = f"Decimal({MONEY_PRECISION}, {MONEY_SCALE}), exact"
PLAIN_AMOUNT = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)
"""An amount as `fragbench.budget.usd` writes it and a config, a journal or a ledger holds it:
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

CALL_COLUMNS = {
    "call_id": "planned call ID",
    **PASSAGE_COLUMNS,
    "mode": "retrieval or full",
    "rep": "repetition",
}

# Column types as a measure declares them (`Measure.tables`): the names
# `fragbench.measure_tables.type_name` gives Polars types, as strings, so that a plugin module
# imports no Polars when fragbench starts.
MONEY_DTYPE = f"Decimal({MONEY_PRECISION}, {MONEY_SCALE})"
"""The one type of every money column (a name ending in `_usd`), as a measure declares it."""
IDS = "List(String)"
"""A list of fact IDs (or of short codes): space-joined in an exported CSV."""
KEY_COLUMNS = ("case", "lang")
"""Every measure table keys its rows by at least these (no global score: test kit)."""
PASSAGE_TYPES = {"case": "String", "lang": "String", "variant": "String"}
CALL_TYPES = {"call_id": "String", **PASSAGE_TYPES, "mode": "String", "rep": "Int32"}
