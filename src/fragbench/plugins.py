"""Plugin discovery and the registry of named chunkers, scorers, backends and measures.

Built-in plugins are modules registered exactly like third-party ones: through the hooks in
`hookspecs`. Third-party plugins are found through the `fragbench` entry-point group.
`FRAGBENCH_LOAD_PLUGINS` (a comma-separated list of distribution names; empty for none) limits
which third-party plugins load. `FRAGBENCH_TRACE_HOOKS=1` prints every hook call to stderr.

Every registered object declares the plugin API it is written for (`api_version = "1.0"`);
`registry` refuses, in one line naming the plugin and its distribution, one that declares none
or one this fragbench does not support (`fragbench.api.api_version_problem`), before any other
check: a plugin written for another API may lack what this one requires.

`code_sha256` identifies a plugin's code by content, for the frozen plan: a plugin whose code
changed while its version did not is a different plugin.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import os
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pluggy

from fragbench import hookspecs
from fragbench.api import api_version_problem
from fragbench.errors import PluginError

DEFAULT_PLUGINS = (
    "fragbench.builtin.chunkers",
    "fragbench.builtin.scorers",
    "fragbench.builtin.extractive",
    "fragbench.builtin.openai_backend",
    "fragbench.builtin.availability",
    "fragbench.builtin.citations",
    "fragbench.builtin.completeness",
)

# kind -> (hook name, attributes a registered object must have)
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "chunker": ("register_chunkers", ("name", "chunk")),
    "scorer": ("register_scorers", ("name", "score")),
    "backend": ("register_backends", ("name", "is_model", "label", "check_params", "open")),
    "measure": ("register_measures", ("name", "kind", "compute")),
}


@attrs.frozen
class Entry:
    kind: str
    name: str
    obj: Any
    origin: str
    """The distribution that registered it (`fragbench` for built-ins)."""
    version: str
    builtin: bool


class Registry:
    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries

    def names(self, kind: str) -> list[str]:
        return sorted(e.name for e in self.entries if e.kind == kind)

    def entry(self, kind: str, name: str, where: str = "") -> Entry:
        for e in self.entries:
            if e.kind == kind and e.name == name:
                return e
        known = ", ".join(self.names(kind)) or "none"
        prefix = f"{where}: " if where else ""
        raise PluginError(f"{prefix}no {kind} named {name!r} is registered; the {kind}s that "
                          f"exist are: {known} (see `fragbench plugins`); if a plugin package "
                          "provides it, install that package (docs/plugins.md, \"Installing a "
                          "plugin\").")

    def get(self, kind: str, name: str, where: str = "") -> Any:
        return self.entry(kind, name, where).obj


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def plugin_manager() -> tuple[pluggy.PluginManager, dict[str, tuple[str, str]]]:
    """The plugin manager, and plugin name -> (distribution, version) for third-party ones."""
    pm = pluggy.PluginManager("fragbench")
    pm.add_hookspecs(hookspecs)
    for module in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(module), name=module)
    allowed = os.environ.get("FRAGBENCH_LOAD_PLUGINS")
    keep = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
    origins: dict[str, tuple[str, str]] = {}
    for ep in importlib.metadata.entry_points(group="fragbench"):
        dist = ep.dist.name if ep.dist else ep.value
        if keep is not None and dist not in keep:
            continue
        name = f"{dist}:{ep.name}"
        if pm.has_plugin(name):
            continue
        try:
            module = ep.load()
        except Exception as exc:  # a broken plugin must not hide behind a traceback
            raise PluginError(f"plugin {dist} (entry point {ep.value}) failed to import: "
                              f"{exc}; fix or uninstall it.") from exc
        pm.register(module, name=name)
        origins[name] = (dist, ep.dist.version if ep.dist else "unknown")
    pm.check_pending()
    if os.environ.get("FRAGBENCH_TRACE_HOOKS"):
        def before(hook_name: str, impls: Any, kwargs: Any) -> None:
            print(f"fragbench hook: {hook_name} -> {[i.plugin_name for i in impls]}",
                  file=sys.stderr)

        def after(*_: Any) -> None:
            return None

        pm.add_hookcall_monitoring(before, after)
    return pm, origins


def call_plugin(kind: str, plugin: Any, method: str, *args: Any) -> Any:
    """Call a plugin; a failure inside it is reported as that plugin's, in one line."""
    from fragbench.errors import first_line

    try:
        return getattr(plugin, method)(*args)
    except Exception as exc:
        raise PluginError(f"{describe(kind, plugin)} failed: {type(exc).__name__}: "
                          f"{first_line(exc)}; fix or uninstall that plugin.") from exc


