"""Split a Kafka byte stream into frames and forward them without copying.

A frame is an int32 big-endian length and that many bytes. `FrameSplitter.feed`
takes each chunk from `data_received`, asks its handler what to do with each frame
once the frame's first bytes (its "head") are in, and writes what may go on with a
single `writelines` per chunk. Complete frames inside one chunk go out as one
memoryview slice of the chunk; a frame spanning chunks goes out as its chunk pieces.
Bodies are never copied on the forwarding path; only a header cut by a chunk border
(at most `HEAD_CAP` bytes) is, and frames a handler asks to hold or keep are assembled.
A kept frame is copied into one buffer piece by piece as it arrives, so the chunks it
came in are released at once; one larger than `keep_limit` is not kept at all: the
handler's `observe_instead` turns it into STREAM_OBSERVE (or STREAM).

Modes a handler returns from `frame_started`:

* STREAM: forward the bytes as they arrive.
* STREAM_NOTIFY: the same, and call `frame_completed(None)` when the frame ends.
* STREAM_KEEP: the same, and call `frame_completed(body)` with the assembled body.
* STREAM_OBSERVE: forward the bytes as they arrive, and pass each piece of the body to
  `frame_piece(piece, last)` as it goes (views into the chunk, valid until
  `chunk_done`; `last` on the frame's final piece). Nothing of the frame is kept.
* HOLD: forward nothing yet; at the end `frame_held(body, raw)` returns what to send.
* NEED_MORE: the head is too short to decide; ask again with more bytes. Only valid
  while the head is shorter than both the frame and `HEAD_CAP`.
* STOP: process nothing more of this stream (the handler closes or drains).
* PAUSE: not this frame yet (the handler recorded nothing for it and has paused
  reading): the splitter keeps the rest of the chunk from the frame's start (a view,
  no copy: none of it went on) and splits it again on `resume()`.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Protocol

STREAM = 0
STREAM_NOTIFY = 1
STREAM_KEEP = 2
HOLD = 3
NEED_MORE = 4
STOP = 5
PAUSE = 6
STREAM_OBSERVE = 7

# Most a handler may need to see before deciding (a Produce header: client id and
# transactional id). Bounds what a hostile header can make the proxy buffer.
HEAD_CAP = 65536
_FIRST_RETRY = 256
_LENGTH = struct.Struct(">i")

Buffer = bytes | memoryview


class FrameHandler(Protocol):
    # Buffers to send before the frame just announced by frame_started (e.g. replies
    # the proxy makes itself, which must keep their place in the response order).
    inject: list[Buffer]

    def frame_started(self, head: memoryview, size: int) -> int: ...

    def frame_completed(self, body: memoryview | None) -> None: ...

    def frame_piece(self, piece: memoryview, last: bool) -> None: ...

    def observe_instead(self, size: int) -> int: ...

    def frame_held(self, body: memoryview, raw: list[Buffer]) -> list[Buffer]: ...

    def frame_too_large(self, size: int) -> None: ...

    def chunk_done(self) -> None: ...


class FrameSplitter:
    """One direction of one connection."""

    __slots__ = (
        "_handler",
        "_write",
        "max_frame",
        "min_head",
        "keep_limit",
        "_remaining",
        "_mode",
        "_pieces",
        "_kept",
        "_kept_at",
        "_undecided",
        "_head_want",
        "stopped",
        "mid_frame_since",
        "_parked",
    )

    def __init__(
        self,
        handler: FrameHandler,
        write: Callable[[list[Buffer]], object],
        max_frame: int,
        min_head: int,
        keep_limit: int = 2**31,
    ) -> None:
        self._handler = handler
        self._write = write
        self.max_frame = max_frame  # declared lengths above this (or negative) are refused
        self.min_head = min_head  # head bytes needed before frame_started is asked
        # STREAM_KEEP frames above this size that span chunks are not assembled: the
        # handler's observe_instead says what to do (limits.observe_whole_frame_bytes)
        self.keep_limit = keep_limit
        self._remaining = 0  # raw bytes of the current frame still to arrive
        self._mode = STREAM
        self._pieces: list[Buffer] | None = None  # raw pieces of a held frame
        self._kept: bytearray | None = None  # a kept frame, prefix included, filled as it comes
        self._kept_at = 0
        self._undecided: bytearray | None = None  # a frame start cut by a chunk border
        self._head_want = min_head
        self.stopped = False
        # monotonic time the unfinished frame started (None at a frame boundary)
        self.mid_frame_since: float | None = None
        self._parked: list[Buffer] = []  # what a PAUSE kept, in stream order

    @property
    def at_boundary(self) -> bool:
        return not self._remaining and self._undecided is None

    def feed(self, data: Buffer) -> None:
        if self.stopped:
            return
        if self._parked:
            self._parked.append(data)  # behind the paused frame
            return
        if not self._remaining and self._undecided is None and self._whole_frame(data):
            return
        view = memoryview(data)
        out: list[Buffer] = []
        pos = 0
        new_partial = False
        if self._undecided is not None:
            pos = self._resolve_undecided(view, out)
        if self._remaining and pos < len(view) and not self.stopped:
            pos = self._continue_frame(view, pos, out)
        if pos < len(view) and not self.stopped:
            new_partial = self._split(view, pos, out)
        if out:
            first = out[0]
            if (
                len(out) == 1
                and isinstance(first, memoryview)
                and first.obj is data
                and len(first) == len(data)
            ):
                # The whole chunk as it came (the usual case): pass the bytes object
                # itself, which uvloop writes straight away; a view takes a slower path.
                out[0] = data
            self._write(out)
        if self._remaining or self._undecided is not None:
            if new_partial or self.mid_frame_since is None:
                self.mid_frame_since = time.monotonic()
        else:
            self.mid_frame_since = None
        self._handler.chunk_done()

    def unforwarded(self) -> tuple[bytes, int] | None:
        """For a closing connection: what a PAUSE kept (it begins at a frame's start), and
        how many bytes of the frame being forwarded are still to come (a frame starts
        after them). None where no frame start is known (stopped; a cut header kept)."""
        if self.stopped or self._undecided is not None:
            return None
        parked, self._parked = self._parked, []
        return b"".join(parked), self._remaining

    def resume(self) -> None:
        """Split what a PAUSE kept; it may pause again, keeping what is left."""
        parked, self._parked = self._parked, []
        for data in parked:
            self.feed(data)

    def _whole_frame(self, data: Buffer) -> bool:
        """The usual chunk, exactly one whole frame: handled here without the general
        splitting machinery (it runs twice per small request). False: not such a chunk,
        nothing done."""
        end = len(data)
        if end < 4:
            return False
        (size,) = _LENGTH.unpack_from(data, 0)
        if size != end - 4 or size > self.max_frame:
            return False
        handler = self._handler
        body = memoryview(data)[4:]
        mode = handler.frame_started(body, size)
        out: list[Buffer] = []
        if handler.inject:
            out.extend(handler.inject)
            handler.inject.clear()
        if mode <= STREAM_KEEP:  # the usual modes first: this runs twice per small request
            out.append(data)
            if mode == STREAM_KEEP:
                handler.frame_completed(body)
            elif mode == STREAM_NOTIFY:
                handler.frame_completed(None)
        elif mode == HOLD:
            out.extend(handler.frame_held(body, [data]))
        elif mode == STREAM_OBSERVE:
            out.append(data)
            handler.frame_piece(body, True)
        elif mode == STOP:
            self.stopped = True
        elif mode == PAUSE:
            self._parked.append(data)
        if out:
            self._write(out)
        self.mid_frame_since = None
        handler.chunk_done()
        return True

    def restart_frame_clock(self) -> None:
        """Reading resumed after a pause: the unfinished frame gets a fresh timeout."""
        if self.mid_frame_since is not None:
            self.mid_frame_since = time.monotonic()

    def _split(self, view: memoryview, pos: int, out: list[Buffer]) -> bool:
        """Frames from `pos` on; True when the chunk ends inside a frame begun here."""
        handler = self._handler
        end = len(view)
        run = pos  # start of bytes to forward verbatim, not yet in `out`
        while pos < end:
            avail = end - pos
            if avail < 4:
                return self._stash(view, pos, run, out)
            (size,) = _LENGTH.unpack_from(view, pos)
            if not self._size_ok(size, view, run, pos, out):
                return False
            body_avail = size if size <= avail - 4 else avail - 4
            if body_avail < size and body_avail < self.min_head:
                return self._stash(view, pos, run, out)
            mode = handler.frame_started(view[pos + 4 : pos + 4 + body_avail], size)
            if handler.inject:
                if run < pos:
                    out.append(view[run:pos])
                run = pos
                out.extend(handler.inject)
                handler.inject.clear()
            if mode == NEED_MORE and body_avail < size:
                self._head_want = _more(body_avail)
                return self._stash(view, pos, run, out)
            if mode == STOP:
                self._stop(view, run, pos, out)
                return False
            if mode == PAUSE:
                if run < pos:
                    out.append(view[run:pos])
                self._parked.append(view[pos:])
                return False
            frame_end = pos + 4 + size
            if frame_end <= end:
                if mode == HOLD:
                    if run < pos:
                        out.append(view[run:pos])
                    out.extend(handler.frame_held(view[pos + 4 : frame_end], [view[pos:frame_end]]))
                    run = frame_end
                elif mode == STREAM_KEEP:
                    handler.frame_completed(view[pos + 4 : frame_end])
                elif mode == STREAM_NOTIFY:
                    handler.frame_completed(None)
                elif mode == STREAM_OBSERVE:
                    handler.frame_piece(view[pos + 4 : frame_end], True)
                pos = frame_end
                continue
            if mode == STREAM_KEEP and size > self.keep_limit:
                mode = handler.observe_instead(size)
            self._remaining = frame_end - end
            self._mode = mode
            if mode == HOLD:
                if run < pos:
                    out.append(view[run:pos])
                run = end
            if mode == HOLD:
                self._pieces = [view[pos:end]]
            elif mode == STREAM_KEEP:
                self._keep_start(view[pos:end], size)
            elif mode == STREAM_OBSERVE:
                handler.frame_piece(view[pos + 4 : end], False)
            pos = end
            if run < pos:
                out.append(view[run:pos])
            return True
        if run < pos:
            out.append(view[run:pos])
        return False

    def _size_ok(self, size: int, view: memoryview, run: int, pos: int, out: list[Buffer]) -> bool:
        if 0 <= size <= self.max_frame:
            return True
        self._stop(view, run, pos, out)
        self._handler.frame_too_large(size)
        return False

    def _stop(self, view: memoryview, run: int, pos: int, out: list[Buffer]) -> None:
        """Forward the frames before `pos`, drop the rest of the stream."""
        if run < pos:
            out.append(view[run:pos])
        self.stopped = True
        self._pieces = None
        self._kept = None
        self._undecided = None
        self._remaining = 0

    def _stash(self, view: memoryview, pos: int, run: int, out: list[Buffer]) -> bool:
        """Keep a frame start too short to decide on (a few header bytes)."""
        if run < pos:
            out.append(view[run:pos])
        self._undecided = bytearray(view[pos:])
        return True

    def _continue_frame(self, view: memoryview, pos: int, out: list[Buffer]) -> int:
        take = min(self._remaining, len(view) - pos)
        piece = view[pos : pos + take]
        mode = self._mode
        if mode == HOLD:
            assert self._pieces is not None
            self._pieces.append(piece)
        else:
            out.append(piece)
            if mode == STREAM_KEEP:
                self._keep(piece)
            elif mode == STREAM_OBSERVE:
                self._handler.frame_piece(piece, take == self._remaining)
        self._remaining -= take
        if not self._remaining:
            pieces, self._pieces = self._pieces, None
            self._complete(mode, pieces, out)
        return pos + take

    def _keep_start(self, start: Buffer, size: int) -> None:
        # One buffer of the frame's size, filled as pieces come: no chunk stays alive
        # for the sake of a few bytes of it, and no join at the end.
        self._kept = bytearray(4 + size)
        self._kept_at = 0
        self._keep(start)

    def _keep(self, piece: Buffer) -> None:
        kept = self._kept
        assert kept is not None
        at = self._kept_at
        kept[at : at + len(piece)] = piece
        self._kept_at = at + len(piece)

    def _complete(self, mode: int, pieces: list[Buffer] | None, out: list[Buffer]) -> None:
        """The end of a frame that spanned chunks (or began in the undecided buffer)."""
        handler = self._handler
        if mode == HOLD:
            assert pieces is not None
            whole = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            out.extend(handler.frame_held(memoryview(whole)[4:], pieces))
        elif mode == STREAM_KEEP:
            kept, self._kept = self._kept, None
            assert kept is not None
            handler.frame_completed(memoryview(kept)[4:])
        elif mode == STREAM_NOTIFY:
            handler.frame_completed(None)

    def _resolve_undecided(self, view: memoryview, out: list[Buffer]) -> int:
        """Grow the cut frame start from this chunk until its handler decides."""
        handler = self._handler
        buf = self._undecided
        assert buf is not None
        pos, end = 0, len(view)
        while True:
            want = 4
            if len(buf) >= 4:
                (size,) = _LENGTH.unpack_from(buf, 0)
                want = 4 + min(size, self._head_want)
            if len(buf) < want:
                take = min(want - len(buf), end - pos)
                buf += view[pos : pos + take]
                pos += take
                if len(buf) < want:
                    return pos
                if len(buf) == 4 and not self._size_ok(
                    _LENGTH.unpack_from(buf, 0)[0], view, 0, 0, out
                ):
                    return end
                continue
            head = memoryview(bytes(buf))[4:]
            mode = handler.frame_started(head, size)
            if handler.inject:
                out.extend(handler.inject)
                handler.inject.clear()
            if mode == NEED_MORE and len(head) < size:
                self._head_want = _more(len(head))
                continue
            if mode == STOP:
                self._stop(view, 0, 0, out)
                return end
            if mode == PAUSE:
                self._undecided = None
                self._head_want = self.min_head
                self._parked.append(bytes(buf))
                if pos < end:
                    self._parked.append(view[pos:])
                return end
            return self._decided(mode, bytes(buf), size, pos, out)

    def _decided(self, mode: int, start: bytes, size: int, pos: int, out: list[Buffer]) -> int:
        self._undecided = None
        self._head_want = self.min_head
        if mode != HOLD:
            out.append(start)
        self._remaining = 4 + size - len(start)
        if mode == STREAM_KEEP and self._remaining and size > self.keep_limit:
            mode = self._handler.observe_instead(size)
        self._mode = mode
        self._pieces = [start] if mode == HOLD else None
        if mode == STREAM_KEEP:
            self._keep_start(start, size)
        elif mode == STREAM_OBSERVE:
            self._handler.frame_piece(memoryview(start)[4:], not self._remaining)
        if not self._remaining:
            pieces, self._pieces = self._pieces, None
            self._complete(mode, pieces, out)
        return pos


def _more(have: int) -> int:
    return min(max(_FIRST_RETRY, 2 * have), HEAD_CAP)
