"""The plugin API reference (the site's `reference/` pages, rendered by mkdocstrings): every public
name a plugin touches has a docstring, so it has an entry.

The check is docs/hooks.py's, the one `mkdocs build --strict` runs (`make docs`,
tests/test_docs_site.py), and it reads griffe's model of the modules the pages name: the model
mkdocstrings renders from, which leaves out a public name without a docstring. These tests
run it in process, without building the site, so that `make check` has them too.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from support.suite import ROOT

import fragbench.testing

DOCS = ROOT / "docs"
SRC = str(ROOT / "src")


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_hooks"] = module
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def documented() -> list[str]:
    return hooks.documented_modules(sorted((DOCS / "reference").rglob("*.md")))


def test_every_public_name_has_a_documented_entry() -> None:
    """A public function, class or constant of each documented module, a public method or
    attribute of a public class, each hookspec, and each module itself: none lacks a docstring
    in griffe's model, and every public submodule of a documented package has a page. The
    failure lists every offender."""
    problems = hooks.check(DOCS, [SRC])
    assert not problems, "the API reference would leave these out:\n  " + "\n  ".join(problems)


def test_the_reference_covers_what_a_plugin_touches() -> None:
    """The modules a plugin author imports, the kit with each of its public submodules (those
    `fragbench.testing` lists in `__all__` and those on disk), and the three a backend meets in
    its errors and imports: each is rendered by a page."""
    names = set(documented())
    kit = {f"fragbench.testing.{m.name}" for m in pkgutil.iter_modules(fragbench.testing.__path__)
           if not m.name.startswith("_")}
    assert kit == {f"fragbench.testing.{name}" for name in fragbench.testing._SUBMODULES}
    assert {"fragbench.api", "fragbench.interfaces", "fragbench.hookspecs", "fragbench.transport",
            "fragbench.testing", "fragbench.errors", "fragbench.redact", "fragbench.lazy",
            *kit} <= names


def test_each_lazy_name_of_the_kit_is_documented_where_it_is_defined() -> None:
    """fragbench.testing serves its names lazily (module `__getattr__`), which griffe's static
    model cannot see in the package; each is documented in the submodule that defines it, and
    that submodule has a page."""
    modules = hooks.load(documented(), [SRC])
    for name, submodule in fragbench.testing._EXPORTS.items():
        where = f"fragbench.testing.{submodule}"
        assert where in modules, (name, where)
        member = modules[where].members[name]
        assert member.is_public and member.docstring and member.docstring.value.strip(), name


PROBE = '''"""A module of every kind of public name, some documented and some not."""

from typing import Protocol

import pluggy

from probe_pkg.inner import DOCUMENTED_THERE, UNDOCUMENTED_THERE

__all__ = ["LIMIT", "UNDOCUMENTED_CONSTANT", "DOCUMENTED_THERE", "UNDOCUMENTED_THERE",
           "Documented", "Bare", "Failure", "register_things", "documented", "hookspec"]

hookspec = pluggy.HookspecMarker("probe")
"""Documented."""

LIMIT = 3
"""Documented."""
UNDOCUMENTED_CONSTANT = 4
_PRIVATE = 5
NOT_EXPORTED = 6


class Documented(Protocol):
    """Documented, with members that are not."""

    name: str
    size: int
    """Documented."""

    def method(self) -> None: ...

    def documented(self) -> None:
        """Documented."""

    def _private(self) -> None: ...

    def __call__(self) -> None: ...


class Bare(Protocol):
    name: str
    """Documented."""


class Failure(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@hookspec
def register_things(register) -> None:
    pass


def documented() -> None:
    """Documented."""
'''

INNER = '''"""Documented."""

DOCUMENTED_THERE = 1
"""Documented where it is defined."""
UNDOCUMENTED_THERE = 2
'''


def probe(tmp_path: Path) -> Path:
    package = tmp_path / "probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(PROBE, encoding="utf-8")
    (package / "inner.py").write_text(INNER, encoding="utf-8")
    (package / "listed.py").write_text('"""Documented."""\n', encoding="utf-8")
    (package / "unlisted.py").write_text('"""Documented."""\n', encoding="utf-8")
    (package / "_private.py").write_text("", encoding="utf-8")
    return package


def test_the_check_names_each_missing_docstring(tmp_path: Path) -> None:
    """The check is not vacuous: on a package written for it, exactly the public names without
    a docstring are named (a constant, a class attribute, a protocol method, a class whose
    only docstring would be its base's, an exception's instance attribute, a hookspec, a
    name re-exported through `__all__`, named where it is defined), and no documented, private,
    special or unexported name."""
    probe(tmp_path)
    modules = hooks.load(["probe_pkg", "probe_pkg.listed"], [str(tmp_path)])
    assert sorted(hooks.undocumented(modules)) == sorted([
        "probe_pkg.UNDOCUMENTED_CONSTANT",
        "probe_pkg.inner.UNDOCUMENTED_THERE",
        "probe_pkg.Documented.name",
        "probe_pkg.Documented.method",
        "probe_pkg.Bare",
        "probe_pkg.Failure",
        "probe_pkg.Failure.kind",
        "probe_pkg.register_things",
    ])


def test_the_check_names_a_public_module_no_page_renders(tmp_path: Path) -> None:
    """A package's public submodule that no page names is a problem (it would go undocumented
    unnoticed); a private one is not, and neither is one whose page exists."""
    probe(tmp_path)
    modules = hooks.load(["probe_pkg", "probe_pkg.listed"], [str(tmp_path)])
    assert sorted(hooks.unlisted(modules)) == ["probe_pkg.inner", "probe_pkg.unlisted"]


def test_a_page_naming_no_module_is_a_problem(tmp_path: Path) -> None:
    """A `:::` line naming a module that does not exist (a rename) is reported by name, not
    skipped."""
    docs = tmp_path / "docs"
    (docs / "reference").mkdir(parents=True)
    (docs / "reference" / "gone.md").write_text("# Gone\n\n::: fragbench.gone\n",
                                                encoding="utf-8")
    assert hooks.check(docs, [SRC]) == [
        "fragbench.gone: no such module, named by a page under docs/reference/"]


@pytest.mark.parametrize(("fence", "title"), [
    ("```python file=src/fragbench_x/__init__.py", '```python title="src/fragbench_x/__init__.py"'),
    ("```toml edit=experiments/x/config.toml",
     '```toml title="experiments/x/config.toml: set these keys"'),
    ("```toml append=experiments/x/config.toml",
     '```toml title="experiments/x/config.toml: add at the end"'),
])
def test_a_worked_examples_fence_is_shown_as_code_with_its_file(fence: str, title: str) -> None:
    """tests/support/walkthrough.py's fences (`file=`, `edit=`, `append=`) are not Markdown's:
    unchanged, the block would render as text (a TOML table header as a link). The hook titles
    them."""
    page = f"Text.\n\n{fence}\n[budget]\nid = 1\n```\n"
    assert hooks.titled_fences(page) == f"Text.\n\n{title}\n[budget]\nid = 1\n```\n"
