"""The numbers the layout description (codec/layout/) and the C interpreter share.

What a field holds (`Kind`), how its length, count or presence is written before it
(`Framing`), and what the skimmer keeps of it (`Entity`). The C interpreter
(codec/_accel.c) reads these numbers from codec/generated/kinds.h, which
`python -m codec.generate` writes from this module; codec/accel.py checks at import
that the built extension has the very same ones.
"""

from __future__ import annotations

from enum import IntEnum


class Kind(IntEnum):
    """What a field holds. INT8 to BOOL are the fixed-size kinds, in this order."""

    INT8 = 1
    INT16 = 2
    UINT16 = 3
    INT32 = 4
    UINT32 = 5
    INT64 = 6
    FLOAT64 = 7
    BOOL = 8
    UUID = 9  # 16 bytes
    STRING = 10  # UTF-8 text
    BYTES = 11  # raw bytes, decoded as a zero-copy view of the frame
    RECORDS = 12  # as BYTES: a record batch set (codec/records reads it)
    STRUCT = 13
    ARRAY = 14


class Framing(IntEnum):
    """What is written before a field's value."""

    NONE = 0  # nothing: a fixed-size value, or a struct that is always there
    INT16 = 1  # a big-endian int16 length, -1 for null (strings, classic versions)
    INT32 = 2  # a big-endian int32 length or count, -1 for null (classic versions)
    COMPACT = 3  # an unsigned varint of length + 1, 0 for null (flexible versions)
    MARKER = 4  # one byte, 0xFF for null and anything else for present (nullable structs)


class Entity(IntEnum):
    """What the skimmer (codec/skim.py) keeps of a field; NONE: nothing."""

    NONE = 0
    TOPIC = 1  # a topic name (entityType topicName)
    GROUP = 2  # a group id (entityType groupId)
    TRANSACTIONAL_ID = 3  # entityType transactionalId
    ERROR_CODE = 4  # an int16 named *error_code: kept when not 0
    TOPIC_ID = 5  # `topic_id` beside a topic name: the two are kept as a pair


FIXED_SIZES = {
    Kind.INT8: 1,
    Kind.INT16: 2,
    Kind.UINT16: 2,
    Kind.INT32: 4,
    Kind.UINT32: 4,
    Kind.INT64: 8,
    Kind.FLOAT64: 8,
    Kind.BOOL: 1,
}
# The struct module's big-endian format character of each fixed-size kind.
FORMATS = {
    Kind.INT8: "b",
    Kind.INT16: "h",
    Kind.UINT16: "H",
    Kind.INT32: "i",
    Kind.UINT32: "I",
    Kind.INT64: "q",
    Kind.FLOAT64: "d",
    Kind.BOOL: "?",
}
ENUMS: tuple[type[IntEnum], ...] = (Kind, Framing, Entity)
