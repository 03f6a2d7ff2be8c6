"""The four hook families a plugin can implement, in the `register_*(register)` style.

Each hook receives a `register` callback and calls it once per object it contributes. The core
owns the names: a second object under a name already taken is an error, whoever registered it.
The built-in plugins register through these same hooks. See docs/plugins.md for the protocols
the registered objects follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("fragbench")
"""Marks the hook specifications below (the core's; a plugin never uses it)."""
hookimpl = pluggy.HookimplMarker("fragbench")
"""The decorator a plugin puts on its hook implementations: `@hookimpl def register_chunkers
(register): ...` in the module its `fragbench` entry point names (also `fragbench.api.hookimpl`)."""

Register = Callable[[Any], None]
"""The `register` callback each hook receives: call it with one object (an instance that
follows the hook's protocol and declares `api_version`). When it loads the plugins, the core
refuses, in one line naming the plugin, a name already taken, a missing protocol attribute or
an `api_version` it does not support."""


@hookspec
def register_chunkers(register: Register) -> None:
    """Called once at start-up; call `register(chunker)` for each chunker (protocol
    `fragbench.interfaces.Chunker`)."""


@hookspec
def register_scorers(register: Register) -> None:
    """Called once at start-up; call `register(scorer)` for each scorer (protocol
    `fragbench.interfaces.Scorer`)."""


@hookspec
def register_backends(register: Register) -> None:
    """Called once at start-up; call `register(backend)` for each backend, model or baseline
    (protocol `fragbench.interfaces.Backend`)."""


@hookspec
def register_measures(register: Register) -> None:
    """Called once at start-up; call `register(measure)` for each measure (protocol
    `fragbench.interfaces.Measure`)."""
