"""Every field name the proxy reads from a decoded message is one the protocol's schemas
define: a read that names a field no schema has (a typo, a field renamed upstream)
fails here instead of quietly reading None on every request.

Read from the source with `ast`, in the rooms that read decoded messages
(proxy/observe, proxy/capture, proxy/gateway): each `x["name"]`, `x.get("name")`,
`"name" in x`, a name a loop over a tuple of names reads, and a name passed to a
function of the same module that reads its parameter as a key.

- Where the code says the dict is a message (`m.body`, `m.header`, a parameter named
  `body` or `header`, and what is read or iterated from those, function by function),
  the name must be a field of a schema: of that api's request or response where the
  function is registered for apis (a module-level table of api key -> function, as
  summary.py's), else of any message.
- Elsewhere the dict may be the proxy's own (a log line's fields, a skim's result, a
  metrics label set), so the name may also be one the proxy or the codec writes
  somewhere (a string that is not only ever read), or a Kafka error's name.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from support.paths import REPO

from codec.error_codes import ERROR_CODES
from codec.generated.schemas import MESSAGES
from codec.schema import Field, api_messages, message

SCANNED = ("proxy/observe", "proxy/capture", "proxy/gateway")
WRITERS = ("proxy", "codec")  # where the proxy's own keys are written
MESSAGE_ATTRIBUTES = {"body", "header"}
MESSAGE_PARAMETERS = {"body", "header"}
READ_METHODS = {"get", "pop", "setdefault"}


@dataclass(frozen=True)
class Read:
    key: str
    line: int
    function: str  # the innermost function's name ("" at module level)
    strict: bool  # the dict read is a decoded message, as far as the code says


# --- the schemas ---------------------------------------------------------------------


def _names(fields: tuple[Field, ...], into: set[str]) -> set[str]:
    for field in fields:
        into.add(field.name)
        if field.children:
            _names(field.children, into)
    return into


@cache
def fields_of(name: str) -> frozenset[str]:
    """Every field name of the message `name`, at any depth and any version."""
    msg, found = message(name), set()
    for version in msg.versions:
        if (definition := msg.definition(version)) is not None:
            _names(definition.fields, found)
    return frozenset(found)


@cache
def every_field() -> frozenset[str]:
    return frozenset().union(*(fields_of(name) for name in MESSAGES))


def fields_of_api(api_key: int, kind: str | None) -> frozenset[str]:
    request, response = api_messages()[api_key]
    if kind == "request":
        return fields_of(request.name)
    if kind == "response":
        return fields_of(response.name)
    return fields_of(request.name) | fields_of(response.name)


# --- the reads -----------------------------------------------------------------------


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Reads(ast.NodeVisitor):
    """The string keys a module reads from dicts, and whether each dict is a message."""

    def __init__(self, keyed_params: dict[str, set[int]]) -> None:
        self.found: list[Read] = []
        self.keyed_params = keyed_params  # function -> positions of parameters read as keys
        self.function = [""]
        self.messages: list[set[str]] = [set()]  # local names bound to message parts
        self.loop_keys: list[dict[str, tuple[str, ...]]] = [{}]  # loop variable -> names

    def is_message(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in MESSAGE_ATTRIBUTES
        if isinstance(node, ast.Name):
            return node.id in self.messages[-1]
        if isinstance(node, ast.Subscript):
            return self.is_message(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr in READ_METHODS and self.is_message(node.func.value)
        if isinstance(node, ast.BoolOp):
            return any(self.is_message(v) for v in node.values)
        if isinstance(node, (ast.List, ast.Tuple)):
            return any(self.is_message(e.value if isinstance(e, ast.Starred) else e) for e in node.elts)
        return False

    def add(self, key: str, node: ast.AST, dict_node: ast.AST) -> None:
        self.found.append(Read(key, getattr(node, "lineno", 0), self.function[-1], self.is_message(dict_node)))

    def key_names(self, node: ast.AST) -> tuple[str, ...]:
        if (key := _string(node)) is not None:
            return (key,)
        if isinstance(node, ast.Name):
            return self.loop_keys[-1].get(node.id, ())
        return ()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        self.function.append(node.name)
        self.messages.append(set(self.messages[-1]) | (params & MESSAGE_PARAMETERS))
        self.loop_keys.append(dict(self.loop_keys[-1]))
        self.generic_visit(node)
        self.function.pop(), self.messages.pop(), self.loop_keys.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def bind(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name) and self.is_message(value):
            self.messages[-1].add(target.id)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.bind(target, node.value)
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.bind(node.target, node.value)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.bind(node.target, node.value)

    def loop(self, target: ast.AST, iterable: ast.AST) -> None:
        self.visit(iterable)
        self.bind(target, iterable)
        if isinstance(target, ast.Name) and isinstance(iterable, (ast.Tuple, ast.List)):
            names = tuple(k for e in iterable.elts if (k := _string(e)) is not None)
            if names and len(names) == len(iterable.elts):
                self.loop_keys[-1][target.id] = names

    def visit_For(self, node: ast.For) -> None:
        self.loop(node.target, node.iter)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.loop(node.target, node.iter)
        for condition in node.ifs:
            self.visit(condition)

    def _comprehension(self, node: ast.AST, parts: list[ast.AST]) -> None:
        for generator in node.generators:  # type: ignore[attr-defined]
            self.visit(generator)
        for part in parts:
            self.visit(part)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp  # type: ignore[assignment]

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load):
            for key in self.key_names(node.slice):
                self.add(key, node, node.value)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            for key in self.key_names(node.left):
                if key.isidentifier():  # not a substring test ("limit" in str(exc))
                    self.add(key, node, node.comparators[0])
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in READ_METHODS and node.args:
            for key in self.key_names(node.args[0]):
                self.add(key, node, func.value)
        if isinstance(func, ast.Name) and func.id in self.keyed_params:
            strict = any(self.is_message(a) for a in node.args)
            for position in self.keyed_params[func.id]:
                if position < len(node.args) and (key := _string(node.args[position])) is not None:
                    self.found.append(Read(key, node.lineno, self.function[-1], strict))
        self.generic_visit(node)


def _keyed_params(tree: ast.Module) -> dict[str, set[int]]:
    """The module's functions whose parameters are read as dict keys: `f(x, key)` with
    `x[key]` or `x.get(key)` in its body, by the parameter's position."""
    found: dict[str, set[int]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
        used: set[str] = set()
        for inner in ast.walk(node):
            if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Name):
                used.add(inner.slice.id)
            elif (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                  and inner.func.attr in READ_METHODS and inner.args and isinstance(inner.args[0], ast.Name)):
                used.add(inner.args[0].id)
        if positions := {i for i, p in enumerate(params) if p in used}:
            found[node.name] = positions
    return found


