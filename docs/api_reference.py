"""fragbench's API reference for plugin authors, generated with pdoc from the code's docstrings
and type annotations: `make docs` writes it to docs/api/ (open docs/api/index.html).

    python docs/api_reference.py [OUT]      # OUT defaults to docs/api

Everything a plugin touches is in `MODULES` (a package brings its submodules). Each page is
built from the imported modules, offline: no script, font or style is fetched from anywhere.

`undocumented()` lists each public name of those modules that has no docstring in pdoc's
model (the module itself, its functions, classes and constants, and each public method and
attribute of a public class); tests/test_api_reference.py fails on any.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from pathlib import Path

import pdoc
import pdoc.doc
import pdoc.extract
import pdoc.render

MODULES = (
    "fragbench.api",
    "fragbench.interfaces",
    "fragbench.hookspecs",
    "fragbench.transport",
    "fragbench.testing",
)
"""The modules a plugin touches; a package (fragbench.testing) brings its submodules."""

OUT = Path(__file__).resolve().parent / "api"
TEMPLATES = Path(__file__).resolve().parent / "api_templates"
"""pdoc's templates, with a front page that says where to start (index.html.jinja2)."""


def module_names() -> list[str]:
    """Every module the reference documents, in order: MODULES with their submodules (those a
    package lists in `__all__`)."""
    return pdoc.extract.walk_specs(list(MODULES))


def _resolve_lazy(names: list[str]) -> None:
    """Load the names a module exports lazily (`__all__` served by a module `__getattr__`, as
    fragbench.testing does to keep pytest's start-up light), so that pdoc, which reads a
    module's namespace, documents the real objects."""
    for name in names:
        module = importlib.import_module(name)
        for exported in getattr(module, "__all__", ()):
            getattr(module, exported, None)


def _reexported_docstrings(modules: dict[str, pdoc.doc.Module]) -> None:
    """A constant a module re-exports (`fragbench.api.COST_FIELDS`) has its docstring where it
    is defined: pdoc reads a variable's docstring from the assignment's source, so give the
    re-export the docstring of the same object documented in another module."""
    documented = {(m.name, id(m.default_value)): m.docstring
                  for module in modules.values() for m in module.members.values()
                  if isinstance(m, pdoc.doc.Variable) and m.docstring.strip()}
    for module in modules.values():
        for member in module.members.values():
            if isinstance(member, pdoc.doc.Variable) and not member.docstring.strip():
                found = documented.get((member.name, id(member.default_value)))
                if found:
                    member.docstring = found


def load(names: list[str] | None = None) -> dict[str, pdoc.doc.Module]:
    """pdoc's model of every documented module (or of `names`), by name, its members resolved
    as above."""
    names = module_names() if names is None else names
    _resolve_lazy(names)
    pdoc.doc.Module.from_name.cache_clear()  # read the code as it is now, not a cached model
    modules = {name: pdoc.doc.Module.from_name(name) for name in names}
    _reexported_docstrings(modules)
    return modules


def build(out: Path = OUT) -> list[str]:
    """Write the HTML reference into `out` (index.html, one page per module, search.js);
    return the warnings pdoc gave (empty when every name and annotation resolved)."""
    from fragbench.api import API_VERSION

    pdoc.render.configure(docformat="markdown", search=True, show_source=True,
                          footer_text=f"fragbench plugin API {API_VERSION}",
                          template_directory=TEMPLATES)
    pdoc.render.env.globals["api_version"] = API_VERSION
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        modules = load()
        for module in modules.values():
            page = out / f"{module.fullname.replace('.', '/')}.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(pdoc.render.html_module(module, modules), encoding="utf-8")
        (out / "index.html").write_text(pdoc.render.html_index(modules), encoding="utf-8")
        (out / "search.js").write_text(pdoc.render.search_index(modules), encoding="utf-8")
    return [str(w.message) for w in caught]


def _public(doc: pdoc.doc.Doc) -> bool:
    return not doc.name.startswith("_") and "@private" not in doc.docstring


def _documented(doc: pdoc.doc.Doc) -> bool:
    if isinstance(doc, pdoc.doc.Class):
        # A class without a docstring of its own inherits its base's in inspect.getdoc
        # (Protocol's "Base class for protocol classes", Exception's): that documents nothing.
        own = doc.obj.__dict__.get("__doc__")
        return isinstance(own, str) and bool(inspect.cleandoc(own).strip())
    return bool(doc.docstring.strip())


def undocumented(modules: dict[str, pdoc.doc.Module] | None = None) -> list[str]:
    """The full name, where it is defined, of each public name without a docstring: a
    documented module itself, its functions, classes and constants, and the public methods
    and attributes of its public classes (a name re-exported, as `fragbench.api` re-exports
    `fragbench.interfaces.Reply`, is named once, where it is defined)."""
    missing: dict[str, None] = {}
    for name, module in (load() if modules is None else modules).items():
        if not module.docstring.strip():
            missing[f"{name} (the module's docstring)"] = None
        for member in module.members.values():
            if isinstance(member, pdoc.doc.Module) or not _public(member):
                continue
            # A constant's value says nothing of where it was defined: name it where it is.
            where = member.fullname if isinstance(member, pdoc.doc.Variable) \
                else ".".join(member.taken_from)
            if not _documented(member):
                missing[where] = None
            if isinstance(member, pdoc.doc.Class):
                for attribute in member.own_members:
                    if _public(attribute) and not _documented(attribute):
                        missing[f"{where}.{attribute.name}"] = None
    return list(missing)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    for problem in build(target):
        print(f"pdoc: {problem}", file=sys.stderr)
    print(f"API reference written to {target}/index.html")
