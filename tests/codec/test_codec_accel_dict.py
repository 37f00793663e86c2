"""The C decoders' dicts and strings beyond what test_codec_accel.py compares.

On CPython 3.11 codec/_accel.c writes a struct's values straight into the entries of
its copy of the template (build_dict, put_direct), bypassing PyDict_SetItem. What
SetItem would also have done must still happen: the dict is tracked by the GC once it
holds a tracked object, the template's values keep their reference counts, and neither
the template nor any other decoded dict sees the writes. Strings that are all ASCII
skip PyUnicode_DecodeUTF8 (decode_text): any other byte, wherever it is, must not.
"""

from __future__ import annotations

import gc
import struct
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from support.codec_frames import FRAMES as GOLDEN_FRAMES
from support.codec_frames import (
    TRUNCATED,
    compare_frame,
    decoders,
    golden,
    needs_accel,
    stages,
)

from codec import ApiKey
from codec.schema import ZERO_UUID

Frame = tuple[bytes, str, int, int]


def frames() -> list[Frame]:
    return [golden(entry) for entry in GOLDEN_FRAMES] + TRUNCATED


def decode_both(frame: Frame) -> Iterator[tuple[Any, Any]]:
    """(Python, C) values of the frame's header and body, where both decode."""
    data, kind, api_key, version = frame
    buf, pos = memoryview(data), 0
    for name, stage_version in stages(kind, api_key, version):
        pure, fast = decoders(name, stage_version)
        theirs, stop = pure(buf, pos, len(buf), [10_000])
        ours, _ = fast(buf, pos, len(buf), [10_000])
        yield theirs, ours
        pos = stop


def pairs(theirs: Any, ours: Any) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """The dicts of both values, side by side (their shapes are the same: see
    test_codec_accel.assert_identical)."""
    if isinstance(ours, dict):
        yield theirs, ours
        for key in ours:
            yield from pairs(theirs[key], ours[key])
    elif isinstance(ours, list):
        for a, b in zip(theirs, ours, strict=True):
            yield from pairs(a, b)


@needs_accel
def test_dicts_are_tracked_by_the_gc_as_the_python_decoders_are() -> None:
    """insertdict tracks a dict that gets a possibly tracked value (a list, a view, a
    uuid); an untracked dict holding one would leave its cycles uncollected."""
    checked = 0
    for frame in frames():
        for theirs, ours in decode_both(frame):
            for a, b in pairs(theirs, ours):
                assert gc.is_tracked(b) == gc.is_tracked(a), (a, b)
                checked += 1
    assert checked > 1000


def inline(api_key: int) -> Frame:
    """test_codec_inline's frame of the api (Fetch, Metadata, JoinGroup)."""
    return next(frame for frame in TRUNCATED[-4:] if frame[2] == api_key)


@needs_accel
def test_decoded_dicts_share_nothing_with_the_template() -> None:
    for _, ours in decode_both(inline(3)):  # scribble over every decoded dict, and grow it
        for _, b in list(pairs(ours, ours)):
            for key in list(b):
                b[key] = object()
            b.update({f"extra{i}": i for i in range(20)})
    for theirs, ours in decode_both(inline(3)):
        assert ours == theirs
        assert all(list(b) == list(a) for a, b in pairs(theirs, ours))


@needs_accel
def test_template_values_keep_their_reference_counts() -> None:
    """Each topic of the Metadata frame has a topic id that is not the template's
    ZERO_UUID: the C decoder drops the reference the copy took, once."""
    list(decode_both(inline(3)))
    gc.collect()
    before = sys.getrefcount(ZERO_UUID)
    for _ in range(1000):
        for _, ours in decode_both(inline(3)):
            del ours
    gc.collect()
    assert sys.getrefcount(ZERO_UUID) == before


class Canary:
    pass


@needs_accel
@pytest.mark.parametrize("api_key", [1, 3])
def test_a_cycle_through_a_decoded_dict_is_collected(api_key: int) -> None:
    """Partitions of Fetch and Metadata: templates of no tracked object, then lists.
    Were such a dict not tracked, the GC would never free a cycle through it."""
    body = list(decode_both(inline(api_key)))[1][1]
    partition = next(b for _, b in pairs(body, body) if "partition_index" in b)
    assert gc.is_tracked(partition)
    items = next(v for v in partition.values() if isinstance(v, list))
    canary = Canary()
    alive = weakref.ref(canary)
    items.extend([partition, canary])  # partition -> items -> partition
    del body, partition, items, canary
    gc.collect()
    assert alive() is None


@needs_accel
@pytest.mark.parametrize("size", [0, 1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 33])
def test_strings_ascii_or_not_at_every_position(size: int) -> None:
    """ApiVersions v3's client id (a classic string) and software name (compact)."""
    ok = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 1) + b"c\x00"
    texts = [bytes(range(size)), b"z" * size]
    for at in range(size):
        for byte in (0x7F, 0x80, 0xC3, 0xFF):
            texts.append(b"a" * at + bytes([byte]) + b"b" * (size - at - 1))
        texts.append(b"a" * at + "é".encode() + b"b" * (size - at - 1))
    for raw in texts:
        header = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, len(raw)) + raw + b"\x00"
        compare_frame(header + b"\x02a\x02b\x00", "request", 18, 3)
        compare_frame(ok + bytes([len(raw) + 1]) + raw + b"\x02b\x00", "request", 18, 3)
