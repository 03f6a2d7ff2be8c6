"""The calls: a frozen plan's requests sent, each reserved, journaled and priced.

In: a verified plan, a backend (through `fragbench.transport`), the budget's ledger. Out: the
series' journal (`fragbench.series.journal`): every reservation, every body received, every
outcome, and the stop reason. Nothing here retries.

- `collector`: `collect`, the loop that reserves, sends, records and stops;
- `pacing`: the provider's rate limits, kept by the starts;
- `interruption`: Ctrl-C and SIGTERM turned into an orderly stop.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "collect": "collector",
    "Stop": "collector",
    "Interruption": "interruption",
    "on_signals": "interruption",
})
