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


API_PROMISE = "declares the plugin API it is written for"
"""The promise every check names first when `api_version` is missing or not supported."""


def declared_api(kind: str, plugin: Any) -> str:
    """The plugin's name for failures (`plugin_name`); fails first, naming `API_PROMISE`, when
    its `api_version` is missing or one this fragbench does not support (the registry would
    refuse it at start-up). Every check of the kit calls it before anything else."""
    from fragbench.api import api_version_problem

    who = plugin_name(kind, plugin)
    problem = api_version_problem(plugin)
    if problem is not None:
        raise fail(who, API_PROMISE, f"it {problem}")
    return who
