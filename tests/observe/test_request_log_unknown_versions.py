"""A request of an api version kafkalens's codec does not know (a client newer than it)
is forwarded undecoded, and its request log line still names the client: the client id
comes right after the api key, version and correlation id in every request header
version a client sends (v1, v2; v3 adds the instance id after it)."""

from __future__ import annotations

import struct
from pathlib import Path

from support.hostile import connect, eventually, hostile_proxy
from support.proxy_harness import read_frame, request_frame

from codec import ApiKey

METADATA = ApiKey.METADATA


def test_a_request_of_an_unknown_version_still_names_its_client(tmp_path: Path) -> None:
    with hostile_proxy(tmp_path) as (px, broker):
        sock = connect(px.port)
        port = sock.getsockname()[1]
        sock.sendall(request_frame(METADATA, 999, 5, b"whatever", client_id="from-the-future"))
        assert read_frame(sock)[:4] == struct.pack(">i", 5)  # forwarded and answered
        assert eventually(lambda: len(px.log_lines("request", port)) == 1)
        (line,) = px.log_lines("request", port)
        assert line["decode_error"] == "unknown api key or version"
        assert (line["api"], line["api_version"], line["client_id"]) == (
            "Metadata",
            999,
            "from-the-future",
        )
        assert px.metric("kafkalens_unknown_requests_total", reason="api_version") == 1
        sock.close()
