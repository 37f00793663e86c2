"""Group protocol payloads (KIP-559): decode the opaque `Metadata`/`Assignment` bytes.

A group message says which protocol its payloads follow: JoinGroup responses from v7,
SyncGroup requests and responses from v5 carry `ProtocolType` (and SyncGroup the
`ProtocolName`), JoinGroup requests and DescribeGroups responses always did. We use
only what the message itself carries; where a version carries no protocol type we say
so instead of guessing from earlier messages on the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from codec.connect_protocol import decode_connect_assignment, decode_connect_metadata
from codec.errors import DecodeError
from codec.generated.api_key import ApiKey
from codec.messages import struct_decoder
from codec.schema import message
from codec.wire import DEFAULT_ELEMENT_BUDGET

CONSUMER = "consumer"
CONNECT = "connect"
_VERSION = struct.Struct(">h")


def _consumer_payload(name: str, data: bytes | memoryview) -> dict[str, Any]:
    """ConsumerProtocolSubscription/Assignment: int16 version, then that version's struct.

    Like Kafka's ConsumerProtocol, a version newer than we know is read with the newest
    layout we know (newer versions only append fields) and its extra bytes are ignored.
    """
    buf = memoryview(data)
    if len(buf) < 2:
        raise DecodeError(f"{name} shorter than its version", direction=name, offset=0)
    (version,) = _VERSION.unpack_from(buf, 0)
    if version < 0:
        raise DecodeError(f"{name} has negative version {version}", direction=name, offset=0)
    newest = message(name).max_version
    decoder = struct_decoder(name, min(version, newest))
    try:
        value, end = decoder(buf, 2, len(buf), [DEFAULT_ELEMENT_BUDGET])
    except DecodeError as exc:
        raise exc.with_context(direction=name) from None
    except (UnicodeDecodeError, struct.error, IndexError, ValueError) as exc:
        raise DecodeError(f"malformed {name}: {type(exc).__name__}", direction=name) from None
    if version <= newest and end != len(buf):
        raise DecodeError(f"{len(buf) - end} bytes after {name}", direction=name, offset=end)
    return {"version": version, **value}


def _summarise_user_data(payload: dict[str, Any]) -> dict[str, Any]:
    user_data = payload.pop("user_data", None)
    payload["user_data_bytes"] = None if user_data is None else len(user_data)
    return payload


def decode_subscription(protocol_type: str | None, data: bytes | memoryview | None) -> dict[str, Any]:
    """A member's JoinGroup metadata, as far as its protocol type lets us read it."""
    if data is None:
        return {"opaque": True, "reason": "null"}
    if protocol_type == CONSUMER:
        return _summarise_user_data(_consumer_payload("ConsumerProtocolSubscription", data))
    if protocol_type == CONNECT:
        return decode_connect_metadata(data)
    return _opaque(protocol_type, data)


def decode_assignment(protocol_type: str | None, data: bytes | memoryview | None) -> dict[str, Any]:
    """A member's SyncGroup assignment, as far as its protocol type lets us read it."""
    if data is None:
        return {"opaque": True, "reason": "null"}
    if protocol_type == CONSUMER:
        if len(data) == 0:
            # Kafka's coordinator sends an empty assignment to members on error.
            return {"version": None, "assigned_partitions": [], "user_data_bytes": None}
        return _summarise_user_data(_consumer_payload("ConsumerProtocolAssignment", data))
    if protocol_type == CONNECT:
        return decode_connect_assignment(data)
    return _opaque(protocol_type, data)


def _opaque(protocol_type: str | None, data: bytes | memoryview) -> dict[str, Any]:
    if protocol_type is None:
        reason = "this message version carries no protocol type"
    else:
        reason = f"protocol type {protocol_type!r} is not decoded"
    return {"opaque": True, "reason": reason, "bytes": len(data)}


def _safely(decode: Any, protocol_type: str | None, data: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = decode(protocol_type, data)
        return result
    except DecodeError as exc:
        return {"opaque": True, "reason": f"undecodable: {exc}", "bytes": len(data)}


def group_payloads(api_key: int, kind: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """Decoded payloads of a JoinGroup/SyncGroup/DescribeGroups message, or None.

    Returns {"protocol_type", "protocol_name", "subscriptions"|"assignments"} with one
    entry per member (keyed by member id where the message has one).
    """
    handler = _HANDLERS.get((api_key, kind))
    return handler(body) if handler else None


def _join_request(body: dict[str, Any]) -> dict[str, Any]:
    protocol_type = body.get("protocol_type")
    return {
        "protocol_type": protocol_type,
        "protocols": [p["name"] for p in body.get("protocols") or ()],
        "subscriptions": {
            p["name"]: _safely(decode_subscription, protocol_type, p["metadata"])
            for p in body.get("protocols") or ()
        },
    }


def _join_response(body: dict[str, Any]) -> dict[str, Any]:
    protocol_type = body.get("protocol_type")  # present from v7 only (KIP-559)
    return {
        "protocol_type": protocol_type,
        "protocol_name": body.get("protocol_name"),
        "subscriptions": {
            m["member_id"]: _safely(decode_subscription, protocol_type, m["metadata"])
            for m in body.get("members") or ()
        },
    }


def _sync_request(body: dict[str, Any]) -> dict[str, Any]:
    protocol_type = body.get("protocol_type")  # present from v5 only (KIP-559)
    return {
        "protocol_type": protocol_type,
        "protocol_name": body.get("protocol_name"),
        "assignments": {
            a["member_id"]: _safely(decode_assignment, protocol_type, a["assignment"])
            for a in body.get("assignments") or ()
        },
    }


def _sync_response(body: dict[str, Any]) -> dict[str, Any]:
    protocol_type = body.get("protocol_type")
    return {
        "protocol_type": protocol_type,
        "protocol_name": body.get("protocol_name"),
        "assignment": _safely(decode_assignment, protocol_type, body.get("assignment")),
    }


def _describe_response(body: dict[str, Any]) -> dict[str, Any]:
    groups = {}
    for group in body.get("groups") or ():
        protocol_type = group.get("protocol_type")
        groups[group["group_id"]] = {
            "protocol_type": protocol_type,
            "protocol_name": group.get("protocol_data"),
            "members": {
                m["member_id"]: {
                    "subscription": _safely(decode_subscription, protocol_type, m["member_metadata"]),
                    "assignment": _safely(decode_assignment, protocol_type, m["member_assignment"]),
                }
                for m in group.get("members") or ()
            },
        }
    return {"groups": groups}


_HANDLERS: dict[tuple[int, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
    (ApiKey.JOIN_GROUP, "request"): _join_request,
    (ApiKey.JOIN_GROUP, "response"): _join_response,
    (ApiKey.SYNC_GROUP, "request"): _sync_request,
    (ApiKey.SYNC_GROUP, "response"): _sync_response,
    (ApiKey.DESCRIBE_GROUPS, "response"): _describe_response,
}
