"""The sans-I/O pieces of `kafkalens decode CAPTURE`: TCP reassembly and frame cutting."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from codec import ApiKey
from codec.frame_cutter import (
    HEAD_BYTES,
    BigEnd,
    BigPiece,
    BigStart,
    Broken,
    CutEvent,
    Frame,
    FrameCutter,
    Skipped,
)
from codec.reassembly import Data, Event, Gap, TcpHalf

WRAP = 1 << 32


def segments_of(data: bytes, cuts: list[int], isn: int) -> list[tuple[int, bytes]]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [((isn + 1 + a) % WRAP, data[a:b]) for a, b in zip(points, points[1:], strict=False)]


def delivered(events: list[Event]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, Data))


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None)
@given(
    data=st.binary(min_size=1, max_size=400),
    cuts=st.lists(st.integers(0, 400), max_size=20),
    isn=st.one_of(st.integers(0, WRAP - 1), st.integers(WRAP - 300, WRAP - 1)),
    seed=st.integers(0, 2**32),
    duplicates=st.integers(0, 5),
)
def test_any_order_and_retransmissions_give_the_bytes_once(
    data: bytes, cuts: list[int], isn: int, seed: int, duplicates: int
) -> None:
    rng = random.Random(seed)
    segments = segments_of(data, cuts, isn)
    # retransmissions, some overlapping two segments (a resent coalesced range)
    for _ in range(duplicates):
        start = rng.randrange(len(data))
        end = rng.randrange(start, len(data)) + 1
        segments.append(((isn + 1 + start) % WRAP, data[start:end]))
    rng.shuffle(segments)
    half = TcpHalf(max_held_bytes=10_000)
    half.syn(isn)
    events = [e for seq, payload in segments for e in half.segment(0.0, seq, payload)]
    events += half.finish(1.0)
    assert delivered(events) == data
    assert not [e for e in events if isinstance(e, Gap)]
    assert half.held_bytes == 0


def test_a_lost_segment_is_a_gap_of_its_size_and_the_rest_comes_through() -> None:
    data = bytes(range(256)) * 4
    segments = segments_of(data, [100, 200, 300, 700], isn=WRAP - 150)
    lost = segments.pop(2)
    half = TcpHalf(max_held_bytes=10_000)
    half.syn(WRAP - 150)
    events = [e for seq, payload in segments for e in half.segment(0.0, seq, payload)] + half.finish(1.0)
    gaps = [e for e in events if isinstance(e, Gap)]
    assert [g.lost for g in gaps] == [len(lost[1])]
    assert delivered(events) == data[:200] + data[300:]
    assert (half.gaps, half.lost_bytes) == (1, 100)


def test_waiting_segments_are_bounded_and_the_bound_is_counted() -> None:
    half = TcpHalf(max_held_bytes=1000)
    half.syn(0)
    events: list[Event] = []
    for i in range(1, 50):  # segment 0 never comes
        events += half.segment(0.0, 1 + i * 100, bytes(100))
        assert half.held_bytes <= 1000 + 100
    assert half.gave_up_waiting == 1
    assert [e.lost for e in events if isinstance(e, Gap)] == [100]
    assert len(delivered(events)) == 49 * 100 - half.held_bytes


def test_a_capture_joining_mid_stream_says_so_first() -> None:
    half = TcpHalf(max_held_bytes=100)
    events = half.segment(0.0, 123456, b"abc") + half.segment(0.1, 123459, b"def")
    assert isinstance(events[0], Gap) and events[0].lost is None
    assert delivered(events) == b"abcdef"


# -- frames ---------------------------------------------------------------------------


def request(corr: int, size: int = 30) -> bytes:
    body = struct.pack(">hhih", ApiKey.METADATA, 12, corr, 1) + b"c" + bytes(size)
    return struct.pack(">i", len(body)) + body


def plausible(head: bytes, size: int, resyncing: bool) -> bool | None:
    if len(head) < min(size, 10):
        return None
    return size >= 10 and head[:4] == b"\x00\x03\x00\x0c"


def cut(cutter: FrameCutter, chunks: list[bytes]) -> list[CutEvent]:
    out = [e for chunk in chunks for e in cutter.feed(0.0, chunk)]
    return out + cutter.finish(1.0)


@settings(max_examples=examples(100), deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=8), cuts=st.lists(st.integers(0, 3000)))
def test_frames_come_out_whole_however_the_stream_is_cut(sizes: list[int], cuts: list[int]) -> None:
    stream = b"".join(request(i, size) for i, size in enumerate(sizes))
    points = sorted({0, len(stream), *(c % len(stream) for c in cuts)})
    events = cut(FrameCutter(plausible, 10_000), [stream[a:b] for a, b in zip(points, points[1:], strict=False)])
    frames = [e for e in events if isinstance(e, Frame)]
    assert [f.body for f in frames] == [request(i, size)[4:] for i, size in enumerate(sizes)]
    assert len(frames) == len(events)


def test_frames_over_the_bound_pass_in_pieces() -> None:
    big = request(1, 5000)
    events = cut(FrameCutter(plausible, 1000), [request(0), big[:300], big[300:4000], big[4000:] + request(2)])
    kinds = [type(e) for e in events]
    assert kinds[0] is Frame and kinds[1] is BigStart and kinds[-2] is BigEnd and kinds[-1] is Frame
    start = events[1]
    assert isinstance(start, BigStart) and start.size == len(big) - 4 and start.head == big[4 : 4 + HEAD_BYTES]
    assert b"".join(e.data for e in events if isinstance(e, BigPiece)) == big[4:]


def test_a_gap_loses_one_frame_and_the_cutter_finds_the_next() -> None:
    cutter = FrameCutter(plausible, 10_000)
    second = request(2)
    events = cutter.feed(0.0, request(1) + second[:20])
    events += cutter.gap(0.1, 7, "lost")
    events += cutter.feed(0.2, second[27:] + request(3) + request(4))
    events += cutter.finish(1.0)
    broken = [e for e in events if isinstance(e, Broken)]
    skipped = [e for e in events if isinstance(e, Skipped)]
    assert len(broken) == 1 and broken[0].offset == len(request(1))
    assert len(skipped) == 1 and skipped[0].skipped == len(second) - 27
    assert [e.body[4:8] for e in events if isinstance(e, Frame)] == [struct.pack(">i", c) for c in (1, 3, 4)]


def test_garbage_is_skipped_in_bounded_memory_and_said_once() -> None:
    rng = random.Random(7)
    cutter = FrameCutter(plausible, 1000)
    cutter.resync("the capture starts mid-stream")
    events: list[CutEvent] = []
    for _ in range(200):
        events += cutter.feed(0.0, bytes(rng.randrange(1, 256) for _ in range(500)))
        assert cutter.buffered <= 4 + HEAD_BYTES
    events += cutter.finish(1.0)
    assert len(events) == 1 and isinstance(events[0], Skipped) and events[0].skipped == 100_000
