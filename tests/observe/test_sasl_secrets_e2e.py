"""SASL/PLAIN through the real proxy: the principal is reported, the password never.

Real clients log in with a known password, both ways Kafka has: SaslHandshake v1 and
SaslAuthenticate requests, and SaslHandshake v0 followed by a raw token (the broker
offers only v0). The broker (support.sasl_broker; tansu offers SCRAM only) keeps the
tokens it got, which proves the secret crossed the proxy; then every request log line,
/metrics, /clients and the proxy's own output are searched for it: as is, in base64 and
in hex, whole or inside the token.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.observed import ObservedProxy, eventually
from support.sasl_broker import PlainBroker

USER = "alice-principal"
PASSWORD = "kl-S3cret-Pa55word-7f3a"
LOGIN_TIMEOUT_S = 5.0

CASES = [
    ("kafka-python", 1, True),
    ("kafka-python", 0, True),  # raw token: the principal comes from the sasl_token hook
    ("confluent-kafka", 1, True),
    ("confluent-kafka", 0, True),
    # the broker refuses: the secret crossed all the same (librdkafka retries: ~5 s)
    pytest.param("confluent-kafka", 1, False, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("client", "handshake", "accept"), CASES)
def test_principal_logged_and_password_nowhere(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], client: str, handshake: int, accept: bool
) -> None:
    seen: list[str] = []  # every text an operator could read
    broker = PlainBroker(handshake, accept)
    with (
        broker,
        ObservedProxy(broker.address, tmp_path / "requests.log") as px,
    ):
        broker.advertised = ("127.0.0.1", px.port)
        with logged_in(client, px.bootstrap, accept):
            if accept:  # clients may reconnect meanwhile: wait for one that logged in
                identities = eventually(lambda: _logged_in_identities(px))
                assert identities and all(
                    (i["principal"], i["sasl_mechanism"]) == (USER, "PLAIN") for i in identities
                )
            seen += [px.http("/clients"), px.http("/metrics")]
        px.wait_all_closed()
        lines = px.lines()
        seen += [px.http("/clients"), px.http("/metrics")]
    assert broker.tokens and all(PASSWORD.encode() in t for t in broker.tokens)
    assert broker.errors == []
    seen += [px.log_path.read_text(encoding="utf-8"), *capfd.readouterr()]
    _check_principal(lines, handshake, accept)
    for form in secret_forms([PASSWORD.encode(), *broker.tokens]):
        assert not any(form in text for text in seen), form


def _logged_in_identities(px: ObservedProxy) -> list[dict[str, Any]]:
    return [c["identity"] for c in px.http_clients() if c["identity"]["principal"]]


def _check_principal(lines: list[dict[str, Any]], handshake: int, accept: bool) -> None:
    requests = [line for line in lines if line["event"] == "request"]
    authenticate = [r for r in requests if r["api"] == "SaslAuthenticate"]
    after_login = [r for r in requests if r["api"] not in ("ApiVersions", "SaslHandshake")]
    assert {r["api_version"] for r in requests if r["api"] == "SaslHandshake"} == {handshake}
    if handshake == 0:
        assert not authenticate  # the token went raw, outside any request
    if accept:
        assert any(r["api"] == "Metadata" for r in after_login)
    else:
        assert authenticate and all(
            r["errors"] == ["SASL_AUTHENTICATION_FAILED"] for r in authenticate
        )
    assert after_login and {r["principal"] for r in after_login} == {USER}
    # a connection cut before its login (librdkafka retrying a refused one) has none
    logged_in = {r["conn"] for r in after_login}
    closes = [line for line in lines if line["event"] == "connection_close"]
    assert {c["principal"] for c in closes if c["conn"] in logged_in} == {USER}


def secret_forms(secrets: list[bytes]) -> set[str]:
    """How a secret could show up in text: as is, in hex, in base64, standalone or as
    part of a longer base64 blob (each of the three alignments)."""
    forms: set[str] = set()
    for secret in secrets:
        forms.add(secret.decode("utf-8", "replace"))
        forms.update({secret.hex(), secret.hex().upper()})
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(secret).decode())
            for offset in range(3):
                forms.add(_aligned_b64(encode, secret, offset))
    return {form for form in forms if len(form) >= 8}


def _aligned_b64(encode: Any, secret: bytes, offset: int) -> str:
    """The base64 characters that depend only on `secret`, when it starts `offset`
    bytes into a blob: drop those shared with the bytes before and after it."""
    text = encode(b"\0" * offset + secret).decode().rstrip("=")
    start = (offset * 4 + 2) // 3  # characters that also encode the leading bytes
    end = (offset + len(secret)) * 4 // 3  # characters wholly inside the secret
    return text[start:end]


@contextmanager
def logged_in(client: str, bootstrap: str, accept: bool) -> Iterator[None]:
    """A client of `client` that logged in (or tried to) and asked for metadata."""
    if client == "kafka-python":
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=USER,
            sasl_plain_password=PASSWORD,
            request_timeout_ms=int(LOGIN_TIMEOUT_S * 1000),
        )
        try:
            assert consumer.topics() == set()
            yield
        finally:
            consumer.close()
        return
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        }
    )
    try:
        assert admin.list_topics(timeout=LOGIN_TIMEOUT_S).topics == {}
    except KafkaException:
        assert not accept  # a refused login: no metadata
    yield
    del admin  # librdkafka closes its connections when the handle is destroyed
