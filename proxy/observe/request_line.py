"""The request log's lines: what every line about a request, or a connection, starts with."""

from __future__ import annotations

from typing import Any

from proxy.hooks import ConnectionInfo, Pending
from proxy.observe.chain import ConnState, Token

UNKNOWN = "unknown"  # the api name of an api key the codec does not know


def request_line(
    info: ConnectionInfo, pending: Pending, token: Token, state: ConnState | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """A request's line: the connection, the request, who sent it, then `extra` (its
    latency and response size, or why it has none), then the request's own fields."""
    line: dict[str, Any] = {
        "conn": info.conn_id,
        "listener": info.listener,
        "client_address": f"{info.client_host}:{info.client_port}",
        "api_key": pending.api_key,
        "api": token.api,
        "api_version": pending.api_version,
        "correlation_id": pending.correlation_id,
        **(state.log_fields if state else {}),
        "request_bytes": pending.request_size,
    }
    if token.decode_error is not None:
        line["decode_error"] = token.decode_error
    line.update(extra)
    line.update(token.fields)
    return line


def connection_fields(info: ConnectionInfo, state: ConnState) -> dict[str, Any]:
    return {
        "conn": info.conn_id,
        "listener": info.listener,
        "client_address": f"{info.client_host}:{info.client_port}",
        "tls_version": info.tls_version,
        "client_cert_subject": info.client_cert_subject,
        **state.identity.log_fields(),
    }
