"""`fragbench new` (issue 15, item 5): each kind's package, generated through the real CLI,
installs (uv, offline, into a private folder, as tests/walkthrough.py does) and passes its own
tests as written, in a pytest process of its own; `fragbench plugins` then lists it. Bad names,
an existing folder and a write that fails leave nothing behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, error_lines, process_env, run_cli, run_process

from fragbench.api import API_VERSION
from fragbench.errors import EXIT_REFUSED, EXIT_USAGE
from fragbench.scaffold import KINDS

NAMES = {kind: f"scaffold-{kind}" for kind in KINDS}
TESTS = {"chunker": 2, "scorer": 2, "measure": 2, "backend": 1}
"""How many tests each kind's package has: all must pass, none be skipped."""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Every kind generated into one folder and installed into a private site folder (put on
    PYTHONPATH, never into the shared environment): (the folder, the site folder)."""
    root = tmp_path_factory.mktemp("scaffold")
    for kind, name in NAMES.items():
        made = run_cli("new", kind, name, "--dir", str(root))
        assert made.returncode == 0, made.stderr
        assert made.stdout.splitlines()[0] == (f"{kind} plugin {name!r} written to "
                                               f"{root / f'fragbench-{name}'}")
    site = root / "site"
    installed = subprocess.run(
        [str(ROOT / ".bootstrap/bin/uv"), "pip", "install", "--python",
         str(ROOT / ".venv/bin/python"), "--target", str(site), "--no-deps",
         "--no-build-isolation", "--offline",
         *[str(root / f"fragbench-{name}") for name in NAMES.values()]],
        capture_output=True, text=True, check=False)
    assert installed.returncode == 0, installed.stderr
    return root, site


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_package_installs_and_passes_its_own_tests(generated: tuple[Path, Path],
                                                         kind: str) -> None:
    root, site = generated
    package = root / f"fragbench-{NAMES[kind]}"
    # From the package's folder, with only the installed copy importable (src/ is not on the
    # path): its tests run against what was installed, with the kit's pytest plugin.
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-rs"], cwd=package, env=process_env({"PYTHONPATH": str(site)}),
                         capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{TESTS[kind]} passed" in ran.stdout and "skipped" not in ran.stdout, ran.stdout
    module = f"fragbench_{NAMES[kind].replace('-', '_')}"
    assert (site / module / "__init__.py").is_file()


def test_fragbench_plugins_lists_every_new_package(generated: tuple[Path, Path]) -> None:
    _, site = generated
    listed = run_process("plugins", env={"PYTHONPATH": str(site)})
    assert listed.returncode == 0, listed.stderr
    lines = [line.split() for line in listed.stdout.splitlines()]
    for kind, name in NAMES.items():
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
                                        "makes a chunker, scorer, measure or backend."]
    nowhere = tmp_path / "nowhere"
    folder = run_cli("new", "chunker", "stride", "--dir", str(nowhere))
    assert folder.returncode == EXIT_USAGE
    assert error_lines(folder.stderr) == [f"fragbench: --dir {nowhere}: no such folder; make it "
                                          "first, or name an existing one."]
    assert list(tmp_path.iterdir()) == []


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
    from fragbench import scaffold

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
