"""SASL/SCRAM through the real proxy against tansu's SCRAM: the principal is reported,
and neither the password nor the client proof appears anywhere an operator can read.

tansu (`--authentication`) runs the whole SCRAM exchange and then refuses the unknown
user, so the client-final message, proof included, crosses the proxy. A recording relay
between the proxy and tansu keeps what crossed, to know the proof to search for.

Apache Kafka with SCRAM would run the same exchange and refuse the unknown user alike:
it would take a broker of its own with a SASL listener, for nothing kafkalens does
differently.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from support.observed import ObservedProxy
from support.relay import RecordingRelay

from codec import ApiKey

USER = "scram-alice"
PASSWORD = "kl-Scram-S3cret-91b2"


def forms(secret: bytes) -> list[str]:
    return [
        secret.decode("latin-1"),
        secret.hex(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
    ]


def client_proofs(relay: RecordingRelay) -> list[bytes]:
    """The p= attribute of every SCRAM client-final message that crossed."""
    proofs = []
    for frame in relay.frames:
        data = bytes(frame.data)
        if frame.direction == "req" and frame.api_key == ApiKey.SASL_AUTHENTICATE and b",p=" in data:
            proof = data.split(b",p=", 1)[1].split(b",", 1)[0]
            proofs.append(proof.rstrip(b"\x00"))
    return proofs


def test_scram_principal_logged_and_no_secret_anywhere(
    tmp_path: Path, tansu_factory: object, capfd: pytest.CaptureFixture[str]
) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    broker = tansu_factory(extra_args=["--authentication"])  # type: ignore[operator]
    with RecordingRelay("127.0.0.1", broker.port) as relay, ObservedProxy(
        relay.bootstrap, tmp_path / "requests.log"
    ) as px:
        with pytest.raises(KafkaError):  # tansu knows no such user: refused after the proof
            KafkaProducer(
                bootstrap_servers=px.bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username=USER,
                sasl_plain_password=PASSWORD,
                request_timeout_ms=3000,
                max_block_ms=4000,
            )
        texts = [px.http("/clients"), px.http("/metrics")]
        px.wait_all_closed()
        lines = px.lines()
        texts += [px.http("/clients"), px.http("/metrics")]
    proofs = client_proofs(relay)
    assert proofs, "the client-final message never crossed"
    texts += [px.log_path.read_text(encoding="utf-8"), *capfd.readouterr()]
    closes = [line for line in lines if line["event"] == "connection_close"]
    assert any(line["principal"] == USER for line in closes)
    secrets = [PASSWORD.encode(), *proofs, *(base64.b64decode(p) for p in proofs)]
    for secret in secrets:
        for form in forms(secret):
            assert all(form not in text for text in texts), form