def reads(source: str) -> list[Read]:
    tree = ast.parse(source)
    visitor = _Reads(_keyed_params(tree))
    visitor.visit(tree)
    return visitor.found


def written(source: str) -> set[str]:
    """Strings a module uses other than as a key it reads: dict keys it writes, names in
    tuples, values it passes or assigns (the proxy's own keys come from these)."""
    tree = ast.parse(source)
    read_nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            read_nodes.add(id(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in READ_METHODS and node.args:
            read_nodes.add(id(node.args[0]))
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            read_nodes.add(id(node.left))
    found = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in read_nodes
    }
    for node in ast.walk(tree):  # d.update(key=...), dict(key=...)
        if isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "update")
            or (isinstance(node.func, ast.Name) and node.func.id == "dict")
        ):
            found |= {k.arg for k in node.keywords if k.arg}
    return found


def scanned(overrides: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """(path, source) of each module of the scanned rooms; `overrides` replaces a
    module's source (the tests' deliberate mistakes)."""
    for room in SCANNED:
        for path in sorted((REPO / room).rglob("*.py")):
            name = str(path.relative_to(REPO))
            yield name, (overrides or {}).get(name) or path.read_text(encoding="utf-8")


@cache
def own_keys() -> frozenset[str]:
    found: set[str] = set()
    for room in WRITERS:
        for path in (REPO / room).rglob("*.py"):
            if "generated" not in path.parts:
                found |= written(path.read_text(encoding="utf-8"))
    return frozenset(found | set(ERROR_CODES.values()))


# --- the apis a function is registered for --------------------------------------------


def _calls(path: str) -> dict[str, set[str]]:
    """The module-level functions of a module, and the module's functions each calls."""
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {
        name: {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call)
               and isinstance(c.func, ast.Name) and c.func.id in functions}
        for name, node in functions.items()
    }


