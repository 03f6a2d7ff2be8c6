"""How every check of the test kit fails: an AssertionError naming the plugin and the promise
it broke (pytest shows the message as the failure; `pytest.raises(AssertionError)` shows that
a check can fail)."""

from __future__ import annotations

from typing import Any


def fail(who: str, promise: str, detail: str) -> AssertionError:
    """The error a check raises: `chunker 'x' breaks its contract (promise): detail`."""
    return AssertionError(f"{who} breaks its contract ({promise}): {detail}")


def plugin_name(kind: str, plugin: Any) -> str:
    """`scorer 'bm25'`: how a check names the plugin it checks."""
    return f"{kind} {getattr(plugin, 'name', type(plugin).__name__)!r}"
