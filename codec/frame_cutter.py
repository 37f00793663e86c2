"""Kafka frames cut from one direction of a reassembled TCP stream, sans I/O.

Unlike the proxy's splitter, which sees every byte of a connection, this reads a
capture: the stream may start mid-frame, lose bytes (`gap`) or hold garbage. After
any of those it resynchronises: it looks for the next offset whose length prefix and
first bytes `plausible` accepts and skips what was before (`Skipped` says how much
and why). `plausible` also checks each frame start in sync; a frame it rejects there
means the stream is not what it seemed and the cutter resynchronises too.

Memory is bounded: a frame up to `max_frame_bytes` is assembled whole (`Frame`), a
larger one goes out in pieces as they come (`BigStart`, `BigPiece`..., `BigEnd`), and
resynchronising keeps at most `max_frame_bytes` of unmatched bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

HEAD_BYTES = 64  # what `plausible` and a big frame's consumer see of its start
_LENGTH = struct.Struct(">i")

# plausible(head, size, resyncing): True, False, or None to see more of the head first
Plausible = Callable[[bytes, int, bool], "bool | None"]


@dataclass(slots=True)
class Frame:
    offset: int  # of its length prefix in the stream (bytes lost to gaps count)
    start_ts: float
    end_ts: float
    body: bytes


@dataclass(slots=True)
class BigStart:
    offset: int
    ts: float
    size: int
    head: bytes


@dataclass(slots=True)
class BigPiece:
    ts: float
    data: bytes


@dataclass(slots=True)
class BigEnd:
    ts: float


@dataclass(slots=True)
class Skipped:
    """`skipped` bytes before `offset` were not a frame (or the rest of a lost one)."""

    offset: int
    ts: float
    skipped: int
    reason: str


@dataclass(slots=True)
class Broken:
    """The frame at `offset` will never be whole: bytes of it were lost."""

    offset: int
    ts: float
    reason: str
    big: bool  # it was a BigStart: its BigEnd never comes


CutEvent = Frame | BigStart | BigPiece | BigEnd | Skipped | Broken


class FrameCutter:
    __slots__ = (
        "plausible",
        "max_frame_bytes",
        "_buf",
        "_offset",
        "_start_ts",
        "_resyncing",
        "_why",
        "_scan",
        "_skipped",
        "_big_left",
        "frames",
        "resyncs",
    )

    def __init__(self, plausible: Plausible, max_frame_bytes: int) -> None:
        self.plausible = plausible
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._offset = 0  # stream offset of _buf[0]
        self._start_ts = 0.0  # when the frame being assembled began
        self._resyncing = False
        self._why = ""
        self._scan = 0  # resynchronising: offsets in _buf before this were rejected
        self._skipped = 0  # resynchronising: bytes dropped so far
        self._big_left = 0  # bytes of a big frame still to pass
        self.frames = 0
        self.resyncs = 0

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def resync(self, reason: str) -> None:
        """Look for the next plausible frame from here (e.g. the stream's start was
        not seen)."""
        self._resyncing = True
        self._why = reason
        self._scan = 0

    def gap(self, ts: float, lost: int | None, reason: str) -> list[CutEvent]:
        out: list[CutEvent] = []
        self._lose_current(ts, out, f"{lost} bytes of the stream were not captured" if lost else reason)
        self._offset += len(self._buf) + (lost or 0)
        self._buf.clear()
        self.resync(reason)
        return out

    def finish(self, ts: float) -> list[CutEvent]:
        out: list[CutEvent] = []
        if self._resyncing and self._buf:
            self._skipped += len(self._buf)
        if self._resyncing and self._skipped:
            out.append(Skipped(self._offset + len(self._buf), ts, self._skipped, self._why + "; no frame found after"))
        elif not self._resyncing:
            self._lose_current(ts, out, "the capture ends inside it")
        self._offset += len(self._buf)
        self._buf.clear()
        self._skipped = 0
        return out

    def feed(self, ts: float, data: bytes) -> list[CutEvent]:
        out: list[CutEvent] = []
        if self._big_left:
            data = self._big(ts, data, out)
            if not data:
                return out
        if not self._buf:
            self._start_ts = ts
        self._buf += data
        while True:
            if self._resyncing and not self._find(ts, out):
                return out
            if not self._cut(ts, out):
                return out

    def _lose_current(self, ts: float, out: list[CutEvent], reason: str) -> None:
        if self._big_left:
            out.append(Broken(self._offset, ts, reason, True))
            self._big_left = 0
        elif self._buf and not self._resyncing:
            out.append(Broken(self._offset, ts, reason, False))

    def _big(self, ts: float, data: bytes, out: list[CutEvent]) -> bytes:
        piece = data[: self._big_left]
        self._big_left -= len(piece)
        self._offset += len(piece)
        out.append(BigPiece(ts, piece))
        if not self._big_left:
            out.append(BigEnd(ts))
        return data[len(piece) :]

    def _cut(self, ts: float, out: list[CutEvent]) -> bool:
        """One frame (or a big frame's start) off the buffer; False: wait for more."""
        buf = self._buf
        if len(buf) < 4:
            return False
        (size,) = _LENGTH.unpack_from(buf, 0)
        verdict = self.plausible(bytes(buf[4 : 4 + HEAD_BYTES]), size, False) if size >= 0 else False
        if verdict is None:
            return False
        if not verdict:
            self.resync(f"no Kafka frame at offset {self._offset}")
            return True
        if size > self.max_frame_bytes:
            if len(buf) < 4 + min(size, HEAD_BYTES):
                return False
            out.append(BigStart(self._offset, self._start_ts, size, bytes(buf[4 : 4 + HEAD_BYTES])))
            self._offset += 4
            self._big_left = size
            rest = bytes(buf[4:])
            buf.clear()
            rest = self._big(ts, rest, out)
            buf += rest
            self._start_ts = ts
            return bool(buf)
        if len(buf) < 4 + size:
            return False
        out.append(Frame(self._offset, self._start_ts, ts, bytes(buf[4 : 4 + size])))
        self.frames += 1
        del buf[: 4 + size]
        self._offset += 4 + size
        self._start_ts = ts
        return bool(buf)

    def _find(self, ts: float, out: list[CutEvent]) -> bool:
        """Resynchronising: drop bytes up to the next plausible frame start; False when
        none is in the buffer yet."""
        buf = self._buf
        pos = self._scan
        while pos + 4 <= len(buf):
            (size,) = _LENGTH.unpack_from(buf, pos)
            verdict = self.plausible(bytes(buf[pos + 4 : pos + 4 + HEAD_BYTES]), size, True) if size >= 0 else False
            if verdict is None:
                break
            if verdict:
                self._found(pos, ts, out)
                return True
            pos += 1
        # Offsets before pos start no frame: only what may still start one is kept
        # (under 4 + HEAD_BYTES bytes).
        if pos:
            del buf[:pos]
            self._offset += pos
            self._skipped += pos
        self._scan = 0
        return False

    def _found(self, pos: int, ts: float, out: list[CutEvent]) -> None:
        del self._buf[:pos]
        self._offset += pos
        skipped = self._skipped + pos
        self._resyncing = False
        self._scan = self._skipped = 0
        self.resyncs += 1
        out.append(Skipped(self._offset, ts, skipped, self._why))
