"""Money and the ledger: what a call may cost, what it did cost, and what a budget has left.

In: the frozen pricing and budget (`Pricing`, `Budget`), a call's size and its usage. Out:
reservations and costs in exact Decimal (`reservation`, `cost`, `usd`), the balance, and the
ledger shared by every series drawing on one budget: a file (`ledger`) or a PostgreSQL server
(`ledger_pg`), chosen by `stores.ledger_for`.

- `money`: `Pricing`, `Budget`, `reservation`, `cost`, `balance`, `usd`, `UnknownCost`;
- `ledger`: the ledger's records and its file store (`Ledger`, `LedgerBase`, `settle`);
- `ledger_pg`: the PostgreSQL store (psycopg imported only where a server is used);
- `stores`: `ledger_for`, the one place that picks a store.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "Pricing": "money",
    "Budget": "money",
    "reservation": "money",
    "cost": "money",
    "balance": "money",
    "usd": "money",
    "UnknownCost": "money",
    "Ledger": "ledger",
    "LedgerBase": "ledger",
    "LedgerError": "ledger",
    "ledger_for": "stores",
})
