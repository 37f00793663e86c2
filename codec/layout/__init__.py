"""The wire layout of a message version: the one description every reader walks.

`layout(name, version)` lowers the schema facts of one message version (codec/schema.py,
generated from Kafka's definitions) into a `Struct`, once. Everything about a field's
wire form is decided here, in `_Lowering`, and nowhere else: its `Kind`, the `Framing`
of its length or count, whether it may be null, which bounds check covers it, the
fewest bytes an array element takes, its tag and default, what the skimmer keeps of
it. Two interpreters run the description: the C one (codec/_accel.c, for speed) and the
Python one (codec/interpreter.py, the fallback and the reference the C is tested
against); the encoder, the skimmer, the streaming decoder (codec/stream.py) and the
entity collector (codec/entities.py) walk it too. See one:

    python -m codec.layout Produce 11 request
    python -m codec.layout FetchResponse 17
    python -m codec.layout RequestHeader 2

(codec/layout/__main__.py prints them.)

Picking: `picked(name, version, paths)` is the same layout with a few fields marked for
the skimmer to keep as columns of rows (`Field.pick`, `Struct.emits`, `Struct.columns`):
a narrow read of an answer (a Produce answer's base offsets for lag) in the same walk
and with the same checks as a skim, without a dict per struct (codec/skim.py's
`Picks`).

Bounds checks: a run of fixed-size fields is checked once, by its first field (`check`:
the run's bytes); a varint-framed field after a run or after a string, bytes or
fixed-size array has its first byte covered by that check too (`check` + 1, `peek`).
These decide which error a truncated frame raises, and where, so both interpreters
follow them exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from codec import schema
from codec.absent import ReadOnlyDict, shared_default
from codec.kinds import FIXED_SIZES, Entity, Framing, Kind

_KINDS = {
    "int8": Kind.INT8,
    "int16": Kind.INT16,
    "uint16": Kind.UINT16,
    "int32": Kind.INT32,
    "uint32": Kind.UINT32,
    "int64": Kind.INT64,
    "float64": Kind.FLOAT64,
    "bool": Kind.BOOL,
    "uuid": Kind.UUID,
    "string": Kind.STRING,
    "bytes": Kind.BYTES,
    "records": Kind.RECORDS,
}
_ENTITIES = {"topicName": Entity.TOPIC, "groupId": Entity.GROUP, "transactionalId": Entity.TRANSACTIONAL_ID}
# The fewest bytes a framing takes: what a hostile count is checked against.
_FRAMING_SIZES = {Framing.NONE: 0, Framing.INT16: 2, Framing.INT32: 4, Framing.COMPACT: 1, Framing.MARKER: 1}


@dataclass(frozen=True, slots=True, eq=False)
class Field:
    """One field of a struct, or the element of an array (then `name` is "")."""

    name: str  # its key in the decoded dict
    kind: Kind
    framing: Framing = Framing.NONE
    nullable: bool = False
    size: int = 0  # fixed-size kinds and UUID: the bytes the value takes
    check: int = 0  # fixed-size kinds and UUID: the bytes the bounds check before the value
    # covers (0: the check of an earlier field in its run covered it)
    peek: bool = False  # STRING, BYTES, RECORDS, ARRAY of a fixed-size kind: the check of
    # its end covers the byte after it too, the first of a varint that follows
    tag: int | None = None  # tagged fields: the tag
    default: Any = None  # the value it takes when absent (encoder: when missing)
    element: Field | None = None  # ARRAY: its element
    struct: Struct | None = None  # STRUCT: its fields
    min_size: int = 0  # ARRAY: the fewest bytes one element takes, which bounds its count
    entity: Entity = Entity.NONE  # what the skimmer keeps
    pick: int = 0  # a picked layout (`picked`): its column + 1 in each row the skimmer makes


@dataclass(frozen=True, slots=True, eq=False)
class Struct:
    """A struct at one version: a message, or a struct inside one."""

    name: str  # the schema's name of the struct (e.g. "TopicProduceData")
    flexible: bool  # its version is flexible: it ends with a tagged-field section
    fields: tuple[Field, ...]  # the regular fields, in wire order
    tagged: tuple[Field, ...]  # the tagged fields, by tag
    # The decoded dict's keys in schema order, holding the tagged fields' immutable or
    # shared (read-only) defaults and None elsewhere: a decoded dict starts as its copy.
    # Never changed.
    template: dict[str, Any]
    fresh: tuple[Field, ...]  # tagged fields whose default is a new list or dict per decode
    min_size: int  # the fewest bytes it takes
    # The skimmer's (topic id, topic name) pair: the names of the TOPIC_ID field and the
    # TOPIC field it keeps together.
    topic_pair: tuple[str, str] | None
    # A picked layout (`picked`): the message's struct names its columns (the paths,
    # dotted); the innermost struct of the paths `emits` a row after each of its elements.
    columns: tuple[str, ...] = ()
    emits: bool = False


class _Lowering:
    """The layout of the structs of one message version."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible

    def struct(self, name: str, fields: tuple[schema.Field, ...]) -> Struct:
        present = [f for f in fields if f.present_in(self.version)]
        if len({f.name for f in present}) != len(present):
            raise ValueError(f"{name}: two fields of one name")
        if not self.flexible and any(f.tag is not None for f in present):
            raise ValueError(f"{name}: tagged fields in a version that is not flexible")
        topics = [f.name for f in present if _entity(f) is Entity.TOPIC and not f.is_array]
        has_id = any(f.name == "topic_id" and f.type == "uuid" and not f.is_array for f in present)
        if has_id and len(topics) > 1:
            raise ValueError(f"{name}: a topic id beside two topic names: which to pair?")
        pair = ("topic_id", topics[0]) if has_id and topics else None
        pairs = pair is not None
        regular = [f for f in present if f.tag is None]
        lowered: list[Field] = []
        for index, field in enumerate(regular):
            lowered.append(self.field(field, pairs, self._varint_follows(regular[index + 1 :])))
        self._share_checks(lowered)
        tagged = tuple(self.field(f, pairs, False) for f in sorted(present, key=_tag) if f.tag is not None)
        defaults = {f.name: f.default for f in tagged}
        fresh = tuple(f for f in tagged if _is_fresh(f.default))
        template = {f.name: None if _is_fresh(defaults.get(f.name)) else defaults.get(f.name) for f in present}
        min_size = int(self.flexible) + sum(_min_size(f) for f in lowered)
        return Struct(name, self.flexible, tuple(lowered), tagged, template, fresh, min_size, pair)

    def _varint_follows(self, rest: list[schema.Field]) -> bool:
        """Whether a varint comes next: the count of tagged fields at the end of a
        flexible struct, or a compact length or count."""
        if not rest:
            return self.flexible
        return rest[0].flexible_in(self.version, self.flexible) and (
            rest[0].is_array or rest[0].type in ("string", "bytes", "records")
        )

    @staticmethod
    def _share_checks(fields: list[Field]) -> None:
        """One bounds check per run of fixed-size fields, by its first: the run's bytes,
        and the byte after it when a varint follows (the last field's `peek`)."""
        index = 0
        while index < len(fields):
            end = index
            while end < len(fields) and fields[end].kind in FIXED_SIZES:
                end += 1
            if end > index:
                run = fields[index:end]
                total = sum(f.size for f in run) + int(run[-1].peek)
                fields[index:end] = [replace(f, check=total if f is run[0] else 0, peek=False) for f in run]
            index = end + 1

    def field(self, field: schema.Field, pairs: bool, peek: bool) -> Field:
        nullable = field.nullable_in(self.version)
        compact = field.flexible_in(self.version, self.flexible)
        shared = shared_default(field)
        default = field.default_value() if shared is None else shared
        name = field.name
        if field.is_array:
            element = self.element(field, compact)
            return Field(
                name,
                Kind.ARRAY,
                Framing.COMPACT if compact else Framing.INT32,
                nullable,
                peek=peek and element.kind in FIXED_SIZES and not nullable,
                tag=field.tag,
                default=default,
                element=element,
                min_size=_element_min_size(element),
            )
        if field.is_struct:
            sub = self.struct(field.element_type, field.children or ())
            framing = Framing.MARKER if nullable else Framing.NONE
            return Field(name, Kind.STRUCT, framing, nullable, tag=field.tag, default=default, struct=sub)
        entity = _entity(field)
        if pairs and name == "topic_id" and field.type == "uuid":
            entity = Entity.TOPIC_ID
        return self.scalar(name, _KINDS[field.type], compact, nullable, peek, entity, field.tag, default)

    def element(self, field: schema.Field, compact: bool) -> Field:
        if field.is_struct:
            sub = self.struct(field.element_type, field.children or ())
            return Field("", Kind.STRUCT, struct=sub)
        kind = _KINDS[field.element_type]
        return self.scalar("", kind, compact, False, False, _entity(field), None, None)

    @staticmethod
    def scalar(
        name: str, kind: Kind, compact: bool, nullable: bool, peek: bool, entity: Entity, tag: int | None, default: Any
    ) -> Field:
        if kind is Kind.UUID:
            return Field(name, kind, size=16, check=16, tag=tag, default=default, entity=entity)
        if kind in FIXED_SIZES:
            size = FIXED_SIZES[kind]
            # alone, it checks its own bytes; _share_checks gives a run's fields theirs
            return Field(name, kind, size=size, check=size, peek=peek, tag=tag, default=default, entity=entity)
        framing = Framing.COMPACT if compact else Framing.INT16 if kind is Kind.STRING else Framing.INT32
        return Field(
            name, kind, framing, nullable, peek=peek and not nullable, tag=tag, default=default, entity=entity
        )