def describe(kind: str, obj: Any) -> str:
    """`chunker 'name' (plugin dist 1.2)`: how errors name a plugin."""
    name = getattr(obj, "name", type(obj).__name__)
    for e in registry().entries:
        if e.obj is obj:
            where = "built-in" if e.builtin else f"plugin {e.origin} {e.version}"
            return f"{kind} {name!r} ({where})"
    return f"{kind} {name!r} ({type(obj).__module__})"


@functools.cache
def registry() -> Registry:
    """Load every plugin once and collect what each registers, refusing duplicate names."""
    pm, origins = plugin_manager()
    entries: list[Entry] = []
    for kind, (hook_name, required) in KINDS.items():
        # Registration order: built-ins first, so a plugin cannot shadow a built-in name.
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            builtin = impl.plugin_name not in origins
            origin, version = origins.get(impl.plugin_name, ("fragbench", _version("fragbench")))

            def register(obj: Any, *, _kind: str = kind, _origin: str = origin,
                         _version_: str = version, _builtin: bool = builtin,
                         _required: tuple[str, ...] = required) -> None:
                # The API version first: a plugin written for another API may well lack what
                # this one requires, and the version is then the thing to say.
                problem = api_version_problem(obj)
                if problem is not None:
                    where = "built-in" if _builtin else f"plugin {_origin} {_version_}"
                    name = getattr(obj, "name", type(obj).__name__)
                    raise PluginError(f"{_kind} {name!r} ({where}) {problem}.")
                missing = [a for a in _required if not hasattr(obj, a)]
                if missing:
                    raise PluginError(f"plugin {_origin} registered a {_kind} without "
                                      f"{', '.join(missing)}; fix or uninstall that plugin.")
                for e in entries:
                    if e.kind == _kind and e.name == obj.name:
                        raise PluginError(f"plugin {_origin} registers a {_kind} named "
                                          f"{obj.name!r}, which {e.origin} already registered; "
                                          "uninstall one of them or set FRAGBENCH_LOAD_PLUGINS.")
                entries.append(Entry(_kind, obj.name, obj, _origin, _version_, _builtin))

            impl.function(register=register)
    return Registry(entries)


def _module_name(obj: Any) -> str:
    """The module that defines a registered object (its class's, for an instance)."""
    if isinstance(obj, ModuleType):
        return obj.__name__
    name = getattr(obj, "__module__", None)
    return name if isinstance(name, str) else type(obj).__module__


def code_files(kind: str, obj: Any) -> dict[str, Path]:
    """The files that make up a registered object's code, by their path relative to the folder
    that holds its top-level package (`fragbench_x/__init__.py`: the same on every machine).

    - Third-party code: every file of the top-level package of the module that defines the
      object (the folder, wherever it is installed: site-packages for a wheel, the source tree
      for an editable install), except `__pycache__` folders and compiled `.pyc`/`.pyo`
      files; a plugin that is a single module, that module's file.
    - fragbench's own code (the built-in plugins): the one module file that defines the
      object; the rest of fragbench is recorded once for the whole plan (`core_files`).

    PluginError, naming the plugin, when the code has no files on disk to read.
    """
    module_name = _module_name(obj)
    top = module_name.partition(".")[0]
    try:
        module = importlib.import_module(module_name if top == "fragbench" else top)
    except Exception as exc:  # the object exists, so this is a plugin that hides its module
        raise PluginError(f"{describe(kind, obj)}: its module {module_name} cannot be imported "
                          f"({type(exc).__name__}); fix or uninstall that plugin.") from None
    folders = [] if top == "fragbench" else list(getattr(module, "__path__", None) or [])
    found: dict[str, Path] = {}
    if folders:
        for folder in map(Path, folders):
            for where, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in files:
                    if not name.endswith((".pyc", ".pyo")):
                        path = Path(where) / name
                        found[path.relative_to(folder.parent).as_posix()] = path
    else:
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and Path(file).is_file():
            path = Path(file)
            depth = module.__name__.count(".") + (path.name == "__init__.py")
            found[path.relative_to(path.parents[depth]).as_posix()] = path
    if not found:
        raise PluginError(f"{describe(kind, obj)}: its code (module {module_name}) has no files "
                          "on disk, so the plan cannot record it; install it as a package "
                          "(docs/plugins.md).")
    return dict(sorted(found.items()))


