"""`kafkalens decode CAPTURE` against real traffic: tcpdump on loopback while real
clients talk to tansu through a kafkalens proxy, captured on both sides of it.

* The decoded lines are the proxy's own request log lines for the same exchanges,
  field for field (bar the connection's name, addresses, timestamps and latencies),
  from the client side and from the broker side of the proxy.
* tshark's Kafka dissector is the independent oracle: every message it decodes has
  the api key, version, correlation id, client id, topic names, partition ids and
  error codes kafkalens found.

The traffic is to tansu: what is tested is the decoding of a capture, the same whatever
the broker, and a broker in memory that starts in a second keeps each capture small.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import kp_client
from support.capture import Line, decode, events, need, tcpdump, tshark_messages
from support.clients import run_workload
from support.observed import ObservedProxy

from codec import ApiKey, decode_request, decode_response
from codec.error_codes import error_name
from proxy.hooks import ConnectionInfo, Pending
from proxy.tansu import free_port

LOCAL = "127.0.0.1"
# What differs between two observers of one exchange: who they are and when they ran.
VOLATILE = frozenset({"ts", "latency_ms", "conn", "listener", "client_address"})
EXCHANGES = ("request", "request_no_response", "request_incomplete")
CLIENTS = [
    ("kafka-python", "gzip"),
    ("kafka-python-0.10.1", "none"),  # pinned old: the versions Kafka 4.0 removed
    ("aiokafka", "zstd"),
    ("confluent-kafka", "lz4"),
]


GET_TELEMETRY_SUBSCRIPTIONS = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS
JOINED = frozenset({"client_instance_id"})


def comparable(line: Line, drop: frozenset[str] = frozenset()) -> str:
    return json.dumps({k: v for k, v in line.items() if k not in VOLATILE | drop}, sort_keys=True)


def exchange_lines(lines: list[Line], broker_side: bool = False, kinds: tuple[str, ...] = EXCHANGES) -> Counter[str]:
    # The proxy caps ApiVersions answers (proxy/observe/api_versions.py): the broker's are longer.
    # A connection without an instance id of its own takes its client's from another
    # (proxy/observe/instance_join.py) at the moment it is published; when two instances
    # share a join key (a producer and a consumer of one program), which connections get
    # which id depends on how connections and answers interleave, which a capture on
    # either side of the proxy cannot replay to the microsecond. So instance ids are
    # compared where a connection learnt its own: on GetTelemetrySubscriptions lines.
    def dropped(line: Line) -> frozenset[str]:
        ids = frozenset() if line["api_key"] == GET_TELEMETRY_SUBSCRIPTIONS else JOINED
        return ids | ({"response_bytes"} if broker_side and line["api_key"] == ApiKey.API_VERSIONS else frozenset())

    return Counter(comparable(line, dropped(line)) for line in events(lines, *kinds))


def check_broker_side(logged: list[Line], broker_side: list[Line]) -> None:
    """The broker side holds the same exchanges, except that a request the proxy
    logged as incomplete (its client left first) may have had its answer there."""
    answered = ("request", "request_no_response")
    want, got = exchange_lines(logged, True, answered), exchange_lines(broker_side, True)
    assert want - got == Counter(), "logged by the proxy, missing from the broker side"
    incomplete = {
        (line["api"], line["correlation_id"], line["client_id"]) for line in events(logged, "request_incomplete")
    }
    for extra in (got - want).elements():
        line = json.loads(extra)
        assert (line["api"], line["correlation_id"], line["client_id"]) in incomplete, line


class Captured:
    """Both sides of a proxy, and the frames kafkalens decoded in each capture."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.broker_port = free_port()
        self.proxy: ObservedProxy | None = None
        self.frames: dict[str, list[tuple[ConnectionInfo, str, Pending, bytes]]] = {"client": [], "broker": []}

    def decoded(self, side: str) -> list[Line]:
        port = self.proxy_port if side == "client" else self.broker_port

        def keep(info: ConnectionInfo, kind: str, pending: Pending, body: bytes) -> None:
            self.frames[side].append((info, kind, pending, body))

        return decode(self.tmp / f"{side}.pcap", (port,), on_frame=keep)

    @property
    def proxy_port(self) -> int:
        assert self.proxy is not None
        return self.proxy.port


