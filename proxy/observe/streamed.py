"""Frames above limits.observe_whole_frame_bytes, decoded as they stream past
(codec/stream.py). A `Streamed` feeds each piece to its decoder and, when the frame
ends, hands itself to `done`: the request log's hooks, which make the same line of it
as of a whole frame, its record batches counted from the batch headers as they passed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from codec import DecodeError
from codec.stream import FrameStream
from proxy.hooks import ConnectionInfo, FrameObserver, Pending
from proxy.metrics import Metrics


class Streamed(FrameObserver):
    """One frame above the whole-frame threshold, decoded as it streams past."""

    __slots__ = ("on_done", "stream", "size", "error", "expects_response")

    def __init__(
        self,
        on_done: Callable[[ConnectionInfo, Pending, Streamed], None],
        stream: FrameStream | None,
        size: int,
        expects_response: bool = True,
    ) -> None:
        self.on_done = on_done
        self.stream = stream  # None: nothing to decode (an unknown api, or a request that failed)
        self.size = size  # the frame's body size
        self.error: str | None = None
        self.expects_response = expects_response

    def piece(self, info: ConnectionInfo, piece: memoryview, pending: Pending) -> None:
        if self.stream is not None and self.error is None:
            try:
                self.stream.feed(piece)
            except DecodeError as exc:
                self.error = str(exc)

    def done(self, info: ConnectionInfo, nothing: memoryview, pending: Pending) -> None:
        if self.stream is not None and self.error is None:
            try:
                self.stream.finish()
            except DecodeError as exc:
                self.error = str(exc)
        self.on_done(info, pending, self)


def note_dropped(fields: dict[str, Any], stream: FrameStream, metrics: Metrics, direction: str) -> None:
    """Array elements a streamed frame had past the materialising bound
    (limits.observe_max_elements; its facts are from the elements before)."""
    if stream.dropped_elements:
        fields["observed_elements_dropped"] = stream.dropped_elements
        metrics.observed_elements_dropped.labels(direction=direction).inc(stream.dropped_elements)
