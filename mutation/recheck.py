"""Re-run each survivor of a cosmic-ray session, one at a time, against other tests.

Usage, from the root of a disposable copy whose src/ is the one the session was made from:
    .venv/bin/python mutation/recheck.py SESSION.sqlite [--lines 12,40] -- TEST [TEST ...]

Why: a module's config runs its mutants against the tests that bear on it, chosen for time; a
survivor may still be killed by a test elsewhere in the suite (a span chunker's test, a
start-up import check, a ledger write failure), or by a test written after the run. The
tests must first pass unmutated. Then each survivor (or those starting on `--lines`) is
applied with `cosmic-ray apply` (the same mutation, from the module path, operator and
occurrence), the tests are run with pytest as the configs run them (`-x -q -p
no:cacheprovider`), and the file is restored. Prints one line per survivor, KILLED or
SURVIVED, with the first line pytest marked `E`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome
from protocol_rules import copy_paths, pytest_run  # the sibling script


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(__doc__)
        return 2
    split = argv.index("--")
    options, tests = argv[:split], argv[split + 1:]
    session = options[0]
    lines = None
    if "--lines" in options:
        lines = {int(n) for n in options[options.index("--lines") + 1].split(",")}
    root = Path.cwd().resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(copy_paths(root)),
           "PYTHONDONTWRITEBYTECODE": "1"}
    code, why = pytest_run(tests, env)
    if code != 0:
        print(f"the tests fail unmutated, so they cannot judge a mutant: {why}")
        return 1
    with use_db(session, WorkDB.Mode.open) as db:
        results = dict(db.results)
        survivors = [item.mutations[0] for item in db.work_items
                     if (r := results.get(item.job_id)) is not None
                     and r.test_outcome == TestOutcome.SURVIVED]
    for m in sorted(survivors, key=lambda m: tuple(m.start_pos)):
        if lines is not None and m.start_pos[0] not in lines:
            continue
        source = root / m.module_path
        original = source.read_text(encoding="utf-8")
        try:
            subprocess.run([".venv/bin/cosmic-ray", "apply", str(m.module_path),
                            m.operator_name, str(m.occurrence)], check=True, env=env,
                           capture_output=True)
            changed = [(a, b) for a, b in zip(original.splitlines(),
                                              source.read_text(encoding="utf-8").splitlines(),
                                              strict=False) if a != b]
            code, why = pytest_run(tests, env)
        finally:
            source.write_text(original, encoding="utf-8")
        print(f"{'KILLED' if code else 'SURVIVED':8} {m.module_path}:{m.start_pos[0]} "
              f"{m.operator_name} #{m.occurrence}: "
              + "; ".join(f"{a.strip()} -> {b.strip()}" for a, b in changed)[:160])
        if why:
            print(f"         {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
