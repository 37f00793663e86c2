"""TLS on both sides, with certificates made by the openssl CLI for each run.

The chain is kafkalens itself twice: client --TLS--> edge proxy (terminates, asks
for a client certificate) --plaintext--> tansu, and for origination: client -->
inner proxy --TLS with its own client certificate--> edge proxy --> tansu.

tansu is the broker: the TLS on both sides is kafkalens's, the broker only answers.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from support.proxy_harness import LOCAL, ProxyThread, api_versions_v0, correlation_id, read_frame
from support.tls import OPENSSL_EXT, issue, make_ca

from proxy.features import Config, parse_config
from proxy.tansu import free_port


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    make_ca(d)
    issue(d, "server", "/CN=localhost", OPENSSL_EXT)
    issue(d, "client", "/O=kafkalens/CN=test-client")
    issue(d, "proxy", "/CN=inner-proxy")
    return d


def config(listen: str, upstream: str, **sections: Any) -> Config:
    listener: dict[str, Any] = {"name": "edge", "listen": listen, "upstream": upstream}
    if "tls" in sections:
        listener["tls"] = sections.pop("tls")
    return parse_config({"listeners": [listener], "metrics": {"listen": f"{LOCAL}:0"}, **sections})


def edge_tls(certs: Path, **extra: Any) -> dict[str, Any]:
    return {
        "cert": str(certs / "server.crt"),
        "key": str(certs / "server.key"),
        "client_ca": str(certs / "ca.crt"),
        "require_client_cert": True,
        **extra,
    }


def tls_client(certs: Path, cert: str | None = "client", **ctx_attrs: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if cert:
        ctx.load_cert_chain(certs / f"{cert}.crt", certs / f"{cert}.key")
    for name, value in ctx_attrs.items():
        setattr(ctx, name, value)
    return ctx


def tls_round_trip(port: int, ctx: ssl.SSLContext) -> bool:
    with (
        socket.create_connection((LOCAL, port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        sock.sendall(api_versions_v0(3))
        return correlation_id(read_frame(sock)) == 3


def test_client_tls_termination_with_real_client(
    certs: Path, tansu_factory: Callable[..., Any]
) -> None:
    broker_port = free_port()
    with ProxyThread(config(f"{LOCAL}:0", f"{LOCAL}:{broker_port}", tls=edge_tls(certs))) as px:
        tansu_factory(advertised_port=px.port, port=broker_port)
        ssl_args = {
            "security_protocol": "SSL",
            "ssl_cafile": str(certs / "ca.crt"),
            "ssl_certfile": str(certs / "client.crt"),
            "ssl_keyfile": str(certs / "client.key"),
        }
        admin = KafkaAdminClient(bootstrap_servers=px.bootstrap, **ssl_args)
        try:
            from kafka.admin import NewTopic

            admin.create_topics([NewTopic("tls-topic", 1, 1)])
            clients = px.clients()
            assert clients and all(c["tls_version"] in ("TLSv1.2", "TLSv1.3") for c in clients)
            assert clients[0]["client_cert_subject"] == "O=kafkalens,CN=test-client"
        finally:
            admin.close()
        consumer = KafkaConsumer(bootstrap_servers=px.bootstrap, **ssl_args)
        try:
            assert "tls-topic" in consumer.topics()
        finally:
            consumer.close()


def test_client_certificate_and_version_policy(certs: Path) -> None:
    from support.proxy_harness import FakeBroker, echo_broker

    with FakeBroker(echo_broker) as broker:
        tls = edge_tls(certs, min_version="TLSv1.3")
        with ProxyThread(config(f"{LOCAL}:0", broker.address, tls=tls)) as px:
            assert tls_round_trip(px.port, tls_client(certs))
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                tls_round_trip(px.port, tls_client(certs, cert=None))  # no client certificate
            old = tls_client(certs, maximum_version=ssl.TLSVersion.TLSv1_2)
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                tls_round_trip(px.port, old)  # TLS 1.2 refused when 1.3 is the minimum


def test_upstream_tls_origination(certs: Path, tansu_factory: Callable[..., Any]) -> None:
    """inner proxy --TLS (checked host name, own client certificate)--> edge proxy."""
    broker_port = free_port()
    with ProxyThread(config(f"{LOCAL}:0", f"{LOCAL}:{broker_port}", tls=edge_tls(certs))) as edge:
        upstream_tls = {
            "ca": str(certs / "ca.crt"),
            "cert": str(certs / "proxy.crt"),
            "key": str(certs / "proxy.key"),
        }
        inner_config = config(f"{LOCAL}:0", edge.bootstrap, upstream_tls=upstream_tls)
        with ProxyThread(inner_config) as inner:
            tansu_factory(advertised_port=inner.port, port=broker_port)
            consumer = KafkaConsumer(bootstrap_servers=inner.bootstrap)
            try:
                consumer.topics()
                # while the client is connected, so are the proxies
                subjects = {c["client_cert_subject"] for c in edge.clients()}
                assert subjects == {"CN=inner-proxy"}
                assert {c["tls_version"] for c in edge.clients()} == {"TLSv1.3"}
            finally:
                consumer.close()


def test_upstream_host_name_is_checked(certs: Path) -> None:
    from support.proxy_harness import FakeBroker, echo_broker, is_closed

    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(config(f"{LOCAL}:0", broker.address, tls=edge_tls(certs))) as edge,
    ):
        wrong_name = {"ca": str(certs / "ca.crt"), "server_hostname": "wrong.example"}
        cfg = config(f"{LOCAL}:0", edge.bootstrap, upstream_tls=wrong_name)
        with ProxyThread(cfg) as inner, socket.create_connection((LOCAL, inner.port)) as sock:
            sock.sendall(api_versions_v0(1))
            assert is_closed(sock)
            text = inner.running.metrics.render().decode()  # type: ignore[union-attr]
            assert 'reason="tls"' in text


def test_gateway_terminates_tls_on_the_bootstrap_and_every_broker_listener(
    certs: Path, mock_cluster: str
) -> None:
    from confluent_kafka import Producer

    # node ids of the 3-broker mock cluster, each given a gateway port up front
    ports = {node: free_port() for node in (1, 2, 3)}
    gateway = parse_config({
        "mode": "gateway",
        "gateway": {
            "bootstrap_servers": mock_cluster.split(","),
            "bootstrap_listen": f"{LOCAL}:0",
            "advertised_host": "localhost",  # the name the server certificate carries
            "listen_host": LOCAL,
            "broker_ports": ports,
            "tls": edge_tls(certs),
        },
        "metrics": {"listen": f"{LOCAL}:0"},
    })
    with ProxyThread(gateway) as px:
        producer = Producer({
            "bootstrap.servers": f"localhost:{px.port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs / "ca.crt"),
            "ssl.certificate.location": str(certs / "client.crt"),
            "ssl.key.location": str(certs / "client.key"),
        })
        metadata = producer.list_topics(timeout=10)
        assert {node: b.port for node, b in metadata.brokers.items()} == ports
        for n in range(30):  # partitions led by the brokers: connections to their listeners
            producer.produce("gw-tls", b"v%d" % n, partition=n % 4)
        assert producer.flush(15) == 0
        clients = px.clients()
        assert {c["listener"] for c in clients} & {f"broker-{n}" for n in ports}
        assert all(c["tls_version"] in ("TLSv1.2", "TLSv1.3") for c in clients)
        for port in ports.values():  # every broker listener speaks TLS, and only TLS
            assert tls_round_trip(port, tls_client(certs))
            assert not plaintext_answered(port)


def plaintext_answered(port: int) -> bool:
    with socket.create_connection((LOCAL, port), timeout=5) as sock:
        sock.sendall(api_versions_v0(4))
        try:
            return correlation_id(read_frame(sock)) == 4
        except (OSError, ConnectionError, ValueError, EOFError, AssertionError):
            return False