def registered() -> dict[tuple[str, str], tuple[set[int], str | None]]:
    """(module file, function name) -> (the api keys it serves, "request", "response" or
    None), from every module-level table of api key -> function in the scanned rooms,
    and the module's functions those call (they serve the same apis); the kind from the
    registered function's first parameter's annotation."""
    known = set(api_messages())
    found: dict[tuple[str, str], tuple[set[int], str | None]] = {}
    direct: set[tuple[str, str]] = set()  # in a table themselves
    for room in SCANNED:
        for path in sorted((REPO / room).rglob("*.py")):
            module = importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts))
            for table in vars(module).values():
                if not (isinstance(table, dict) and table and set(table) <= known
                        and all(inspect.isfunction(f) for f in table.values())):
                    continue
                for api_key, function in table.items():
                    first = next(iter(inspect.signature(function).parameters.values()), None)
                    annotation = str(first.annotation) if first is not None else ""
                    kind = "request" if "Request" in annotation else "response" if "Response" in annotation else None
                    where = (str(path.relative_to(REPO)), function.__name__)
                    direct.add(where)
                    apis, _ = found.get(where, (set(), kind))
                    found[where] = (apis | {api_key}, kind)
    for path in {p for p, _ in found}:  # what a registered function calls serves its apis
        calls = _calls(path)
        changed = True
        while changed:
            changed = False
            for (p, name), (apis, kind) in list(found.items()):
                if p != path:
                    continue
                for callee in calls.get(name, ()):
                    have, have_kind = found.get((path, callee), (set(), kind))
                    merged = (have | apis, have_kind if have_kind == kind else None)
                    if merged != (have, have_kind) or (path, callee) not in found:
                        found[(path, callee)] = merged
                        changed = changed or merged[0] != have
        # A helper that code serving any api calls (request_fields calls
        # _group_member_fields for every request) serves any api: no table says which.
        # (A function in a table that such code calls directly, request_fields calling
        # _produce_request for a Produce, serves the table's apis.)
        unrestricted = [name for name in calls if (path, name) not in found]
        while unrestricted:
            for callee in calls.get(unrestricted.pop(), ()):
                if (path, callee) not in direct and found.pop((path, callee), None) is not None:
                    unrestricted.append(callee)
    return found


def name_tables() -> Iterator[tuple[str, int, str]]:
    """(module, api key, name) of every module-level table of api key -> field names in
    the scanned rooms (summary.py's _CONFIG_NAME_PATHS: where each api keeps its config
    names)."""
    known = set(api_messages())
    for room in SCANNED:
        for path in sorted((REPO / room).rglob("*.py")):
            module = importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts))
            for table in vars(module).values():
                if (isinstance(table, dict) and table and set(table) <= known
                        and all(isinstance(v, tuple) and v and all(isinstance(n, str) for n in v)
                                for v in table.values())):
                    for api_key, names in table.items():
                        for name in names:
                            yield str(path.relative_to(REPO)), api_key, name


