"""The experiment: its config read and checked, its requests built, its plan frozen.

In: an experiment folder (`config.toml`, the prompts, the corpus it names) and the plugins it
names. Out: an `Experiment` record, each call's exact request (`requests`), and the frozen plan
(`plan.freeze`, `plan.verify`: the hashes that pin what will be sent and by which code).

- `config`: `load_experiment`, `Experiment`, `BackendConfig`;
- `requests`: one call's request, its text and its sha256;
- `plan`: the schedule of calls, their reservations, `freeze`, `verify`, `review`.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "load_experiment": "config",
    "Experiment": "config",
    "BackendConfig": "config",
    "freeze": "plan",
    "verify": "plan",
    "review": "plan",
    "PlannedCall": "plan",
})
