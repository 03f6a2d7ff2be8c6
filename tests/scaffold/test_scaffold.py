"""`fragbench new` (issue 15, item 5): each kind's package, generated through the real CLI,
installs (uv, offline, into a private folder, as tests/support/walkthrough.py does; all in one uv
call) and passes its own tests as written, in a pytest process apart from the suite's (one for all
the packages); `fragbench plugins` then lists it. So does a
package under a name whose CamelCase is a name the templates import, or a keyword. The
generated README's commands, followed as a reader would from a checkout, work. Bad names, an
existing folder and a write that fails leave nothing behind."""

from __future__ import annotations

import ast
import keyword
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from support.cli import error_lines, process_env, run_cli, run_process
from support.suite import ROOT
from support.walkthrough import follow

from fragbench.api import API_VERSION
from fragbench.errors import EXIT_REFUSED, EXIT_USAGE
from fragbench.scaffold.plugin import KINDS, class_name, name_problem, render

pytestmark = pytest.mark.slow

NAMES = {kind: f"scaffold-{kind}" for kind in KINDS}
COLLIDING = {
    "chunker": ("none",),
    "scorer": ("false",),
    "measure": ("measure-input",),
    "backend": ("usage",),
}
"""Names accepted by `fragbench new` whose plain CamelCase (`None`, `MeasureInput`, `Usage`...)
is a keyword or a name that kind's plugin or test module imports; a sample, installed and
tested (every such name is checked, without installing, by
test_no_name_can_make_a_class_that_shadows_one_the_templates_use). One backend name: each
backend package runs the kit's whole fault suite, and `reply` and `contract`, tested here
before, failed exactly as `usage` did with the kind's ending removed from `class_name`."""
PACKAGES = [(kind, NAMES[kind]) for kind in KINDS] + [
    (kind, name) for kind, names in COLLIDING.items() for name in names]
