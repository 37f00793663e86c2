"""Find fields by what they mean, from the schemas: topic names, group ids, error codes.

The schemas tag fields with an `entityType` (topicName, groupId, transactionalId...).
For each (message, version) we work out once the paths to such fields, so pulling the
topics out of any message is a short walk, with no per-API code to fall out of date.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from codec.schema import Field, message

Path = tuple[str, ...]


def _paths(fields: tuple[Field, ...], version: int, want: Any, prefix: Path = ()) -> Iterator[Path]:
    for field in fields:
        if not field.present_in(version):
            continue
        path = (*prefix, field.name)
        if want(field):
            yield path
        if field.children:
            yield from _paths(field.children, version, want, path)


@cache
def entity_paths(message_name: str, version: int, entity_type: str) -> tuple[Path, ...]:
    definition = message(message_name).definition(version)
    if definition is None:
        return ()
    return tuple(_paths(definition.fields, version, lambda f: f.entity_type == entity_type))


@cache
def error_code_paths(message_name: str, version: int) -> tuple[Path, ...]:
    definition = message(message_name).definition(version)
    if definition is None:
        return ()
    return tuple(
        _paths(definition.fields, version, lambda f: f.type == "int16" and f.name.endswith("error_code"))
    )


def values_at(value: Any, path: Path) -> Iterator[Any]:
    """Every value at `path`, descending into lists along the way."""
    if isinstance(value, list):
        for item in value:
            yield from values_at(item, path)
        return
    if not path:
        if isinstance(value, list):
            yield from value
        else:
            yield value
        return
    if isinstance(value, dict):
        child = value.get(path[0])
        if child is not None:
            yield from values_at(child, path[1:])


def collect(body: dict[str, Any], paths: tuple[Path, ...]) -> list[Any]:
    """Distinct non-null values at any of `paths`, in first-seen order."""
    seen: dict[Any, None] = {}
    for path in paths:
        for item in values_at(body, path):
            if item is not None:
                seen.setdefault(item, None)
    return list(seen)
