"""A scrape stays small and fast after a hostile client and a hostile broker chose
20,000 distinct values of every label they control, and a well-behaved client's round
trips carry on while /metrics is read.

The proxy runs with its real hooks and request log (support.hostile.hostile_proxy).
The hostile client sends every api and version the codec knows (the most series
that can exist), api versions the codec does not know, api keys that do not
exist, a client id per request, and client software names and versions (one
connection each: a connection is counted under the software its first ApiVersions
named); the scripted broker answers with error codes, most of them not Kafka's.
"""

from __future__ import annotations

import socket
import struct
import time
import urllib.request
from pathlib import Path

import pytest
from support.hostile import Sentinel, connect, hostile_proxy
from support.proxy_harness import LOCAL, read_frame, request_frame, write_frame

from codec import ApiKey, Request, encode_request
from codec.error_codes import ERROR_CODES
from codec.schema import api_messages, api_names
from proxy.metrics import Metrics

DISTINCT = 20_000
SOFTWARE_CONNECTIONS = 2_000  # each a connection: 40x the default cap of 50 pairs
METADATA, SASL_HANDSHAKE, API_VERSIONS = ApiKey.METADATA, ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS
UNSUPPORTED_VERSION = 35
MAX_SCRAPE_BYTES = 300_000
# The target is 50 ms (measured: ~20 ms here); the bound leaves room for a loaded CI box.
MAX_SCRAPE_SECONDS = 0.25
MAX_RENDER_CPU_SECONDS = 0.075
MAX_GOOD_CLIENT_WAIT_SECONDS = 1.0
PIPELINE = 500


def error_code(corr: int) -> int:
    """A distinct int16 error code per request: Kafka's -1..133 and 19,865 invented ones."""
    return corr - DISTINCT // 2


def erroring_broker(sock: socket.socket, request: bytes) -> None:
    """Answers ApiVersions v0 with an error code chosen per request."""
    corr = struct.unpack_from(">i", request, 4)[0]
    write_frame(sock, struct.pack(">ihi", corr, error_code(corr), 0))


def refusing_broker(sock: socket.socket, request: bytes) -> None:
    """Answers ApiVersions v3 as a broker that does not know v3 does (KIP-511)."""
    corr = struct.unpack_from(">i", request, 4)[0]
    write_frame(sock, struct.pack(">ihi", corr, UNSUPPORTED_VERSION, 0))


def pipelined(port: int, frames: list[bytes]) -> None:
    """Send `frames` on one connection, PIPELINE at a time, reading every answer."""
    with connect(port, timeout=30) as sock:
        for start in range(0, len(frames), PIPELINE):
            batch = frames[start : start + PIPELINE]
            sock.sendall(b"".join(batch))
            for _ in batch:
                read_frame(sock)


def software_frame(i: int) -> bytes:
    header = {"correlation_id": 1, "client_id": "evil-software"}
    body = {"client_software_name": f"evil-{i}", "client_software_version": f"{i}.0"}
    data = encode_request(Request(API_VERSIONS, 3, header, body))
    return struct.pack(">i", len(data)) + data


def attack(port: int) -> None:
    newest = api_messages()[METADATA][0].max_version
    unknown_versions = [
        request_frame(METADATA, newest + 1 + i, i, client_id=f"cid-{i}") for i in range(DISTINCT)
    ]
    unknown_keys = [request_frame(1000 + i, 0, i, client_id=f"key-{i}") for i in range(DISTINCT)]
    errors = [request_frame(API_VERSIONS, 0, i, client_id="evil-errors") for i in range(DISTINCT)]
    every_known = [  # a series per api and version, and a duration histogram per api
        [request_frame(key, version, version) for version in request.versions]
        for key, (request, _) in api_messages().items()
        if key != SASL_HANDSHAKE  # v0 would turn the connection's next frames into tokens
    ]
    for frames in every_known:
        pipelined(port, frames)
    pipelined(port, unknown_versions)
    pipelined(port, unknown_keys)
    pipelined(port, errors)
    for i in range(SOFTWARE_CONNECTIONS):
        with connect(port) as sock:
            sock.sendall(software_frame(i))
            read_frame(sock)


