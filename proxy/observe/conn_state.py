"""What the observer keeps per connection, and per request until its response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from codec import Response
from proxy.hooks import ConnectionInfo
from proxy.observe.identity import ZERO_UUID, Identity
from proxy.observe.instance_join import JoinKey
from proxy.observe.lag import CommitAsk, FetchAsk, ProduceAsk
from proxy.observe.share import HeartbeatAsk, ShareAsk
from proxy.observe.summary import GroupProtocols


@dataclass
class ConnState:
    identity: Identity
    info: ConnectionInfo | None = None
    requests: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    decode_errors: int = 0
    instance_reported: bool = False
    groups: GroupProtocols = field(default_factory=GroupProtocols)
    # What identity looked like when last published, and its log fields then: every
    # line needs them, and they change a handful of times per connection.
    identity_key: tuple[Any, ...] = ()
    log_fields: dict[str, Any] = field(default_factory=dict)
    broker_telemetry: bool = False  # the broker's ApiVersions lists KIP-714's apis
    # The broker's ApiVersions ranges, api key -> (min, max), once it answered one here.
    broker_ranges: dict[int, tuple[int, int]] | None = None
    join_key: JoinKey | None = None  # waiting under this key for its client's instance id
    joined: bool = False  # its instance id came from another connection
    joinable: bool = True  # False once it has a telemetry exchange of its own
    header_id: UUID | None = None  # the first KIP-1313 header id the client sent


@dataclass
class Token:
    """What a pending request carries until its response: plain values, no buffers."""

    api: str
    correlation_id: int
    fields: dict[str, Any]
    decode_error: str | None = None
    response: Response | None = None  # already decoded by rewrite_response
    # what the lag or share-group tracker reads the response against
    lag: FetchAsk | CommitAsk | ProduceAsk | ShareAsk | HeartbeatAsk | None = None


def note_header_id(state: ConnState, header_id: UUID | None) -> None:
    if state.header_id is None and header_id is not None and header_id != ZERO_UUID:
        state.header_id = header_id


def telemetry_id_mismatch(state: ConnState, body_id: UUID | None) -> str | None:
    """KIP-1313 with KIP-714: a telemetry body's id must be the header's, if both are set."""
    header_id = state.header_id
    if header_id is None or body_id is None or body_id in (ZERO_UUID, header_id):
        return None
    return "telemetry client instance id differs from the request header's"
