"""Find fields by what they mean in a decoded body: topic names, group ids, error codes.

The layout (codec/layout/) marks each field with the `Entity` the schemas give it
(entityType topicName, groupId, transactionalId; int16 fields named *error_code). For
each (message, version) the paths to such fields are worked out once from the layout,
and a collector walks a decoded body along those paths only: pulling the topics and
errors out of any message is one pass, with no per-API code to fall out of date.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from codec import accel
from codec.interpreter import ERRORS, GROUPS, TOPICS, TRANSACTIONAL_IDS
from codec.kinds import Entity
from codec.layout import Struct, layout

# What a collector gathers, by category (the skimmer's names).
ERROR_CODES = ERRORS
_CATEGORIES = {
    Entity.TOPIC: TOPICS,
    Entity.GROUP: GROUPS,
    Entity.TRANSACTIONAL_ID: TRANSACTIONAL_IDS,
    Entity.ERROR_CODE: ERRORS,
}

Collector = Callable[[dict[str, Any]], dict[str, list[Any]]]


@dataclass(frozen=True, slots=True)
class _Node:
    """One struct level of the paths worth walking."""

    leaves: tuple[tuple[str, str, bool], ...]  # (key, category, holds a list)
    children: tuple[tuple[str, bool, _Node], ...]  # (key, is an array, the struct below)


def _node(struct: Struct) -> _Node | None:
    """The paths below `struct`, its fields in schema order (the template's)."""
    fields = {f.name: f for f in struct.fields + struct.tagged}
    leaves, children = [], []
    for name in struct.template:
        field = fields[name]
        element = field.element or field
        if element.entity in _CATEGORIES and element.struct is None:
            leaves.append((name, _CATEGORIES[element.entity], field.element is not None))
        if element.struct is not None and (child := _node(element.struct)) is not None:
            children.append((name, field.element is not None, child))
    return _Node(tuple(leaves), tuple(children)) if leaves or children else None


def _walk(node: _Node, value: dict[str, Any], found: dict[str, list[Any]]) -> dict[str, list[Any]]:
    for name, category, is_list in node.leaves:
        item = value.get(name)
        if is_list:
            if item:
                found[category].extend(item)
        elif category == ERRORS:
            if item:
                found[category].append(item)
        elif item is not None:
            found[category].append(item)
    for name, is_array, child in node.children:
        item = value.get(name)
        if item:
            for inner in item if is_array else (item,):
                _walk(child, inner, found)
    return found


def _collect(node: _Node, body: dict[str, Any]) -> dict[str, list[Any]]:
    # The observer runs this on every frame it summarises, so it stays lean: a dict
    # comprehension for the distinct values cost more (bench/PROFILE.md, "Tried and not
    # kept").
    found = _walk(node, body, {TOPICS: [], GROUPS: [], TRANSACTIONAL_IDS: [], ERRORS: []})
    for category in _CATEGORY_ORDER:
        if len(found[category]) > 1:
            found[category] = list(dict.fromkeys(found[category]))
    return found


_CATEGORY_ORDER = (TOPICS, GROUPS, TRANSACTIONAL_IDS, ERRORS)


@cache
def collector(message_name: str, version: int, pure: bool = False) -> Collector:
    """A function: decoded body -> {category: distinct values in first-seen order}.

    Run in C (codec/_accel.c's Collector) when the codec runs C (accel.ACTIVE) and not
    `pure`: the same dict, fewer instructions (bench/PROFILE.md, "Produce and Fetch
    of a few records")."""
    try:
        root = _node(layout(message_name, version))
    except KeyError:
        root = None
    if root is None:
        return _empty
    return accel.c_collector(root) if accel.ACTIVE and not pure else partial(_collect, root)


def _distinct(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values)) if len(values) > 1 else values


def _empty(body: dict[str, Any]) -> dict[str, list[Any]]:
    return {TOPICS: [], GROUPS: [], TRANSACTIONAL_IDS: [], ERRORS: []}
