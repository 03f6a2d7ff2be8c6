"""The generated API reference (docs/api_reference.py, `make docs`): it builds, offline, from
the code's docstrings and annotations, and every public name a plugin touches has a documented
entry in it.

The reference is built in process through pdoc's own API into tmp_path, the same function
`make docs` runs, and the check reads pdoc's model of the modules, the one the pages are
rendered from: a name missing there is missing from the reference.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import ROOT

import fragbench.testing


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference",
                                                  ROOT / "docs" / "api_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["api_reference"] = module
    spec.loader.exec_module(module)
    return module


reference = _reference()


def test_every_public_name_has_a_documented_entry() -> None:
    """A public module-level function, class or constant of the documented modules, a public
    method or attribute of a public class, each hookspec, and each module itself: none lacks
    a docstring in pdoc's model. The failure lists every offender."""
    missing = reference.undocumented()
    assert not missing, ("these public names have no docstring, so the API reference documents "
                         "nothing for them; write one (what a plugin author can rely on):\n  "
                         + "\n  ".join(missing))


def test_the_reference_builds_offline_with_every_module(tmp_path: Path) -> None:
    """`build` writes a page per documented module, an index and the search index, with no
    warning from pdoc (every lazily exported name and every annotation resolved), and no page
    loads anything from another host."""
    problems = reference.build(tmp_path)
    assert problems == []
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    expected = {name.replace(".", "/") + ".html" for name in reference.module_names()}
    assert expected <= pages
    assert {"index.html", "fragbench/interfaces.html", "fragbench/hookspecs.html",
            "fragbench/transport.html", "fragbench/api.html", "fragbench/testing.html",
            "fragbench/testing/loopback.html"} <= pages
    assert (tmp_path / "search.js").is_file()
    for page in [*tmp_path.rglob("*.html"), tmp_path / "search.js"]:
        text = page.read_text(encoding="utf-8")
        # A link a reader may follow is fine (pdoc's footer credits pdoc.dev); a script,
        # style, font or image fetched from another host is not.
        remote = re.findall(r"<(?:script|link|img|iframe|source)\b[^>]*?(?:src|href)="
                            r"[\"']?(?:https?:)?//[^\"' >]+|@import[^;]*//|url\([\"']?"
                            r"(?:https?:)?//", text)
        assert remote == [], f"{page.name} loads {remote}"


def test_lazy_exports_are_documented_as_the_real_objects(tmp_path: Path) -> None:
    """fragbench.testing serves its names lazily (module `__getattr__`): the reference shows
    the real function with its signature and docstring, not a missing name; annotations
    written through fragbench.lazy's Polars proxy show Polars' own DataFrame."""
    reference.build(tmp_path)
    testing = (tmp_path / "fragbench" / "testing.html").read_text(encoding="utf-8")
    for name in fragbench.testing._EXPORTS:
        assert f'id="{name}"' in testing, name
    from fragbench.testing.retrieval_checks import check_scorer

    opening = " ".join((check_scorer.__doc__ or "").split()[:4])  # "Check a scorer on"
    assert opening and opening in testing
    interfaces = (tmp_path / "fragbench" / "interfaces.html").read_text(encoding="utf-8")
    assert "polars.dataframe.frame.DataFrame" in interfaces


def test_every_public_submodule_of_the_kit_is_in_the_reference() -> None:
    """A new public module under fragbench/testing/ must be listed (fragbench.testing's
    `__all__`, which the reference follows), or its names would go undocumented unnoticed."""
    found = {f"fragbench.testing.{m.name}" for m in pkgutil.iter_modules(
        fragbench.testing.__path__) if not m.name.startswith("_")}
    assert found - set(reference.module_names()) == set()


PROBE = '''"""A module of every kind of public name, some documented and some not."""

from typing import Protocol

import pluggy

hookspec = pluggy.HookspecMarker("probe")
"""Documented."""

LIMIT = 3
"""Documented."""
UNDOCUMENTED_CONSTANT = 4
_PRIVATE = 5


class Documented(Protocol):
    """Documented, with members that are not."""

    name: str
    size: int
    """Documented."""

    def method(self) -> None: ...

    def documented(self) -> None:
        """Documented."""

    def _private(self) -> None: ...


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


def test_the_check_names_each_missing_docstring(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous: on a module written for it, exactly the public names without
    a docstring are named (a constant, a class attribute, a protocol method, a class whose
    only docstring would be its base's, an exception's instance attribute, a hookspec), and
    no documented or private name."""
    (tmp_path / "fragbench_probe.py").write_text(PROBE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = reference.undocumented(reference.load(["fragbench_probe"]))
    assert sorted(missing) == sorted([
        "fragbench_probe.UNDOCUMENTED_CONSTANT",
        "fragbench_probe.Documented.name",
        "fragbench_probe.Documented.method",
        "fragbench_probe.Bare",
        "fragbench_probe.Failure",
        "fragbench_probe.Failure.kind",
        "fragbench_probe.register_things",
    ])
