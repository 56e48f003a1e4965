"""The folders are the architecture (docs/GUIDE.md#layout): at run time a layer imports only the layers below it
(type annotations aside), so specs never need the fit, nor the fit the scheduler, nor anything the front ends."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import source_tree

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenroof"
# lowest first; one rank may import its own and any lower rank
RANKS = {
    "errors": 0,
    "units": 0,
    "params": 0,  # every numeric parameter's range (the CLI and the page check values alike)
    "stats": 0,  # arrival times and latency percentiles: the simulator and the load client compute them alike
    "style": 0,  # how numbers and bounds are shown (the tables, the report and the figures share it)
    "schemas": 0,  # the JSON contract as data (read by io.contract)
    "specs": 1,
    "model": 2,
    "io": 3,
    "fit": 4,
    "serving": 5,
    "measure": 5,
    "report": 6,
    "cli": 7,  # the front ends: the CLI and the local page call each other's helpers
    "ui": 7,
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tokenroof"


def runtime_imports(path: Path) -> set[str]:
    """The tokenroof modules `path` imports when it runs (not those under `if TYPE_CHECKING:`)."""
    tree = source_tree(path)
    typing_only = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for sub in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tokenroof."):
            found.add(node.module)
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("tokenroof.")}
    return found


def test_every_folder_is_a_known_layer() -> None:
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("__")}
    modules = {p.stem for p in SRC.glob("*.py") if not p.name.startswith("__")}
    assert folders | modules == set(RANKS)


def test_imports_go_down_the_layers() -> None:
    upward = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if len(rel.parts) == 1 and rel.name.startswith("__"):
            continue  # the package's own entry points: the lazy public API, `python -m tokenroof`
        mine = rel.parts[0].removesuffix(".py")
        for module in runtime_imports(path):
            theirs = layer_of(module)
            if RANKS[theirs] > RANKS[mine]:
                upward.append(f"{rel} imports {module} ({mine} → {theirs})")
    assert upward == []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def every_import(path: Path) -> set[str]:
    """The tokenroof modules `path` names in any import, at the top, in a function or under TYPE_CHECKING.
    `from package import submodule` names the submodule (Python runs the package's __init__ for any submodule,
    which is not a dependency of the importer's own)."""
    found = set()
    for node in ast.walk(source_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tokenroof"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(MODULES)
            attributes = [a for a in node.names if f"{node.module}.{a.name}" not in MODULES]
            found |= subs | ({node.module} if attributes else set())
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("tokenroof.")}
    return found & set(MODULES)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_or_inside_the_layers() -> None:
    """Every import counts here, the lazy ones in functions and the TYPE_CHECKING ones too: a cycle hidden in a
    function is still a cycle in the design. The package's own entry points (the lazy public API) are left out."""
    graph = {
        name: every_import(path) - {name}
        for name, path in MODULES.items()
        if name not in ("tokenroof", "tokenroof.__main__")
    }
    assert cycles(graph) == []
    layers: dict[str, set[str]] = {}
    for name, targets in graph.items():
        layers.setdefault(layer_of(name), set()).update(layer_of(t) for t in targets if layer_of(t) != layer_of(name))
    assert cycles(layers) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
