"""No import circle, kept by the code (issue 25, item 2).

Every module under src/fragbench is parsed (never imported: the check runs in well under a
second and cannot be fooled by what an import happens to do at run time), and every import of
a fragbench module is an edge: at module level and inside functions alike, since an import
inside a function only postpones the circle to the first call. `from fragbench.x import y` is
an edge to `fragbench.x.y` when y is a submodule, else to `fragbench.x`; relative imports
resolve from the importing module's package; `importlib.import_module("fragbench.x")` with a
literal name counts too. Not counted: imports under `if TYPE_CHECKING:` (they never run), and
names computed at run time (the built-in plugins `plugins.DEFAULT_PLUGINS` registers, the way
entry points are).

Two graphs must be free of cycles: the modules', and the packages' (each subpackage of
fragbench, such as `builtin`, `importers` or `testing`, is one node with its submodules; each
top-level module is a node of its own). A failure names every cycle as a path, each edge with
the file and line that makes it, so the fix starts from the message.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import attrs

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "fragbench"


@attrs.frozen
class Edge:
    source: str
    target: str
    where: str
    """`path:line`, and the function when the import is inside one."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Module name -> file, for every .py file of the package (subpackages included)."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def ours(name: str) -> bool:
    return name == "fragbench" or name.startswith("fragbench.")


def under_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def import_nodes(tree: ast.AST, function: str = "") -> Iterator[tuple[ast.AST, str]]:
    """Every import statement (and `importlib.import_module` call) in the tree, with the
    function it is in, skipping the bodies of `if TYPE_CHECKING:` (their `else:` runs)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and under_type_checking(node.test):
            for branch in node.orelse:
                yield from import_nodes(ast.Module(body=[branch], type_ignores=[]), function)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Call):
            yield node, function
        inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else ""
        yield from import_nodes(node, f"{function}.{inner}".strip(".") if inner else function)


def resolve_base(source: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` reads from."""
    if not node.level:
        return node.module or ""
    package = source if is_package(source) else source.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def literal_import_module(node: ast.Call) -> str | None:
    """The name in `importlib.import_module("...")` / `import_module("...")`, when literal."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if called != "import_module" or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def reexported(source: str, node: ast.Call) -> list[str]:
    """The submodules a package's `reexport(__name__, {name: submodule, ...})` (fragbench.lazy)
    imports on first use: edges like any import inside a function."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if called != "reexport" or len(node.args) != 2 or not isinstance(node.args[1], ast.Dict):
        return []
    return [f"{source}.{value.value}" for value in node.args[1].values
            if isinstance(value, ast.Constant) and isinstance(value.value, str)]


def targets(source: str, node: ast.AST) -> list[str]:
    """The fragbench modules one import statement imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if ours(alias.name)]
    if isinstance(node, ast.Call):
        name = literal_import_module(node)
        if name is None:
            return reexported(source, node)
        return [name] if ours(name) else []
    assert isinstance(node, ast.ImportFrom)
    base = resolve_base(source, node)
    if not ours(base):
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base
            for alias in node.names]


@cache
def edges() -> tuple[Edge, ...]:
    found = []
    for source, path in modules().items():
        tree = ast.parse(path.read_bytes(), filename=str(path))
        for node, function in import_nodes(tree):
            where = f"{path.relative_to(SRC.parent)}:{getattr(node, 'lineno', '?')}"
            where += f" in {function}()" if function else ""
            found += [Edge(source, target, where) for target in targets(source, node)]
    return tuple(found)


def package_of(name: str) -> str:
    """The package-level node: `fragbench.X` for anything inside subpackage X, else the
    module itself (a top-level module, or `fragbench` for the package's own __init__)."""
    parts = name.split(".")
    top = ".".join(parts[:2])
    return top if len(parts) > 2 or (len(parts) == 2 and is_package(top)) else name


def cycles(graph: dict[str, dict[str, Edge]]) -> list[list[Edge]]:
    """One shortest cycle through each node that lies on a cycle, without repeats: every
    strongly connected component is reported, through each of its members."""
    found: list[list[Edge]] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    for start in sorted(graph):
        path = shortest_path_back(graph, start)
        if path is None:
            continue
        key = frozenset((edge.source, edge.target) for edge in path)
        if key not in seen:
            seen.add(key)
            found.append(path)
    return found


def shortest_path_back(graph: dict[str, dict[str, Edge]], start: str) -> list[Edge] | None:
    """The shortest path of edges from `start` back to itself (breadth first), or None."""
    came_by: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target, edge in sorted(graph.get(node, {}).items()):
                if target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came_by[path[0].source])
                    return path
                if target not in came_by:
                    came_by[target] = edge
                    following.append(target)
        frontier = following
    return None


