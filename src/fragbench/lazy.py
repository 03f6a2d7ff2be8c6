"""Heavy modules imported on first use, so that `fragbench --help` and `fragbench plugins` never
pay for them (Polars alone is about a tenth of a second).

    if TYPE_CHECKING:
        import polars as pl
    else:
        from fragbench.lazy import polars as pl

`pl.col(...)` then imports Polars the first time it runs. Module-level code must not touch such
a name: that would import it at once, which is what this avoids.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """A module imported the first time one of its attributes is read (`polars.col`), then
    kept: a stand-in for `import name` at module level."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


polars = LazyModule("polars")
"""Polars, imported on first use (the module docstring shows how to annotate with it)."""


def reexport(package: str, names: dict[str, str]) -> tuple[Any, Any]:
    """A package's module `__getattr__` and `__dir__` that re-export `names` (name -> the
    submodule, relative to `package`, that defines it) on first use, the way
    `fragbench/__init__.py` does: importing the package imports none of its modules, so that
    `fragbench --help` stays as light as before the package existed.

        __getattr__, __dir__ = reexport(__name__, {"Case": "cases", ...})

    A name is resolved once, then kept in the package's namespace."""
    import sys

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
