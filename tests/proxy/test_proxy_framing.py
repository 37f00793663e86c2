"""proxy.forward.framing: every chunking of a stream gives the same frames and the same output."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.framing import MODES, Recorder, collect_into, frame, split

from proxy.forward.framing import (
    HOLD,
    STOP,
    STREAM,
    STREAM_KEEP,
    STREAM_NOTIFY,
    STREAM_OBSERVE,
    Buffer,
    FrameSplitter,
)


class Injector(Recorder):
    """Asks to send b"INJECTED" ahead of the frame whose body is b"two"."""

    def frame_started(self, head: memoryview, size: int) -> int:
        mode = super().frame_started(head, size)
        if bytes(head) == b"two":
            self.inject.append(b"INJECTED")
        return mode


def run(
    bodies: list[bytes], modes: list[int], cuts: list[int], want_head: int = 0
) -> tuple[Recorder, bytes]:
    handler = Recorder(modes, want_head)
    out: list[bytes] = []
    splitter = FrameSplitter(handler, lambda bufs: out.extend(bytes(b) for b in bufs), 1 << 20, 4)
    for chunk in split(b"".join(frame(b) for b in bodies), cuts):
        splitter.feed(chunk)
    assert splitter.at_boundary
    return handler, b"".join(out)


def expected_output(bodies: list[bytes], modes: list[int]) -> bytes:
    parts = []
    for body, mode in zip(bodies, modes, strict=True):
        if mode == HOLD and len(body) % 2 == 0:
            parts.append(frame(body[::-1]))
        else:
            parts.append(frame(body))
    return b"".join(parts)


bodies_st = st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=8)


@settings(max_examples=examples(300), deadline=None)
@given(
    bodies=bodies_st,
    mode_picks=st.lists(st.sampled_from(MODES), min_size=8, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    want_head=st.sampled_from([0, 4, 9, 300]),
)
def test_any_chunking_same_frames_and_output(
    bodies: list[bytes], mode_picks: list[int], cuts: list[int], want_head: int
) -> None:
    modes = mode_picks[: len(bodies)]
    handler, out = run(bodies, modes, cuts, want_head)
    assert out == expected_output(bodies, modes)
    assert [size for _head, size in handler.started] == [len(b) for b in bodies]
    for (head, _size), body in zip(handler.started, bodies, strict=True):
        assert body.startswith(head)
        assert len(head) >= min(len(body), 4, want_head or 4)
    kept = [b if m != STREAM_NOTIFY else None for b, m in zip(bodies, modes, strict=True) if m]
    assert handler.completed == kept


@settings(max_examples=examples(200), deadline=None)
@given(bodies=bodies_st, mode_picks=st.lists(st.sampled_from(MODES), min_size=8, max_size=8))
def test_one_frame_per_chunk_same_frames_and_output(
    bodies: list[bytes], mode_picks: list[int]
) -> None:
    # chunks that are exactly one frame take the splitter's shortcut (_whole_frame)
    modes = mode_picks[: len(bodies)]
    cuts = [sum(4 + len(b) for b in bodies[:i]) for i in range(1, len(bodies))]
    handler, out = run(bodies, modes, cuts)
    assert out == expected_output(bodies, modes)
    assert [(head, size) for head, size in handler.started] == [(b, len(b)) for b in bodies]
    kept = [b if m != STREAM_NOTIFY else None for b, m in zip(bodies, modes, strict=True) if m]
    assert handler.completed == kept
    assert handler.chunks == len(bodies)


def test_stop_and_inject_in_a_one_frame_chunk() -> None:
    handler = Injector([STREAM, STREAM, STOP, STREAM])
    out: list[bytes] = []
    splitter = FrameSplitter(handler, lambda bufs: out.extend(bytes(b) for b in bufs), 1000, 4)
    for body in (b"one", b"two", b"three", b"four"):
        splitter.feed(frame(body))
    assert b"".join(out) == frame(b"one") + b"INJECTED" + frame(b"two")
    assert splitter.stopped and handler.chunks == 3


def test_complete_frames_in_one_chunk_go_out_as_the_chunk_itself() -> None:
    bodies = [b"a" * 10, b"b" * 20, b"c" * 5]
    handler = Recorder([STREAM] * 3)
    writes: list[list[Buffer]] = []
    splitter = FrameSplitter(handler, writes.append, 1 << 20, 4)
    data = b"".join(frame(b) for b in bodies)
    splitter.feed(data)
    assert len(writes) == 1 and len(writes[0]) == 1
    assert writes[0][0] is data  # no copy, and a bytes object: uvloop's fast write path


def test_frame_spanning_chunks_goes_out_as_its_pieces() -> None:
    body = bytes(range(256)) * 100
    data = frame(body)
    handler = Recorder([STREAM])
    writes: list[list[Buffer]] = []
    splitter = FrameSplitter(handler, writes.append, 1 << 20, 4)
    chunks = [data[:1000], data[1000:9000], data[9000:]]
    for chunk in chunks:
        splitter.feed(chunk)
    assert [[bytes(b) for b in w] for w in writes] == [[c] for c in chunks]
    assert all(w[0] is c for w, c in zip(writes, chunks, strict=True))
    assert splitter.mid_frame_since is None


def test_negative_or_oversized_length_stops_after_earlier_frames() -> None:
    for bad in (struct.pack(">i", -5), struct.pack(">i", 2000), b"\x16\x03\x01\x02\x00"):
        handler = Recorder([STREAM, STREAM])
        out: list[bytes] = []
        splitter = FrameSplitter(handler, collect_into(out), 1000, 4)
        good = frame(b"ok")
        splitter.feed(good + bad + b"x" * 10)
        assert b"".join(out) == good
        assert len(handler.too_large) == 1 and splitter.stopped
        splitter.feed(frame(b"later"))
        assert b"".join(out) == good  # nothing after the stop


def test_stop_drops_the_rest() -> None:
    handler = Recorder([STREAM, STOP, STREAM])
    out: list[bytes] = []
    splitter = FrameSplitter(handler, lambda bufs: out.extend(bytes(b) for b in bufs), 1000, 4)
    splitter.feed(frame(b"one") + frame(b"two") + frame(b"three"))
    assert b"".join(out) == frame(b"one")


def test_injected_buffers_go_before_the_frame() -> None:
    handler = Injector([STREAM] * 3)
    out: list[bytes] = []
    splitter = FrameSplitter(handler, lambda bufs: out.extend(bytes(b) for b in bufs), 1000, 4)
    splitter.feed(frame(b"one") + frame(b"two") + frame(b"three"))
    assert b"".join(out) == frame(b"one") + b"INJECTED" + frame(b"two") + frame(b"three")


def test_mid_frame_clock() -> None:
    handler = Recorder([STREAM, STREAM])
    splitter = FrameSplitter(handler, lambda bufs: None, 1000, 4)
    data = frame(b"x" * 50)
    splitter.feed(data[:10])
    started = splitter.mid_frame_since
    assert started is not None
    splitter.feed(data[10:20])
    assert splitter.mid_frame_since == started  # the same frame keeps its start
    splitter.feed(data[20:] + frame(b"y" * 5)[:3])
    assert splitter.mid_frame_since is not None and splitter.mid_frame_since >= started
    splitter.feed(frame(b"y" * 5)[3:])
    assert splitter.mid_frame_since is None


# --- frames over the keep limit: observed in pieces, never assembled -------------------


class Observer(Recorder):
    """Keeps every frame (STREAM_KEEP); over the splitter's keep limit, observes it."""

    def __init__(self, count: int) -> None:
        super().__init__([STREAM_KEEP] * count)
        self.pieces: list[list[bytes]] = []
        self.asked: list[int] = []
        self._open: list[bytes] | None = None

    def observe_instead(self, size: int) -> int:
        self.asked.append(size)
        self._open = []
        return STREAM_OBSERVE

    def frame_piece(self, piece: memoryview, last: bool) -> None:
        assert self._open is not None  # only after observe_instead
        self._open.append(bytes(piece))
        if last:
            self.pieces.append(self._open)
            self._open = None


