"""Whether an address is a listener of the kind a route serves, before the route goes there.

A broker route that forwarded to a controller listener would take every client that
connects to it to a node that answers neither Produce nor Fetch (the failure that
DescribeQuorum's controller endpoints, taken for brokers, used to cause). So before a
route opens or moves, the gateway asks the new address what it is: one ApiVersions v0
request (which every Kafka listener answers, before authentication too, KIP-511), and the
api keys it lists say which kind of listener it is:

- a broker's listener answers Produce and Fetch;
- a controller's (KRaft's CONTROLLER listener) answers Vote, which no broker listener
  does (it answers Fetch too: KRaft's own, KIP-595, but never Produce).

The check is one connection, opened and closed, per route opened or moved: never per
client connection. What an address answers is bounded like any frame from a peer: at
most `MAX_ANSWER_BYTES`, within the check's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ssl
import struct

from codec import ApiKey, DecodeError, Request, decode_response, encode_request
from proxy.config import Address
from proxy.gateway.addresses import BROKER, CONTROLLER, EndpointKind

CHECK_CLIENT_ID = "kafkalens-route-check"
# An ApiVersions v0 answer lists ~100 api keys in 6 bytes each: far below this.
MAX_ANSWER_BYTES = 64 * 1024
_CORRELATION_ID = 0x6B6C  # "kl"
_REQUEST = encode_request(
    Request(
        ApiKey.API_VERSIONS,
        0,
        {"correlation_id": _CORRELATION_ID, "client_id": CHECK_CLIENT_ID},
        {},
    )
)
CHECK_REQUEST = struct.pack(">i", len(_REQUEST)) + _REQUEST


# What a listener of each kind answers that one of the other kind does not.
MUST_ANSWER: dict[EndpointKind, frozenset[int]] = {
    BROKER: frozenset({ApiKey.PRODUCE, ApiKey.FETCH}),
    CONTROLLER: frozenset({ApiKey.VOTE}),
}


class Verdict(enum.Enum):
    """What a check found at an address."""

    FITS = "fits"  # a listener of the route's kind
    WRONG_KIND = "wrong_kind"  # it answers, but not as that kind of listener
    UNREACHABLE = "unreachable"  # no answer (refused, timed out, closed, or not Kafka)


def verdict(kind: EndpointKind, api_keys: frozenset[int] | None) -> Verdict:
    """The verdict on a listener that lists `api_keys` (None: no answer) for a route of `kind`."""
    if api_keys is None:
        return Verdict.UNREACHABLE
    return Verdict.FITS if MUST_ANSWER[kind] <= api_keys else Verdict.WRONG_KIND


def read_api_keys(frame: bytes) -> frozenset[int] | None:
    """The api keys an ApiVersions v0 answer (without its length) lists; None if it is
    not one (another correlation id, an error, undecodable)."""
    try:
        response = decode_response(frame, ApiKey.API_VERSIONS, 0)
    except DecodeError:
        return None
    if response.header.get("correlation_id") != _CORRELATION_ID:
        return None
    if response.body.get("error_code", 0) != 0:
        return None
    return frozenset(entry["api_key"] for entry in response.body.get("api_keys") or ())


async def listener_api_keys(
    address: Address,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> frozenset[int] | None:
    """The api keys the listener at `address` answers, or None when it does not answer
    an ApiVersions request within `timeout` seconds."""
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                address.host,
                address.port,
                ssl=tls,
                server_hostname=(server_hostname or address.host) if tls else None,
            )
            writer.write(CHECK_REQUEST)
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            if not 0 < size <= MAX_ANSWER_BYTES:
                return None
            return read_api_keys(await reader.readexactly(size))
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
        return None
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
