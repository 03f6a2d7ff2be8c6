"""What a Python file imports, read from its syntax tree (never by importing it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def absolute_imports(path: Path) -> Iterator[str]:
    """Each module an `import` or `from ... import` of the file names, at module level or
    inside a function, under `TYPE_CHECKING` too; relative imports left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
