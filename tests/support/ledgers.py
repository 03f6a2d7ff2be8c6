"""Budget ledgers a test writes: a budget, its stores, a ledger with records forged or real."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from pathlib import Path

from fragbench.budget.ledger import Ledger, LedgerBase
from fragbench.budget.money import Budget
from fragbench.redact import Redactor

BUDGET = Budget(id="b", ceiling_usd=Decimal(10), prior_spend_usd=Decimal("0.5"),
                framing_tokens=1024)


def forged(records: list[dict]) -> list[bytes]:
    """What a careful forger would write: every hash recomputed, so only the values speak."""
    out, prev = [], "0" * 64
    for n, record in enumerate(records):
        line = json.dumps({**record, "n": n, "prev": prev}).encode()
        out.append(line)
        prev = hashlib.sha256(line).hexdigest()
    return out


def write_some(path: Path | Store) -> LedgerBase:
    """Two series: one call settled at its cost, one still open at its reservation."""
    store = FileStore(path) if isinstance(path, Path) else path
    ledger = store.make().open(Redactor(["sk-secret-value-123"]))
    with ledger.locked():
        ledger.append({"type": "reserve", "series_uid": "s1", "call_id": "a",
                       "reserved_usd": "0.09"})
        ledger.append({"type": "outcome", "series_uid": "s1", "call_id": "a",
                       "counted_usd": "0.02", "status": "sk-secret-value-123"})
        ledger.append({"type": "reserve", "series_uid": "s2", "call_id": "a",
                       "reserved_usd": "0.08"})
    ledger.close()
    return ledger


class Store:
    """Where the key tests' ledger lives, and a hand that edits it behind fragbench's back."""

    def make(self, budget: Budget = BUDGET) -> LedgerBase:
        raise NotImplementedError

    def lines(self) -> list[bytes]:
        """Each record's text, in order."""
        raise NotImplementedError

    def put(self, lines: list[bytes], head: bool) -> None:
        """Replace the records by `lines` (record i at place i); `head`: also make the
        server's head name the last one (what a careful forger does)."""
        raise NotImplementedError


class FileStore(Store):
    def __init__(self, path: Path) -> None:
        self.path = path

    def make(self, budget: Budget = BUDGET) -> LedgerBase:
        return Ledger(self.path, budget)

    def lines(self) -> list[bytes]:
        return self.path.read_bytes().rstrip(b"\n").split(b"\n")

    def put(self, lines: list[bytes], head: bool) -> None:
        self.path.write_bytes(b"\n".join(lines) + b"\n")