def problems(overrides: dict[str, str] | None = None) -> tuple[list[str], int]:
    """What reads name no field, and how many reads were checked."""
    tables = registered()
    wrong: list[str] = []
    count = 0
    for path, source in scanned(overrides):
        for read in reads(source):
            count += 1
            apis, kind = tables.get((path, read.function), (set(), None))
            if read.strict and apis:
                allowed = frozenset().union(*(fields_of_api(a, kind) for a in apis))
                why = f"no field of {sorted(apis)} {kind or 'request or response'}"
            elif read.strict:
                allowed, why = every_field(), "no field of any message"
            else:
                allowed, why = every_field() | own_keys(), "no field, nor a key the proxy writes"
            if read.key not in allowed:
                wrong.append(f"{path}:{read.line} {read.function}: {read.key!r}: {why}")
    for path, api_key, name in name_tables():
        count += 1
        if name not in fields_of_api(api_key, None):
            wrong.append(f"{path}: {name!r} in a table of api {api_key}'s fields: no field of it")
    return wrong, count


# --- the tests -----------------------------------------------------------------------


def test_every_field_name_read_from_a_message_is_in_the_schemas() -> None:
    wrong, count = problems()
    assert count >= 190, count  # the walk found the reads
    assert not wrong, "\n".join(wrong)


def test_the_registered_functions_are_found_and_typed() -> None:
    tables = registered()
    summary = "proxy/observe/summary.py"
    assert tables[(summary, "_fetch_request")] == ({1, 78}, "request")  # Fetch, ShareFetch
    assert tables[(summary, "_metadata_response")] == ({3}, "response")
    assert (summary, 19, "configs") in set(name_tables())  # CreateTopics' config names


def test_the_checker_sees_what_a_read_names() -> None:
    source = textwrap.dedent('''
        def f(request, out, key):
            body = request.body
            out["x"] = body.get("max_wait_ms")
            for topic in body.get("topics") or ():
                for p in topic["partitions"]:
                    p.get("partiton_index")
            for name in ("client_software_name", "client_software_nmae"):
                request.body.get(name)
            if "topics" in out:
                return out.get("record_stats")
            g(body, "partition_data")

        def g(body, key):
            return body[key]
    ''')
    found = {(r.key, r.strict) for r in reads(source)}
    assert {("max_wait_ms", True), ("topics", True), ("partitions", True),
            ("partiton_index", True), ("client_software_name", True),
            ("client_software_nmae", True), ("record_stats", False),
            ("topics", False), ("partition_data", True)} <= found
    assert "x" in written(source) and "partiton_index" not in written(source)


def test_a_misspelt_field_and_another_messages_field_are_found() -> None:
    """The check run with one mistake made in the proxy's source: each is named."""
    summary, tracker = "proxy/observe/summary.py", "proxy/observe/lag/tracker.py"
    sources = {path: (REPO / path).read_text(encoding="utf-8") for path in (summary, tracker)}
    mistakes = {
        # a typo in a Fetch request's field
        (summary, '.get("max_wait_ms")', '.get("max_wait_msec")'):
            "proxy/observe/summary.py:{} _fetch_request: 'max_wait_msec': no field of [1, 78] request",
        # a field of Produce's request read from a Fetch request
        (summary, '.get("max_wait_ms")', '.get("acks")'):
            "proxy/observe/summary.py:{} _fetch_request: 'acks': no field of [1, 78] request",
        # a typo where the code does not say the dict is a message
        (tracker, 'partition.get("partition_index", -1)', 'partition.get("partiton_index", -1)'):
            "proxy/observe/lag/tracker.py:{} _fetch_walk: 'partiton_index': no field of any message",
    }
    for (path, right, wrong_read), expected in mistakes.items():
        assert right in sources[path], right
        changed = sources[path].replace(right, wrong_read, 1)
        line = sources[path][: sources[path].index(right)].count("\n") + 1
        assert problems({path: changed})[0] == [expected.format(line)]
