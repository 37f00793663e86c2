"""`kafkalens decode`: frames in, one JSON object per frame out."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from codec import ApiKey, Request, Response, encode_request, encode_response
from proxy.decode_cmd import main


def framed(*frames: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, data: bytes, *args: str) -> tuple[int, list]:
    path = tmp_path / "frames.bin"
    path.write_bytes(data)
    status = main([str(path), *args])
    return status, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_requests_bytes_shown_as_length_and_prefix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    secretless = Request(ApiKey.SASL_AUTHENTICATE, 2, {"correlation_id": 4, "client_id": "c"}, {"auth_bytes": b"x" * 100})
    meta = Request(ApiKey.METADATA, 1, {"correlation_id": 5, "client_id": "c"}, {"topics": [{"name": "orders"}]})
    status, out = run(capsys, tmp_path, framed(encode_request(secretless), encode_request(meta)))
    assert status == 0
    assert out[0]["api"] == "SaslAuthenticate"
    assert out[0]["body"]["auth_bytes"] == {"length": 100, "redacted": True}
    assert out[1]["api"] == "Metadata" and out[1]["body"]["topics"] == [{"name": "orders"}]
    assert out[1]["header"]["correlation_id"] == 5


def test_responses_need_the_request_api(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    response = Response(ApiKey.API_VERSIONS, 0, {"correlation_id": 1}, {"error_code": 0, "api_keys": [
        {"api_key": ApiKey.PRODUCE, "min_version": 0, "max_version": 9}]})
    status, out = run(capsys, tmp_path, framed(encode_response(response)), "--response-to", "18:0")
    assert status == 0
    assert out[0]["direction"] == "response"
    assert out[0]["body"]["api_keys"] == [{"api_key": ApiKey.PRODUCE, "min_version": 0, "max_version": 9}]


def test_errors_are_reported_per_frame(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = encode_request(Request(ApiKey.API_VERSIONS, 0, {"correlation_id": 1, "client_id": None}, {}))
    status, out = run(capsys, tmp_path, framed(good, b"\x00\x03\x00\x00garbage") + b"\x00\x00")
    assert status == 1
    assert "error" not in out[0]
    assert "runs past the end" in out[1]["error"] and out[1]["offset"] == 10
    assert out[2] == {"offset": out[2]["offset"], "error": "2 bytes left, too few for a length prefix"}


def subscription_v0(topics: list[str]) -> bytes:
    # hand-built: version, [topics], null user data
    names = b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return struct.pack(">hi", 0, len(topics)) + names + struct.pack(">i", -1)


def assignment_v0(topic: str, partitions: list[int]) -> bytes:
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode()
            + struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
            + struct.pack(">i", -1))


def test_group_payloads_are_decoded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """KIP-559: JoinGroup names the protocol type; a SyncGroup before v5 does not, and
    takes it from the JoinGroup earlier in the file."""
    join = Request(ApiKey.JOIN_GROUP, 5, {"correlation_id": 1, "client_id": "c"}, {
        "group_id": "g", "session_timeout_ms": 10, "rebalance_timeout_ms": 10, "member_id": "m",
        "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription_v0(["orders", "pay"])}],
    })
    sync = Request(ApiKey.SYNC_GROUP, 3, {"correlation_id": 2, "client_id": "c"}, {
        "group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
        "assignments": [{"member_id": "m", "assignment": assignment_v0("orders", [0, 2])}],
    })
    status, out = run(capsys, tmp_path, framed(encode_request(join), encode_request(sync)))
    assert status == 0
    assert out[0]["group_payloads"]["subscriptions"] == {
        "range": {"version": 0, "topics": ["orders", "pay"], "user_data_bytes": None},
    }
    assert out[1]["group_payloads"]["assignments"]["m"]["assigned_partitions"] == [
        {"topic": "orders", "partitions": [0, 2]},
    ]


def test_describe_groups_members_decoded_with_response_to(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    response = Response(ApiKey.DESCRIBE_GROUPS, 1, {"correlation_id": 3}, {"throttle_time_ms": 0, "groups": [{
        "error_code": 0, "group_id": "g", "group_state": "Stable", "protocol_type": "consumer",
        "protocol_data": "range", "members": [{
            "member_id": "m", "client_id": "c", "client_host": "/h",
            "member_metadata": subscription_v0(["orders"]),
            "member_assignment": assignment_v0("orders", [1]),
        }],
    }]})
    status, out = run(capsys, tmp_path, framed(encode_response(response)), "--response-to", "15:1")
    assert status == 0
    member = out[0]["group_payloads"]["groups"]["g"]["members"]["m"]
    assert member["subscription"]["topics"] == ["orders"]
    assert member["assignment"]["assigned_partitions"] == [{"topic": "orders", "partitions": [1]}]


def test_sasl_principal_shown_and_the_secret_never(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    handshake = Request(ApiKey.SASL_HANDSHAKE, 1, {"correlation_id": 1, "client_id": "c"}, {"mechanism": "PLAIN"})
    token = b"\x00alice\x00s3cr3t-passw0rd"
    auth = Request(ApiKey.SASL_AUTHENTICATE, 2, {"correlation_id": 2, "client_id": "c"}, {"auth_bytes": token})
    path = tmp_path / "frames.bin"
    path.write_bytes(framed(encode_request(handshake), encode_request(auth)))
    assert main([str(path)]) == 0
    text = capsys.readouterr().out
    out = [json.loads(line) for line in text.splitlines()]
    assert out[1]["body"]["principal"] == "alice"
    assert out[1]["body"]["auth_bytes"] == {"length": len(token), "redacted": True}
    assert "s3cr3t" not in text and token.hex()[:20] not in text and "czNjcjN0" not in text


def test_bad_arguments_are_said_not_raised(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path / "missing.pcap")])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"kafkalens: error: cannot read {tmp_path / 'missing.pcap'}: No such file or directory\n"
    )
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path / "missing.pcap"), "--max-streams", "0"])
    assert exited.value.code == 2
    assert "must be positive" in capsys.readouterr().err