TESTS = {"chunker": 2, "scorer": 2, "measure": 2, "backend": 1}
"""How many tests each kind's package has: all must pass, none be skipped."""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Every package of `PACKAGES` generated into one folder and installed, in one uv call,
    into a private site folder (put on PYTHONPATH, never into the shared environment): (the
    folder, the site folder)."""
    root = tmp_path_factory.mktemp("scaffold")
    for kind, name in PACKAGES:
        made = run_cli("new", kind, name, "--dir", str(root))
        assert made.returncode == 0, made.stderr
        assert made.stdout.splitlines()[0] == (f"{kind} plugin {name!r} written to "
                                               f"{root / f'fragbench-{name}'}")
    site = root / "site"
    installed = subprocess.run(
        [str(ROOT / ".bootstrap/bin/uv"), "pip", "install", "--python",
         str(ROOT / ".venv/bin/python"), "--target", str(site), "--no-deps",
         "--no-build-isolation", "--offline",
         *[str(root / f"fragbench-{name}") for _, name in PACKAGES]],
        capture_output=True, text=True, check=False)
    assert installed.returncode == 0, installed.stderr
    return root, site


@pytest.fixture(scope="module")
def tested(generated: tuple[Path, Path]) -> dict[str, dict[str, str]]:
    """Every package's tests, as written, run by one pytest process (not one per package: each
    would pay interpreter start-up and fragbench's imports again, the cost that grows most on
    a busy machine) with only the installed copies importable (src/ is not on the path) and
    the kit's pytest plugin: test file name -> test name -> outcome, from pytest's JUnit XML
    report. The README's own `pytest`, run from a package's folder, is followed in
    test_the_readme_commands_work_as_written."""
    root, site = generated
    report = root / "junit.xml"
    # A package whose tests cannot be collected fails alone: the others still run.
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                          "--continue-on-collection-errors", f"--junitxml={report}",
                          *[str(root / f"fragbench-{name}" / "tests") for _, name in PACKAGES]],
                         cwd=root, env=process_env({"PYTHONPATH": str(site)}),
                         capture_output=True, text=True, check=False)
    assert report.is_file(), ran.stdout + ran.stderr
    outcomes: dict[str, dict[str, str]] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        detail = "".join(child.get("message", "") + (child.text or "") for child in case)
        # A test file that could not be collected has no class name: its own name says which.
        module = (case.get("classname") or case.get("name", "")).rsplit(".", 1)[-1]
        tests = outcomes.setdefault(module, {})
        # Outcomes are found by test file name: two packages sharing one would mix theirs.
        assert case.get("name", "") not in tests, f"two packages have a test file {module}"
        tests[case.get("name", "")] = (kinds[0] + ": " + detail) if kinds else "passed"
    return outcomes


@pytest.mark.parametrize(("kind", "name"), PACKAGES, ids=[name for _, name in PACKAGES])
def test_a_new_package_installs_and_passes_its_own_tests(generated: tuple[Path, Path],
                                                         tested: dict[str, dict[str, str]],
                                                         kind: str, name: str) -> None:
    root, site = generated
    module = f"fragbench_{name.replace('-', '_')}"
    [test_file] = (root / f"fragbench-{name}" / "tests").glob("test_*.py")
    # Its tests ran against what was installed, and all passed, none skipped.
    results = tested.get(test_file.stem, {})
    assert len(results) == TESTS[kind], (test_file, results)
    assert set(results.values()) == {"passed"}, results
    assert (site / module / "__init__.py").is_file()


def template_names(kind: str) -> tuple[str, set[str]]:
    """The class of the plugin `x` of `kind`, and every name its module and test bind or use."""
    names = set()
    for path, text in render(kind, "x").items():
        if path.endswith(".py"):
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Name):
                    names.add(node.id)
                elif isinstance(node, ast.alias):
                    names.update({*node.name.split("."), node.asname or ""})
                elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                    names.add(node.name)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
    cls = class_name(kind, "x")
    assert cls in names
    return cls, names - {"", cls}


@pytest.mark.parametrize("kind", KINDS)
def test_no_name_can_make_a_class_that_shadows_one_the_templates_use(kind: str) -> None:
    """Every name the kind's templates use, and every keyword, written as a NAME a user could
    type (`MeasureInput` -> `measure-input`, `None` -> `none`): the class it gives is none of
    them."""
    cls, names = template_names(kind)
    typed = {re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", n).lower().replace("_", "-")
             for n in names | set(keyword.kwlist)}
    accepted = sorted(n for n in typed if name_problem(n) is None)
    assert {"usage", "route", "measure-input", "none", "pl"} & set(accepted)
    clashes = [(n, class_name(kind, n)) for n in accepted
               if class_name(kind, n) in names | set(keyword.kwlist)]
    assert clashes == []
    # What keeps it so as templates change: the class ends in the kind's word, nothing else does.
    assert cls == f"X{kind.capitalize()}" and class_name(kind, f"my-{kind}") == cls.replace(
        "X", "My", 1)
    assert [n for n in names if n.endswith(kind.capitalize())] == []


def test_the_readme_commands_work_as_written(tmp_path: Path) -> None:
    """The generated README's commands, followed from a scratch fragbench checkout
    (tests/support/walkthrough.py) with the package next to it (`--dir ..`, as docs/plugins.md's
    quick start does), its placeholder replaced by the path a reader would write. The install goes
    to a private folder as in every walkthrough; a `sitecustomize` there makes Python read its
    `.pth` files as it reads the environment's site-packages, so the editable install works
    as it does in `.venv/`."""
    made = run_cli("new", "chunker", "read-me", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    package = tmp_path / "fragbench-read-me"
    readme = package / "README.md"
    assert readme.read_text(encoding="utf-8").count("PATH/TO/fragbench-read-me") >= 3
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nimport site\n\nsite.addsitedir(os.path.dirname(__file__))\n",
        encoding="utf-8")
    install, listed, tested = follow(readme, tmp_path,
                                     replace={"PATH/TO/fragbench-read-me": "../fragbench-read-me"})
    assert "fragbench-read-me" in install.stderr
    assert listed.stdout.split() == ["chunker", "read-me", "fragbench-read-me", "0.1.0",
                                     "(plugin)", "API", API_VERSION]
    assert "2 passed" in tested.stdout and "skipped" not in tested.stdout, tested.stdout
    # Editable, as the README says: the code is imported from the package's src/, not copied.
    assert not (site / "fragbench_read_me").exists()
    [pth] = site.glob("*.pth")
    assert pth.read_text(encoding="utf-8").split() == [str(package / "src")]


def test_fragbench_plugins_lists_every_new_package(generated: tuple[Path, Path]) -> None:
    _, site = generated
    listed = run_process("plugins", env={"PYTHONPATH": str(site)})
    assert listed.returncode == 0, listed.stderr
    lines = [line.split() for line in listed.stdout.splitlines()]
    for kind, name in PACKAGES:
        assert [kind, name, f"fragbench-{name}", "0.1.0", "(plugin)", "API",
                API_VERSION] in lines, (kind, listed.stdout)


def test_the_package_holds_what_the_readme_says(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Written in the current folder by default; each file where the README says."""
    monkeypatch.chdir(tmp_path)
    made = run_cli("new", "chunker", "stride-groups")
    assert made.returncode == 0, made.stderr
    package = tmp_path / "fragbench-stride-groups"
    assert sorted(p.relative_to(package).as_posix() for p in package.rglob("*")
                  if p.is_file()) == ["README.md", "pyproject.toml",
                                      "src/fragbench_stride_groups/__init__.py",
                                      "tests/test_stride_groups.py"]
    pyproject = (package / "pyproject.toml").read_text(encoding="utf-8")
    assert ('[project.entry-points.fragbench]\nstride_groups = "fragbench_stride_groups"'
            in pyproject)
    assert 'build-backend = "hatchling.build"' in pyproject
    plugin = (package / "src/fragbench_stride_groups/__init__.py").read_text(encoding="utf-8")
    assert 'name = "stride-groups"' in plugin and f'api_version = "{API_VERSION}"' in plugin
    assert "{{" not in plugin and "{{" not in pyproject
    assert "## What to edit next" in (package / "README.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fragbench-stride-groups"]


