"""`kafkalens decode`: frames in, one JSON object per frame out."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from codec import Request, Response, encode_request, encode_response
from proxy.decode_cmd import main


def framed(*frames: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, data: bytes, *args: str) -> tuple[int, list]:
    path = tmp_path / "frames.bin"
    path.write_bytes(data)
    status = main([str(path), *args])
    return status, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_requests_bytes_shown_as_length_and_prefix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    secretless = Request(36, 2, {"correlation_id": 4, "client_id": "c"}, {"auth_bytes": b"x" * 100})
    meta = Request(3, 1, {"correlation_id": 5, "client_id": "c"}, {"topics": [{"name": "orders"}]})
    status, out = run(capsys, tmp_path, framed(encode_request(secretless), encode_request(meta)))
    assert status == 0
    assert out[0]["api"] == "SaslAuthenticate"
    assert out[0]["body"]["auth_bytes"] == {"length": 100, "redacted": True}
    assert out[1]["api"] == "Metadata" and out[1]["body"]["topics"] == [{"name": "orders"}]
    assert out[1]["header"]["correlation_id"] == 5


def test_responses_need_the_request_api(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    response = Response(18, 0, {"correlation_id": 1}, {"error_code": 0, "api_keys": [
        {"api_key": 0, "min_version": 0, "max_version": 9}]})
    status, out = run(capsys, tmp_path, framed(encode_response(response)), "--response-to", "18:0")
    assert status == 0
    assert out[0]["direction"] == "response"
    assert out[0]["body"]["api_keys"] == [{"api_key": 0, "min_version": 0, "max_version": 9}]


def test_errors_are_reported_per_frame(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = encode_request(Request(18, 0, {"correlation_id": 1, "client_id": None}, {}))
    status, out = run(capsys, tmp_path, framed(good, b"\x00\x03\x00\x00garbage") + b"\x00\x00")
    assert status == 1
    assert "error" not in out[0]
    assert "runs past the end" in out[1]["error"] and out[1]["offset"] == 10
    assert out[2] == {"offset": out[2]["offset"], "error": "2 bytes left, too few for a length prefix"}