@pytest.fixture
def captured(tansu_factory: Any, tmp_path: Path) -> Iterator[Captured]:
    need("tcpdump")
    cap = Captured(tmp_path)
    with ObservedProxy(f"{LOCAL}:{cap.broker_port}", tmp_path / "requests.log") as px:
        cap.proxy = px
        tansu_factory(advertised_port=px.port, port=cap.broker_port)
        yield cap


def run_captured(cap: Captured, client: str, compression: str) -> list[Line]:
    """The workload through the proxy, both sides captured; the proxy's log lines."""
    px = cap.proxy
    assert px is not None
    topic = f"cap-{client.replace('-', '').replace('.', '')}"
    with tcpdump(cap.tmp / "client.pcap", px.port), tcpdump(cap.tmp / "broker.pcap", cap.broker_port):
        if client == "kafka-python-0.10.1":
            outcome = kp_client.legacy_workload(px.bootstrap, topic, (0, 10, 1))
        else:
            outcome = run_workload(client, px.bootstrap, topic, compression=compression, count=3,
                                   admin=client == "kafka-python")
        assert len(outcome.consumed) == 3
        px.wait_all_closed()
    return px.lines()


@pytest.mark.parametrize(("client", "compression"), CLIENTS)
def test_capture_gives_the_proxys_request_log(captured: Captured, client: str, compression: str) -> None:
    logged = run_captured(captured, client, compression)
    client_side = captured.decoded("client")
    broker_side = captured.decoded("broker")

    # A client that sends its last request and closes at once (librdkafka's short-lived
    # connections do, after GetTelemetrySubscriptions) races its answer; either way the
    # proxy logs what the client side shows: a `request` for an answer it wrote, a
    # `request_incomplete` for one read after the client left (test_proxy_client_gone.py).
    want = exchange_lines(logged)
    assert sum(want.values()) >= 15
    assert exchange_lines(client_side) == want
    check_broker_side(logged, broker_side)
    # connections: as many, with the same identity and the same counts
    drop = frozenset({"reason", "duration_s"}) | JOINED
    opened = [comparable(line, drop) for line in events(logged, "connection_open")]
    closed = [comparable(line, drop) for line in events(logged, "connection_close")]
    assert sorted(comparable(line, drop) for line in events(client_side, "connection_open")) == sorted(opened)
    assert sorted(comparable(line, drop) for line in events(client_side, "connection_close")) == sorted(closed)
    for decoded in (client_side, broker_side):
        summary = events(decoded, "capture_summary")[0]
        assert summary["unmatched_responses"] == summary["resyncs"] == summary["lost_bytes"] == 0
        assert not events(decoded, "capture_stream_error", "capture_tls_stream")
    # the capture's own times: a JoinGroup waits for the rebalance (tansu answers
    # after its rebalance timeout), a latency no clock of this test could fake
    joins = [line for line in events(client_side, "request") if line["api"] == "JoinGroup"]
    assert joins and all(line["latency_ms"] >= 0 for line in joins)
    assert all(line["ts"].startswith("20") for line in client_side)

    compared = check_against_tshark(captured, "client") + check_against_tshark(captured, "broker")
    assert compared["topics"] and compared["errors"], compared
    # tshark 4.0 decodes partitions of none of the versions librdkafka 2.x sends
    assert compared["partitions"] or client == "confluent-kafka", compared


def test_group_payloads_and_records_are_decoded(captured: Captured) -> None:
    run_captured(captured, "kafka-python", "none")
    lines = events(captured.decoded("client"), "request")
    by_api: dict[str, list[Line]] = {}
    for line in lines:
        by_api.setdefault(line["api"], []).append(line)
    sync = by_api["SyncGroup"][0]
    assigned = next(iter(sync["assignments"].values()))["assigned_partitions"]
    assert assigned == [{"topic": "cap-kafkapython", "partitions": [0]}]
    assert sync["assignment"]["assigned_partitions"] == assigned
    joined = [line for line in by_api["JoinGroup"] if not line["errors"]][0]
    assert next(iter(joined["member_subscriptions"].values()))["topics"] == ["cap-kafkapython"]
    produce = by_api["Produce"][0]
    assert produce["record_stats"]["records"] == 3 and produce["topics"] == ["cap-kafkapython"]


