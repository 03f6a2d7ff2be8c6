"""fragbench's plugin API: the one import a plugin author needs, stable under semantic
versioning (docs/plugins.md, "Stability").

    from fragbench.api import API_VERSION, Chunker, hookimpl

Every name in `__all__` is the same object as in the module that defines it (`hookimpl` is
`fragbench.hookspecs.hookimpl`, `Reply` is `fragbench.interfaces.Reply`, ...), so a plugin that
imports them from there keeps working; these names, with the protocols' documented attributes
and columns, stay compatible for every API 1.x. Importing this module loads no Polars and no
SDK, so a plugin module that imports it stays light at start-up.

Every object a plugin registers (chunker, scorer, backend, measure) says which plugin API it was
written for, as a class attribute: `api_version = "1.0"` (MAJOR.MINOR). A fragbench supports one
major version, up to its own minor: it accepts a plugin written for 1.0 while its API is 1.x,
and refuses, in one line naming the plugin, one written for a major it no longer supports or a
minor newer than its own (that plugin may use what this fragbench lacks).
"""

from __future__ import annotations

import re
from typing import Any

from fragbench.errors import FragbenchError
from fragbench.hookspecs import hookimpl
from fragbench.interfaces import (
    COST_FIELDS,
    SNAPSHOT,
    Backend,
    BackendFailure,
    Chunker,
    Contract,
    Measure,
    MeasureInput,
    Reply,
    Request,
    Scorer,
    Session,
    Usage,
)

__all__ = [
    "API_VERSION",
    "COST_FIELDS",
    "SNAPSHOT",
    "Backend",
    "BackendFailure",
    "Chunker",
    "Contract",
    "FragbenchError",
    "Measure",
    "MeasureInput",
    "Reply",
    "Request",
    "Scorer",
    "Session",
    "Usage",
    "hookimpl",
]

API_VERSION = "1.1"
"""The plugin API this fragbench provides (MAJOR.MINOR)."""

_FORM = re.compile(r"(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})")


def _parts(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def api_version_problem(obj: Any) -> str | None:
    """Why `obj`'s declared `api_version` is not one this fragbench supports, in words that
    follow the plugin's name ("declares no api_version; ..."); None when it is supported.

    fragbench's own check (the registry and the kit's checks call it), not part of the stable
    surface (`__all__`): its words may change in any release."""
    declared = getattr(obj, "api_version", None)
    ours = f"this fragbench provides plugin API {API_VERSION}"
    if declared is None:
        return (f"declares no api_version; add `api_version = \"{API_VERSION}\"` to it (the "
                "plugin API it is written for, docs/plugins.md)")
    if not isinstance(declared, str) or not _FORM.fullmatch(declared):
        return (f"declares api_version {declared!r}, not MAJOR.MINOR such as "
                f"\"{API_VERSION}\" (docs/plugins.md)")
    major, minor = _parts(declared)
    our_major, our_minor = _parts(API_VERSION)
    if major != our_major:
        return (f"was written for plugin API {declared}, and {ours} (major {our_major} only); "
                f"install a version of the plugin written for API {our_major}.x, or a fragbench "
                f"that supports API {major}.x")
    if minor > our_minor:
        return (f"was written for plugin API {declared}, newer than {ours}; upgrade fragbench, "
                f"or install a version of the plugin written for API {API_VERSION}")
    return None