def code_sha256(kind: str, obj: Any) -> dict[str, str]:
    """The sha256 of each of `code_files`, by relative path, sorted: what the frozen plan
    records of a plugin's code, so that a change names the file."""
    return _digests(code_files(kind, obj), describe(kind, obj), "fix or reinstall that plugin")


def _digests(files: dict[str, Path], who: str, fix: str) -> dict[str, str]:
    digests = {}
    for name, path in files.items():
        try:
            with path.open("rb") as fh:
                digests[name] = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError as exc:
            raise PluginError(f"{who}: {path} cannot be read ({exc.strerror}); {fix}.") from None
    return digests


CORE_LEFT_OUT = ("builtin", "scaffold", "testing")
"""Folders of the package that are not in the core's identity: the built-in plugins (each is
recorded as a plugin, with the file that defines it, where a plan uses it), `fragbench new`'s
scaffolds and the plugin authors' test kit (neither runs in a plan, a run or a report)."""
CORE_SUFFIXES = (".py", ".j2", ".js")
"""What runs or renders: the modules, and the report pages' templates and script."""


def core_files() -> dict[str, Path]:
    """fragbench's own code, by path from the folder holding the package (`fragbench/calls/
    collector.py`: the same for a wheel and for a source tree), sorted: every module and page
    template of the installed package outside `CORE_LEFT_OUT`, compiled files and caches
    left out. The plan records each one's sha256 (`core_identity`), so that a change to how
    calls are reserved or stopped is named by `plan` and refused by `run`, as a plugin's is."""
    root = Path(__file__).resolve().parent
    found: dict[str, Path] = {}
    for where, dirs, files in os.walk(root):
        top = Path(where) == root
        dirs[:] = sorted(d for d in dirs
                         if d != "__pycache__" and not (top and d in CORE_LEFT_OUT))
        for name in files:
            if name.endswith(CORE_SUFFIXES):
                path = Path(where) / name
                found[path.relative_to(root.parent).as_posix()] = path
    return dict(sorted(found.items()))


def core_identity() -> dict[str, Any]:
    """What the frozen plan records of fragbench itself: its version, one sha256 over its
    files (`sha256sum`'s lines of `code_sha256`, joined), and each file's sha256."""
    digests = _digests(core_files(), "fragbench", "reinstall fragbench")
    listing = "".join(f"{digest}  {name}\n" for name, digest in digests.items())
    return {"version": _version("fragbench"),
            "sha256": hashlib.sha256(listing.encode()).hexdigest(),
            "code_sha256": digests}


@attrs.frozen
class ConfigBackends:
    """The backends one experiment config defines: what `--backend` accepts for it."""

    config: Path
    backends: tuple[tuple[str, str], ...]
    """(name, plugin) in the config's order."""
    default: str | None
    problem: str | None = None
    """Why the config could not be read, if it could not."""


def config_backends(folder: Path) -> list[ConfigBackends]:
    """Every `*/config.toml` under `folder` (an experiments folder) or `folder/config.toml`,
    read for its backend tables only: a quick look for `fragbench plugins`, no validation
    (that is `fragbench plan`'s job) and no heavy import."""
    configs = [folder / "config.toml"] if (folder / "config.toml").is_file() else sorted(
        folder.glob("*/config.toml"))
    found = []
    for config in configs:
        try:
            data = tomllib.loads(config.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            found.append(ConfigBackends(config, (), None, f"unreadable ({exc})"))
            continue
        tables = data.get("backends") if isinstance(data.get("backends"), dict) else {}
        pairs = tuple((str(name), str(table.get("plugin", "?")) if isinstance(table, dict)
                       else "?") for name, table in tables.items())
        default = data.get("default_backend")
        found.append(ConfigBackends(config, pairs, default if isinstance(default, str)
                                    else None))
    return found