def _tag(field: schema.Field) -> int:
    return -1 if field.tag is None else field.tag


def _entity(field: schema.Field) -> Entity:
    if field.entity_type in _ENTITIES:
        return _ENTITIES[field.entity_type]
    if field.type == "int16" and field.name.endswith("error_code"):
        return Entity.ERROR_CODE
    return Entity.NONE


def _is_fresh(default: Any) -> bool:
    return isinstance(default, list | dict) and not isinstance(default, ReadOnlyDict)


def _min_size(field: Field) -> int:
    if field.kind is Kind.STRUCT and field.framing is Framing.NONE:
        assert field.struct is not None
        return field.struct.min_size
    return field.size or _FRAMING_SIZES[field.framing]


def _element_min_size(element: Field) -> int:
    if element.struct is not None:
        return max(1, element.struct.min_size)
    if element.size:
        return element.size
    return 1 if element.framing is Framing.COMPACT else 2


@cache
def layout(name: str, version: int) -> Struct:
    """The layout of message `name` (e.g. "FetchResponse") at `version`; KeyError for a
    name or version the schemas do not define."""
    definition = schema.message(name).definition(version)
    if definition is None:
        raise KeyError(f"{name} has no version {version}")
    return _Lowering(version, definition.is_flexible(version)).struct(name, definition.fields)


