"""The modules of proxy/ import one way: config (and codec) at the bottom, the
command line at the top, and the rooms in between (exchange/, forward/, observe/,
gateway/, admin/, capture/) each depend only on what is below them. The modules of
pipeline/ too: no cycle, its command line (pipeline/cli.py) at the top. codec/ imports
one way too: no cycle, nothing above it, and no module takes another's private names.
Read from the source with `ast`, every import counts: module level, inside functions
(lazy), under TYPE_CHECKING and under `if __name__ == "__main__"`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support.paths import REPO as ROOT

PROXY = ROOT / "proxy"
CODEC = ROOT / "codec"
# The one private name a codec module may import: the C extension, behind codec/accel.py.
CODEC_PRIVATE_IMPORTS = {("accel", "_accel")}
# What the config package (proxy/config/) may import from proxy/: nothing but itself,
# it is the bottom layer. Its command (`python -m proxy.config`, __main__.py) is a top:
# it writes the whole file, every feature's sections included.
CONFIG_MAY_IMPORT: frozenset[str] = frozenset()
CONFIG_COMMAND = "config.__main__"
# The top-level modules every room may use: configuration, the seam between forwarding
# and observers (hooks), the metrics registry, TLS contexts, logging set-up.
BASE = frozenset({"config", "console", "hooks", "metrics", "tls", "signals"})
# Which rooms a room may import from, besides BASE and itself.
ROOMS_MAY_IMPORT: dict[str, frozenset[str]] = {
    "exchange": frozenset(),  # the sans-I/O Kafka exchange: below forwarding and captures
    "forward": frozenset({"exchange"}),
    "observe": frozenset(),
    "admin": frozenset(),
    "gateway": frozenset({"forward", "observe"}),
    "capture": frozenset({"exchange", "observe"}),
}


def module_name(path: Path, top: Path = PROXY) -> str:
    """'observe.chain' for proxy/observe/chain.py, 'config' for proxy/config/__init__.py."""
    parts = path.relative_to(top).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def proxy_imports(source: str, modules: set[str], package: str = "", top: str = "proxy"
                  ) -> set[str]:
    """The proxy/ (or `top`/) modules named by `source`'s import statements, wherever
    they are. `package` is the importing module's package inside it ('' for itself)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):  # relative: from . import x / from .x import y
            anchor = [top] + ([p for p in package.split(".") if p])
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != top:
                continue
            # the longest dotted prefix that is a module: proxy.observe.chain.X -> observe.chain
            for end in range(len(parts), 1, -1):
                if (candidate := ".".join(parts[1:end])) in modules:
                    found.add(candidate)
                    break
    return found


def import_graph(top: str = "proxy") -> dict[str, set[str]]:
    paths = sorted((ROOT / top).rglob("*.py"))
    modules = {module_name(path, ROOT / top) for path in paths} - {""}
    graph: dict[str, set[str]] = {}
    for path in paths:
        name = module_name(path, ROOT / top)
        if not name:
            continue
        package = name.rpartition(".")[0] if path.name != "__init__.py" else name
        imports = proxy_imports(path.read_text(encoding="utf-8"), modules, package, top)
        graph[name] = imports - {name}
    return graph


