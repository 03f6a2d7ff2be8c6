"""Documentation of the key columns that many tables share (docs/tables.md)."""

from __future__ import annotations

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
