"""The folders are the architecture (docs/GUIDE.md#layout): at run time a layer imports only the layers below it
(type annotations aside), so specs never need the fit, nor the fit the scheduler, nor anything the front ends."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenroof"
# lowest first; one rank may import its own and any lower rank
RANKS = {
    "errors": 0,
    "units": 0,
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
    tree = ast.parse(path.read_text(encoding="utf-8"))
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
