"""The type check (issue 25, item 7): mypy over src/ finds no error its baseline does not list.

tools/typecheck.py runs mypy with pyproject.toml's `[tool.mypy]` and compares what it finds with
tools/mypy-baseline.txt by file, code and message, never by line, counting repeats. Besides the
check itself, each direction is broken once here: a new error in a copy of the tree fails (and
moving the listed errors down their file does not), and a listed error that no longer occurs as
often as listed fails too, so the baseline only shrinks. mypy's cache is the repo's .mypy_cache
(warm after `make lint`: a few seconds a run; a first run takes a minute, hence `slow`).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "typecheck.py"
BASELINE = ROOT / "tools" / "mypy-baseline.txt"


def typecheck(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, check=False)


def listed() -> list[str]:
    return [line for line in BASELINE.read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")]


def test_src_has_no_type_error_beyond_its_baseline() -> None:
    ran = typecheck()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"mypy: {len(listed())} error(s), each listed" in ran.stdout


def test_a_new_error_fails_and_a_shifted_one_does_not(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src", tmp_path / "src",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    if (ROOT / ".mypy_cache").is_dir():  # third-party modules stay cached: only ours rerun
        shutil.copytree(ROOT / ".mypy_cache", tmp_path / ".mypy_cache")
    # Every listed error moves three lines down: still the same errors.
    for name in {line.split(": ", 1)[0] for line in listed()}:
        module = tmp_path / name
        module.write_text("#\n#\n#\n" + module.read_text(encoding="utf-8"), encoding="utf-8")
    errors = tmp_path / "src" / "fragbench" / "errors.py"
    errors.write_text(errors.read_text(encoding="utf-8")
                      + '\n\ndef _typo() -> int:\n    return "not an int"\n', encoding="utf-8")

    ran = typecheck("--root", tmp_path)

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == [
        "1 new type error(s), not in mypy-baseline.txt: fix each",
        '  src/fragbench/errors.py: [return-value] Incompatible return value type '
        '(got "str", expected "int")',
    ]


def test_a_fixed_error_still_listed_fails(tmp_path: Path) -> None:
    # Listed twice but found once: one occurrence was fixed and its line must go.
    once = listed()[0]
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("\n".join([*listed(), once]) + "\n", encoding="utf-8")

    ran = typecheck("--baseline", baseline)

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == [
        "1 error(s) fixed but still listed in baseline.txt: delete these lines", f"  {once}"]


def test_each_occurrence_needs_its_line(tmp_path: Path) -> None:
    lines = listed()
    repeated = next((line for line in lines if lines.count(line) > 1), None)
    if repeated is None:
        pytest.skip("no error is listed twice today")
    lines.remove(repeated)
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("\n".join(lines) + "\n", encoding="utf-8")

    ran = typecheck("--baseline", baseline)

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == [
        "1 new type error(s), not in baseline.txt: fix each", f"  {repeated}"]
