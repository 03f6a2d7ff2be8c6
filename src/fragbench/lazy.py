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
    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


polars = LazyModule("polars")
