"""The test support works: the recording relay, the fixtures, the client workloads,
librdkafka's mock cluster and the golden frames' index."""

from __future__ import annotations

import json
import re
import struct
import time

import pytest
from kafka import KafkaAdminClient
from support import kp_client
from support.clients import make_records, run_workload, sort_records
from support.mock_cluster import KAFKA_PYTHON_API_VERSION
from support.paths import GOLDEN
from support.relay import (
    REQUEST,
    RESPONSE,
    UNKNOWN,
    ConnectionState,
    FrameSplitter,
    RecordingRelay,
)

from codec import ApiKey
from proxy.tansu import TansuBroker

NAME = re.compile(r"^(\d{4})-(req|resp)-k(\d+)-v(\d+)\.bin$")
PRODUCE = ApiKey.PRODUCE
FETCH = ApiKey.FETCH
METADATA = ApiKey.METADATA
API_VERSIONS = ApiKey.API_VERSIONS


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_frame_splitter_handles_any_chunking() -> None:
    bodies = [b"abc", b"", b"x" * 300, b"\x00\x01"]
    stream = b"".join(frame(b) for b in bodies)
    for size in (1, 3, 7, len(stream)):
        splitter = FrameSplitter()
        got = []
        for i in range(0, len(stream), size):
            got += splitter.feed(stream[i : i + size])
        assert got == bodies


def test_raw_sasl_tokens_after_handshake_v0_are_not_attributed() -> None:
    state = ConnectionState(1)
    handshake = struct.pack(">hhih", ApiKey.SASL_HANDSHAKE, 0, 5, -1) + struct.pack(">h", 5) + b"PLAIN"
    assert state.classify_request(handshake)[:3] == (17, 0, 5)
    assert state.classify_response(struct.pack(">ih", 5, 0) + b"\x00\x00\x00\x00")[:2] == (17, 0)
    assert state.classify_request(b"\x00user\x00secret").api_key == UNKNOWN
    assert state.classify_response(b"").api_key == UNKNOWN  # the broker's empty token
    assert state.classify_request(struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 6, -1)).api_key == ApiKey.API_VERSIONS


def test_relay_pairs_requests_and_responses(
    relayed_tansu: tuple[RecordingRelay, TansuBroker],
) -> None:
    relay, _broker = relayed_tansu
    outcome = run_workload("kafka-python", relay.bootstrap, "relayed", count=4, admin=False)
    kp_client.produce(relay.bootstrap, "relayed", make_records(2, "a0"), acks=0)
    assert sort_records(outcome.consumed) == sort_records(outcome.produced)

    # The acks=0 Produce: tansu answers it all the same, unless the client closed
    # first. The client returns once it has sent it, maybe before the relay has
    # recorded it (a CI run saw none yet), so the relay gets a moment to catch up.
    deadline = time.monotonic() + 5
    while True:
        pairs = relay.pairs()
        silent = [req for req, resp in pairs if resp is None or resp.unexpected]
        if silent or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [r.api_key for r in silent] == [PRODUCE]
    frames = relay.frames
    assert frames and all(f.api_key != UNKNOWN for f in frames)
    for req, resp in pairs:
        if resp is not None:
            assert (resp.api_key, resp.api_version) == (req.api_key, req.api_version)
            assert resp.correlation_id == req.correlation_id == _request_corr(req.data)
            assert resp.direction == RESPONSE and req.direction == REQUEST
    seen = {f.api_key for f in frames}
    assert {API_VERSIONS, METADATA, PRODUCE, FETCH, 10, 11, 14, 8, 9} <= seen
    answered = sum(resp is not None for _req, resp in pairs)
    assert sum(f.direction == RESPONSE for f in frames) == answered


def _request_corr(data: bytes) -> int:
    return int(struct.unpack_from(">i", data, 4)[0])


@pytest.mark.parametrize(
    ("client", "compression"), [("aiokafka", "zstd"), ("confluent-kafka", "lz4")]
)
def test_workload_round_trip(tansu: TansuBroker, client: str, compression: str) -> None:
    outcome = run_workload(client, tansu.bootstrap, "wl", compression=compression, partitions=2)
    assert sort_records(outcome.consumed) == sort_records(outcome.produced)
    assert set(outcome.admin) == {"configs", "groups", "group", "offsets", "deleted"}


def test_mock_cluster_serves_kafka_python(mock_cluster: str) -> None:
    pin = KAFKA_PYTHON_API_VERSION
    records = make_records(8, "mock")
    kp_client.produce(mock_cluster, "mocked", records, "gzip", api_version=pin)
    got = kp_client.consume(mock_cluster, "mocked", "mock-group", len(records), api_version=pin)
    assert sort_records(got) == sort_records(records)

    admin = KafkaAdminClient(bootstrap_servers=mock_cluster, api_version=pin)
    try:
        cluster = admin.describe_cluster()
        topics = admin.describe_topics(["mocked"])
    finally:
        admin.close()
    assert len(cluster["brokers"]) == 3
    leaders = {p["leader_id"] for p in topics[0]["partitions"]}
    assert len(leaders) > 1


def test_golden_index_matches_files() -> None:
    index = json.loads((GOLDEN / "index.json").read_text())
    entries = index["frames"]
    assert entries
    total = 0
    for entry in entries:
        path = GOLDEN / entry["file"]
        data = path.read_bytes()
        total += len(data)
        match = NAME.match(path.name)
        assert match, path.name
        assert path.parent.name == entry["client"] and entry["client_version"]
        direction, key, version = match[2], int(match[3]), int(match[4])
        assert (direction, key, version) == (
            entry["direction"],
            entry["api_key"],
            entry["api_version"],
        )
        if direction == REQUEST:
            assert struct.unpack_from(">hhi", data) == (key, version, entry["correlation_id"])
        else:
            assert struct.unpack_from(">i", data)[0] == entry["correlation_id"]
    assert total < 3 * 1024 * 1024


def test_golden_frames_cover_the_workload_apis() -> None:
    entries = json.loads((GOLDEN / "index.json").read_text())["frames"]
    keys = {e["api_key"] for e in entries}
    wanted = {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22, 32}
    assert wanted <= keys, wanted - keys
    old = {(e["api_key"], e["api_version"]) for e in entries}
    assert {(0, 2), (1, 3), (3, 1), (18, 0), (18, 3)} <= old
