"""fragbench's own code in the frozen plan (issue 25, item 3).

The plan records the core's identity (`core`: the version, one sha256 over its files, each
file's sha256; `fragbench.plugins.core_identity`), so that a collector, budget or wire that
changed under the same version string is named by `plan` and refused by `run`, exactly as a
plugin's changed file is. The trial is the one a user meets: the experiment frozen with one
fragbench, then planned and run with another (here a copy of the installed package with one
byte more in the collector, imported first through PYTHONPATH, in a real process: which
fragbench the process imports is what is under test).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import error_lines, process_env, run_cli

import fragbench.plugins
from fragbench.experiment.plan import differences

pytestmark = pytest.mark.slow

PACKAGE = Path(fragbench.plugins.__file__).resolve().parent
COLLECTOR = "fragbench/calls/collector.py"


def other_fragbench(tmp_path: Path, edit: bool) -> dict[str, str]:
    """A copy of the installed package (caches left out), its collector given one comment line
    when `edit`; the environment that makes a process import it."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "fragbench", ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        collector = site / COLLECTOR
        collector.write_text(collector.read_text(encoding="utf-8") + "# upgraded\n",
                             encoding="utf-8")
    return process_env({"PYTHONPATH": os.pathsep.join([str(site), os.environ.get(
        "PYTHONPATH", "")]).rstrip(os.pathsep)})


def fragbench_in(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fragbench", *args], env=env,
                          capture_output=True, text=True, check=False)


def test_a_changed_core_file_is_named_by_plan_and_refused_by_run(experiment: Path,
                                                                 tmp_path: Path) -> None:
    env = other_fragbench(tmp_path, edit=True)
    where = subprocess.run([sys.executable, "-c", "import fragbench.plugins as p; "
                            "print(p.__file__)"], env=env, capture_output=True, text=True,
                           check=True)
    assert where.stdout.strip().startswith(str(tmp_path / "site")), "the copy was not imported"
    said = f"fragbench's own file {COLLECTOR} changed since the plan was frozen"

    planned = fragbench_in(env, "plan", str(experiment))
    assert said in planned.stdout + planned.stderr, planned.stdout + planned.stderr

    out = tmp_path / "outputs"
    ran = fragbench_in(env, "run", str(experiment), "--series", "extractive", "--out", str(out))
    assert ran.returncode == 4, ran.stderr
    [line] = error_lines(ran.stderr)
    assert "the frozen plan is out of date" in line and said in line
    assert not out.exists(), "a refused run wrote something"


def test_the_same_core_elsewhere_is_the_same_plan(experiment: Path, tmp_path: Path) -> None:
    """The identity is of the files' bytes by their path inside the package: the same code
    imported from another folder (a wheel in site-packages, a source tree) runs the plan."""
    env = other_fragbench(tmp_path, edit=False)
    out = tmp_path / "outputs"
    ran = fragbench_in(env, "run", str(experiment), "--series", "extractive", "--out", str(out))
    assert ran.returncode == 0, ran.stderr


def test_the_core_is_its_modules_and_page_templates_not_the_kit_or_scaffolds() -> None:
    files = fragbench.plugins.core_files()
    assert COLLECTOR in files and "fragbench/budget/money.py" in files
    assert "fragbench/http/wire.py" in files and "fragbench/report/templates/page.js" in files
    assert not [name for name in files if name.startswith(
        ("fragbench/builtin/", "fragbench/testing/", "fragbench/scaffold/"))]
    assert not [name for name in files if "__pycache__" in name or name.endswith(".pyc")]
    identity = fragbench.plugins.core_identity()
    assert set(identity) == {"version", "sha256", "code_sha256"}
    assert list(identity["code_sha256"]) == list(files)


def test_a_plan_frozen_before_the_core_was_recorded_says_so(experiment: Path) -> None:
    """A plan without `core` (frozen by an earlier fragbench) is out of date in one line that
    says why, not a diff of sections."""
    import json

    frozen = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    now = {k: v for k, v in frozen.items() if k != "recorded"}
    older = {k: v for k, v in now.items() if k != "core"}
    assert differences(older, now) == [
        "fragbench's own code: the plan froze no hash of it (an earlier fragbench froze it)"]
    assert run_cli("plan", str(experiment)).returncode == 0


def test_a_new_version_with_the_same_files_is_said_once(experiment: Path) -> None:
    """A release that changed no core file (the version alone): the plan is out of date, said
    once, by the packages' line; no line claims the code differs."""
    import json

    frozen = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    now = {k: v for k, v in frozen.items() if k != "recorded"}
    older = json.loads(json.dumps(now))
    older["core"]["version"] = older["packages"]["fragbench"] = "0.0.9"
    said = differences(older, now)
    assert said == [f"package fragbench is {now['packages']['fragbench']}, the plan froze 0.0.9"]