def room(module: str) -> str:
    return module.split(".")[0]


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
    modules = {"a", "b", "c", "d", "e", "room", "room.f", "room.g"}
    source = (
        "import proxy.a\nfrom proxy import b\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from proxy.c import X\n"
        "def f():\n    from proxy.d import y\nfrom .. import e\nimport codec.schema\n"
        "from proxy.room.f import Z\nfrom .g import W\n"
    )
    assert proxy_imports(source, modules, "room") == {"a", "b", "c", "d", "e", "room.f", "room.g"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_in_proxy() -> None:
    graph = import_graph()
    assert len(graph) > 20  # the walk found the package
    assert {"observe.observing_hooks", "forward.connection", "gateway.gateway", "admin.http"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_config_is_the_bottom_layer() -> None:
    graph = import_graph()
    package = {m for m in graph if room(m) == "config" and m != CONFIG_COMMAND}
    assert {"config", "config.language", "config.core", "config.file"} <= package
    wrong = {m: sorted(graph[m] - package - CONFIG_MAY_IMPORT) for m in package if graph[m] - package - CONFIG_MAY_IMPORT}
    assert not wrong, wrong
    assert not [m for m, imports in graph.items() if CONFIG_COMMAND in imports]


def test_base_modules_import_no_room() -> None:
    graph = import_graph()
    wrong = {
        m: sorted(i for i in imports if room(i) not in BASE)
        for m, imports in graph.items()
        if room(m) in BASE and m != CONFIG_COMMAND and any(room(i) not in BASE for i in imports)
    }
    assert not wrong, wrong


def test_each_room_imports_only_what_is_below_it() -> None:
    graph = import_graph()
    wrong: dict[str, list[str]] = {}
    for module, imports in graph.items():
        if room(module) not in ROOMS_MAY_IMPORT:
            continue
        allowed = BASE | {room(module)} | ROOMS_MAY_IMPORT[room(module)]
        if bad := sorted(i for i in imports if room(i) not in allowed):
            wrong[module] = bad
    assert not wrong, wrong


# The observing features, each a package of its own (a slice: its config section,
# metrics, per-connection state and link). The core never imports one, nor does one
# feature another: each registers with the core by one line in proxy/features.py, and
# only the composition builds them: features.py, the runner and the workers that start
# a proxy, and `kafkalens decode`'s replay of a capture (capture/decode.py), which runs
# the same links as a proxy with the shipped defaults.
# A feature is a package with its feature.py and config.py (ARCHITECTURE.md's "Add a
# feature"; observe/feature.py is the contract, not a feature): found, not listed, so a
# new feature is under the rules from its first commit.
FEATURE_PACKAGES = tuple(
    sorted(
        ".".join(path.parent.relative_to(PROXY).parts)
        for path in PROXY.rglob("feature.py")
        if (path.parent / "config.py").exists()
    )
)
COMPOSITION = frozenset({"features", "runner", "workers", "capture.decode"})


def feature_of(module: str) -> str | None:
    return next((f for f in FEATURE_PACKAGES if module == f or module.startswith(f + ".")), None)


def test_the_core_never_imports_a_feature() -> None:
    graph = import_graph()
    assert all(any(feature_of(m) == f for m in graph) for f in FEATURE_PACKAGES)
    wrong = {
        module: sorted(i for i in imports if feature_of(i) not in (None, feature_of(module)))
        for module, imports in graph.items()
        if module not in COMPOSITION
    }
    assert not {m: i for m, i in wrong.items() if i}, wrong


def test_the_command_line_is_the_top() -> None:
    graph = import_graph()
    assert not [module for module, imports in graph.items() if "cli" in imports]


def test_the_exchange_does_no_io() -> None:
    """proxy/exchange/ is sans I/O: frames in, events out; no sockets, no event loop,
    no logging (what it tells, its drivers say)."""
    io = {"asyncio", "uvloop", "socket", "ssl", "selectors", "select", "structlog", "logging", "threading"}
    for path in sorted((PROXY / "exchange").glob("*.py")):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & io, (path.name, sorted(imported & io))


def test_no_import_cycle_in_pipeline_and_its_command_line_is_the_top() -> None:
    graph = import_graph("pipeline")
    assert {"cli", "report", "watch", "ingest", "read", "fine"} <= set(graph)
    assert "report" in graph["cli"]  # the walk sees the command line's lazy imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])
    assert not [module for module, imports in graph.items() if "cli" in imports]


def test_no_import_cycle_in_codec() -> None:
    graph = import_graph("codec")
    assert {"messages", "layout", "interpreter", "accel", "stream", "records.batch"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def top_level_imports(source: str) -> set[str]:
    """The first part of every absolute import's module name in `source`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_codec_imports_nothing_above_it() -> None:
    above = {"proxy", "pipeline", "bench", "tests", "support"}
    wrong = {
        module_name(path, CODEC): sorted(top_level_imports(path.read_text(encoding="utf-8")) & above)
        for path in CODEC.rglob("*.py")
    }
    assert not {module: names for module, names in wrong.items() if names}


def codec_private_uses(source: str, importer: str) -> set[tuple[str, str]]:
    """(importer, name) of each private name of another codec module that `source`
    imports (`from codec.x import _y`, `import codec._x`) or reaches into (`x._y` with
    `x` a codec module it imported)."""
    found: set[tuple[str, str]] = set()
    modules: set[str] = set()  # local names bound to codec modules
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "codec":
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.add((importer, alias.name))
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "codec":
                    found |= {(importer, part) for part in parts[1:] if part.startswith("_")}
                    modules.add(alias.asname or parts[0])
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if node.value.id in modules and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.add((importer, node.attr))
    return found


def test_the_checker_sees_private_names() -> None:
    source = "from codec.a import _b, c\nimport codec._d\nfrom codec import e\nx = e._f\ny = c.g\n"
    assert codec_private_uses(source, "m") == {("m", "_b"), ("m", "_d"), ("m", "_f")}


def test_no_codec_module_takes_another_ones_private_names() -> None:
    found: set[tuple[str, str]] = set()
    for path in CODEC.rglob("*.py"):
        found |= codec_private_uses(path.read_text(encoding="utf-8"), module_name(path, CODEC))
    assert found <= CODEC_PRIVATE_IMPORTS, sorted(found - CODEC_PRIVATE_IMPORTS)


def imported_test_modules(source: str) -> set[str]:
    """The test modules (test_*.py, as `test_x` or `tests.test_x`) that `source` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            module = parts[1] if parts[0] == "tests" and len(parts) > 1 else parts[0]
            if module.startswith("test_"):
                found.add(module)
    return found


def test_the_checker_sees_test_modules_imported() -> None:
    source = "from test_a import x\nimport tests.test_b\nfrom tests.test_c import y\nfrom support import z\n"
    assert imported_test_modules(source) == {"test_a", "test_b", "test_c"}


# The tests' rooms mirror the code's (ARCHITECTURE.md, "The rooms"); tests/support holds
# every helper, tests/data the golden frames, tests/peers the peer programs.
TEST_ROOMS = frozenset(
    {"codec", "proxy", "observe", "gateway", "capture", "pipeline", "interop", "deploy", "project"}
)
TESTS = ROOT / "tests"
NOT_ROOMS = frozenset({"support", "data", "peers", "__pycache__"})


def python_files_of_tests() -> list[Path]:
    """Every Python file of tests/ but the peer programs'."""
    return sorted(p for p in TESTS.rglob("*.py") if "peers" not in p.relative_to(TESTS).parts)


def test_every_test_module_is_in_a_room_and_helpers_only_in_support() -> None:
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert folders - NOT_ROOMS == TEST_ROOMS, sorted(folders ^ (TEST_ROOMS | NOT_ROOMS))
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["conftest.py"]
    misplaced = [
        str(p.relative_to(TESTS))
        for room in TEST_ROOMS
        for p in (TESTS / room).rglob("*.py")
        if not p.name.startswith("test_")
    ]
    assert not misplaced, f"helpers belong in tests/support/: {misplaced}"


def test_no_test_module_imports_another() -> None:
    """Helpers live in tests/support/; a test module is never another's library (its
    fixtures and checks would run, or break, with the module that imports them)."""
    found = {
        str(path.relative_to(TESTS)): sorted(imported_test_modules(path.read_text(encoding="utf-8")))
        for path in python_files_of_tests()
    }
    assert not {name: imported for name, imported in found.items() if imported}


def test_no_test_imports_bench() -> None:
    """bench/ may use the tests' helpers, never the other way round: what a test needs
    from a benchmark's module belongs in tests/support (bench's own checks live in
    bench/checks)."""
    found = {
        str(path.relative_to(TESTS)): "bench"
        for path in python_files_of_tests()
        if "bench" in top_level_imports(path.read_text(encoding="utf-8"))
    }
    assert not found, found


def test_no_test_finds_the_repository_from_its_own_path() -> None:
    """A test's folder is a room, one below tests/: the repository's root is
    support.paths.REPO, never the grandparent of its own file (which is tests/ there)."""
    climbing = re.compile(r"__file__\)(\.resolve\(\))?(\.parent){2}\b|__file__\)(\.resolve\(\))?\.parents\[1\]")
    found = [
        str(path.relative_to(TESTS))
        for room in TEST_ROOMS
        for path in (TESTS / room).rglob("test_*.py")
        if climbing.search(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"use support.paths.REPO in {found}"
