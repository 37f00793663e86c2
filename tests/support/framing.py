"""A scripted FrameSplitter handler and the stream helpers the framing tests share."""

from __future__ import annotations

import struct
from collections.abc import Callable

from proxy.forward.framing import HOLD, NEED_MORE, STREAM, STREAM_KEEP, STREAM_NOTIFY, Buffer

MODES = (STREAM, STREAM_NOTIFY, STREAM_KEEP, HOLD)


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


class Recorder:
    """A handler that picks each frame's mode from a script and records what it saw."""

    def __init__(self, modes: list[int], want_head: int = 0) -> None:
        self.modes = modes
        self.want_head = want_head  # ask NEED_MORE until this many head bytes (or the frame)
        self.inject: list[Buffer] = []
        self.started: list[tuple[bytes, int]] = []
        self.completed: list[bytes | None] = []
        self.too_large: list[int] = []
        self.chunks = 0

    def frame_started(self, head: memoryview, size: int) -> int:
        if len(head) < min(size, self.want_head):
            return NEED_MORE
        self.started.append((bytes(head), size))
        return self.modes[len(self.started) - 1]

    def frame_completed(self, body: memoryview | None) -> None:
        self.completed.append(None if body is None else bytes(body))

    def frame_held(self, body: memoryview, raw: list[Buffer]) -> list[Buffer]:
        self.completed.append(bytes(body))
        if len(body) % 2:
            return raw  # odd sizes: forward as they were
        return [frame(bytes(body)[::-1])]  # even: a replacement

    def frame_too_large(self, size: int) -> None:
        self.too_large.append(size)

    def chunk_done(self) -> None:
        self.chunks += 1


def collect_into(out: list[bytes]) -> Callable[[list[Buffer]], None]:
    return lambda bufs: out.extend(bytes(b) for b in bufs)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]
