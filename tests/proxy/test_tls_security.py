"""TLS policy on both sides of a proxy running its real hooks, with certificates made
for each run: old protocol versions, missing or untrusted client certificates, broker
certificates for the wrong host or from the wrong CA, and a good chain end to end.

tansu v0.6.0 cannot serve TLS (its `--cert` and `--key` refuse to be given together),
so the TLS broker is `TlsRelay`, a stdlib TLS terminator in front of tansu.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from support.hostile import ScriptedBroker
from support.observed import ObservedProxy
from support.proxy_harness import (
    LOCAL,
    FakeBroker,
    api_versions_v0,
    correlation_id,
    is_closed,
    read_frame,
)
from support.tls import OPENSSL_EXT, issue
from support.tls import make_ca as ca_files

from proxy.config import ConfigError
from proxy.features import Config, parse_config
from proxy.tansu import free_port

OLD_VERSIONS = ["TLSv1", "TLSv1_1"]
WEAK_CIPHERS = "DEFAULT:@SECLEVEL=0"  # lets this OpenSSL offer TLS 1.0/1.1 at all


# --- certificates ----------------------------------------------------------------------


def make_ca(d: Path, name: str) -> Path:
    d.mkdir()
    ca_files(d, f"/CN={name}")
    return d


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca/: the trusted CA and what it signed; rogue/: a CA nobody trusts."""
    root = tmp_path_factory.mktemp("pki")
    ca = make_ca(root / "ca", "kafkalens test CA")
    issue(ca, "server", "/CN=localhost", OPENSSL_EXT)
    issue(ca, "client", "/O=kafkalens/CN=test-client")
    issue(ca, "wrong-host", "/CN=wrong.example", "subjectAltName=DNS:wrong.example")
    rogue = make_ca(root / "rogue", "rogue CA")
    issue(rogue, "server", "/CN=localhost", OPENSSL_EXT)
    issue(rogue, "client", "/O=kafkalens/CN=test-client")
    return root


def pair(pki: Path, name: str) -> tuple[str, str]:
    """(cert, key) paths of "ca/server", "rogue/client" and the like."""
    return str(pki / f"{name}.crt"), str(pki / f"{name}.key")