# -- the oracle ------------------------------------------------------------------------

PARTITION_KEYS = frozenset({"partition_index", "partition", "index", "partition_id"})


def tshark_facts(message: Line) -> dict[str, Any]:
    kafka = message["kafka"]
    found: dict[str, set[Any]] = {"topics": set(), "partitions": set(), "errors": set()}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "kafka.topic_name" and isinstance(value, str):
                    found["topics"].add(value)
                elif key == "kafka.partition_id" and isinstance(value, str):
                    found["partitions"].add(int(value))
                elif key == "kafka.error" and isinstance(value, str) and value != "0":
                    found["errors"].add(error_name(int(value)))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(kafka)
    return {
        "request": "kafka.request_key" in kafka,
        "api_key": int(kafka["kafka.api_key"]) if "kafka.api_key" in kafka else None,
        "version": int(kafka.get("kafka.request.version") or kafka.get("kafka.response.version") or -1),
        "correlation_id": int(kafka["kafka.correlation_id"]),
        "client_id": kafka.get("kafka.client_id"),
        "malformed": message["undecoded"],
        **found,
    }


def our_facts(kind: str, pending: Pending, body: bytes) -> dict[str, Any]:
    message: Any = (
        decode_request(body) if kind == "request" else decode_response(body, pending.api_key, pending.api_version)
    )
    # (names and partition numbers wherever the schemas put them: tshark's must be among them)
    found: dict[str, set[Any]] = {"topics": set(), "partitions": set(), "errors": set()}

    def walk(node: Any, parent: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("name", "topic", "topic_name") and isinstance(value, str):
                    found["topics"].add(value)
                elif key in PARTITION_KEYS and isinstance(value, int):
                    found["partitions"].add(value)
                elif key == "partition_indexes" and isinstance(value, list):
                    found["partitions"].update(value)
                elif key == "error_code" and value:
                    found["errors"].add(error_name(value))
                walk(value, key)
        elif isinstance(node, list):
            for item in node:
                walk(item, parent)

    walk(message.body, "")
    client_id = message.header.get("client_id") if kind == "request" else None
    return {"client_id": client_id, **found}


def check_against_tshark(cap: Captured, side: str) -> Counter[str]:
    """Every message tshark decodes agrees with kafkalens; the facts compared."""
    port = cap.proxy_port if side == "client" else cap.broker_port
    ours: dict[tuple[int, int, str], tuple[Pending, dict[str, Any]]] = {}
    for info, kind, pending, body in cap.frames[side]:
        ours[(info.client_port, pending.correlation_id, kind)] = (pending, our_facts(kind, pending, body))
    messages = tshark_messages(cap.tmp / f"{side}.pcap", port)
    checked = 0
    compared: Counter[str] = Counter()  # facts tshark had that were compared
    for message in messages:
        theirs = tshark_facts(message)
        tcp = message["tcp"]
        client_port = int(tcp["tcp.srcport"] if theirs["request"] else tcp["tcp.dstport"])
        kind = "request" if theirs["request"] else "response"
        key = (client_port, theirs["correlation_id"], kind)
        assert key in ours, f"tshark decoded {key} ({theirs['api_key']}), kafkalens did not"
        pending, facts = ours[key]
        if theirs["api_key"] is None:  # tshark could not pair this response
            continue
        assert (pending.api_key, pending.api_version) == (theirs["api_key"], theirs["version"]), key
        if kind == "request":
            assert facts["client_id"] == theirs["client_id"], key
        if not theirs["malformed"]:
            for name in ("topics", "partitions", "errors"):
                assert theirs[name] <= facts[name], (key, name, theirs[name], facts[name])
                compared[name] += len(theirs[name])
        checked += 1
    assert checked >= 20, checked
    return compared
