"""What small frames that repeat byte for byte decode to, kept once per process.

Clients repeat many small requests exactly, correlation id apart: metadata refreshes,
heartbeats, FindCoordinator, ApiVersions on every new connection; brokers repeat
their answers to them. Decoding and summarising such a frame costs tens of
microseconds of Python on the event loop; finding it here costs a copy and a hash of
at most `MAX_FRAME_BYTES` bytes. Frames that differ (most Produce and Fetch traffic)
miss and are decoded as before, at the price of that copy.

Keys leave the correlation id out; values must not depend on anything but the
frame's bytes (callers keep per-connection and learnt state out of them).
"""

from __future__ import annotations

from typing import Any

MAX_FRAME_BYTES = 2048
MAX_ENTRIES = 2048


class FrameMemo:
    """A bounded map from (api key, version, frame bytes after the correlation id)."""

    __slots__ = ("_entries", "skip", "hits", "misses")

    def __init__(self, skip: int) -> None:
        self._entries: dict[tuple[int, int, bytes], Any] = {}
        self.skip = skip  # frame bytes up to the end of the correlation id
        self.hits = 0
        self.misses = 0

    def key(self, api_key: int, version: int, frame: memoryview) -> tuple[int, int, bytes] | None:
        """The key of a frame small enough to keep, or None."""
        if len(frame) > MAX_FRAME_BYTES:
            return None
        return (api_key, version, frame[self.skip :].tobytes())

    def get(self, key: tuple[int, int, bytes]) -> Any:
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: tuple[int, int, bytes], value: Any) -> None:
        if len(self._entries) >= MAX_ENTRIES:
            # Traffic that does not repeat: start again rather than track recency on
            # every hit (a full memo is at most ~4 MiB of keys).
            self._entries.clear()
        self._entries[key] = value
