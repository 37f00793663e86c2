"""The modules of proxy/ import one way: config (and codec) at the bottom, the
command line at the top. Read from the source with `ast`, every import counts:
module level, inside functions (lazy) and under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

PROXY = Path(__file__).resolve().parent.parent / "proxy"
# What config.py may import from proxy/: nothing, it is the bottom layer.
CONFIG_MAY_IMPORT: frozenset[str] = frozenset()


def proxy_imports(source: str, modules: set[str]) -> set[str]:
    """The proxy/ modules named by `source`'s import statements, wherever they are."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):  # relative: from . import x / from .x import y
            base = f"proxy.{node.module}" if node.module else "proxy"
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) >= 2 and parts[0] == "proxy" and parts[1] in modules:
                found.add(parts[1])
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {path.stem for path in PROXY.glob("*.py")}
    return {
        path.stem: proxy_imports(path.read_text(encoding="utf-8"), modules) - {path.stem}
        for path in PROXY.glob("*.py")
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_checker_sees_every_kind_of_import() -> None:
    modules = {"a", "b", "c", "d", "e"}
    source = (
        "import proxy.a\nfrom proxy import b\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from proxy.c import X\n"
        "def f():\n    from proxy.d import y\nfrom . import e\nimport codec.schema\n"
    )
    assert proxy_imports(source, modules) == modules
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_in_proxy() -> None:
    graph = import_graph()
    assert len(graph) > 20  # the walk found the package
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_config_is_the_bottom_layer() -> None:
    assert import_graph()["config"] <= CONFIG_MAY_IMPORT


def test_the_command_line_is_the_top() -> None:
    graph = import_graph()
    assert not [module for module, imports in graph.items() if "cli" in imports]