@pytest.mark.parametrize(("name", "says"), [
    ("Stride", "is not lowercase ASCII letters"),
    ("stride_groups", "is not lowercase ASCII letters"),
    ("-stride", "is not lowercase ASCII letters"),
    ("stride-", "is not lowercase ASCII letters"),
    ("stride--groups", "is not lowercase ASCII letters"),
    ("2-stride", "is not lowercase ASCII letters"),
    ("../stride", "is not lowercase ASCII letters"),
    ("stride groups", "is not lowercase ASCII letters"),
    ("", "is not lowercase ASCII letters"),
    ("fragbench-stride", "starts with `fragbench`"),
    ("s" * 41, "is longer than 40 characters"),
])
def test_a_bad_name_is_refused_in_one_line_and_nothing_is_written(
        tmp_path: Path, name: str, says: str) -> None:
    result = run_cli("new", "chunker", "--dir", str(tmp_path), "--", name)
    assert result.returncode == EXIT_USAGE and result.stdout == ""
    [line] = error_lines(result.stderr)
    assert line.startswith(f"fragbench: plugin name {name!r} {says}"), line
    assert line.endswith("; choose another.")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_kind_or_folder_is_refused(tmp_path: Path) -> None:
    kind = run_cli("new", "tokenizer", "stride", "--dir", str(tmp_path))
    assert kind.returncode == EXIT_USAGE
    assert error_lines(kind.stderr) == ["fragbench: no plugin kind 'tokenizer'; `fragbench new` "
                                        "makes a chunker, scorer, measure or backend plugin, or "
                                        "an experiment."]
    nowhere = tmp_path / "nowhere" / "deeper"  # a missing --dir is made, not its parent
    folder = run_cli("new", "chunker", "stride", "--dir", str(nowhere))
    assert folder.returncode == EXIT_USAGE
    assert error_lines(folder.stderr) == [f"fragbench: --dir {nowhere}: no such folder, and its "
                                          f"parent {nowhere.parent} is no folder either; name a "
                                          "folder, or one to be made in an existing folder."]
    assert list(tmp_path.iterdir()) == []
    file = tmp_path / "a-file"
    file.write_text("mine\n", encoding="utf-8")
    for where in (file, file / "below"):
        refused = run_cli("new", "chunker", "stride", "--dir", str(where))
        assert refused.returncode == EXIT_USAGE
        [line] = error_lines(refused.stderr)
        assert line.startswith(f"fragbench: --dir {where}: "), line
    assert list(tmp_path.iterdir()) == [file] and file.read_text(encoding="utf-8") == "mine\n"


def test_an_existing_folder_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    existing = tmp_path / "fragbench-stride"
    existing.mkdir()
    (existing / "mine.py").write_text("# my work\n", encoding="utf-8")
    result = run_cli("new", "scorer", "stride", "--dir", str(tmp_path))
    assert result.returncode == EXIT_REFUSED
    assert error_lines(result.stderr) == [f"fragbench: {existing} already exists; it is left as "
                                          "it is: remove it, or choose another name or --dir."]
    assert [p.name for p in tmp_path.iterdir()] == ["fragbench-stride"]
    assert [p.name for p in existing.iterdir()] == ["mine.py"]
    assert (existing / "mine.py").read_text(encoding="utf-8") == "# my work\n"


def test_a_write_that_fails_leaves_nothing_behind(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A file list whose third entry cannot be written (a file where a folder must go): the
    real filesystem refuses it after two files were written; the hidden folder they went into
    is removed and no package folder appears."""
    from fragbench.scaffold import plugin as scaffold

    real = scaffold.render

    def clashing(kind: str, name: str) -> dict[str, str]:
        files = real(kind, name)
        return {"pyproject.toml": files["pyproject.toml"], "README.md": files["README.md"],
                "tests": "a file where the tests folder goes", **files}

    monkeypatch.setattr(scaffold, "render", clashing)
    result = run_cli("new", "chunker", "stride", "--dir", str(tmp_path))
    assert result.returncode == EXIT_REFUSED
    [line] = error_lines(result.stderr)
    assert "tests" in line, line
    assert list(tmp_path.iterdir()) == []
