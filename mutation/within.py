"""Keep only the pending mutants that fall inside the named functions of the session's module.

Usage: python mutation/within.py SESSION.sqlite FUNCTION [FUNCTION ...]
       (e.g. `_priced _Collection.run`: a function, or a method as Class.method)

Why: issue 18 asks for a mutation run over parts of large modules (collect.py's budget and
stop checks, ledger.py's first record, compare.py's cell matching). cosmic-ray's
`excluded-modules` works on whole files, and its operators filter on operator names, so
neither can keep one function. This reads the module (the file the session's mutants are in,
as it is on disk now: run it right after `cosmic-ray init`, before anything is mutated), finds
each named function's lines with `ast`, decorators included, and records every pending
mutant that starts outside all of them as `skipped` with the output "outside the functions
named", which `tally.py` counts apart. It never looks at a result. A name it cannot find is
an error, so that a renamed function cannot silently empty the run.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult

OUTSIDE = "outside the functions named"


def spans(source: str, names: list[str]) -> dict[str, tuple[int, int]]:
    """Qualified name -> (first line, last line) of each function or method named."""
    found: dict[str, tuple[int, int]] = {}
    todo: list[tuple[str, ast.AST]] = [("", ast.parse(source))]
    while todo:  # iterative walk: a class's methods are qualified by the class
        prefix, node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                todo.append((f"{prefix}{child.name}.", child))
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                if name in names:
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found[name] = (first, child.end_lineno or child.lineno)
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"not found in the module: {', '.join(missing)}")
    return found


def main(argv: list[str]) -> int:
    session, names = argv[0], argv[1:]
    with use_db(session, WorkDB.Mode.open) as db:
        items = list(db.pending_work_items)
        modules = {str(i.mutations[0].module_path) for i in items}
        if len(modules) != 1:
            raise SystemExit(f"expected the mutants of one module, found {sorted(modules)}")
        ranges = spans(Path(modules.pop()).read_text(encoding="utf-8"), names)
        kept = 0
        for item in items:
            line = item.mutations[0].start_pos[0]
            if any(first <= line <= last for first, last in ranges.values()):
                kept += 1
            else:
                db.set_result(item.job_id, WorkResult(output=OUTSIDE,
                                                      worker_outcome=WorkerOutcome.SKIPPED))
    lines = ", ".join(f"{n} {a}-{b}" for n, (a, b) in ranges.items())
    print(f"kept {kept} of {len(items)} pending mutants ({lines})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
