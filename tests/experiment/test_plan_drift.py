"""A plan that cannot drift (issue 14, items 10, 11, 12 and the plan's side of 3, 5 and 6).

- A config key fragbench does not read is refused, naming the nearest known key: a typo in a
  pre-registered plan never becomes a default.
- A plugin's code is part of the plan: a file of it that changed while its version did not is
  refused by `run` and shown by `plan`, naming the plugin and the file.
- Freezing a plan that is still current leaves experiment.json byte for byte.
- The response size bound is a config value, frozen in the plan.
- `plan` says which endpoint a backend would use and whether it is usable, and names the ledger
  store with the number of records it holds there.

Plugin discovery from an installed package is what some of these test, so those run the real
command in a subprocess with the package installed by uv into a folder of their own.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import error_lines, refreeze, run_cli, run_process
from support.plugins import toy_experiment, with_path
from support.suite import CANARY_KEY, COMMITTED_EXPERIMENTS, ROOT
from support.walkthrough import checkout

from fragbench.errors import PluginError
from fragbench.experiment.config import DEFAULT_MAX_RESPONSE_BYTES, load_experiment
from fragbench.plugins import code_files, code_sha256
from fragbench.testing.loopback import Server, http_error

pytestmark = pytest.mark.slow

CONFIG = "config.toml"

# Item 10: unknown keys ---------------------------------------------------------------------

UNKNOWN = {
    # name: (file, old, new, what the one line says)
    "misspelt top-level key": (CONFIG, "repetitions = 3", "repetitons = 3",
                               "unknown key repetitons (did you mean repetitions?)"),
    "key of another table's name": (
        CONFIG, "top_ks = [1, 2]", "top_ks = [1, 2]\ntop_k = [1, 2, 3]",
        "unknown key sensitivity.top_k (did you mean sensitivity.top_ks?)"),
    "budget key without its unit": (
        CONFIG, 'ceiling_usd = "10"', 'ceiling_usd = "10"\nceiling = "1"',
        "unknown key budget.ceiling (did you mean budget.ceiling_usd?)"),
    "key in the wrong table": (
        CONFIG, "repetitions = 3", "repetitions = 3\nchunk_size = 2",
        "unknown key chunk_size (did you mean retrieval.chunk_size?)"),
    "misspelt table": (
        CONFIG, "[sensitivity]", "[sensitivty]\nchunk_sizes = [2, 3]\n[sensitivity]",
        "unknown key sensitivty (did you mean sensitivity?)"),
    "pricing key": (
        CONFIG, 'output = "50"', 'output = "50"\noutptu = "5"',
        "unknown key backends.openai.pricing.outptu (did you mean "
        "backends.openai.pricing.output?)"),
    "prompt for a language the config does not have": (
        CONFIG, 'schema_name = "cited_answer"',
        'schema_name = "cited_answer"\nde = "prompts/en.toml"',
        "unknown key prompts.de (the known names there are schema, schema_name, en, fr)"),
    "nothing close": (
        CONFIG, "repetitions = 3", "repetitions = 3\nzzz = 1",
        "unknown key zzz (the known names there are id, title, design_date, corpus"),
    "prompt file key": (
        "prompts/fr.toml", "instructions =", 'instrutions = "x"\ninstructions =',
        "unknown key instrutions (did you mean instructions?)"),
}


@pytest.mark.parametrize("name", sorted(UNKNOWN))
def test_a_key_fragbench_does_not_read_is_refused_by_every_command(
        experiment: Path, workspace: Path, name: str) -> None:
    file, old, new, says = UNKNOWN[name]
    path = experiment / file
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    frozen = (experiment / "experiment.json").read_bytes()
    for command in (["freeze"], ["plan"], ["run", "--series", "extractive", "--out",
                                           str(workspace / "outputs")]):
        result = run_cli(command[0], str(experiment), *command[1:])
        assert result.returncode == 4, (command, result.stdout)
        [line] = error_lines(result.stderr)
        assert line.startswith(f"fragbench: {path}: "), line
        assert says in line, line
    assert (experiment / "experiment.json").read_bytes() == frozen
    assert not (workspace / "outputs").exists()


def test_every_unknown_key_of_a_config_is_named_in_its_one_line(experiment: Path) -> None:
    config = experiment / CONFIG
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("repetitions = 3", "repetitons = 3").replace(
        'ceiling_usd = "10"', 'ceiling_usd = "10"\nceiling = "1"'), encoding="utf-8")
    [line] = error_lines(run_cli("plan", str(experiment)).stderr)
    assert "unknown keys repetitons (did you mean repetitions?); budget.ceiling (did you " \
        "mean budget.ceiling_usd?)" in line


def test_every_key_of_the_committed_configs_is_known() -> None:
    for name in COMMITTED_EXPERIMENTS:
        load_experiment(ROOT / "experiments" / name)  # raises on an unknown key


# Item 3, the config's side: the response size bound ------------------------------------------


@pytest.mark.parametrize(("value", "accepted"), [
    ("65536", True), ("67108864", True), ("65535", False), ("67108865", False),
    ("true", False), ('"4 MiB"', False), ("4194304.0", False)])
def test_max_response_bytes_is_bounded(experiment: Path, value: str, accepted: bool) -> None:
    config = experiment / CONFIG
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("repetitions = 3", f"repetitions = 3\nmax_response_bytes = "
                                   f"{value}"), encoding="utf-8")
    frozen = (experiment / "experiment.json").read_bytes()
    result = run_cli("freeze", str(experiment))
    if accepted:
        assert result.returncode == 0, result.stderr
        assert load_experiment(experiment).max_response_bytes == int(value)
        plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
        assert plan["parameters"]["max_response_bytes"] == int(value)
        return
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert line.startswith(f"fragbench: {config}: max_response_bytes "), line
    assert (experiment / "experiment.json").read_bytes() == frozen


def test_the_response_bound_is_frozen_and_a_change_is_refused(experiment: Path,
                                                              workspace: Path) -> None:
    assert load_experiment(experiment).max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES == 4194304
    path = experiment / "experiment.json"
    plan = json.loads(path.read_text(encoding="utf-8"))
    assert plan["parameters"]["max_response_bytes"] == 4194304  # the default, frozen
    plan["parameters"]["max_response_bytes"] = 8388608
    path.write_text(json.dumps(plan, ensure_ascii=False, indent=2), encoding="utf-8")
    result = run_cli("run", str(experiment), "--series", "extractive",
                     "--out", str(workspace / "outputs"))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "parameters differs (at parameters.max_response_bytes)" in line
    assert not (workspace / "outputs").exists()


# Item 11: a plugin's code ------------------------------------------------------------------

PYPROJECT = '''[project]
name = "fragbench-drift-groups"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["fragbench"]

[project.entry-points.fragbench]
drift_groups = "fragbench_drift_groups"

[build-system]
requires = ["hatchling>=1.27"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/fragbench_drift_groups"]
'''

PACKAGE = {
    "__init__.py": '''from fragbench.hookspecs import hookimpl
from fragbench_drift_groups.groups import DriftGroups


@hookimpl
def register_chunkers(register):
    register(DriftGroups())
''',
    "groups.py": '''from fragbench.builtin.chunkers import SentenceGroups


class DriftGroups(SentenceGroups):
    """Sentence groups, under a name of its own."""

    name = "drift-groups"
''',
}


def install(tmp_path: Path, layout: str) -> tuple[dict[str, str], Path]:
    """Build and install the package with uv, as docs/writing-a-chunker.md does, into a
    folder of its own; returns the environment that finds it and the folder its code is
    imported from. `editable`: the code stays in the source tree (what an editable install
    puts on the path), only the metadata is installed."""
    source = tmp_path / "fragbench-drift-groups"
    (source / "src" / "fragbench_drift_groups").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    for name, code in PACKAGE.items():
        (source / "src" / "fragbench_drift_groups" / name).write_text(code, encoding="utf-8")
    site = tmp_path / "site"
    done = subprocess.run(
        [str(ROOT / ".bootstrap" / "bin" / "uv"), "pip", "install", "--python",
         str(ROOT / ".venv" / "bin" / "python"), "--target", str(site), "--no-deps",
         "--no-build-isolation", "--offline", str(source)],
        capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    if layout == "wheel":
        return with_path(site), site / "fragbench_drift_groups"
    shutil.rmtree(site / "fragbench_drift_groups")
    env = with_path(site)
    env["PYTHONPATH"] = f"{source / 'src'}:{env['PYTHONPATH']}"
    return env, source / "src" / "fragbench_drift_groups"


@pytest.mark.parametrize("layout", ["wheel", "editable"])
def test_a_plugin_whose_code_changed_under_the_same_version_is_refused(
        experiment: Path, workspace: Path, tmp_path: Path, layout: str) -> None:
    env, code = install(tmp_path, layout)
    config = experiment / CONFIG
    config.write_text(config.read_text(encoding="utf-8").replace(
        'chunker = "sentence-groups"', 'chunker = "drift-groups"'), encoding="utf-8")
    frozen = run_process("freeze", str(experiment), env=env)
    assert frozen.returncode == 0, frozen.stderr
    plan = json.loads((experiment / "experiment.json").read_text(encoding="utf-8"))
    [entry] = [p for p in plan["plugins"] if p["name"] == "drift-groups"]
    assert entry["origin"] == "fragbench-drift-groups" and entry["version"] == "0.1.0"
    assert entry["code_sha256"] == {
        f"fragbench_drift_groups/{name}": hashlib.sha256(text.encode()).hexdigest()
        for name, text in sorted(PACKAGE.items())}
    # Bytecode beside it (what an import writes) is not the plugin's code.
    (code / "__pycache__").mkdir(exist_ok=True)
    (code / "__pycache__" / "groups.cpython-311.pyc").write_bytes(b"\0compiled")
    assert "is current" in run_process("plan", str(experiment), env=env).stdout

    # One file changes; the version does not.
    with (code / "groups.py").open("a", encoding="utf-8") as fh:
        fh.write("# the same version, other code\n")
    said = ("plugin chunker drift-groups (fragbench-drift-groups 0.1.0): file "
            "fragbench_drift_groups/groups.py changed since the plan was frozen")
    shown = run_process("plan", str(experiment), env=env)
    assert shown.returncode == 0, shown.stderr  # a review, not a refusal
    assert "OUT OF DATE" in shown.stdout and said in shown.stdout
    refused = run_process("run", str(experiment), "--series", "extractive",
                          "--out", str(workspace / "outputs"), env=env)
    assert refused.returncode == 4
    [line] = error_lines(refused.stderr)
    assert said in line and "out of date" in line
    assert not (workspace / "outputs").exists()

    # A file added to the package is code too.
    (code / "extra.py").write_text("X = 1\n", encoding="utf-8")
    shown = run_process("plan", str(experiment), "--json", env=env)
    differences = json.loads(shown.stdout)["review"]["frozen_plan"]["differences"]
    assert differences == [said, "plugin chunker drift-groups (fragbench-drift-groups 0.1.0): "
                           "file fragbench_drift_groups/extra.py is new since the plan was "
                           "frozen"]


def test_a_builtin_plugin_is_identified_by_its_module_file(experiment: Path,
                                                           workspace: Path) -> None:
    import fragbench.builtin.chunkers as module

    path = experiment / "experiment.json"
    plan = json.loads(path.read_text(encoding="utf-8"))
    assert all(entry["code_sha256"] for entry in plan["plugins"])
    [entry] = [p for p in plan["plugins"] if p["name"] == "sentence-groups"]
    digest = hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()
    assert entry["code_sha256"] == {"fragbench/builtin/chunkers.py": digest}
    # As if the module had changed since the plan was frozen.
    entry["code_sha256"]["fragbench/builtin/chunkers.py"] = "0" * 64
    path.write_text(json.dumps(plan, ensure_ascii=False, indent=2), encoding="utf-8")
    result = run_cli("run", str(experiment), "--series", "extractive",
                     "--out", str(workspace / "outputs"))
    assert result.returncode == 4
    [line] = error_lines(result.stderr)
    assert "plugin chunker sentence-groups (fragbench " in line
    assert "file fragbench/builtin/chunkers.py changed since the plan was frozen" in line


def test_a_plugins_files_are_its_package_less_compiled_files(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    package = tmp_path / "fragbench_drift_pkg"
    (package / "inner" / "__pycache__").mkdir(parents=True)
    (package / "__pycache__").mkdir()
    files = {"__init__.py": "from fragbench_drift_pkg.inner.impl import Thing\n",
             "inner/__init__.py": "", "inner/impl.py": "class Thing:\n    name = 'thing'\n",
             "words.txt": "data the code reads\n"}
    for name, text in files.items():
        (package / name).write_text(text, encoding="utf-8")
    for junk in ("__pycache__/x.cpython-311.pyc", "inner/__pycache__/impl.cpython-311.pyc",
                 "inner/stale.pyc"):
        (package / junk).write_bytes(b"\0compiled")
    (tmp_path / "fragbench_drift_single.py").write_text("class One:\n    name = 'one'\n",
                                                         encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        thing = importlib.import_module("fragbench_drift_pkg").Thing()
        one = importlib.import_module("fragbench_drift_single").One()
        assert code_sha256("chunker", thing) == {
            f"fragbench_drift_pkg/{name}": hashlib.sha256(text.encode()).hexdigest()
            for name, text in sorted(files.items())}
        assert code_files("chunker", one) == {
            "fragbench_drift_single.py": tmp_path / "fragbench_drift_single.py"}
        (tmp_path / "fragbench_drift_single.py").unlink()
        with pytest.raises(PluginError, match=r"chunker 'one' .*has no files on disk"):
            code_files("chunker", one)
    finally:
        for name in [m for m in sys.modules if m.startswith("fragbench_drift_")]:
            del sys.modules[name]


# Item 12: freezing is idempotent -------------------------------------------------------------


def test_freezing_an_unchanged_plan_leaves_it_byte_for_byte(experiment: Path) -> None:
    path = experiment / "experiment.json"
    committed = (ROOT / "experiments" / "protocol-1.0" / "experiment.json").read_bytes()
    before = path.stat()
    result = run_cli("freeze", str(experiment))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"frozen plan {path} is current: left unchanged\n"
    assert path.read_bytes() == committed
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten

    refreeze(experiment, 'ceiling_usd = "10"', 'ceiling_usd = "7.5"')  # a changed plan: written
    changed = path.read_bytes()
    assert changed != committed
    assert json.loads(changed)["budget"]["ceiling_usd"] == "7.5"
    again = run_cli("freeze", str(experiment))
    assert "left unchanged" in again.stdout and path.read_bytes() == changed


def test_series_of_one_plan_frozen_twice_compare_as_one_plan(extractive: Path,
                                                            experiment: Path,
                                                            workspace: Path) -> None:
    assert run_cli("freeze", str(experiment)).returncode == 0
    again = run_cli("run", str(experiment), "--series", "again", "--backend", "extractive",
                    "--out", str(workspace / "outputs"))
    assert again.returncode == 0, again.stderr
    shown = run_cli("compare", str(extractive), str(workspace / "outputs/protocol-1.0/again"))
    assert shown.returncode == 0, shown.stderr
    assert "different frozen plans" not in shown.stdout


# Items 5 and 6: what `plan` shows of the endpoint and the ledger store -------------------------

CHECKED = '''def contract(self, params):
        return Contract(model=params["model"], output_ceiling=params["max_tokens"],
                        usage_fields=frozenset({"input_tokens", "output_tokens"}))

    def check_environment(self, params):
        import os
        from fragbench.errors import FragbenchError
        how = os.environ.get("TOY_ENDPOINT", "")
        if how == "refuse":
            raise FragbenchError("TOY_BASE_URL=127.0.0.1:8000 has no scheme; give http://...")
        if how == "crash":
            raise RuntimeError("boom")
        if how == "silent":
            return None
        return "http://127.0.0.1:9/v1 (from TOY_BASE_URL), key from TOY_API_KEY"'''


def test_plan_shows_the_endpoint_and_whether_it_is_usable(experiment: Path,
                                                          tmp_path: Path) -> None:
    env = toy_experiment(experiment, tmp_path / "site", CHECKED)
    assert run_process("freeze", str(experiment), env=env).returncode == 0

    def endpoint(how: str) -> list[str]:
        shown = run_process("plan", str(experiment), "--backend", "toy",
                            env={**env, "TOY_ENDPOINT": how})
        assert shown.returncode == 0, shown.stderr  # a review: never a refusal
        return [ln for ln in shown.stdout.splitlines() if ln.startswith("endpoint:")]

    assert endpoint("") == ["endpoint: http://127.0.0.1:9/v1 (from TOY_BASE_URL), key from "
                            "TOY_API_KEY"]
    assert endpoint("refuse") == ["endpoint: NOT USABLE: TOY_BASE_URL=127.0.0.1:8000 has no "
                                  "scheme; give http://..."]
    assert endpoint("crash") == ["endpoint: NOT USABLE: backend 'toy-chat' (plugin "
                                 "fragbench-toy-chat 0.3) failed: RuntimeError: boom; fix or "
                                 "uninstall that plugin"]
    [silent] = endpoint("silent")
    assert silent.startswith("endpoint: NOT USABLE: backend 'toy-chat'") and \
        "returned NoneType from check_environment()" in silent
    shown = run_process("plan", str(experiment), "--backend", "toy", "--json",
                        env={**env, "TOY_ENDPOINT": "refuse"})
    assert json.loads(shown.stdout)["review"]["endpoint"] == {
        "usable": False, "description": None,
        "problem": "TOY_BASE_URL=127.0.0.1:8000 has no scheme; give http://..."}
    # A backend whose plugin has no check_environment says so.
    shown = run_process("plan", str(experiment), "--backend", "extractive", env=env)
    assert "endpoint: backend extractive states none (its plugin has no check_environment)." \
        in shown.stdout


def test_plan_names_the_ledger_store_and_its_records(experiment: Path, workspace: Path,
                                                     ledger_store: Path, tmp_path: Path) -> None:
    def review(env: dict[str, str] | None = None) -> tuple[str, dict]:
        shown = run_cli("plan", str(experiment), env=env)
        assert shown.returncode == 0, shown.stderr
        as_json = run_cli("plan", str(experiment), "--json", env=env)
        return shown.stdout, json.loads(as_json.stdout)["review"]["ledger"]

    ledger = ledger_store / "protocol-1.0-openai.jsonl"
    shown, info = review()
    assert f"ledger store {ledger_store}: no ledger for budget protocol-1.0-openai there yet " \
        "(the first run creates it); if this budget was spent from another store, set " \
        "FRAGBENCH_LEDGER_DIR to that folder before running." in shown
    assert info == {"store": str(ledger_store), "path": str(ledger), "exists": False,
                    "records": 0, "series": 0}
    assert not ledger.exists()  # plan reads only

    with Server() as server:  # a series that stops at its third call: records in this store
        server.script.update({2: http_error(500)})
        run_cli("run", str(experiment), "--out", str(workspace / "outputs"),
                env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    records = len(ledger.read_text(encoding="utf-8").splitlines())
    assert records > 3
    shown, info = review()
    assert f"ledger store {ledger_store}: budget protocol-1.0-openai has {records} records " \
        "there (1 series)" in shown
    assert info == {"store": str(ledger_store), "path": str(ledger), "exists": True,
                    "records": records, "series": 1}

    # Another store (another HOME, XDG_DATA_HOME or FRAGBENCH_LEDGER_DIR) is named as such.
    other = tmp_path / "another-store"
    shown, info = review({"FRAGBENCH_LEDGER_DIR": str(other)})
    assert f"ledger store {other}: no ledger for budget protocol-1.0-openai there yet" in shown
    assert info["records"] == 0 and not other.exists()


# What a user adds to the workspace reaches no test ------------------------------------------


def test_the_committed_experiments_are_the_ones_tests_copy(workspace: Path) -> None:
    assert sorted(p.name for p in (workspace / "experiments").iterdir()) == \
        sorted(COMMITTED_EXPERIMENTS)
    for name in COMMITTED_EXPERIMENTS:
        assert (ROOT / "experiments" / name / "experiment.json").is_file(), name
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return  # not a git checkout: the list above is the reference
    tracked = subprocess.run([git, "ls-files", "experiments/*/config.toml"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert sorted(Path(p).parent.name for p in tracked) == sorted(COMMITTED_EXPERIMENTS)


def test_an_experiment_a_user_added_stays_out_of_the_walkthrough(tmp_path: Path) -> None:
    """docs/writing-a-chunker.md has the reader add experiments/char-window to the checkout;
    the walkthrough's scratch checkout of that checkout holds the committed ones only."""
    root = tmp_path / "checkout"
    (root / "experiments").mkdir(parents=True)
    for name in (".venv", ".bootstrap", "corpus"):
        (root / name).symlink_to(ROOT / name)
    for name in COMMITTED_EXPERIMENTS:
        (root / "experiments" / name).symlink_to(ROOT / "experiments" / name)
    shutil.copytree(ROOT / "experiments" / "protocol-1.0", root / "experiments" / "char-window")
    (tmp_path / "scratch").mkdir()
    where = checkout(tmp_path / "scratch", root)
    assert sorted(p.name for p in (where / "experiments").iterdir()) == \
        sorted(COMMITTED_EXPERIMENTS)
