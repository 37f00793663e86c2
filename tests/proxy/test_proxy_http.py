"""/metrics, /healthz, /readyz, /clients over real HTTP, and bad HTTP input."""

from __future__ import annotations

import http.client
import json
import socket

from prometheus_client.parser import text_string_to_metric_families
from support.proxy_harness import (
    LOCAL,
    FakeBroker,
    ProxyThread,
    api_versions_v0,
    echo_broker,
    proxy_config,
    read_frame,
)

from proxy.tansu import free_port


def get(port: int, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection(LOCAL, port, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def raw_http(port: int, data: bytes) -> bytes:
    with socket.create_connection((LOCAL, port), timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_endpoints() -> None:
    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(proxy_config(broker.address)) as px,
        socket.create_connection((LOCAL, px.port)) as client,
    ):
        px.run(px.running.probe.probe_once())  # type: ignore[union-attr]
        client.sendall(api_versions_v0(1))
        read_frame(client)
        port = px.http_port
        assert get(port, "/healthz")[0] == 200
        status, _, body = get(port, "/readyz")
        assert (status, body) == (200, b"ready\n")
        status, content_type, body = get(port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=")
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }
        assert samples[("kafkalens_connections_opened_total", (("listener", "plaintext"),))] == 1
        assert samples[("kafkalens_pending_requests", ())] == 0
        status, content_type, body = get(px.clients_port, "/clients?pretty=0")
        assert (status, content_type) == (200, "application/json")
        [conn] = json.loads(body)
        assert conn["listener"] == "plaintext" and conn["upstream"] == broker.address
        assert (conn["requests"], conn["responses"], conn["in_flight"]) == (1, 1, 0)
        assert conn["bytes_in"] == len(api_versions_v0(1)) and conn["bytes_out"] == 4 + 6
        host, port_ = client.getsockname()
        assert conn["client"] == f"{host}:{port_}"
        assert conn["identity"] == {}
        assert get(port, "/readyz", "HEAD")[2] == b""


def test_not_ready_while_the_upstream_refuses() -> None:
    with ProxyThread(proxy_config(f"{LOCAL}:{free_port()}")) as px:
        px.run(px.running.probe.probe_once())  # type: ignore[union-attr]
        status, _, body = get(px.http_port, "/readyz")
        assert status == 503 and b"upstream unreachable" in body
        assert get(px.http_port, "/healthz")[0] == 200  # alive all the same


def test_bad_http_input() -> None:
    with FakeBroker(echo_broker) as broker, ProxyThread(proxy_config(broker.address)) as px:
        port = px.http_port
        assert raw_http(port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw_http(port, b"GET /" + b"a" * 10000).startswith(b"HTTP/1.1 431 ")
        assert raw_http(port, b"\x16\x03\x01\x02\x00\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert get(port, "/metrics", "POST")[0] == 405
        assert get(port, "/nope")[0] == 404
        assert get(port, "/healthz")[0] == 200  # still serving


def test_readiness_verdict_sidecar_needs_its_upstream_a_gateway_one_broker() -> None:
    from proxy.admin.readiness import UpstreamProbe
    from proxy.config import Address

    a, b = Address("10.0.0.1", 9092), Address("10.0.0.2", 9092)
    probe = UpstreamProbe(lambda: [a, b])
    assert probe.verdict(need_all=True) == (False, "upstream not probed yet")
    probe.probed, probe.unreachable = [a, b], [b]
    assert probe.verdict(need_all=True) == (False, "upstream unreachable: 10.0.0.2:9092")
    assert probe.verdict(need_all=False) == (True, "ready; unreachable: 10.0.0.2:9092")
    probe.unreachable = [a, b]
    assert probe.verdict(need_all=False)[0] is False
    probe.unreachable = []
    assert probe.verdict(need_all=True) == probe.verdict(need_all=False) == (True, "ready")
