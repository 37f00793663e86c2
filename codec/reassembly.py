"""One direction of a TCP connection put back in order, sans I/O (`kafkalens decode`).

Segments come in as a capture holds them: out of order, retransmitted, overlapping,
some missing, and the capture may start after the connection did. `TcpHalf.segment`
returns the bytes that are now in order (`Data`) and says where some will never come
(`Gap`): a segment that does not fit waits, but only `max_held_bytes` of them; past
that the missing bytes are given up on, as they are at `finish`. Memory is the
waiting segments, never more than `max_held_bytes` (plus the one being added).

The peer's acknowledgements end a wait early: bytes it acknowledged that the capture
never showed were dropped by the capture and will not be retransmitted (`acked`).

Sequence numbers are 32 bits and wrap; positions here are unwrapped relative to the
next byte expected, so a connection may carry any number of bytes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

_WRAP = 1 << 32
_HALF = 1 << 31


@dataclass(slots=True)
class Data:
    """In-order bytes, first seen at capture time `ts`."""

    ts: float
    data: bytes


@dataclass(slots=True)
class Gap:
    """Bytes that never came: `lost` of them (None: unknown, the capture started
    mid-stream). What follows does not continue what came before."""

    ts: float
    lost: int | None


Event = Data | Gap


class TcpHalf:
    """The bytes one side sent, in order (see the module docstring)."""

    __slots__ = (
        "max_held_bytes",
        "next",
        "started",
        "_held",
        "held_bytes",
        "duplicate_bytes",
        "lost_bytes",
        "gaps",
        "gave_up_waiting",
        "fin_at",
    )

    def __init__(self, max_held_bytes: int) -> None:
        self.max_held_bytes = max_held_bytes
        self.next: int | None = None  # the position of the next byte expected
        self.started = False  # Data or Gap already given: the stream's start is settled
        self._held: list[tuple[int, int, float, bytes]] = []  # heap: (pos, -len, ts, data)
        self.held_bytes = 0
        self.duplicate_bytes = 0  # retransmitted bytes already given
        self.lost_bytes = 0
        self.gaps = 0
        self.gave_up_waiting = 0  # times max_held_bytes made missing bytes be given up
        self.fin_at: int | None = None  # the position of the FIN, which is no data byte

    def syn(self, seq: int) -> None:
        """A SYN: the stream's first byte is at seq + 1 (a SYN seen late is ignored)."""
        if self.next is None:
            self.next = seq + 1
            self.started = True

    def segment(self, ts: float, seq: int, payload: bytes) -> list[Event]:
        if not payload:
            return []
        out: list[Event] = []
        if self.next is None:  # no SYN: the capture joined a running connection
            self.next = seq
        if not self.started:
            self.started = True
            out.append(Gap(ts, None))
        assert self.next is not None
        pos = self.next + _delta(seq, self.next)
        if pos + len(payload) <= self.next:
            self.duplicate_bytes += len(payload)
            return out
        if pos > self.next:
            self._hold(pos, ts, payload)
            if self.held_bytes > self.max_held_bytes:
                self.gave_up_waiting += 1
                self._skip_to_held(ts, out)
            return out
        self._give(pos, ts, payload, out)
        self._drain(out)
        return out

    def fin(self, seq: int, length: int) -> None:
        """A FIN on a segment at `seq` carrying `length` bytes."""
        if self.next is not None:
            self.fin_at = self.next + _delta(seq, self.next) + length

    def acked(self, ts: float, ack: int) -> list[Event]:
        """The peer acknowledged every byte before `ack`: bytes up to there that never
        came were lost by the capture, not the network (no retransmission will come),
        so waiting for them ends now."""
        out: list[Event] = []
        if self.next is None or not self.started:
            return out
        pos = self.next + _delta(ack, self.next)
        if self.fin_at is not None:
            pos = min(pos, self.fin_at)  # the FIN's own sequence number is acknowledged too
        while pos > self.next:
            if self._held and self._held[0][0] <= pos:
                self._skip_to_held(ts, out)
            else:
                self._lose(ts, pos - self.next, out)
        return out

    def finish(self, ts: float) -> list[Event]:
        """No more segments: what still waits comes out, after the gaps before it."""
        out: list[Event] = []
        while self._held:
            self._skip_to_held(ts, out)
        return out

    def _hold(self, pos: int, ts: float, payload: bytes) -> None:
        heapq.heappush(self._held, (pos, -len(payload), ts, payload))
        self.held_bytes += len(payload)

    def _give(self, pos: int, ts: float, payload: bytes, out: list[Event]) -> None:
        """`payload` at `pos` <= next: its new part, if any, goes out."""
        assert self.next is not None
        skip = self.next - pos
        if skip >= len(payload):
            self.duplicate_bytes += len(payload)
            return
        self.duplicate_bytes += skip
        out.append(Data(ts, payload[skip:] if skip else payload))
        self.next = pos + len(payload)

    def _drain(self, out: list[Event]) -> None:
        held = self._held
        while held and held[0][0] <= (self.next or 0):
            pos, _, ts, payload = heapq.heappop(held)
            self.held_bytes -= len(payload)
            self._give(pos, ts, payload, out)

    def _skip_to_held(self, ts: float, out: list[Event]) -> None:
        """Give up on the bytes before the first waiting segment."""
        assert self.next is not None and self._held
        self._lose(ts, self._held[0][0] - self.next, out)
        self._drain(out)

    def _lose(self, ts: float, lost: int, out: list[Event]) -> None:
        if lost > 0:
            assert self.next is not None
            self.gaps += 1
            self.lost_bytes += lost
            out.append(Gap(ts, lost))
            self.next += lost


def _delta(seq: int, reference: int) -> int:
    """seq's distance from `reference` (unwrapped), modulo 2**32 into [-2**31, 2**31)."""
    d = (seq - reference) % _WRAP
    return d - _WRAP if d >= _HALF else d
