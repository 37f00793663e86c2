"""Requests a client sent that a closing connection never forwarded are each a
`request_incomplete` line with the close's reason and counted, as the client counts them
sent: those that came while the proxy was still connecting to the broker, when that
connection failed (the broker is down, as while it restarts), and those that waited
behind `limits.max_in_flight_requests` (parked, or unread in the socket) when the broker
connection broke. (librdkafka's "Sent ApiVersionRequest" and a Produce had no line in
the request log while a broker was down or died: tests/interop/test_kafka_faults.py.)

The unreachable broker is a listener whose accept queue is full: connecting to it waits
(its SYNs are dropped) until `limits.connect_timeout_seconds`, so the client's requests
come while the proxy connects, every time.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.hostile import connect, eventually, hostile_proxy, sidecar_config
from support.observed import ObservedProxy
from support.proxy_harness import LOCAL, FakeBroker, is_closed, read_frame, request_frame

from codec import ApiKey
from proxy.forward.connection import Connection

API_VERSIONS, METADATA = ApiKey.API_VERSIONS, ApiKey.METADATA
REQUESTS = (
    request_frame(API_VERSIONS, 0, 7)
    + request_frame(METADATA, 0, 8, struct.pack(">i", 0))
    + request_frame(METADATA, 0, 9, struct.pack(">i", 0))[:-2]  # cut: no request
)


@contextmanager
def unanswering_broker() -> Iterator[str]:
    """host:port where connections wait and are never accepted."""
    listener = socket.create_server((LOCAL, 0), backlog=0)
    address = listener.getsockname()
    fillers = []
    try:
        while True:  # until a connection attempt waits: the accept queue is full
            filler = socket.socket()
            fillers.append(filler)
            filler.settimeout(0.5)
            try:
                filler.connect(address)
            except TimeoutError:
                break
        yield f"{address[0]}:{address[1]}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def early(px: ObservedProxy) -> list[bytes]:
    """What the proxy read from its one client before the broker connection."""
    conns: list[Connection] = px.call(lambda: list(px.server.connections.values()))
    return px.call(lambda: list(conns[0]._early)) if conns else []


@pytest.mark.slow
@pytest.mark.parametrize("reads", ["one_read", "two_reads"])
def test_requests_sent_before_a_failed_broker_connection_are_logged_incomplete(
    tmp_path: Path, reads: str
) -> None:
    with (
        unanswering_broker() as broker,
        ObservedProxy(
            sidecar_config(broker, tmp_path / "requests.log", connect_timeout_seconds=2)
        ) as px,
    ):
        sock = connect(px.port)
        port = sock.getsockname()[1]
        if reads == "one_read":
            sock.sendall(REQUESTS)
        else:
            # The proxy reads once (the ApiVersions request), then waits for the broker
            # connection before reading more: the rest waits in its socket until the
            # close reads it.
            first = len(request_frame(API_VERSIONS, 0, 7))
            sock.sendall(REQUESTS[:first])
            assert eventually(lambda: early(px) == [REQUESTS[:first]])
            sock.sendall(REQUESTS[first:])
            time.sleep(0.2)
            assert early(px) == [REQUESTS[:first]]
        assert is_closed(sock, timeout=15)
        assert eventually(lambda: px.closed("upstream_connect_failed") == 1)
        lines = px.log_lines("request_incomplete", port)
        assert [(line["api"], line["api_version"], line["correlation_id"]) for line in lines] == [
            ("ApiVersions", 0, 7),
            ("Metadata", 0, 8),
        ]
        assert {line["reason"] for line in lines} == {"upstream_connect_failed"}
        # decoded as forwarded requests are: whose they were
        assert {line["client_id"] for line in lines} == {"t"}
        assert "decode_error" not in lines[0] and "decode_error" not in lines[1]
        assert all(line["response_bytes"] is None for line in lines)
        assert px.log_lines("request", port) == []
        for api in ("ApiVersions", "Metadata"):
            counted = px.metric(
                "kafkalens_requests_incomplete_total", api=api, reason="upstream_connect_failed"
            )
            assert counted == 1, api
        assert px.pending_total() == 0
        assert px.metric("kafkalens_upstream_failures_total", reason="timeout") == 1


def test_requests_waiting_behind_the_bound_when_the_broker_connection_breaks(
    tmp_path: Path,
) -> None:
    """Bound 2: two requests go on, the third is parked, the fourth waits unread in the
    socket; the broker hangs up. Then the same with two more: past the bound (at most
    that many not forwarded are logged), counted only."""
    for sent, logged in ((4, 4), (6, 4)):
        got_two = threading.Event()
        go = threading.Event()

        def broker(sock: socket.socket) -> None:
            read_frame(sock)
            read_frame(sock)
            got_two.set()  # noqa: B023 - each round's own, waited on in that round
            assert go.wait(10)  # noqa: B023
            sock.close()

        log_path = tmp_path / f"requests-{sent}.log"
        with (
            FakeBroker(broker) as fake,
            ObservedProxy(sidecar_config(fake.address, log_path, max_in_flight_requests=2)) as px,
        ):
            sock = connect(px.port)
            port = sock.getsockname()[1]
            frames = [
                request_frame(METADATA, 0, corr, struct.pack(">i", 0)) for corr in range(sent)
            ]
            sock.sendall(frames[0] + frames[1])
            assert got_two.wait(10)
            sock.sendall(frames[2])  # read, and parked: two requests await their answers
            assert eventually(lambda: px.metric("kafkalens_in_flight_limit_hits_total") == 1)
            sock.sendall(b"".join(frames[3:]))  # reading is paused: they stay in the socket
            go.set()
            assert is_closed(sock, timeout=15)
            assert eventually(lambda: px.closed("upstream_eof") == 1)
            lines = px.log_lines("request_incomplete", port)
            assert [line["correlation_id"] for line in lines] == list(range(logged))
            assert {(line["reason"], line["client_id"]) for line in lines} == {
                ("upstream_eof", "t")
            }
            counted = px.metric("kafkalens_requests_incomplete_total", reason="upstream_eof")
            assert counted == sent
            assert px.metric("kafkalens_incomplete_requests_unlogged_total") == sent - logged


def test_a_connection_closed_for_a_request_reads_nothing_after_it(tmp_path: Path) -> None:
    """A SaslHandshake over the before-auth limit closes the connection as its head comes
    in. Its body (here, Metadata requests one after another) is not requests: where the
    next request would start is not known, so nothing more is read as one."""
    with hostile_proxy(tmp_path) as (px, _):
        sock = connect(px.port)
        port = sock.getsockname()[1]
        lookalike = request_frame(METADATA, 0, 5, struct.pack(">i", 0)) * 100_000  # 2.2 MB
        head = struct.pack(">ihhi", 8 + len(lookalike), 17, 1, 4)  # SaslHandshake v1
        with contextlib.suppress(OSError):
            sock.sendall(head + lookalike)
        assert is_closed(sock, timeout=15)
        assert eventually(lambda: px.closed("frame_too_large") == 1)
        assert px.log_lines("request_incomplete", port) == []
        assert px.metric("kafkalens_requests_incomplete_total") == 0