@settings(max_examples=examples(300), deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 2000), max_size=12),
    limit=st.integers(0, 200),
)
def test_frames_over_the_keep_limit_spanning_chunks_are_observed_not_kept(
    sizes: list[int], cuts: list[int], limit: int
) -> None:
    bodies = [bytes([i + 1]) * 8 + bytes(range(256))[:size] for i, size in enumerate(sizes)]
    stream = b"".join(frame(b) for b in bodies)
    handler = Observer(len(bodies))
    out: list[bytes] = []
    splitter = FrameSplitter(handler, collect_into(out), 1 << 20, 8, keep_limit=limit)
    for chunk in split(stream, cuts):
        splitter.feed(chunk)
    assert b"".join(out) == stream  # forwarded untouched, whatever was observed
    observed = [b"".join(p) for p in handler.pieces]
    kept = [c for c in handler.completed if c is not None]
    assert sorted(observed + kept) == sorted(bodies)  # each frame seen exactly once
    # observed: exactly the frames over the limit (and over the 8-byte head, which is
    # assembled anyway when cut) that a chunk border cuts
    borders = set()
    at = 0
    for chunk in split(stream, cuts)[:-1]:
        at += len(chunk)
        borders.add(at)
    expected, start = [], 0
    for body in bodies:
        end = start + 4 + len(body)
        if len(body) > max(limit, 8) and any(start < b < end for b in borders):
            expected.append(body)
        start = end
    assert sorted(observed) == sorted(expected)
    assert len(handler.asked) == len(observed)  # asked only of frames that spanned chunks
    assert all(len(b) > limit for b in observed) and all(size > limit for size in handler.asked)
    assert splitter._kept is None  # nothing held between frames
