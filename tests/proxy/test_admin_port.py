"""The admin port (metrics.*): /clients off unless enabled, then only with the bearer
token of metrics.clients_token_file or on the loopback listener metrics.clients_listen;
Host headers checked where asked; HTTPS with metrics.tls. /metrics, /healthz and
/readyz stay open. Live proxies with their real hooks; /clients with a real client
through the proxy to tansu.

The broker is tansu: the admin port is kafkalens's own, the same whatever the broker.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
from support.hostile import eventually
from support.observed import ObservedProxy
from support.proxy_harness import LOCAL, FakeBroker, echo_broker
from support.tls import issue, make_ca

from proxy.config import ConfigError
from proxy.features import Config, parse_config
from proxy.runner import start_proxy
from proxy.tansu import free_port

TOKEN = "s3cret-token-0123456789abcdef"


def admin_config(upstream: str, tmp_path: Path, **metrics: Any) -> Config:
    return parse_config(
        {
            "listeners": [{"name": "plaintext", "listen": f"{LOCAL}:0", "upstream": upstream}],
            "metrics": {"listen": f"{LOCAL}:0", **metrics},
            "request_log": {"path": str(tmp_path / "requests.log")},
        }
    )


def get(
    port: int,
    path: str,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection(LOCAL, port, timeout=5, context=context)
    else:
        conn = http.client.HTTPConnection(LOCAL, port, timeout=5)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection((LOCAL, port), timeout=5) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- configuration -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics", "error"),
    [
        (
            {"clients_listen": "0.0.0.0:9181"},
            "metrics.clients_listen: must be a loopback address (127.0.0.1, [::1], localhost),"
            " got 0.0.0.0:9181",
        ),
        ({"clients_listen": "10.1.2.3:9181"}, "metrics.clients_listen: must be a loopback"),
        ({"clients_token_file": "/nope/token"}, "metrics.clients_token_file: file not found"),
        ({"allowed_hosts": ["ok", ""]}, "metrics.allowed_hosts[1]: must be a non-empty string"),
        ({"allowed_hosts": "kafkalens"}, "metrics.allowed_hosts: must be a list"),
        ({"max_error_series": 0}, "metrics.max_error_series: must be a positive integer"),
        ({"tls": {"cert": "/nope.crt"}}, "metrics.tls.cert: file not found: /nope.crt"),
        ({"tls": {}}, "metrics.tls.cert: is required for TLS"),
    ],
)
def test_bad_admin_settings_name_their_key(
    tmp_path: Path, metrics: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        admin_config(f"{LOCAL}:9092", tmp_path, **metrics)
    assert str(caught.value).startswith(error)
    assert "\n" not in str(caught.value)


def test_loopback_addresses_are_accepted_and_clients_is_off_by_default(tmp_path: Path) -> None:
    default = admin_config(f"{LOCAL}:9092", tmp_path).metrics
    assert (default.clients_token_file, default.clients_listen, default.allowed_hosts) == (
        None,
        None,
        None,
    )
    for listen in ("127.0.0.1:9181", "127.0.0.2:9181", "localhost:9181", "[::1]:9181"):
        assert admin_config(f"{LOCAL}:9092", tmp_path, clients_listen=listen).metrics.clients_listen


def test_an_empty_token_file_stops_the_start(tmp_path: Path) -> None:
    import asyncio

    token = tmp_path / "token"
    token.write_text(" \n")
    config = admin_config(f"{LOCAL}:{free_port()}", tmp_path, clients_token_file=str(token))
    with pytest.raises(ConfigError, match=r"^metrics.clients_token_file: holds no token$"):
        asyncio.run(start_proxy(config))


# --- /clients ----------------------------------------------------------------------


def test_clients_is_off_unless_enabled_the_rest_stays_open(tmp_path: Path) -> None:
    with (
        FakeBroker(echo_broker) as broker,
        ObservedProxy(admin_config(broker.address, tmp_path)) as px,
    ):
        px.run(px.running.probe.probe_once())  # type: ignore[union-attr]
        port = px.http_port
        status, _, body = get(port, "/clients", bearer(TOKEN))
        assert status == 404
        assert b"set metrics.clients_token_file or metrics.clients_listen" in body
        assert get(port, "/metrics", {"Host": "anything.example"})[0] == 200
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz")[:3:2] == (200, b"ready\n")


def test_clients_with_the_bearer_token_of_a_file(tmp_path: Path, tansu_factory: Any) -> None:
    from kafka import KafkaProducer

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")  # as `kubectl create secret --from-file` keeps it
    broker_port = free_port()
    config = admin_config(f"{LOCAL}:{broker_port}", tmp_path, clients_token_file=str(token_file))
    with ObservedProxy(config) as px:
        tansu_factory(advertised_port=px.port, port=broker_port)
        producer = KafkaProducer(bootstrap_servers=px.bootstrap, client_id="token-test")
        try:
            producer.send("admin-topic", b"x").get(30)
            port = px.http_port
            status, headers, body = get(port, "/clients", bearer(TOKEN))
            assert status == 200 and headers["Content-Type"] == "application/json"
            assert "token-test" in {c["identity"].get("client_id") for c in json.loads(body)}

            status, headers, body = get(port, "/clients")
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
            assert b"token-test" not in body
            for refused in (
                bearer(TOKEN + "x"),
                bearer(TOKEN[:-1]),
                bearer(""),
                {"Authorization": f"Basic {TOKEN}"},
                {"Authorization": TOKEN},
            ):
                assert get(port, "/clients", refused)[0] == 401, refused
            assert get(port, "/clients", {"Authorization": f"bearer   {TOKEN}"})[0] == 200
            assert get(port, "/metrics")[0] == 200  # no token needed

            # A rotated Secret: a new file swapped in. The new token only, at once.
            rotated = tmp_path / "token.new"
            rotated.write_text("rotated-token-42")
            os.replace(rotated, token_file)
            assert get(port, "/clients", bearer(TOKEN))[0] == 401
            assert get(port, "/clients", bearer("rotated-token-42"))[0] == 200
            token_file.unlink()  # gone or unreadable: nobody
            assert get(port, "/clients", bearer("rotated-token-42"))[0] == 401
        finally:
            producer.close()


def test_a_repeated_authorization_or_host_header_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    config = admin_config(f"{LOCAL}:{free_port()}", tmp_path, clients_token_file=str(token_file))
    with ObservedProxy(config) as px:
        port = px.http_port
        twice = f"Authorization: Bearer wrong\r\nAuthorization: Bearer {TOKEN}\r\n".encode()
        answer = raw(port, b"GET /clients HTTP/1.1\r\nHost: x\r\n" + twice + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 400 ")
        answer = raw(port, b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 ")


def test_clients_on_the_loopback_listener_with_host_checks(tmp_path: Path) -> None:
    config = admin_config(f"{LOCAL}:{free_port()}", tmp_path, clients_listen=f"{LOCAL}:0")
    with ObservedProxy(config) as px:
        local = px.clients_port
        assert get(px.http_port, "/clients")[0] == 404  # not on the open listener
        status, _, body = get(local, "/clients")  # Host: 127.0.0.1:<port>
        assert status == 200 and json.loads(body) == []
        assert get(local, "/clients", {"Host": f"localhost:{local}"})[0] == 200
        assert get(local, "/metrics", {"Host": "localhost"})[0] == 200
        # DNS rebinding: a web page's own name pointed at 127.0.0.1
        status, _, body = get(local, "/clients", {"Host": f"evil.example:{local}"})
        assert status == 421 and b"json" not in body
        assert get(local, "/clients", {"Host": "127.0.0.2"})[0] == 421  # not where it came in
        assert raw(local, b"GET /clients HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 421 ")


def test_allowed_hosts_on_the_open_listener(tmp_path: Path) -> None:
    config = admin_config(
        f"{LOCAL}:{free_port()}", tmp_path, allowed_hosts=["kafkalens.monitoring.svc"]
    )
    with ObservedProxy(config) as px:
        port = px.http_port
        for host in (
            "kafkalens.monitoring.svc:9180",
            "KAFKALENS.Monitoring.svc.",
            f"{LOCAL}:{port}",
        ):
            assert get(port, "/metrics", {"Host": host})[0] == 200, host
        for path in ("/metrics", "/healthz", "/readyz", "/clients"):
            assert get(port, path, {"Host": "evil.example"})[0] == 421, path
        assert get(port, "/healthz")[0] == 200  # a probe names the address it dials


def test_an_empty_allowed_hosts_list_allows_only_the_address_and_localhost(tmp_path: Path) -> None:
    with ObservedProxy(admin_config(f"{LOCAL}:{free_port()}", tmp_path, allowed_hosts=[])) as px:
        port = px.http_port
        assert get(port, "/metrics")[0] == 200  # Host: 127.0.0.1:<port>
        assert get(port, "/metrics", {"Host": "localhost"})[0] == 200
        assert get(port, "/metrics", {"Host": "kafkalens.monitoring.svc"})[0] == 421


# --- bounds and refusals -------------------------------------------------------------


def refused(port: int) -> dict[str, float]:
    """kafkalens_admin_refused_total by reason, read from /metrics (every reason is
    there from the start, at 0: only those above)."""
    text = get(port, "/metrics")[2].decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("kafkalens_admin_refused_total{"):
            labels, _, value = line.rpartition(" ")
            if float(value):
                counts[labels.split('reason="')[1].split('"')[0]] = float(value)
    return counts


def admin_open(px: ObservedProxy) -> int:
    """Connections the admin port's main listener counts as open (read on its loop)."""
    assert px.running is not None
    return int(px.call(lambda: px.running.admin.gates["metrics.listen"].open))  # type: ignore[union-attr]


