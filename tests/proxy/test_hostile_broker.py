"""A hostile broker: the same classes of attack, arriving as responses.

The scripted broker is honest with the well-behaved client and misbehaves for the
connection whose client id names a script. The proxy must cut or forward as for a
hostile client, count what it could not decode, and keep serving everyone else.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import paths
from support.hostile import (
    LIMIT,
    MIB,
    PeakGrowth,
    Sentinel,
    answer,
    api_versions_v0_answer,
    bomb_batch,
    connect,
    hostile_proxy,
)
from support.proxy_harness import is_closed, read_frame, request_frame, write_frame

from codec import ApiKey, decode_request, decode_response, encode_request, encode_response

BOUND = 32 * MIB  # peak RSS growth allowed during any one attack below
METADATA_V0_NO_TOPICS = struct.pack(">i", 0)
GARBAGE = struct.pack(">i", 2**31 - 1) + bytes(range(256)) * 2  # 2**31 - 1 brokers, or keys
GOLDEN = paths.GOLDEN / "kafka-python"
Script = Callable[[socket.socket, bytes], object]


def until_closed(sock: socket.socket, closed: threading.Event) -> str:
    """Wait (30 s at most) for the proxy to hang up; `closed` tells the test it did."""
    sock.settimeout(30)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return "stop"
    except OSError:
        pass  # a reset is a hang-up too
    closed.set()
    return "stop"


def frame_start(size: int, closed: threading.Event, rest: bytes = b"") -> Script:
    """Answer with a length prefix of `size`, a few bytes of body, then nothing more."""

    def script(sock: socket.socket, request: bytes) -> str:
        sock.sendall(struct.pack(">i", size) + request[4:8] + rest)
        return until_closed(sock, closed)

    return script


def test_bad_response_lengths_close_that_client_only(tmp_path: Path) -> None:
    cut = {name: threading.Event() for name in ("negative", "most-negative", "largest", "over")}
    sizes = {"negative": -5, "most-negative": -(2**31), "largest": 2**31 - 1, "over": 100 * MIB + 1}
    scripts = {f"evil-{name}": frame_start(sizes[name], cut[name], b"x" * 64) for name in cut}
    with hostile_proxy(tmp_path, scripts) as (px, _), Sentinel(px.port) as sentinel:
        with PeakGrowth() as grown:
            for name in cut:
                with connect(px.port) as sock:
                    sock.sendall(request_frame(ApiKey.METADATA, 0, 1, METADATA_V0_NO_TOPICS, f"evil-{name}"))
                    assert is_closed(sock, timeout=10), name
                assert cut[name].wait(10), f"{name}: the broker connection stayed open"
        sentinel.healthy()
        assert grown.bytes < BOUND, str(grown)
        assert px.closed("upstream_frame_too_large") == len(cut)


def garbage_first(sock: socket.socket, request: bytes) -> None:
    """Garbage to correlation ids below 100, honest answers after."""
    if struct.unpack_from(">i", request, 4)[0] < 100:
        write_frame(sock, request[4:8] + GARBAGE)
    else:
        answer(sock, request)


def test_garbage_response_bodies_are_forwarded_and_counted(tmp_path: Path) -> None:
    with (
        hostile_proxy(tmp_path, {"evil": garbage_first}) as (px, _),
        Sentinel(px.port) as sentinel,
        PeakGrowth() as grown,
        connect(px.port) as sock,
    ):
        sock.sendall(request_frame(ApiKey.METADATA, 0, 1, METADATA_V0_NO_TOPICS, "evil"))
        sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, 2, client_id="evil"))  # a response held to rewrite
        sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, 100, client_id="evil"))
        got = [read_frame(sock) for _ in range(3)]
        sentinel.healthy()
        assert got[:2] == [struct.pack(">i", 1) + GARBAGE, struct.pack(">i", 2) + GARBAGE]
        assert got[2] == api_versions_v0_answer(100)  # the connection goes on
        assert px.decode_errors(api="Metadata", direction="response") == 1
        assert px.decode_errors(api="ApiVersions", direction="response") == 1
        assert px.decode_errors(direction="request") == 0
        assert px.client(sock)["in_flight"] == 0  # type: ignore[index]
    assert grown.bytes < BOUND, str(grown)


def strangers_first(count: int) -> Script:
    """`count` responses to correlation ids nobody used, then the real answer."""

    def script(sock: socket.socket, request: bytes) -> None:
        stranger = struct.pack(">i", 777_777) + b"not yours"
        sock.sendall((struct.pack(">i", len(stranger)) + stranger) * count)
        answer(sock, request)

    return script


def test_responses_nobody_asked_for_are_passed_on(tmp_path: Path) -> None:
    count = 20_000
    scripts = {"evil": strangers_first(count)}
    with (
        hostile_proxy(tmp_path, scripts) as (px, _),
        Sentinel(px.port) as sentinel,
        PeakGrowth() as grown,
        connect(px.port) as sock,
    ):
        sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, 5, client_id="evil"))
        strangers = [read_frame(sock) for _ in range(count)]
        assert set(strangers) == {struct.pack(">i", 777_777) + b"not yours"}
        assert read_frame(sock) == api_versions_v0_answer(5)  # still matched to its request
        sentinel.healthy()
        assert px.client(sock)["in_flight"] == 0  # type: ignore[index]
        assert px.decode_errors() == 0
        [line] = px.log_lines("request", sock.getsockname()[1])
        assert line["correlation_id"] == 5 and line["api"] == "ApiVersions"
    assert grown.bytes < BOUND, str(grown)


@pytest.mark.slow
def test_a_response_that_never_completes_is_cut(tmp_path: Path) -> None:
    cut = threading.Event()
    scripts = {"evil": frame_start(1000, cut, b"partial")}
    limits: dict[str, Any] = {"frame_timeout_seconds": 1.0}
    with (
        hostile_proxy(tmp_path, scripts, **limits) as (px, _),
        Sentinel(px.port) as sentinel,
        connect(px.port) as sock,
    ):
        sock.sendall(request_frame(ApiKey.METADATA, 0, 1, METADATA_V0_NO_TOPICS, "evil"))
        assert is_closed(sock, timeout=20)
        assert cut.wait(10)
        sentinel.healthy()
        assert px.closed("frame_timeout") == 1
        assert px.client(sock) is None


def fetch_bomb(codec: str) -> tuple[bytes, Script]:
    """A Fetch v12 request (client id "evil") and a broker answering it with a bomb."""
    request = decode_request((GOLDEN / "0030-req-k1-v12.bin").read_bytes())
    request.header["client_id"] = "evil"
    response = decode_response((GOLDEN / "0031-resp-k1-v12.bin").read_bytes(), 1, 12)
    response.body["responses"][0]["partitions"][0]["records"] = bomb_batch(codec)

    def script(sock: socket.socket, frame: bytes) -> None:
        corr = struct.unpack_from(">i", frame, 4)[0]
        answered = dataclasses.replace(response, header={"correlation_id": corr})
        write_frame(sock, encode_response(answered))

    body = encode_request(request)
    return struct.pack(">i", len(body)) + body, script


def test_fetch_response_bomb_with_record_detail(tmp_path: Path) -> None:
    frame, script = fetch_bomb("zstd")
    options: dict[str, Any] = {"record_detail": True, "decompression_limit_bytes": LIMIT}
    with (
        hostile_proxy(tmp_path, {"evil": script}, **options) as (px, _),
        Sentinel(px.port) as sentinel,
        PeakGrowth() as grown,
        connect(px.port) as sock,
    ):
        sock.sendall(frame)
        got = read_frame(sock)
        sentinel.healthy()
        assert decode_response(got, 1, 12).body["responses"][0]["partitions"][0]["records"]
        [line] = [x for x in px.log_lines("request") if x["api"] == "Fetch"]
        keys = line["record_stats"]["header_keys"]
        assert any(key.startswith("<undecodable:") for key in keys), line
        assert px.decode_errors() == 0  # the frame itself decodes; only its records do not
    assert grown.bytes < BOUND, str(grown)
