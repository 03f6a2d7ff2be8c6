"""The type check of `make lint`: mypy over src/fragbench against a baseline that only shrinks.

mypy's settings are pyproject.toml's `[tool.mypy]`. The errors allowed today are listed in
tools/mypy-baseline.txt, one line each, `file: [code] message`, with no line number (line
numbers shift with every edit above an error) and repeated when one file has the same error
twice. The check fails on an error the baseline does not list (a new one: fix it) and on a
listed error that no longer occurs (a fixed one: delete its line in the same change), so the
list can only shrink.

    .venv/bin/python tools/typecheck.py                    the check (exit 0 or 1; 2: mypy failed)
    .venv/bin/python tools/typecheck.py --print-baseline   today's errors in the baseline's form

`--print-baseline` is for a deliberate rewrite when modules move (their paths change), read in
the diff: never a way to allow a new error. `--root` checks another tree (a copy holding src/
and pyproject.toml), `--baseline` compares with another list: the tests break the check with
both.
"""

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "tools" / "mypy-baseline.txt"
HEADER = """\
# mypy's errors in src/ allowed today (tools/typecheck.py, run by `make lint`): file, code and
# message, no line numbers; a line per occurrence. The list only shrinks: fixing an error means
# deleting its line in the same change, and a new error is fixed, not added here.
"""
# A message longer than this (matplotlib's rc keys spell out a Literal of 300 names) is kept as
# its start and a hash of the whole: still exact, and the baseline stays readable in a diff.
LONGEST = 240


def key(error: dict[str, object]) -> str:
    """One error as a baseline line: its file, code and message, never its line number."""
    message = re.sub(r"\bline \d+", "line N", str(error["message"]))  # "defined on line 12"
    if len(message) > LONGEST:
        digest = hashlib.sha256(message.encode()).hexdigest()[:12]
        message = f"{message[:200]} ... (sha256 {digest})"
    return f"{error['file']}: [{error['code']}] {message}"


def found(root: Path) -> Counter[str]:
    """Today's errors in `root` (mypy run there: its pyproject.toml, its .mypy_cache), as
    baseline lines."""
    ran = subprocess.run([sys.executable, "-m", "mypy", "--output", "json"], cwd=root,
                         capture_output=True, text=True, check=False)
    if ran.returncode not in (0, 1):  # 2: a crash, a bad setting, a syntax error
        print(f"mypy failed (exit {ran.returncode}):\n{ran.stdout}{ran.stderr}", file=sys.stderr)
        raise SystemExit(2)
    errors: Counter[str] = Counter()
    for line in ran.stdout.splitlines():
        error = json.loads(line)  # a line that is not JSON fails loudly, never silently
        if error["severity"] == "error":
            errors[key(error)] += 1
    return errors


def allowed(path: Path) -> Counter[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return Counter(line for line in lines if line and not line.startswith("#"))


def report(new: list[str], fixed: list[str], baseline: Path) -> str:
    parts = []
    if new:
        parts.append(f"{len(new)} new type error(s), not in {baseline.name}: fix each\n"
                     + "\n".join(f"  {line}" for line in new))
    if fixed:
        parts.append(f"{len(fixed)} error(s) fixed but still listed in {baseline.name}: "
                     "delete these lines\n" + "\n".join(f"  {line}" for line in fixed))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="mypy over src/ against tools/mypy-baseline.txt")
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--print-baseline", action="store_true")
    args = parser.parse_args(argv)
    errors = found(args.root.resolve())
    if args.print_baseline:
        print(HEADER + "\n".join(sorted(errors.elements())))
        return 0
    listed = allowed(args.baseline)
    new = sorted((errors - listed).elements())
    fixed = sorted((listed - errors).elements())
    if new or fixed:
        print(report(new, fixed, args.baseline))
        return 1
    print(f"mypy: {sum(errors.values())} error(s), each listed in {args.baseline.name}; no new one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
