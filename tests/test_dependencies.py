"""Every dependency declared (issue 25, item 6): each third-party package that src/fragbench
imports is named in pyproject.toml, by the distribution that provides it, in `[project]`
dependencies, an extra (`[project.optional-dependencies]`) or a dependency group.

A package another dependency happens to bring in does not count: httpx2 came with openai, and
a release of openai that dropped or bounded it differently would have broken the transport with
nothing in pyproject.toml to say so. Every import counts, at module level or inside a function
(fragbench imports its heavy libraries on first use) and under `TYPE_CHECKING` too (a type
checker imports those). The standard library (`sys.stdlib_module_names`), fragbench itself and
relative imports are not dependencies. An import name is mapped to its distributions by
`importlib.metadata.packages_distributions()` (`yaml` is PyYAML's); a module no installed
distribution provides is taken to be its own distribution's name, so that it is still named.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

from support.imports import absolute_imports
from support.suite import ROOT

NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?", re.ASCII)
"""A distribution's name at the start of a requirement string (PEP 508)."""


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them: `MarkupSafe`, `markupsafe` and
    `markup_safe` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imports(package: Path, base: Path) -> dict[str, list[str]]:
    """Each top-level module the package's files import, with the files (relative to `base`,
    sorted) that import it; the standard library, the package itself and relative imports
    left out."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for name in absolute_imports(path):
            top = name.partition(".")[0]
            if top != package.name and top not in sys.stdlib_module_names:
                found.setdefault(top, set()).add(path.relative_to(base).as_posix())
    return {top: sorted(files) for top, files in sorted(found.items())}


def declared(pyproject: Mapping[str, object]) -> set[str]:
    """The distributions a pyproject.toml names: its dependencies, every extra and every
    dependency group (a group's `{include-group = ...}` entries are other groups, read there)."""
    project = pyproject.get("project", {})
    assert isinstance(project, dict)
    requirements: list[object] = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    groups = pyproject.get("dependency-groups", {})
    assert isinstance(groups, dict)
    for group in groups.values():
        requirements.extend(group)
    names = set()
    for requirement in requirements:
        if isinstance(requirement, str):
            match = NAME.match(requirement.strip())
            assert match, f"pyproject.toml: a requirement with no name: {requirement!r}"
            names.add(normalize(match.group()))
    return names


def undeclared(imported: Mapping[str, Iterable[str]], names: set[str],
               providers: Mapping[str, list[str]]) -> list[str]:
    """One line per imported module that no declared distribution provides, naming it, the
    distributions that do, a file that imports it and what to do."""
    lines = []
    for top, files in imported.items():
        distributions = providers.get(top) or [top]
        if not any(normalize(d) in names for d in distributions):
            files = list(files)
            more = f" (and {len(files) - 1} more)" if len(files) > 1 else ""
            lines.append(f"{files[0]}{more} imports {top} (distribution "
                         f"{' or '.join(sorted(set(distributions)))}), which pyproject.toml "
                         "does not declare: add it to [project] dependencies, or to the extra "
                         "or group of the only code that imports it")
    return lines


def test_every_package_fragbench_imports_is_declared() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    imported = imports(ROOT / "src" / "fragbench", ROOT)
    assert "httpx2" in imported, "the scan no longer sees fragbench's imports"
    missing = undeclared(imported, declared(pyproject), packages_distributions())
    assert not missing, "\n".join(missing)


def test_an_undeclared_import_is_named_with_its_file(tmp_path: Path) -> None:
    """The checker on a package of its own: an import inside a function and a `from` import
    are found; a module is matched to its distribution's name (PyYAML for yaml), in any
    spelling; the standard library, the package itself, relative imports and what an extra
    or a group declares are not reported."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os, json\nfrom . import sub\nfrom pkg.sub import thing\nimport attrs\n"
        "def later():\n    import httpx2.exceptions\n", encoding="utf-8")
    (package / "sub" / "__init__.py").write_text(
        "from yaml import safe_load\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import ray\n    from numpy import ndarray\n"
        "thing = 1\n", encoding="utf-8")
    pyproject = tomllib.loads(
        '[project]\ndependencies = ["attrs>=25.1"]\n'
        '[project.optional-dependencies]\nray = ["ray[data]>=2.40"]\n'
        '[dependency-groups]\ndev = [{ include-group = "lint" }]\nlint = ["PYyaml>=6"]\n')
    imported = imports(package, tmp_path)
    assert list(imported) == ["attrs", "httpx2", "numpy", "ray", "yaml"]
    providers = {"yaml": ["PyYAML"], "attrs": ["attrs"]}
    assert undeclared(imported, declared(pyproject), providers) == [
        "pkg/__init__.py imports httpx2 (distribution httpx2), which pyproject.toml does not "
        "declare: add it to [project] dependencies, or to the extra or group of the only code "
        "that imports it",
        "pkg/sub/__init__.py imports numpy (distribution numpy), which pyproject.toml does "
        "not declare: add it to [project] dependencies, or to the extra or group of the only "
        "code that imports it",
    ]
