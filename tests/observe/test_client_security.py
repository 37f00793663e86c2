"""The client_security feature (proxy/observe/client_security/): open client connections
by TLS version and SASL mechanism, and client software, on /metrics
(kafkalens_client_security_connections), through a real proxy with a TLS listener and a
plaintext one in front of a broker that asks for SASL/PLAIN (support.sasl_broker).

The truth is the clients': each raw client knows how many connections it opened, the
TLS version its own socket negotiated (`SSLSocket.version()`), the mechanism it asked
for and the software name it sent; a real kafka-python client, the mechanism it was
configured with and its own version. Closing the connections takes them out again."""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.observed import ObservedProxy, eventually
from support.proxy_harness import LOCAL, read_frame, write_frame
from support.sasl_broker import PlainBroker
from support.tls import OPENSSL_EXT, issue, make_ca

from codec import ApiKey, Request, encode_request
from proxy.features import Config, parse_config

METRIC = "kafkalens_client_security_connections"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    make_ca(d)
    issue(d, "server", "/CN=localhost", OPENSSL_EXT)
    return d


def two_listeners(broker: str, certs: Path, log: Path, **sections: Any) -> Config:
    tls = {"cert": str(certs / "server.crt"), "key": str(certs / "server.key")}
    return parse_config({
        "listeners": [
            {"name": "plain", "listen": f"{LOCAL}:0", "upstream": broker},
            {"name": "tls", "listen": f"{LOCAL}:0", "upstream": broker, "tls": tls},
        ],
        "metrics": {"listen": f"{LOCAL}:0"},
        "request_log": {"path": str(log)},
        **sections,
    })  # fmt: skip


def port_of(px: ObservedProxy, name: str) -> int:
    return px.call(lambda: px.server.listeners[name].bound.port)


class RawClient:
    """One connection that says its software (ApiVersions v3) and, if given, asks for a
    SASL mechanism (SaslHandshake v1): what it did, from its own side."""

    def __init__(self, port: int, software: str, mechanism: str | None, tls: ssl.SSLContext | None) -> None:
        raw = socket.create_connection((LOCAL, port), timeout=10)
        self.sock: socket.socket = tls.wrap_socket(raw, server_hostname="localhost") if tls else raw
        self.tls_version = self.sock.version() if isinstance(self.sock, ssl.SSLSocket) else None
        self.software = software
        self.mechanism = mechanism
        self.ask(Request(ApiKey.API_VERSIONS, 3, {"correlation_id": 1, "client_id": "raw"},
                         {"client_software_name": software, "client_software_version": "1.0"}))  # fmt: skip
        if mechanism is not None:
            self.ask(Request(ApiKey.SASL_HANDSHAKE, 1, {"correlation_id": 2, "client_id": "raw"},
                             {"mechanism": mechanism}))  # fmt: skip

    def ask(self, request: Request) -> None:
        write_frame(self.sock, encode_request(request))
        answer = read_frame(self.sock)
        assert struct.unpack_from(">i", answer)[0] == request.correlation_id

    def close(self) -> None:
        self.sock.close()


def tls_context(certs: Path, version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    ctx.minimum_version = ctx.maximum_version = version
    return ctx


@contextmanager
def proxy(certs: Path, tmp_path: Path, **sections: Any) -> Iterator[ObservedProxy]:
    with PlainBroker(handshake_max=1) as broker, ObservedProxy(
        two_listeners(broker.address, certs, tmp_path / "requests.log", **sections)
    ) as px:
        broker.advertised = (LOCAL, port_of(px, "plain"))
        yield px


def counted(px: ObservedProxy) -> dict[tuple[str, ...], float]:
    samples = px.metrics().by_labels(METRIC, "tls_version", "sasl_mechanism", "client_software_name")
    return {labels: value for labels, value in samples.items() if value}


def test_connections_by_tls_version_and_mechanism_as_the_clients_made_them(certs: Path, tmp_path: Path) -> None:
    with proxy(certs, tmp_path) as px, ExitStack() as opened:
        plan = [  # (listener, TLS version, mechanism asked for, its label, software, how many)
            ("plain", None, "PLAIN", "PLAIN", "raw-plain-plaintext", 3),
            ("plain", None, None, "none", "raw-no-sasl", 2),
            ("tls", ssl.TLSVersion.TLSv1_2, "PLAIN", "PLAIN", "raw-plain-tls12", 2),
            ("tls", ssl.TLSVersion.TLSv1_3, "SCRAM-SHA-512", "SCRAM-SHA-512", "raw-scram-tls13", 4),
            ("tls", ssl.TLSVersion.TLSv1_3, "X-CUSTOM", "other", "raw-custom", 1),  # not Kafka's
        ]
        clients = [
            (RawClient(port_of(px, listener), software, mechanism, tls_context(certs, tls) if tls else None), label)
            for listener, tls, mechanism, label, software, count in plan
            for _ in range(count)
        ]
        for client, _ in clients:
            opened.callback(client.close)
        # what the clients did, from their side: the version each socket negotiated
        truth: dict[tuple[str, ...], float] = {}
        for client, label in clients:
            key = (client.tls_version or "none", label, client.software)
            truth[key] = truth.get(key, 0) + 1
        assert {version for version, _, _ in truth} == {"none", "TLSv1.2", "TLSv1.3"}
        assert eventually(lambda: counted(px) == truth), (counted(px), truth)
        for client, _ in clients[:5]:  # the plaintext ones, with PLAIN and without SASL
            client.close()
        truth[("none", "PLAIN", "raw-plain-plaintext")] -= 3
        truth[("none", "none", "raw-no-sasl")] -= 2
        truth = {key: value for key, value in truth.items() if value}
        assert eventually(lambda: counted(px) == truth), (counted(px), truth)
        opened.close()  # every connection closed: nothing counted
        assert eventually(lambda: counted(px) == {}), counted(px)


def test_a_real_client_is_counted_under_its_own_mechanism_and_version(certs: Path, tmp_path: Path) -> None:
    import kafka
    from kafka import KafkaConsumer

    with proxy(certs, tmp_path) as px:
        consumer = KafkaConsumer(
            bootstrap_servers=f"{LOCAL}:{port_of(px, 'plain')}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password="kl-client-security-Pa55",
            request_timeout_ms=5000,
        )
        try:
            assert consumer.topics() == set()
            connections = len(px.clients())  # the client's connections the proxy holds
            samples = px.metrics().by_labels(
                METRIC, "tls_version", "sasl_mechanism", "client_software_name", "client_software_version"
            )
            live = {labels: value for labels, value in samples.items() if value}
            assert live == {("none", "PLAIN", "kafka-python", kafka.__version__): connections}, live
        finally:
            consumer.close()
        px.wait_all_closed()
        assert counted(px) == {}


def test_off_leaves_the_family_without_series_and_check_config_says_so(certs: Path, tmp_path: Path) -> None:
    from proxy.features import summary

    with proxy(certs, tmp_path, client_security={"enabled": False}) as px:
        client = RawClient(port_of(px, "plain"), "raw", "PLAIN", None)
        try:
            assert px.metrics().by_labels(METRIC, "tls_version") == {}
            assert f"# TYPE {METRIC} gauge" in px.metrics().text  # the family, as always
        finally:
            client.close()
    on = parse_config({})
    assert "client TLS versions and SASL mechanisms: counted" in summary(on)
    assert "client TLS versions and SASL mechanisms: off" in summary(parse_config({"client_security": {"enabled": False}}))