def graph_of(rename: dict[str, str] | None = None) -> dict[str, dict[str, Edge]]:
    """source -> target -> the first edge making it; nodes renamed (packages) when asked."""
    graph: dict[str, dict[str, Edge]] = {}
    for edge in edges():
        source = rename.get(edge.source, edge.source) if rename else edge.source
        target = rename.get(edge.target, edge.target) if rename else edge.target
        if source != target or not rename:
            graph.setdefault(source, {}).setdefault(target, Edge(source, target, edge.where))
    return graph


def described(found: list[list[Edge]]) -> str:
    lines = []
    for path in found:
        names = " -> ".join([path[0].source, *(edge.target for edge in path)])
        lines.append(f"{names}\n" + "".join(f"    {edge.source} -> {edge.target}: {edge.where}\n"
                                             for edge in path))
    return f"{len(found)} import cycle(s):\n" + "".join(lines)


def test_every_fragbench_import_names_a_module_of_the_package() -> None:
    """The edges below are only as good as their resolution: an import the check could not
    map to a file of src/fragbench would be a circle it cannot see."""
    unknown = [f"{edge.where}: {edge.target}" for edge in edges() if edge.target not in modules()]
    assert not unknown, "imports of no module under src/fragbench:\n" + "\n".join(unknown)
    assert len(modules()) > 50 and len(edges()) > 200, "the parse found too little to judge"


def test_at_most_twenty_modules_at_the_top_level() -> None:
    """Packages by stage (issue 25): the top level holds the public paths and the shared
    leaves; a new module goes into its stage's package."""
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 20, f"{len(top)} modules at the top of src/fragbench: {top}"


def test_no_import_cycle_between_modules() -> None:
    found = cycles(graph_of())
    assert not found, described(found)


def test_no_import_cycle_between_packages() -> None:
    """Subpackages (the stages, builtin, testing, and any added later) are one node each."""
    assert {package_of(name) for name in modules()} >= {
        f"fragbench.{name}" for name in ("builtin", "testing", "http", "corpus", "retrieval",
                                         "budget", "experiment", "calls", "series", "report",
                                         "scaffold", "cli")}
    found = cycles(graph_of({name: package_of(name) for name in modules()}))
    assert not found, described(found)


def test_the_check_sees_imports_inside_functions_and_relative_ones() -> None:
    """The parser itself, on a made-up module: a function-level import and a relative one are
    edges, an import under TYPE_CHECKING is not (its else branch is), and the cycle finder
    names a two-module circle as a path."""
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from fragbench import cli\n"
                     "else:\n    from fragbench.lazy import polars\n"
                     "def f():\n    from .http import wire\n    import fragbench.errors\n"
                     "    importlib.import_module('fragbench.text')\n")
    found = [target for node, _ in import_nodes(tree)
             for target in targets("fragbench.transport", node)]
    assert found == ["fragbench.lazy", "fragbench.http.wire", "fragbench.errors", "fragbench.text"]
    a_b = Edge("a", "b", "a.py:1")
    b_a = Edge("b", "a", "b.py:2")
    assert cycles({"a": {"b": a_b}, "b": {"a": b_a}}) == [[a_b, b_a]]
    assert described([[a_b, b_a]]).splitlines()[1] == "a -> b -> a"
    assert cycles({"a": {"b": a_b}}) == []
    # A package's lazy re-exports (fragbench.lazy.reexport) are imports of its submodules.
    border = ast.parse('__getattr__, __dir__ = reexport(__name__, {"Exchange": "wire"})')
    assert [target for node, _ in import_nodes(border)
            for target in targets("fragbench.http", node)] == ["fragbench.http.wire"]
