"""One line of the survival table for a cosmic-ray session, then each survivor.

Usage: python mutation/tally.py SESSION.sqlite [--diffs] [--subset KEEP/EVERY]

`--subset 1/6` counts only the mutants that `sample.py SESSION 1 6` would keep (a subset of
those `1 3` keeps), so that a run sampled more thinly can be compared with a fuller one.

Columns: generated (every mutant cosmic-ray made), filtered (operators excluded in the config,
see docs/testing.md), sampled out (mutation/sample.py), outside (outside the functions named to
mutation/within.py), tested, killed (a test failed; a
timeout counts here too, and is also shown apart), survived (every selected test passed),
incompetent (the mutant could not be run at all).
"""

from __future__ import annotations

import sys

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome
from sample import kept  # the sibling script: python puts mutation/ first on sys.path
from within import OUTSIDE  # likewise


def main(argv: list[str]) -> int:
    session = argv[0]
    subset = None
    if "--subset" in argv:
        keep, every = argv[argv.index("--subset") + 1].split("/")
        subset = (int(keep), int(every))
    counts = dict.fromkeys(["generated", "filtered", "sampled_out", "outside", "tested",
                            "killed", "survived", "timeouts", "incompetent", "pending"], 0)
    survivors = []
    with use_db(session, WorkDB.Mode.open) as db:
        results = dict(db.results)
        for item in db.work_items:
            m = item.mutations[0]
            if subset and not kept(str(m.module_path), m.operator_name, m.occurrence, *subset):
                continue
            counts["generated"] += 1
            result = results.get(item.job_id)
            if result is None:
                counts["pending"] += 1
            elif result.worker_outcome == WorkerOutcome.SKIPPED:
                counts[{"sampled out": "sampled_out", OUTSIDE: "outside"}.get(
                    result.output, "filtered")] += 1
            else:
                counts["tested"] += 1
                if result.test_outcome == TestOutcome.KILLED:
                    counts["killed"] += 1
                    counts["timeouts"] += result.output == "timeout"
                elif result.test_outcome == TestOutcome.SURVIVED:
                    counts["survived"] += 1
                    survivors.append((item, result))
                else:
                    counts["incompetent"] += 1
    print(" | ".join(f"{k} {v}" for k, v in counts.items()))
    for item, result in sorted(survivors, key=lambda s: tuple(s[0].mutations[0].start_pos)):
        m = item.mutations[0]
        print(f"SURVIVED {m.module_path}:{m.start_pos[0]}:{m.start_pos[1]} {m.operator_name} "
              f"occurrence {m.occurrence} in {m.definition_name}")
        if "--diffs" in argv:
            print(result.diff)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
