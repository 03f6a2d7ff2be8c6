"""The tests mirror the packages (issue 25, item 4), kept by the code.

- A test file sits in the folder of the stage it mostly tests (tests/corpus/, tests/retrieval/,
  ... one per package of src/fragbench, and tests/plugins_kit/ for the plugin API and the
  authors' kit), or at the top of tests/ when it is cross-cutting: named below, with why.
- No test module imports conftest or another test module: what modules share is in
  tests/support/ (`from support.cli import run_cli`), shared fixtures in tests/conftest.py.
  pytest imports test modules by path (`--import-mode=importlib`), so a test module is not on
  sys.path to be imported anyway; this test also catches what importlib mode would let
  through (`import conftest`, an old helper path at the top of tests/, `tests.x.test_y`).
- tests/ holds no `__init__.py` but support's: tests/ is on sys.path (for `support`), and
  tests/http/ made a package would hide the standard library's `http` from every test.

Files other helpers of issue 25 were still editing when the suite was reorganised are listed
in NOT_YET_CONVERTED and NOT_YET_MOVED, each with what it still needs. Both lists only shrink:
a listed file that no longer needs its entry fails, so the entry is removed in the same change
(the compatibility modules at the top of tests/ go with the last file that imports them).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from support.imports import absolute_imports

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SRC = ROOT / "src" / "fragbench"

STAGES = ("corpus", "retrieval", "budget", "experiment", "calls", "series", "report",
          "scaffold", "cli", "http")
"""A folder of tests per package of src/fragbench, named as the package."""
KIT = "plugins_kit"
"""The plugin API (api, interfaces, hookspecs, plugins) and the authors' kit (testing)."""

CROSS_CUTTING = {
    "test_trust_gaps.py": "money, secrets and one-line errors across every command",
    "test_protocol_clauses.py": "protocol 1.0's clauses, each wherever it is applied",
    "test_sigkill.py": "the collector killed at each kind of durable write",
    "test_signals.py": "an interrupted run never costs the answer in flight",
    "test_terminal.py": "a closed pipe or terminal never stops collection",
    "test_run_edges.py": "issue 14's run-side edges, through every stage of a run",
    "test_redact_edges.py": "the redactor at the edges, for every output",
    "test_shared_rules.py": "rules written once and read alike by every module",
    "test_edges24.py": "issue 24's edges across commands",
    "test_messages24.py": "issue 24's one-line messages across stages",
    "test_import_graph.py": "the import graph of the whole package",
    "test_dependencies.py": "every imported package declared",
    "test_public_paths.py": "the public import paths of the whole package",
    "test_types.py": "the type check over src/",
    "test_test_layout.py": "this file: the layout of tests/",
    "test_readme_experiment.py": "documentation: the README followed as written",
    "test_docs_walkthrough.py": "documentation: the worked examples followed as written",
    "test_docs_gemini.py": "documentation: a worked example followed as written",
    "test_docs_measure.py": "documentation: a worked example followed as written",
    "test_docs_scorer.py": "documentation: a worked example followed as written",
    "test_docs_site.py": "documentation: the site built",
    "test_api_reference.py": "documentation: the API reference",
    "test_tables_doc.py": "documentation: docs/tables.md against the files",
}
"""Test files that stay at the top of tests/, and why: what they test spans the stages."""

NOT_YET_MOVED = {
}
"""Test files at the top of tests/ only until the file named imports from support/ instead."""

NOT_YET_CONVERTED = {
}
"""Files that may still import these test modules (each at most these), until converted to
support/: helper H1's documentation tests (/work/helpers/issue25/h2_finish.py h1 converts them)."""

COMPATIBILITY = (
)
"""Old helper paths at the top of tests/, each re-exporting support/ (or the kit) for the files
in NOT_YET_CONVERTED that import it."""