def client_context(
    pki: Path, cert: str | None = "ca/client", version: str | None = None
) -> ssl.SSLContext:
    """A client trusting our CA; `version` pins one protocol version (old ones too)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki / "ca" / "ca.crt")
    if cert is not None:
        ctx.load_cert_chain(*pair(pki, cert))
    if version is not None:
        pin(ctx, version)
    return ctx


def pin(ctx: ssl.SSLContext, version: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # that is the point
        ctx.set_ciphers(WEAK_CIPHERS)
        ctx.minimum_version = ctx.maximum_version = getattr(ssl.TLSVersion, version)


def round_trip(port: int, ctx: ssl.SSLContext, corr: int = 3) -> bool:
    with (
        socket.create_connection((LOCAL, port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        sock.settimeout(10)
        sock.sendall(api_versions_v0(corr))
        return correlation_id(read_frame(sock)) == corr


# --- a TLS broker ----------------------------------------------------------------------


class TlsRelay:
    """Terminates TLS on a free local port and pipes the plaintext to `upstream_port`."""

    def __init__(self, upstream_port: int, ctx: ssl.SSLContext) -> None:
        self.upstream_port = upstream_port
        self.ctx = ctx
        # TLS connections that completed their handshake and carried Kafka (the proxy's
        # upstream probe, a handshake every 2 s and nothing more, is not one)
        self.handshakes = 0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    def __enter__(self) -> TlsRelay:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(self._listen(), self.loop).result(10)
        self.port = int(server.sockets[0].getsockname()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, LOCAL, 0, ssl=self.ctx)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = b""
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            first = await reader.read(65536)
        if not first:
            writer.close()
            return
        self.handshakes += 1
        up_reader, up_writer = await asyncio.open_connection(LOCAL, self.upstream_port)
        up_writer.write(first)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


def broker_context(
    pki: Path, cert: str = "ca/server", version: str | None = None
) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*pair(pki, cert))
    if version is not None:
        pin(ctx, version)
    return ctx


# --- the proxy -------------------------------------------------------------------------


def tls_config(upstream: str, tmp_path: Path, **sections: Any) -> Config:
    listener: dict[str, Any] = {"name": "tls", "listen": f"{LOCAL}:0", "upstream": upstream}
    if "tls" in sections:
        listener["tls"] = sections.pop("tls")
    return parse_config(
        {
            "listeners": [listener],
            "metrics": {"listen": f"{LOCAL}:0"},
            "request_log": {"path": str(tmp_path / "requests.log")},
            **sections,
        }
    )


def terminating(pki: Path, **extra: Any) -> dict[str, Any]:
    cert, key = pair(pki, "ca/server")
    return {"cert": cert, "key": key, "client_ca": str(pki / "ca" / "ca.crt"), **extra}


@contextlib.contextmanager
def tls_listener(pki: Path, tmp_path: Path, **extra: Any) -> Iterator[ObservedProxy]:
    """A proxy terminating TLS (client certificates required) in front of a fake broker."""
    with FakeBroker(ScriptedBroker()) as broker:
        config = tls_config(
            broker.address, tmp_path, tls=terminating(pki, require_client_cert=True, **extra)
        )
        with ObservedProxy(config) as px:
            yield px


def refused(call: Callable[[], object]) -> BaseException:
    """The error `call` fails with; fails the test if it succeeds."""
    try:
        call()
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        return exc
    raise AssertionError("the connection was accepted")


# --- client side -----------------------------------------------------------------------


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_old_tls_versions_are_refused_by_the_listener(
    pki: Path, tmp_path: Path, version: str
) -> None:
    old = client_context(pki, version=version)
    # control: this client really can speak `version` to a server that allows it...
    with (
        FakeBroker(ScriptedBroker()) as plain,
        TlsRelay(plain.port, broker_context(pki, version=version)) as relay,
    ):
        assert round_trip(relay.port, old)
    with tls_listener(pki, tmp_path) as px:
        # (uvloop hangs up without the protocol_version alert: any TLS failure will do)
        refused(functools.partial(round_trip, px.port, old))
        # ...and the same weak-cipher client pinned to TLS 1.2 gets in: the version it is
        assert round_trip(px.port, client_context(pki, version="TLSv1_2"))
        assert px.metric("kafkalens_connections_opened_total") == 1  # the refused never got in


def test_the_tls_floor_cannot_be_configured_lower(pki: Path, tmp_path: Path) -> None:
    for old in ("TLSv1", "TLSv1.1"):
        with pytest.raises(ConfigError, match="min_version"):
            tls_config(f"{LOCAL}:9", tmp_path, tls=terminating(pki, min_version=old))
        with pytest.raises(ConfigError, match="min_version"):
            tls_config(f"{LOCAL}:9", tmp_path, upstream_tls={"min_version": old})


@pytest.mark.parametrize("cert", [None, "rogue/client"], ids=["no-cert", "untrusted-cert"])
def test_clients_without_a_trusted_certificate_are_refused(
    pki: Path, tmp_path: Path, cert: str | None
) -> None:
    with tls_listener(pki, tmp_path) as px:
        for version in ("TLSv1_2", "TLSv1_3"):  # 1.3 reports it after the handshake
            ctx = client_context(pki, cert=cert)
            ctx.minimum_version = ctx.maximum_version = getattr(ssl.TLSVersion, version)
            refused(functools.partial(round_trip, px.port, ctx))
        assert round_trip(px.port, client_context(pki))
        assert px.metric("kafkalens_connections_opened_total") == 1  # the refused never got in


# --- broker side -----------------------------------------------------------------------


@contextlib.contextmanager
def originating(
    pki: Path, tmp_path: Path, broker_ctx: ssl.SSLContext, **upstream_tls: Any
) -> Iterator[tuple[ObservedProxy, TlsRelay]]:
    """A plaintext listener whose upstream is a TLS broker (a relay to a fake broker)."""
    with FakeBroker(ScriptedBroker()) as plain, TlsRelay(plain.port, broker_ctx) as relay:
        tls = {"ca": str(pki / "ca" / "ca.crt"), **upstream_tls}
        config = tls_config(f"{LOCAL}:{relay.port}", tmp_path, upstream_tls=tls)
        with ObservedProxy(config) as px:
            yield px, relay


def plain_round_trip(port: int) -> bool:
    with socket.create_connection((LOCAL, port), timeout=10) as sock:
        sock.settimeout(10)
        sock.sendall(api_versions_v0(5))
        return correlation_id(read_frame(sock)) == 5


BAD_BROKERS = {
    "wrong host": ("ca/wrong-host", None),
    "untrusted CA": ("rogue/server", None),
    "TLS 1.0": ("ca/server", "TLSv1"),
    "TLS 1.1": ("ca/server", "TLSv1_1"),
}


@pytest.mark.parametrize("case", BAD_BROKERS)
def test_bad_broker_certificates_and_versions_are_refused(
    pki: Path, tmp_path: Path, case: str
) -> None:
    cert, version = BAD_BROKERS[case]
    with originating(pki, tmp_path, broker_context(pki, cert, version)) as (px, relay):
        with socket.create_connection((LOCAL, px.port), timeout=10) as sock:
            sock.sendall(api_versions_v0(1))
            assert is_closed(sock, timeout=15)
        assert relay.handshakes == 0  # not a byte of Kafka went to that broker
        assert px.metric("kafkalens_upstream_failures_total", reason="tls") == 1
        assert px.closed("upstream_connect_failed") == 1


def test_a_good_broker_certificate_is_accepted(pki: Path, tmp_path: Path) -> None:
    with originating(pki, tmp_path, broker_context(pki)) as (px, relay):
        assert plain_round_trip(px.port)
        assert relay.handshakes == 1
        assert px.metric("kafkalens_upstream_failures_total") == 0


def test_wrong_host_accepted_only_with_hostname_checks_off(pki: Path, tmp_path: Path) -> None:
    """The knob works, so the refusal above is the host name check and nothing else."""
    ctx = broker_context(pki, "ca/wrong-host")
    with originating(pki, tmp_path, ctx, check_hostname=False) as (px, relay):
        assert plain_round_trip(px.port)
        assert relay.handshakes == 1


# --- end to end ------------------------------------------------------------------------


def test_kafka_client_through_tls_proxy_to_a_tls_broker(
    pki: Path, tmp_path: Path, tansu_factory: Callable[..., Any]
) -> None:
    """kafka-python --TLS, client cert--> kafkalens --TLS, checked--> TlsRelay --> tansu."""
    tansu_port = free_port()
    with TlsRelay(tansu_port, broker_context(pki)) as relay:
        config = tls_config(
            f"{LOCAL}:{relay.port}",
            tmp_path,
            tls=terminating(pki, require_client_cert=True),
            upstream_tls={"ca": str(pki / "ca" / "ca.crt")},
        )
        with ObservedProxy(config) as px:
            tansu_factory(advertised_port=px.port, port=tansu_port)
            cert, key = pair(pki, "ca/client")
            ssl_args = {
                "bootstrap_servers": px.bootstrap,
                "security_protocol": "SSL",
                "ssl_cafile": str(pki / "ca" / "ca.crt"),
                "ssl_certfile": cert,
                "ssl_keyfile": key,
                "request_timeout_ms": 15000,
            }
            assert produce_and_consume(ssl_args) == [b"over tls 0", b"over tls 1", b"over tls 2"]
            assert relay.handshakes >= 1
            assert px.metric("kafkalens_decode_errors_total") == 0
            lines = px.log_lines("connection_open")
            assert {line["client_cert_subject"] for line in lines} == {"O=kafkalens,CN=test-client"}
            assert {line["tls_version"] for line in lines} <= {"TLSv1.2", "TLSv1.3"}


def produce_and_consume(ssl_args: dict[str, Any]) -> list[bytes]:
    admin = KafkaAdminClient(**ssl_args)
    try:
        admin.create_topics([NewTopic("tls-e2e", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(**ssl_args)
    try:
        for i in range(3):
            producer.send("tls-e2e", f"over tls {i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer("tls-e2e", auto_offset_reset="earliest", **ssl_args)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < 3 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in batch)
    finally:
        consumer.close()
    return values