def scrape(port: int) -> tuple[bytes, float]:
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://{LOCAL}:{port}/metrics", timeout=10) as answer:
        body: bytes = answer.read()
    return body, time.perf_counter() - started


def longest_wait(times: list[float], start: float, end: float) -> float:
    """The longest gap between the good client's round trips around [start, end]."""
    around = [t for t in times if t >= start] + [end]
    before = [t for t in times if t < start][-1:]
    points = before + around
    return max(b - a for a, b in zip(points, points[1:], strict=False))


@pytest.mark.slow
def test_scrape_after_20000_distinct_values_of_every_kind(tmp_path: Path) -> None:
    scripts = {"evil-errors": erroring_broker, "evil-software": refusing_broker}
    with hostile_proxy(tmp_path, scripts, max_connections_per_ip=10_000) as (px, _broker):
        http_port = px.http_port
        with Sentinel(px.port) as good:
            attack(px.port)
            # every answer was read, but the last connections' close may still be on its way
            assert px.wait_until(lambda: len(px.server.clients()) <= 1, 15)
            start = time.monotonic()
            scrapes = [scrape(http_port) for _ in range(10)]
            end = time.monotonic()
            good.healthy()
            waited = longest_wait(good.times, start, end)
        body, _ = scrapes[-1]
        seconds = sorted(s for _, s in scrapes)[len(scrapes) // 2]
        print(f"\nscrape: {len(body)} bytes, median {seconds * 1000:.1f} ms;"
              f" good client's longest wait {waited * 1000:.0f} ms")  # fmt: skip
        text = body.decode()
        assert px.metric("kafkalens_requests_total", api_version="other") == 2 * DISTINCT
        assert px.metric("kafkalens_requests_total", api="unknown") == DISTINCT
        errors = px.metric("kafkalens_request_errors_total", api="ApiVersions")
        assert errors == DISTINCT - 1 + SOFTWARE_CONNECTIONS  # code 0 is no error
        assert px.metric("kafkalens_label_values_capped_total", label="client_software") > 0
        assert len(body) < MAX_SCRAPE_BYTES
        assert seconds < MAX_SCRAPE_SECONDS
        assert waited < MAX_GOOD_CLIENT_WAIT_SECONDS
        assert "_created" not in text
        assert "evil-1999" not in text and "cid-" not in text and 'api_version="20000"' not in text


def saturated() -> Metrics:
    """A registry holding every series peers can make under the default caps: every api
    with every version the codec knows and "other", durations and decode errors of each,
    the (api, error) pairs' cap reached, and software and upstream labels past theirs."""
    m = Metrics()
    names = api_names()
    for key, (request, _) in api_messages().items():
        api = m.api(names[key])
        for version in [*request.versions, 30000]:
            api.request(version, 1)
        api.response(0.01, 1)
        api.decode_error("request")
        api.decode_error("response")
    for error in sorted(ERROR_CODES.values()):
        for name in names.values():
            m.api(name).error(error)
    for i in range(1000):
        m.connection_opened("plaintext").identify(f"evil-{i}", f"{i}.0")
        m.upstream_failure(f"10.0.{i // 256}.{i % 256}:9092", "reset")
    return m


def test_the_largest_exposition_peers_can_cause_is_small_and_cheap() -> None:
    m = saturated()
    body = m.render()
    cpu = []
    for _ in range(9):
        started = time.thread_time()
        m.render()
        cpu.append(time.thread_time() - started)
    median = sorted(cpu)[len(cpu) // 2]
    lines = len(body.splitlines())
    print(f"\nsaturated: {len(body)} bytes, {lines} lines, {median * 1000:.1f} ms CPU")
    assert len(body) < MAX_SCRAPE_BYTES
    # CPU time, not wall-clock time: the figure a busy machine does not inflate.
    # Measured ~21 ms (the target is 50 ms); the bound leaves room for a slower CPU.
    assert median < MAX_RENDER_CPU_SECONDS
    errors = [n for n in m.registry.collect() if n.name == "kafkalens_request_errors"][0]
    assert len(errors.samples) == 256 + len(api_names())  # the cap, and "other" per api
