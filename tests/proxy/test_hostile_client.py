"""Hostile clients against a running proxy with its real hooks and the request log on.

Each attack must close only the offending connection (or, for frames that are valid
at the framing level but undecodable, forward them and count a decode error), while a
well-behaved client keeps working on its own connection, and the proxy's memory stays
within a stated bound. The bounds are far below what believing a declared size would
cost (hundreds of MiB) and far above the noise of a Python process (a few MiB).
"""

from __future__ import annotations

import contextlib
import gzip
import ssl
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from support.hostile import (
    LIMIT,
    MIB,
    PeakGrowth,
    Sentinel,
    bomb_batch,
    connect,
    eventually,
    hostile_proxy,
)
from support.proxy_harness import correlation_id, is_closed, read_frame, request_frame

from codec import ApiKey

BOUND = 32 * MIB  # peak RSS growth allowed during any one attack below
METADATA, PRODUCE, SASL_AUTHENTICATE = ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.SASL_AUTHENTICATE


def client_hello() -> bytes:
    """The first bytes a TLS client sends, made by this Python's OpenSSL."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_bad_frame_lengths_close_only_that_connection(tmp_path: Path) -> None:
    hello = client_hello()
    assert hello[0] == 0x16 and int.from_bytes(hello[:4], "big") > 100 * MIB
    bad = {
        "negative": struct.pack(">i", -1) + b"\x00" * 8,
        "most negative": struct.pack(">i", -(2**31)) + b"\x00" * 8,
        "largest": struct.pack(">i", 2**31 - 1) + b"\x00\x03\x00\x00\x00\x00\x00\x01",
        "just over max_frame_bytes": struct.pack(">i", 100 * MIB + 1) + b"\x00\x03" + b"\x00" * 6,
        "ApiVersions over the before-auth cap": struct.pack(">i", 2 * MIB)
        + b"\x00\x12\x00\x00\x00\x00\x00\x01",
        "TLS ClientHello": hello,
    }
    with hostile_proxy(tmp_path) as (px, broker), Sentinel(px.port) as sentinel:
        with PeakGrowth() as grown:
            for name, data in bad.items():
                with connect(px.port) as sock:
                    sock.sendall(data)  # the header alone: the proxy must not wait for more
                    assert is_closed(sock, timeout=10), name
        sentinel.healthy()
        assert grown.bytes < BOUND, str(grown)
        assert px.closed("frame_too_large") == len(bad)
        assert broker.frames_from("t") == []  # nothing of the refused frames went on


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


PRODUCE_LYING_RECORDS = (
    struct.pack(">hhii", -1, 1, 5000, 1)  # no transactional id, acks=1, timeout, 1 topic
    + struct.pack(">h", 1)
    + b"t"
    + struct.pack(">iii", 1, 0, 1 << 30)  # 1 partition: index 0, records of 1 GiB...
    + b"records"  # ...in 7 bytes
)

# Frames whose declared lengths or nulls are wrong, but whose frame length is right:
# the proxy cannot decode them, so it must forward them untouched and count the error.
# (api name, frame, what the request log must say went wrong)
UNDECODABLE = {
    "54 million topics in 8 bytes": (
        "Metadata",
        request_frame(METADATA, 0, 1, struct.pack(">i", 54_000_000)),
        "array count exceeds the bytes left",
    ),
    "topic name longer than the frame": (
        "Metadata",
        request_frame(METADATA, 0, 2, struct.pack(">ih", 1, 30000) + b"abc"),
        "string runs past the end",
    ),
    "null topics array in v0": (
        "Metadata",
        request_frame(METADATA, 0, 3, struct.pack(">i", -1)),
        "null array in a field that is not nullable",
    ),
    "null topic name": (
        "Metadata",
        request_frame(METADATA, 0, 4, struct.pack(">ih", 1, -1)),
        "null in a field that is not nullable",
    ),
    "compact array of 2**31 - 1 in v12": (
        "Metadata",  # header v2: client id, no tagged fields; then the topics' varint count
        framed(struct.pack(">hhih", METADATA, 12, 5, 1) + b"t\x00" + b"\x80\x80\x80\x80\x08"),
        "array count exceeds the bytes left",
    ),
    "auth bytes declaring 2 GiB": (
        "SaslAuthenticate",
        request_frame(SASL_AUTHENTICATE, 0, 6, struct.pack(">i", 2**31 - 1) + b"tok"),
        "bytes runs past the end",
    ),
    "records declaring 1 GiB": (
        "Produce",
        request_frame(PRODUCE, 3, 7, PRODUCE_LYING_RECORDS),
        "records runs past the end",
    ),
}


def test_undecodable_frames_are_forwarded_and_counted(tmp_path: Path) -> None:
    frames = [frame for _, frame, _ in UNDECODABLE.values()]
    with hostile_proxy(tmp_path) as (px, broker), Sentinel(px.port) as sentinel:
        with PeakGrowth() as grown, connect(px.port) as sock:
            port = sock.getsockname()[1]
            sock.sendall(b"".join(frames))
            answers = [read_frame(sock) for _ in frames]  # the same connection goes on
        sentinel.healthy()
        assert grown.bytes < BOUND, str(grown)
        assert [a[4:] for a in answers] == [b"ok"] * len(frames)
        assert broker.frames_from("t") == [frame[4:] for frame in frames]  # byte for byte
        for api in ("Metadata", "SaslAuthenticate", "Produce"):
            expected = sum(name == api for name, _, _ in UNDECODABLE.values())
            assert px.decode_errors(api=api, direction="request") == expected, api
        assert px.decode_errors(direction="response") == 0  # not even the sentinel's
        logged = {line["correlation_id"]: line for line in px.log_lines("request", port)}
        for corr, (api, _, why) in enumerate(UNDECODABLE.values(), start=1):
            assert logged[corr]["api"] == api and why in logged[corr]["decode_error"]


def tagged_fields_frames() -> list[bytes]:
    """Metadata v12 (request header v2): a million empty tagged fields; one of 16 MiB."""
    count = 1_000_000
    tags = b"".join(bytes([0x80 | (t & 0x7F), t >> 7 & 0x7F, 0]) for t in range(count))
    varint = bytes([0x80 | (count & 0x7F), 0x80 | (count >> 7 & 0x7F), count >> 14])
    million = struct.pack(">hhih", METADATA, 12, 1, 0) + varint + tags + b"\x01\x00\x00"
    huge = struct.pack(">hhih", METADATA, 12, 2, 0) + b"\x01\x05\x80\x80\x80\x08x\x01\x00\x00"
    return [framed(body) for body in (million, huge)]


@pytest.mark.slow
@pytest.mark.parametrize("enforcement", ["log", "reject"])  # reject decodes before forwarding
def test_hostile_tagged_fields_in_a_header(tmp_path: Path, enforcement: str) -> None:
    frames = tagged_fields_frames()
    with hostile_proxy(tmp_path, enforcement=enforcement) as (px, broker), Sentinel(px.port) as s:
        with PeakGrowth() as grown, connect(px.port) as sock:
            port = sock.getsockname()[1]
            sock.sendall(b"".join(frames))
            assert [correlation_id(read_frame(sock)) for _ in frames] == [1, 2]
        s.healthy()
        assert grown.bytes < BOUND, str(grown)
        assert broker.frames_from("") == [frame[4:] for frame in frames]
        assert px.decode_errors(api="Metadata", direction="request") == 2
        lines = px.log_lines("request", port)
        why = {line["correlation_id"]: line["decode_error"] for line in lines}
        assert "too many tagged fields" in why[1]
        assert "tagged field runs past the end" in why[2]


def trickle(port: int, frame: bytes, pause: float, give_up: float) -> float:
    """Send `frame` a byte at a time until the proxy cuts us off; seconds it took."""
    with connect(port) as sock:
        started = time.monotonic()
        for byte in frame:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            if time.monotonic() - started > give_up:
                break
            time.sleep(pause)
        assert is_closed(sock, timeout=give_up)
        return time.monotonic() - started


@pytest.mark.slow
def test_slow_frames_and_idle_connections_are_cut(tmp_path: Path) -> None:
    limits: dict[str, Any] = {"frame_timeout_seconds": 1.0, "idle_timeout_seconds": 2.0}
    frame = request_frame(METADATA, 0, 9, b"\x00" * 1000)  # 50 s at one byte per 50 ms
    with hostile_proxy(tmp_path, **limits) as (px, _), Sentinel(px.port) as sentinel:
        silent, quiet = connect(px.port), connect(px.port)
        quiet.sendall(request_frame(ApiKey.API_VERSIONS, 0, 1))
        read_frame(quiet)
        with PeakGrowth() as grown:
            started = time.monotonic()
            took = trickle(px.port, frame, pause=0.05, give_up=20)
            assert is_closed(silent, timeout=20) and is_closed(quiet, timeout=20)
            finished = time.monotonic()
        silent.close()
        quiet.close()
        sentinel.healthy()
        assert 0.9 <= took < 20, took  # never before its frame timeout, never the whole frame
        assert sentinel.during(started, finished) >= 3  # the sentinel was served meanwhile
        assert grown.bytes < BOUND, str(grown)
        assert px.closed("frame_timeout") == 1
        assert px.closed("idle_timeout") == 2


@pytest.mark.slow
def test_many_slow_frames_at_once(tmp_path: Path) -> None:
    """Slowloris: each connection holds a frame open; each is cut at its timeout."""
    limits: dict[str, Any] = {"frame_timeout_seconds": 1.0}
    with hostile_proxy(tmp_path, **limits) as (px, _), Sentinel(px.port) as sentinel:
        with PeakGrowth() as grown:
            socks = [connect(px.port) for _ in range(100)]
            for sock in socks:
                sock.sendall(struct.pack(">i", 50 * MIB) + b"\x00\x03\x00\x00")  # begun, stalled
            assert all(is_closed(sock, timeout=20) for sock in socks)
        for sock in socks:
            sock.close()
        sentinel.healthy()
        assert grown.bytes < BOUND, str(grown)
        assert px.closed("frame_timeout") == 100


def test_connections_past_the_per_ip_limit_are_refused(tmp_path: Path) -> None:
    with (
        hostile_proxy(tmp_path, max_connections_per_ip=5) as (px, _),
        Sentinel(px.port) as sentinel,
    ):
        admitted = [connect(px.port) for _ in range(4)]  # with the sentinel: the limit
        for corr, sock in enumerate(admitted):
            sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, corr))
            read_frame(sock)
        with PeakGrowth() as grown:
            refused = [connect(px.port) for _ in range(50)]
            assert all(is_closed(sock) for sock in refused)
        for sock in refused:
            sock.close()
        sentinel.healthy()
        for corr, sock in enumerate(admitted):  # the admitted ones still work
            sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, 100 + corr))
            assert read_frame(sock)[:4] == struct.pack(">i", 100 + corr)
        assert grown.bytes < BOUND, str(grown)
        assert px.metric("kafkalens_connections_rejected_total", reason="per_ip_limit") == 50
        admitted.pop().close()
        assert px.wait_until(lambda: len(px.server.connections) == 4, timeout=15)
        with connect(px.port) as again:  # a freed slot is usable
            again.sendall(request_frame(ApiKey.API_VERSIONS, 0, 7))
            assert read_frame(again)[:4] == struct.pack(">i", 7)
        for sock in admitted:
            sock.close()


# --- decompression bomb ----------------------------------------------------------------


def produce_acks0(batch: bytes) -> bytes:
    """Produce v3, acks=0, one partition of topic "bombs": no response is expected."""
    body = struct.pack(">hhii", -1, 0, 5000, 1) + struct.pack(">h", 5) + b"bombs"
    body += struct.pack(">iii", 1, 0, len(batch)) + batch
    return request_frame(PRODUCE, 3, 1, body, client_id="noanswer")


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_decompression_bomb_with_record_detail(tmp_path: Path, codec: str) -> None:
    frame = produce_acks0(bomb_batch(codec))
    assert len(frame) < 2 * MIB  # a small frame (zstd: 8 KB, gzip: 1.2 MB)...
    scripts = {"noanswer": lambda sock, request: None}  # acks=0: no answer
    # Assembled whole (not observed in pieces, where record detail keeps only batches
    # within the threshold), so its one big batch is decompressed for detail.
    options: dict[str, Any] = {
        "record_detail": True, "decompression_limit_bytes": LIMIT, "observe_whole_frame_bytes": 2 * MIB
    }
    with hostile_proxy(tmp_path, scripts, **options) as (px, broker), Sentinel(px.port) as s:
        with PeakGrowth() as grown, connect(px.port) as sock:
            sock.sendall(frame)
            assert eventually(lambda: len(px.log_lines("request_no_response")) == 1)
            sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, 2))  # ...after which the connection goes on
            assert read_frame(sock)[:4] == struct.pack(">i", 2)
        s.healthy()
        assert grown.bytes < BOUND, str(grown)  # ...that would take 256 MiB inflated
        assert broker.frames_from("noanswer") == [frame[4:]]
        [line] = px.log_lines("request_no_response")
        stats = line["record_stats"]
        assert stats["records"] == 1000 and stats["compression"] == [codec]
        assert any(key.startswith("<undecodable:") for key in stats["header_keys"]), stats


def legacy_message(offset: int, value: bytes | None = None, attributes: int = 0) -> bytes:
    """A magic 0 message with a null key."""
    body = struct.pack(">bbi", 0, attributes, -1)
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def legacy_wrapper(inflated: int) -> bytes:
    """A gzip wrapper whose inner set is `inflated` bytes of identical 26-byte messages
    (which compress about 400:1)."""
    inner = legacy_message(0) * (inflated // 26)
    return legacy_message(0, gzip.compress(inner, 9), attributes=1)


@pytest.mark.slow
def test_legacy_wrapper_of_tiny_messages_with_record_detail(tmp_path: Path) -> None:
    frame = produce_acks0(legacy_wrapper(6 * MIB))
    assert len(frame) < 64 * 1024
    scripts = {"noanswer": lambda sock, request: None}
    options: dict[str, Any] = {"record_detail": True, "decompression_limit_bytes": 16 * MIB}
    with hostile_proxy(tmp_path, scripts, **options) as (px, _), Sentinel(px.port) as sentinel:
        with PeakGrowth() as grown, connect(px.port) as sock:
            sock.sendall(frame)
            assert eventually(lambda: len(px.log_lines("request_no_response")) == 1, 60)
        sentinel.healthy()
        assert grown.bytes < BOUND, str(grown)