# The most columns a picked layout may have (the C interpreter's row, codec/_accel.c).
MAX_COLUMNS = 16


@cache
def picked(name: str, version: int, paths: tuple[tuple[str, ...], ...]) -> Struct:
    """The layout of message `name` at `version` with the field at the end of each path
    (names of nested arrays or structs, then a field's) picked: its value is column i of
    each row, i its path's index. The paths' structs must nest in one chain, the
    innermost emitting a row per element (with the columns of its outer structs as they
    were when it was read); a path that this version lacks gives None in every row. Only
    regular fields of a fixed-size kind, uuid, string, bytes or records are picked, and
    in an outer struct only those before the chain's next struct (whose rows they go
    in). ValueError otherwise."""
    if not 0 < len(paths) <= MAX_COLUMNS or any(len(path) < 1 for path in paths):
        raise ValueError(f"between 1 and {MAX_COLUMNS} paths, each of one name or more")
    chain = max((path[:-1] for path in paths), key=len)
    if any(path[:-1] != chain[: len(path) - 1] for path in paths):
        raise ValueError(f"the paths' structs do not nest in one chain: {paths}")
    columns = {path: index + 1 for index, path in enumerate(paths)}
    root = layout(name, version)
    return replace(_picked(root, (), chain, columns), columns=tuple(".".join(path) for path in paths))


def _picked(struct: Struct, at: tuple[str, ...], chain: tuple[str, ...], columns: dict[tuple[str, ...], int]) -> Struct:
    """`struct` (at path `at` of the chain) with its picked fields and the chain's next struct."""
    fields = []
    inside = False  # past the chain's next struct: a column read there would be late
    for field in struct.fields:
        path = (*at, field.name)
        if path in columns:
            if field.kind in (Kind.STRUCT, Kind.ARRAY):
                raise ValueError(f"{'.'.join(path)}: only a scalar, uuid, string, bytes or records field is picked")
            if inside:
                raise ValueError(f"{'.'.join(path)}: picked after {'.'.join(chain)}, whose rows it belongs to")
            field = replace(field, pick=columns[path])
        elif path == chain[: len(path)]:
            inside = True
            inner = field.element.struct if field.element is not None else field.struct
            if inner is None:
                raise ValueError(f"{'.'.join(path)}: neither a struct nor an array of structs")
            inner = _picked(inner, path, chain, columns)
            if field.element is not None:
                field = replace(field, element=replace(field.element, struct=inner))
            else:
                field = replace(field, struct=inner)
        fields.append(field)
    if any((*at, field.name) in columns or (*at, field.name) == chain[: len(at) + 1] for field in struct.tagged):
        raise ValueError(f"{struct.name}: a tagged field is not picked")
    return replace(struct, fields=tuple(fields), emits=at == chain)
