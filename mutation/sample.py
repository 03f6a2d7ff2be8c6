"""Keep a deterministic share of a cosmic-ray session's pending mutants; skip the rest.

Usage: python mutation/sample.py SESSION.sqlite KEEP EVERY   (e.g. 1 3: keep one mutant in three)

Why: the machine is shared and a mutation run of the larger modules against their tests would
take longer than the time allowed. The choice depends only on the mutant's module, operator
and occurrence (its rank among that operator's sites in the module), hashed, so the same
source gives the same sample on every run; it never looks at a result. Skipped mutants are
recorded as `skipped` with the output "sampled out" and are not counted as tested.
"""

from __future__ import annotations

import hashlib
import sys

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult


def kept(module: str, operator: str, occurrence: int, keep: int, every: int) -> bool:
    digest = hashlib.sha256(f"{module}|{operator}|{occurrence}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % every < keep


def main(argv: list[str]) -> int:
    session, keep, every = argv[0], int(argv[1]), int(argv[2])
    with use_db(session, WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            m = item.mutations[0]
            if not kept(str(m.module_path), m.operator_name, m.occurrence, keep, every):
                db.set_result(item.job_id, WorkResult(output="sampled out",
                                                      worker_outcome=WorkerOutcome.SKIPPED))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
