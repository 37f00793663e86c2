"""An ApiVersions version the codec cannot read is answered by kafkalens as KIP-511 has
a broker answer a version it does not know: UNSUPPORTED_VERSION with a v0 body and the
range the codec reads, never forwarded; the client's next ApiVersions, within that range,
goes to the broker and its answer is capped as usual. (A client newer than the codec's
definitions does this: franz-go 1.22 sent ApiVersions v5, KIP-1242, before the codec was
generated from Kafka 4.4's definitions. The test asks one version past the codec's newest.)"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from support.observed import ObservedProxy
from support.proxy_harness import FakeBroker, read_frame, write_frame

from codec import ApiKey, Request, Response, decode_response, encode_request, encode_response
from codec.error_codes import UNSUPPORTED_VERSION
from codec.schema import api_messages

API_VERSIONS, METADATA = ApiKey.API_VERSIONS, ApiKey.METADATA


class RecordingBroker(FakeBroker):
    """Answers every request with its response's defaults (ApiVersions with a range of
    every api up to v99, to be capped); remembers (api key, version, correlation id)."""

    def __init__(self) -> None:
        super().__init__(self.serve)
        self.seen: list[tuple[int, int, int]] = []

    def serve(self, sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            api_key, version, corr = struct.unpack_from(">hhi", request)
            self.seen.append((api_key, version, corr))
            body = {}
            if api_key == API_VERSIONS:
                body = {"api_keys": [{"api_key": k, "min_version": 0, "max_version": 99}
                                     for k in (METADATA, API_VERSIONS)]}
            write_frame(sock, encode_response(Response(api_key, version, {"correlation_id": corr}, body)))


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _api_versions_unknown(corr: int, version: int) -> bytes:
    """Header v2 (key, version, corr, client id, no tags), then a body the proxy never
    reads: a version past the codec's newest cannot be encoded by the codec itself."""
    client_id = b"franz"
    header = struct.pack(">hhih", API_VERSIONS, version, corr, len(client_id)) + client_id + b"\x00"
    return _frame(header + b"\x04kgo\x08v1.22.3\x00\x00")


def test_an_unreadable_api_versions_version_is_answered_as_kip511_says(tmp_path: Path) -> None:
    newest = max(api_messages()[API_VERSIONS][0].versions)
    unknown = newest + 1
    broker = RecordingBroker()
    with (
        broker,
        ObservedProxy(broker.address, tmp_path / "requests.log") as px,
        socket.create_connection(("127.0.0.1", px.port), timeout=10) as sock,
    ):
        metadata = encode_request(Request(METADATA, 1, {"correlation_id": 1, "client_id": "c"}, {"topics": None}))
        # pipelined: the proxy's answer to 2 comes after the broker's to 1
        sock.sendall(_frame(metadata) + _api_versions_unknown(2, unknown))
        assert decode_response(read_frame(sock), METADATA, 1).correlation_id == 1
        refused = decode_response(read_frame(sock), API_VERSIONS, 0)
        assert refused.correlation_id == 2
        assert refused.body["error_code"] == UNSUPPORTED_VERSION
        assert refused.body["api_keys"] == [{"api_key": API_VERSIONS, "min_version": 0, "max_version": newest}]
        # the client asks again within the range: forwarded, and the broker's answer capped
        again = Request(API_VERSIONS, newest, {"correlation_id": 3, "client_id": "c"},
                        {"client_software_name": "kgo", "client_software_version": "v1.22.3"})
        sock.sendall(_frame(encode_request(again)))
        answer = decode_response(read_frame(sock), API_VERSIONS, newest)
        ranges = {e["api_key"]: e["max_version"] for e in answer.body["api_keys"]}
        assert ranges == {METADATA: max(api_messages()[METADATA][0].versions), API_VERSIONS: newest}
        sock.close()
        px.wait_all_closed()
        errors = px.metrics().value("kafkalens_request_errors_total", api="ApiVersions", error="UNSUPPORTED_VERSION")
    assert broker.seen == [(METADATA, 1, 1), (API_VERSIONS, newest, 3)]  # never the unknown
    assert errors == 1
    lines = [line for line in px.lines() if line["event"] == "request" and line["api"] == "ApiVersions"]
    assert [(line["api_version"], line.get("answered_by"), line["errors"]) for line in lines] == [
        (unknown, "proxy", ["UNSUPPORTED_VERSION"]), (newest, None, [])]
    assert lines[1]["client_software_name"] == "kgo"