def python_files() -> list[Path]:
    """Every Python file of the suite: tests/ (support included) and the plugins' tests."""
    found = [p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(found + list(ROOT.glob("plugins/*/tests/*.py")))


def importable_test_names() -> set[str]:
    """The names by which a test module (or conftest, or an old helper path) could be
    imported: every file at the top of tests/, any `test_*`, and `tests` itself."""
    return {p.stem for p in TESTS.glob("*.py")} | {"conftest", "tests"}


def imported_test_modules(path: Path) -> set[str]:
    """The test modules `path` imports, at module level or inside a function."""
    names = importable_test_names()
    tops = {module.partition(".")[0] for module in absolute_imports(path)}
    return {top for top in tops if top in names or top.startswith("test_")}


def where(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_test_module_imports_conftest_or_another_test_module() -> None:
    wrong, stale = [], []
    for path in python_files():
        imported = imported_test_modules(path)
        allowed = NOT_YET_CONVERTED.get(where(path), set())
        if imported - allowed:
            wrong.append(f"{where(path)} imports {', '.join(sorted(imported - allowed))}: "
                         "import what it needs from tests/support/ (fixtures: tests/conftest.py)")
        if where(path) in NOT_YET_CONVERTED and not imported & allowed:
            stale.append(f"{where(path)} imports no test module now: remove its entry from "
                         "NOT_YET_CONVERTED")
    assert not wrong, "\n".join(wrong)
    assert not stale, "\n".join(stale)
    missing = [name for name in NOT_YET_CONVERTED if not (ROOT / name).is_file()]
    assert not missing, f"listed in NOT_YET_CONVERTED but gone: {missing}"


def test_every_test_file_sits_in_its_stage_or_is_cross_cutting() -> None:
    folders = (*STAGES, KIT)
    wrong = []
    for path in sorted(TESTS.rglob("test_*.py")):
        place = path.parent.relative_to(TESTS).as_posix()
        if place == ".":
            if path.name not in CROSS_CUTTING and path.name not in NOT_YET_MOVED:
                wrong.append(f"{where(path)}: move it to the folder of the stage it tests "
                             f"({', '.join(folders)}), or name it in CROSS_CUTTING with why")
        elif place not in folders:
            wrong.append(f"{where(path)}: tests/{place}/ is not a stage's folder "
                         f"({', '.join(folders)})")
    assert not wrong, "\n".join(wrong)
    listed = {*CROSS_CUTTING, *NOT_YET_MOVED}
    gone = sorted(name for name in listed if not (TESTS / name).is_file())
    assert not gone, f"named at the top of tests/ but not there (moved? remove the entry): {gone}"
    assert not set(CROSS_CUTTING) & set(NOT_YET_MOVED)


def test_each_stage_folder_is_a_package_of_fragbench() -> None:
    """The folders mirror the packages: one renamed or removed in src/ shows here."""
    pending = {reason.split("/")[0] for reason in NOT_YET_MOVED.values()}
    for stage in STAGES:
        assert (SRC / stage / "__init__.py").is_file(), f"tests/{stage}/ mirrors no package"
        assert any((TESTS / stage).glob("test_*.py")) or stage in pending, (
            f"tests/{stage}/ holds no test")
    assert (SRC / "testing" / "__init__.py").is_file() and any((TESTS / KIT).glob("test_*.py"))


def test_tests_holds_helpers_only_in_support_and_no_package_but_support() -> None:
    top = {p.name for p in TESTS.glob("*.py")} - {"conftest.py"}
    helpers = sorted(name for name in top if not name.startswith("test_"))
    assert helpers == sorted(COMPATIBILITY), (
        f"a helper module at the top of tests/ belongs in tests/support/: {helpers}")
    still_used = {module for path in python_files() for module in imported_test_modules(path)}
    unused = [name for name in COMPATIBILITY if Path(name).stem not in still_used]
    assert not unused, f"no file imports these now: delete them and their entry: {unused}"
    # A tests/http/__init__.py hides the standard library's http from the whole session.
    packages = sorted(where(p) for p in TESTS.rglob("__init__.py"))
    assert packages == ["tests/support/__init__.py"], packages
    assert not list((TESTS / "support").glob("test_*.py")), "a test file inside support/"


def test_pytest_imports_test_modules_by_path() -> None:
    """importlib mode is what keeps a test module off sys.path (and so unimportable by its
    basename); `pythonpath` puts tests/ there for `support` alone."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pytest_options = options["tool"]["pytest"]["ini_options"]
    assert "--import-mode=importlib" in pytest_options["addopts"].split()
    assert pytest_options["pythonpath"] == ["tests"]
