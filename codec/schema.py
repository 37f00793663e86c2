"""Typed access to the generated schema facts (codec/generated/schemas.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any
from uuid import UUID

from codec.generated.schemas import MESSAGES

VersionRange = tuple[int, int] | None

ZERO_UUID = UUID(int=0)


def in_range(version: int, versions: VersionRange) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    versions: VersionRange
    nullable_versions: VersionRange
    tag: int | None
    default: Any
    flexible_override: Any
    map_key: bool
    entity_type: str | None
    children: tuple[Field, ...] | None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.children is not None

    def present_in(self, version: int) -> bool:
        return in_range(version, self.versions)

    def nullable_in(self, version: int) -> bool:
        return in_range(version, self.nullable_versions)

    def flexible_in(self, version: int, message_flexible: bool) -> bool:
        if self.flexible_override is ...:
            return message_flexible
        return in_range(version, self.flexible_override)

    def default_value(self) -> Any:
        """The value a field has when absent (FORMAT.md's defaults and custom defaults)."""
        if self.default is not ...:
            if self.default is None:
                return None
            if self.is_array or self.is_struct:
                return [] if self.is_array else None
            return self.default
        if self.is_array:
            return []
        if self.is_struct:
            return {f.name: f.default_value() for f in self.children or ()}
        return _TYPE_DEFAULTS.get(self.type)


_TYPE_DEFAULTS: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "uuid": ZERO_UUID,
    "bytes": b"",
    "records": None,
}


def _field(facts: tuple[Any, ...]) -> Field:
    name, type_name, versions, nullable, tag, default, flexible, map_key, entity, children = facts
    kids = tuple(_field(c) for c in children) if children is not None else None
    return Field(name, type_name, versions, nullable, tag, default, flexible, map_key, entity, kids)


@dataclass(frozen=True, slots=True)
class Definition:
    valid: tuple[int, int]
    flexible: VersionRange
    header_versions: tuple[tuple[int, int, int], ...] | None
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return in_range(version, self.flexible)

    def header_version(self, version: int) -> int | None:
        for low, high, header in self.header_versions or ():
            if low <= version <= high:
                return header
        return None


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    kind: str
    api_key: int | None
    versions: dict[int, Definition]

    @property
    def min_version(self) -> int:
        return min(self.versions)

    @property
    def max_version(self) -> int:
        return max(self.versions)

    def definition(self, version: int) -> Definition | None:
        return self.versions.get(version)


@cache
def message(name: str) -> Message:
    raw = MESSAGES[name]
    definitions = [
        Definition(d["valid"], d["flexible"], d["header_versions"], tuple(_field(f) for f in d["fields"]))
        for d in raw["definitions"]
    ]
    versions = {v: definitions[i] for v, i in raw["versions"].items()}
    return Message(name, raw["kind"], raw["api_key"], versions)


@cache
def api_messages() -> dict[int, tuple[Message, Message]]:
    """api_key -> (request message, response message)."""
    table: dict[int, tuple[Message, Message]] = {}
    for name, raw in MESSAGES.items():
        if raw["kind"] == "request":
            stem = name[: -len("Request")]
            table[raw["api_key"]] = (message(name), message(stem + "Response"))
    return dict(sorted(table.items()))


@cache
def api_names() -> dict[int, str]:
    """api_key -> API name as Kafka spells it (e.g. 0 -> 'Produce')."""
    return {key: req.name[: -len("Request")] for key, (req, _) in api_messages().items()}


def data_message_names() -> list[str]:
    """Embedded (non-RPC) messages such as ConsumerProtocolSubscription."""
    return sorted(n for n, raw in MESSAGES.items() if raw["kind"] == "data")
