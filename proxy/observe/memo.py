"""What small frames that repeat byte for byte decode to, kept once per process, with
their request log fields already rendered.

Clients repeat many small requests exactly, correlation id apart: metadata refreshes,
heartbeats, FindCoordinator, ApiVersions on every new connection; brokers repeat
their answers to them. Decoding and summarising such a frame costs tens of
microseconds of Python on the event loop; finding it here costs a copy and a hash of
at most `MAX_FRAME_BYTES` bytes. Frames that differ (most Produce and Fetch traffic)
miss and are decoded as before, at the price of that copy.

A key is the frame's bytes without its correlation id, prefixed with what says how to
read them: a request's own api key and version (`request_key`), a response's request's
(`response_key`), a version for the ApiVersions cap (`version_key`). One bytes object:
the C steady-state path (proxy/_steady.c) makes the same keys from the same bytes and
looks them up in the same dicts. Values must not depend on anything but the frame's
bytes (callers keep per-connection and learnt state out of them).

An entry keeps what the frame means once: a request's decoded form and line fields
(`RequestEntry`, which is also the request's token while it awaits its answer: read
only, shared by every request with those bytes), a response's line fields
(`ResponseEntry`), an ApiVersions answer's rewrite (`CapEntry`). Each has its line
fields rendered as JSON once (`fragment`, proxy/observe/request_line.py), so a line
about a memoised exchange is put together from bytes instead of rendered again.
"""

from __future__ import annotations

import struct
from typing import Any

MAX_FRAME_BYTES = 2048
MAX_ENTRIES = 2048
# ApiVersions answers are kept decoded, whole, and a broker's answer changes with its
# finalized_features_epoch, which follows the metadata log: KRaft appends to it at least
# every metadata.max.idle.interval.ms (500 ms by default), so each broker's answer is new
# twice a second and found again only within that half second. A few entries per broker
# hold every hit there is; MAX_ENTRIES of them made the proxy's memory grow for a quarter
# of an hour (bench/README.md, Soak).
API_VERSIONS_ENTRIES = 64
_API = struct.Struct(">hh")
_VERSION = struct.Struct(">h")


def request_key(frame: memoryview) -> bytes | None:
    """A request frame's key: its api key and version, then what follows its correlation id."""
    if len(frame) > MAX_FRAME_BYTES or len(frame) < 8:
        return None
    return frame[:4].tobytes() + frame[8:]


def response_key(api_key: int, version: int, frame: memoryview) -> bytes | None:
    """A response frame's key: the api key and version it answers, then what follows its
    correlation id."""
    if len(frame) > MAX_FRAME_BYTES or len(frame) < 4:
        return None
    return _API.pack(api_key, version) + frame[4:]


def version_key(version: int, frame: memoryview) -> bytes | None:
    """An ApiVersions answer's key for its cap: the version it is read as, then what
    follows its correlation id."""
    if len(frame) > MAX_FRAME_BYTES or len(frame) < 4:
        return None
    return _VERSION.pack(version) + frame[4:]


class FrameMemo:
    """A bounded map from a frame's key (above) to its entry."""

    __slots__ = ("_entries", "max_entries", "hits", "misses")

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: dict[bytes, Any] = {}
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> Any:
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: bytes, value: Any) -> None:
        entries = self._entries
        if len(entries) >= self.max_entries:
            # Traffic that does not repeat: start again rather than track recency on
            # every hit (a full memo is at most ~4 MiB of keys). The same dict object:
            # the C path holds it.
            entries.clear()
        entries[key] = value


class RequestEntry:
    """A request decoded once: its `request`, its line `fields`, and, rendered, what its
    lines say about it. Also the token (chain.Token's reading side) of every request with
    these bytes whose api no link of the chain reads: nothing changes it after it is made."""

    __slots__ = (
        "request",  # the decoded Request (no views of the chunk it came in)
        "api",  # the api's name, as on its lines and metrics
        "fields",  # the line's request fields (request_fields)
        # rendered when the memo first finds it (most frames are never seen again):
        "head",  # `,"api_key":N,"api":"...","api_version":N`
        "fragment",  # the fields but those the connection's identity gives (`overlap`)
        "mask",  # request_line.key_mask of the fields
        "overlap",  # ((identity field, value), ...): fields the identity also gives
        "linked",  # a link of the chain reads this api: never a token itself
    )

    # chain.Token's other fields, as a request with no link and no error has them
    correlation_id = None
    decode_error = None
    response = None
    ask = None
    asked_by = None

    def __init__(self, request: Any, api: str, fields: dict[str, Any], linked: bool) -> None:
        self.request = request
        self.api = api
        self.fields = fields
        self.head = b""
        self.fragment: bytes | None = None
        self.mask = 0
        self.overlap: tuple[tuple[str, Any], ...] = ()
        self.linked = linked


class ResponseEntry:
    """A skimmed response's line fields (`fields`, shared: copy before changing), and
    them rendered (`fragment`). Made when the memo first finds them: until then they are
    memoised as a plain dict (most answers never come again)."""

    __slots__ = ("fields", "fragment", "mask", "errors")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        self.fragment = b""
        self.mask = 0
        self.errors = bool(fields["errors"])


class CapEntry:
    """An ApiVersions answer as capped once: the rewrite (`tail`, the frame after its
    correlation id, or None to forward it as it came), the answer decoded, the broker's
    own ranges, and its line fields (`fields`, rendered
    as `fragment`)."""

    __slots__ = ("tail", "response", "ranges", "fields", "fragment", "mask", "errors")

    def __init__(
        self, tail: bytes | None, response: Any, ranges: dict[int, tuple[int, int]]
    ) -> None:
        self.tail = tail
        self.response = response
        self.ranges = ranges
        self.fields: dict[str, Any] | None = None  # made at its first answer forwarded
        self.fragment: bytes | None = None  # at its second
        self.mask = 0
        self.errors = False
