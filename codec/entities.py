"""Find fields by what they mean, from the schemas: topic names, group ids, error codes.

The schemas tag fields with an `entityType` (topicName, groupId, transactionalId...).
For each (message, version) we compile once a function that walks a decoded body
along exactly the paths where such fields sit and collects their values, so pulling
the topics and errors out of any message is one straight pass with no per-API code
to fall out of date.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from codec.schema import Field, message

# What a compiled collector gathers, by category.
TOPICS, GROUPS, TRANSACTIONAL_IDS, ERROR_CODES = "topics", "groups", "transactional_ids", "errors"
_ENTITY_CATEGORIES = {
    "topicName": TOPICS,
    "groupId": GROUPS,
    "transactionalId": TRANSACTIONAL_IDS,
}


def category(field: Field) -> str | None:
    if field.entity_type in _ENTITY_CATEGORIES:
        return _ENTITY_CATEGORIES[field.entity_type]
    if field.type == "int16" and field.name.endswith("error_code"):
        return ERROR_CODES
    return None


@dataclass
class _Node:
    """One struct level of the paths worth walking."""

    leaves: list[tuple[str, str, bool]] = field(default_factory=list)  # (name, category, is_list)
    children: dict[str, tuple[bool, _Node]] = field(default_factory=dict)  # name -> (is_array, node)


def _build(fields: tuple[Field, ...], version: int) -> _Node | None:
    node = _Node()
    for f in fields:
        if not f.present_in(version):
            continue
        kind = category(f)
        if kind is not None and not f.is_struct:
            node.leaves.append((f.name, kind, f.is_array))
        if f.children:
            child = _build(f.children, version)
            if child is not None:
                node.children[f.name] = (f.is_array, child)
    return node if node.leaves or node.children else None


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def var(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def emit(self, node: _Node, source: str, indent: int) -> None:
        pad = "    " * indent
        for name, category, is_list in node.leaves:
            value = self.var()
            self.lines.append(f"{pad}{value} = {source}.get({name!r})")
            if is_list:
                self.lines.append(f"{pad}if {value}: {category}.extend({value})")
            elif category == ERROR_CODES:
                self.lines.append(f"{pad}if {value}: {category}.append({value})")
            else:
                self.lines.append(f"{pad}if {value} is not None: {category}.append({value})")
        for name, (is_array, child) in node.children.items():
            value = self.var()
            self.lines.append(f"{pad}{value} = {source}.get({name!r})")
            self.lines.append(f"{pad}if {value}:")
            if is_array:
                item = self.var()
                self.lines.append(f"{pad}    for {item} in {value}:")
                self.emit(child, item, indent + 2)
            else:
                self.emit(child, value, indent + 1)


Collector = Callable[[dict[str, Any]], dict[str, list[Any]]]


@cache
def collector(message_name: str, version: int) -> Collector:
    """A function: decoded body -> {category: distinct values in first-seen order}."""
    definition = message(message_name).definition(version)
    root = _build(definition.fields, version) if definition else None
    if root is None:
        return _empty
    writer = _Writer()
    writer.emit(root, "d", 1)
    categories = (TOPICS, GROUPS, TRANSACTIONAL_IDS, ERROR_CODES)
    source = "\n".join(
        [
            "def collect(d):",
            *(f"    {c} = []" for c in categories),
            *writer.lines,
            "    return {" + ", ".join(f"{c!r}: _distinct({c})" for c in categories) + "}",
        ]
    )
    namespace: dict[str, Any] = {"_distinct": _distinct}
    exec(source, namespace)  # noqa: S102 - our own generated source
    compiled: Collector = namespace["collect"]
    return compiled


def _distinct(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values)) if len(values) > 1 else values


def _empty(body: dict[str, Any]) -> dict[str, list[Any]]:
    return {TOPICS: [], GROUPS: [], TRANSACTIONAL_IDS: [], ERROR_CODES: []}
