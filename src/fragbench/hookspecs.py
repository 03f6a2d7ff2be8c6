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
hookimpl = pluggy.HookimplMarker("fragbench")

Register = Callable[[Any], None]


@hookspec
def register_chunkers(register: Register) -> None:
    """Called once at start-up; call `register(chunker)` for each chunker (protocol `Chunker`)."""


@hookspec
def register_scorers(register: Register) -> None:
    """Called once at start-up; call `register(scorer)` for each scorer (protocol `Scorer`)."""


@hookspec
def register_backends(register: Register) -> None:
    """Called once at start-up; call `register(backend)` for each model backend (`Backend`)."""


@hookspec
def register_measures(register: Register) -> None:
    """Called once at start-up; call `register(measure)` for each measure (protocol `Measure`)."""
