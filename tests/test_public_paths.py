"""The public paths stay where they were (issue 25, item 1): the modules plugin authors and
analysts import, the entry points, and every `import` a page of the documentation shows.

The layout moved 41 modules into packages by stage; what a user outside the repository wrote
against fragbench must not notice. The documentation's own import lines are read from the pages
(README.md and docs/**.md, fenced Python blocks), so a page that names a path the code no longer
has fails here, whoever moves what.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PUBLIC = ("fragbench.api", "fragbench.interfaces", "fragbench.hookspecs", "fragbench.transport",
          "fragbench.testing", "fragbench.lazy", "fragbench.errors", "fragbench.redact")
"""The paths ARCHITECTURE.md and the issue name as public: they never move."""

FENCE = re.compile(r"^```(?:python|py)\n(.*?)^```", re.M | re.S)


@pytest.mark.parametrize("name", PUBLIC)
def test_the_public_modules_import_from_their_paths(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} lost its docstring"


def test_fragbench_scan_and_version_stay_on_the_package() -> None:
    import fragbench

    assert callable(fragbench.scan) and fragbench.scan.__doc__
    assert isinstance(fragbench.__version__, str)


def test_the_entry_points_resolve() -> None:
    """The `fragbench` script (`fragbench.cli:main`) and the test kit's pytest plugin, as the
    installed distribution declares them."""
    points = importlib.metadata.distribution("fragbench").entry_points
    script = next(p for p in points if p.group == "console_scripts" and p.name == "fragbench")
    assert script.value == "fragbench.cli:main" and callable(script.load())
    kit = next(p for p in points if p.group == "pytest11" and p.name == "fragbench")
    assert kit.value == "fragbench.testing.plugin"
    kit.load()


def ours(module: str) -> bool:
    return module == "fragbench" or module.startswith("fragbench.")


def documented_imports() -> list[tuple[str, str]]:
    """(page, import statement) for every fragbench import in a fenced Python block."""
    found = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            try:
                tree = ast.parse(block)
            except SyntaxError:  # a fragment (a signature, a shell line): its imports are read
                tree = ast.parse("\n".join(line for line in block.splitlines()
                                           if line.lstrip().startswith(("from ", "import "))
                                           and not line.rstrip().endswith("(")))
            for node in ast.walk(tree):
                if (isinstance(node, ast.ImportFrom) and ours(node.module or "") \
                        and node.level == 0) or (isinstance(node, ast.Import) and any(
                        ours(alias.name) for alias in node.names)):
                    found.append((str(page.relative_to(ROOT)), ast.unparse(node)))
    return found


def test_every_import_the_documentation_shows_works() -> None:
    """Only fragbench's own paths (`fragbench`, `fragbench.x`): an example plugin's package
    (`fragbench_myplugin`) is the reader's, not ours."""
    shown = documented_imports()
    assert len(shown) >= 5, "the pages were not read: too few imports found"
    broken = []
    for page, statement in shown:
        try:
            exec(statement, {})
        except ImportError as exc:
            broken.append(f"{page}: {statement} ({exc})")
    assert not broken, "the documentation shows imports that fail:\n" + "\n".join(broken)