def connect_from(source: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.settimeout(5)
    sock.bind((source, 0))
    sock.connect((LOCAL, port))
    return sock


def busy_answer(sock: socket.socket) -> bytes:
    """What the port sent a connection it turned away, up to its close."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_connection_past_max_connections_replaces_the_oldest_idle_one(tmp_path: Path) -> None:
    """At metrics.max_connections, a newcomer takes the place of the oldest connection
    still waiting for its request."""
    config = admin_config(f"{LOCAL}:{free_port()}", tmp_path, max_connections=3)
    with ObservedProxy(config) as px:
        port = px.http_port
        crowd = [connect_from("127.0.0.2", port) for _ in range(2)]
        lone = connect_from("127.0.0.3", port)
        assert eventually(lambda: admin_open(px) == 3, 5)  # the proxy took all three in
        # the newcomer from a third address: the oldest (127.0.0.2's first) makes room
        assert raw(port, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")
        answer = busy_answer(crowd[0])
        assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in answer
        assert b"too many admin connections" in answer
        # the others were left alone, and are served when they ask
        for sock in (crowd[1], lone):
            sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert busy_answer(sock).startswith(b"HTTP/1.1 200 ")
        assert refused(port) == {"too_many_connections": 1}
        for sock in (*crowd, lone):
            sock.close()


def test_one_address_holds_at_most_max_connections_per_address(tmp_path: Path) -> None:
    config = admin_config(f"{LOCAL}:{free_port()}", tmp_path, max_connections_per_address=2)
    with ObservedProxy(config) as px:
        port = px.http_port
        first, second = (connect_from("127.0.0.2", port) for _ in range(2))
        assert eventually(lambda: admin_open(px) == 2, 5)
        third = connect_from("127.0.0.2", port)  # past the address's limit: replaces `first`
        assert busy_answer(first).startswith(b"HTTP/1.1 503 ")
        assert get(port, "/healthz")[0] == 200  # another address is not concerned
        for sock in (second, third):
            sock.sendall(b"GET /readyz HTTP/1.0\r\n\r\n")
            assert busy_answer(sock).startswith(b"HTTP/1.1 ")
        assert refused(port) == {"per_address_limit": 1}
        for sock in (first, second, third):
            sock.close()


def test_a_newcomer_is_refused_only_when_every_connection_it_could_replace_is_answering() -> None:
    from proxy.admin.http import Endpoints, Gate, HttpProtocol

    gate = Gate(limit=2, per_address=1)
    endpoints = Endpoints(metrics=lambda: b"", ready=lambda: (True, "ready"), clients=list)

    def arriving(address: str) -> HttpProtocol:
        conn = HttpProtocol(endpoints, gate=gate)
        conn.address = address
        return conn

    answering = arriving("10.0.0.1")
    assert gate.admit(answering) is None
    answering.waiting = False  # its request is in: being answered, never replaced
    assert gate.admit(arriving("10.0.0.1")) == "per_address_limit"
    other = arriving("10.0.0.2")
    assert gate.admit(other) is None
    other.waiting = False
    assert gate.admit(arriving("10.0.0.3")) == "too_many_connections"
    assert gate.open == 2
    gate.release(other)
    gate.release(other)  # released once only
    assert gate.open == 1 and gate.admit(arriving("10.0.0.3")) is None


def test_the_per_address_limit_counts_an_ipv6_host_by_its_64() -> None:
    from proxy.admin.http import address_key

    assert address_key(("2001:db8:1:2::1", 5, 0, 0)) == address_key(("2001:db8:1:2:ffff::9", 5, 0, 0))
    assert address_key(("2001:db8:1:2::1", 5, 0, 0)) == "2001:db8:1:2::/64"
    assert address_key(("2001:db8:1:3::1", 5, 0, 0)) != address_key(("2001:db8:1:2::1", 5, 0, 0))
    assert address_key(("::ffff:10.1.2.3", 5, 0, 0)) == "10.1.2.3"
    assert address_key(("10.1.2.3", 5)) == "10.1.2.3"


def test_each_refusal_is_counted_by_reason(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    config = admin_config(
        f"{LOCAL}:{free_port()}", tmp_path, clients_token_file=str(token_file), allowed_hosts=[]
    )
    with ObservedProxy(config) as px:
        port = px.http_port
        assert refused(port) == {}
        assert get(port, "/clients", bearer("wrong"))[0] == 401
        assert get(port, "/clients")[0] == 401
        assert get(port, "/metrics", {"Host": "evil.example"})[0] == 421
        assert raw(port, b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        assert raw(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw(port, b"GET /" + b"a" * 9000).startswith(b"HTTP/1.1 431 ")
        assert get(port, "/clients", bearer(TOKEN))[0] == 200  # allowed: not counted
        assert get(port, "/nowhere")[0] == 404  # a wrong path is not a refusal
        assert refused(port) == {
            "unauthorized": 2, "host": 1, "method": 1, "bad_request": 1, "header_too_large": 1
        }


def test_clients_off_is_counted(tmp_path: Path) -> None:
    with ObservedProxy(admin_config(f"{LOCAL}:{free_port()}", tmp_path)) as px:
        assert get(px.http_port, "/clients")[0] == 404
        assert refused(px.http_port) == {"clients_off": 1}


# --- TLS ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("admin-certs")
    make_ca(d, "/CN=kafkalens admin test CA")
    issue(d, "server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    return d


def test_tls_on_the_admin_port(tmp_path: Path, certs: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    tls = {"cert": str(certs / "server.crt"), "key": str(certs / "server.key")}
    config = admin_config(
        f"{LOCAL}:{free_port()}", tmp_path, tls=tls, clients_token_file=str(token_file)
    )
    with ObservedProxy(config) as px:
        port = px.http_port
        trusting = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        status, _, body = get(port, "/metrics", context=trusting)
        assert status == 200 and b"kafkalens_build_info" in body
        assert get(port, "/clients", bearer(TOKEN), context=trusting)[0] == 200
        assert get(port, "/clients", context=trusting)[0] == 401
        with pytest.raises(ssl.SSLCertVerificationError):
            get(port, "/metrics", context=ssl.create_default_context())
        assert not raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/")
        assert get(port, "/healthz", context=trusting)[0] == 200  # still serving


def test_a_bad_tls_certificate_stops_the_start(tmp_path: Path) -> None:
    import asyncio

    (tmp_path / "bad.crt").write_text("not a certificate")
    tls = {"cert": str(tmp_path / "bad.crt"), "key": str(tmp_path / "bad.crt")}
    config = admin_config(f"{LOCAL}:{free_port()}", tmp_path, tls=tls)
    with pytest.raises(ConfigError, match=r"^metrics.tls: cannot load the certificate"):
        asyncio.run(start_proxy(config))


def test_check_config_says_where_clients_is_served(tmp_path: Path) -> None:
    from proxy.features import summary

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    upstream = f"{LOCAL}:9092"
    assert "clients: off" in summary(admin_config(upstream, tmp_path))
    lines = summary(
        admin_config(
            upstream,
            tmp_path,
            listen="0.0.0.0:9180",
            clients_token_file=str(token_file),
            clients_listen="127.0.0.1:9181",
        )
    )
    assert "clients: http://0.0.0.0:9180/clients (bearer token)" in lines
    assert "clients: http://127.0.0.1:9181/clients" in lines
    assert "clients: off" not in lines
