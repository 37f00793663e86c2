"""Gateway mode's hooks: whatever other hooks do, plus every node address rewritten.

`GatewayHooks` wraps the hooks the proxy would run anyway (decoding, logging,
metrics) and adds one thing: a response that names nodes is decoded, each node's
host/port is replaced by the mapper's answer (proxy/gateway/gateway.py), and re-encoded.
Which responses, at which versions, where in them, and which kind of endpoint (broker or
controller) each address is, comes from the schemas and the declarations of
proxy/gateway/addresses.py, so a new message that carries an address is not missed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import structlog

from codec import DecodeError, HeaderPolicy, Response, decode_response, encode_response
from codec.schema import api_messages, message
from proxy.gateway.addresses import (
    BROKER,
    EndpointKind,
    Mapper,
    address_fields,
    rewrite_addresses,
    rewritten_api_keys,
)
from proxy.hooks import ConnectionInfo, FrameObserver, Hooks, Pending

log = structlog.get_logger("kafkalens.gateway")


@cache
def _response_name(api_key: int) -> str:
    return api_messages()[api_key][1].name


def rewrite_node_addresses(
    frame: memoryview | bytes,
    api_key: int,
    api_version: int,
    policy: HeaderPolicy,
    mapper: Mapper,
    route: EndpointKind = BROKER,
) -> bytes | None:
    """The response with every node address mapped, or None when none changed (the
    original bytes then go on untouched). `route`: the kind of the route it came on.
    LookupError for an endpoint kind no release defines."""
    name = _response_name(api_key)
    fields = address_fields(name, api_version)
    if not fields:
        if message(name).definition(api_version) is None:
            # newer than the codec (a client that did not negotiate: the ApiVersions cap
            # keeps the others below): its addresses, if any, go out unrewritten
            raise DecodeError(f"{name} v{api_version}: a version the codec does not know")
        return None  # this version names no node (e.g. Fetch before v16): no decoding
    response, trailing = _decode(frame, api_key, api_version, policy)
    if not rewrite_addresses(response.body, fields, mapper, name, route):
        return None
    return encode_response(response, policy) + trailing


def _decode(
    frame: memoryview | bytes, api_key: int, api_version: int, policy: HeaderPolicy
) -> tuple[Response, bytes]:
    """The response, and whatever bytes follow its end, kept as they are.

    Clients ignore bytes after a response's end, and librdkafka's mock cluster adds one
    to its flexible responses; refusing those would leave the brokers' own addresses
    in them, for clients to go round the gateway.
    """
    try:
        return decode_response(frame, api_key, api_version, policy), b""
    except DecodeError as exc:
        end = exc.offset
        if end is None or not 0 < end < len(frame):
            raise
        try:  # if the message ends at the offset, what failed was only what follows it
            response = decode_response(frame[:end], api_key, api_version, policy)
        except DecodeError:
            raise exc from None
        return response, bytes(frame[end:])


class GatewayHooks(Hooks):
    """`inner`'s behaviour, with node addresses rewritten by `mapper` before sending.
    `route_kind` says which kind of endpoint a listener (by name) forwards to.

    Every hook is delegated, so the connection assembles every frame even when `inner`
    reads none; the hooks `kafkalens proxy` runs read them all anyway.
    """

    def __init__(
        self,
        inner: Hooks,
        mapper: Mapper,
        route_kind: Callable[[str], EndpointKind],
        policy: HeaderPolicy,
    ) -> None:
        self.inner = inner
        self.mapper = mapper
        self.route_kind = route_kind
        self.policy = policy
        self.inspects_requests = inner.inspects_requests
        self.admit_api_keys = inner.admit_api_keys
        self.address_api_keys = rewritten_api_keys()
        self.rewrite_api_keys = frozenset(inner.rewrite_api_keys) | self.address_api_keys

    def rewrite_response(
        self, info: ConnectionInfo, frame: memoryview, pending: Pending
    ) -> bytes | None:
        inner = None
        if pending.api_key in self.inner.rewrite_api_keys:
            inner = self.inner.rewrite_response(info, frame, pending)
        if pending.api_key not in self.address_api_keys:
            return inner
        source = frame if inner is None else inner
        try:
            ours = rewrite_node_addresses(
                source,
                pending.api_key,
                pending.api_version,
                self.policy,
                self.mapper,
                self.route_kind(info.listener),
            )
        except (DecodeError, LookupError) as exc:
            # the client now sees the nodes' own addresses and may go round the gateway
            why = "undecodable response" if isinstance(exc, DecodeError) else "unknown kind"
            log.error(
                f"node addresses not rewritten: {why}",
                conn=info.conn_id,
                api_key=pending.api_key,
                api_version=pending.api_version,
                error=str(exc),
            )
            return inner
        return inner if ours is None else ours

    # -- the rest is the inner hooks' ---------------------------------------------------

    def api_name(self, api_key: int) -> str:
        return self.inner.api_name(api_key)

    def connection_opened(self, info: ConnectionInfo) -> None:
        self.inner.connection_opened(info)

    def admit_request(
        self,
        info: ConnectionInfo,
        frame: memoryview,
        api_key: int,
        api_version: int,
        correlation_id: int,
    ) -> bytes | None:
        return self.inner.admit_request(info, frame, api_key, api_version, correlation_id)

    def request_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        self.inner.request_forwarded(info, frame, pending)

    def request_without_response(
        self, info: ConnectionInfo, frame: memoryview, pending: Pending
    ) -> None:
        self.inner.request_without_response(info, frame, pending)

    def request_not_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        self.inner.request_not_forwarded(info, frame, pending)

    def response_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        self.inner.response_forwarded(info, frame, pending)

    def request_stream(
        self, info: ConnectionInfo, pending: Pending, expects_response: bool
    ) -> FrameObserver | None:
        return self.inner.request_stream(info, pending, expects_response)

    def response_stream(self, info: ConnectionInfo, pending: Pending, size: int) -> FrameObserver | None:
        return self.inner.response_stream(info, pending, size)

    def sasl_token(self, info: ConnectionInfo, token: memoryview) -> None:
        self.inner.sasl_token(info, token)

    def request_incomplete(self, info: ConnectionInfo, pending: Pending, reason: str) -> None:
        self.inner.request_incomplete(info, pending, reason)

    def connection_closed(self, info: ConnectionInfo, reason: str) -> None:
        self.inner.connection_closed(info, reason)

    def reopen_logs(self) -> None:
        self.inner.reopen_logs()

    def close(self) -> None:
        self.inner.close()
