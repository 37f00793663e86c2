"""What real clients cause the proxy to report: request log lines, /metrics, /clients.

Each library runs the shared workload (create a topic, produce with compression,
consume in a group) through the proxy `kafkalens proxy` runs, in front of tansu and in
front of Apache Kafka (the session's newest node, as its sidecar); then keeps a producer
connected while /metrics and /clients are read, and asks about a topic that does not
exist (support.observed_clients.ask_for_missing_topic). The request log file and the
metrics are then checked against each other and against what the clients did.

Apache Kafka 4.x offers KIP-714's telemetry APIs only with a ClientTelemetry receiver,
which the session's node has not: librdkafka asks for a client instance id of tansu only.

tansu quirks met here: it answers a Produce to a missing topic without an error (and
creates topics when Metadata allows it), so the missing topic shows up as
UNKNOWN_TOPIC_OR_PARTITION in Metadata answers; its first JoinGroup answer is
MEMBER_ID_REQUIRED (KIP-394) and its first generation is 0.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import compat
from support.clients import (
    APACHE_KAFKA_GROUPS,
    FETCH_MAX_WAIT_MS,
    TANSU_GROUPS,
    GroupTimeouts,
    client_version,
    run_workload,
)
from support.kafka import NEWEST, observed_sidecar
from support.observed import ObservedProxy, Samples, eventually, observed_in_front_of
from support.observed_clients import (
    Expected,
    ask_for_missing_topic,
    connected_producer,
    expected,
)

WORKLOADS = [("kafka-python", "gzip"), ("aiokafka", "zstd"), ("confluent-kafka", "lz4")]
COUNT = 12
FEATURE = "what kafkalens reports: request log, /metrics, /clients"
UNKNOWN_TOPIC = "UNKNOWN_TOPIC_OR_PARTITION"
COORDINATOR_NOT_READY = ("COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE")

Line = dict[str, Any]


@contextmanager
def _observed(
    broker: str, request: pytest.FixtureRequest, log: Path
) -> Iterator[tuple[ObservedProxy, GroupTimeouts]]:
    if broker == "tansu":
        with observed_in_front_of(request.getfixturevalue("tansu_factory"), log) as px:
            yield px, TANSU_GROUPS
    else:
        with observed_sidecar(request.getfixturevalue("apache_kafka"), log) as px:
            yield px, APACHE_KAFKA_GROUPS


@pytest.mark.parametrize("broker", [
    pytest.param("tansu", marks=pytest.mark.broker),
    pytest.param("apache-kafka", marks=[pytest.mark.broker, pytest.mark.java]),
])
@pytest.mark.parametrize(("client", "compression"), WORKLOADS)
def test_real_clients_are_logged_and_counted(
    request: pytest.FixtureRequest, tmp_path: Path, client: str, compression: str, broker: str
) -> None:
    broker_name = compat.tansu() if broker == "tansu" else compat.apache_kafka(NEWEST)
    row = (broker_name, client, client_version(client), "sidecar", FEATURE)
    with compat.checking(*row):
        _observe(request, tmp_path, client, compression, broker)


def _observe(
    request: pytest.FixtureRequest, tmp_path: Path, client: str, compression: str, broker: str
) -> None:
    want = expected(client)
    if broker != "tansu":  # no telemetry receiver: the broker does not offer KIP-714's APIs
        want = dataclasses.replace(want, telemetry=False)
    topic = f"obs-{client.replace('-', '')}-{uuid.uuid4().hex[:8]}"
    held_id = f"held-{client}"
    missing = f"{topic}-missing"
    with _observed(broker, request, tmp_path / "requests.log") as (px, timeouts):
        outcome = run_workload(
            client, px.bootstrap, topic, compression=compression, count=COUNT, admin=False,
            timeouts=timeouts,
        )  # fmt: skip
        assert len(outcome.consumed) == COUNT
        with connected_producer(client, px.bootstrap, topic, held_id):
            held = _while_connected(px, held_id, want)
        ask_for_missing_topic(client, px.bootstrap, missing)
        px.wait_all_closed()
        lines, metrics = px.lines(), px.metrics()
    requests = [line for line in lines if line["event"] == "request"]
    _check_identity(requests, want, held_id, held)
    _check_records(requests, topic, compression, held_id)
    _check_groups(lines, f"{topic}-group", topic, want, timeouts)
    _check_connections(lines)
    _check_metrics(lines, requests, metrics)
    _check_missing_topic(requests, metrics, missing)


def _while_connected(px: ObservedProxy, held_id: str, want: Expected) -> list[dict[str, Any]]:
    """/clients and the connection gauges while the held producer is connected."""

    def held() -> list[dict[str, Any]]:
        found = [c for c in px.http_clients() if c["identity"]["client_id"] == held_id]
        if want.telemetry and not any(c["identity"]["client_instance_id"] for c in found):
            return []  # librdkafka asks for its instance id shortly after connecting
        return found

    entries = eventually(held)
    assert entries, px.http_clients()
    name, version = want.software or ("unknown", "unknown")
    for entry in entries:
        identity = entry["identity"]
        assert (identity["client_software_name"], identity["client_software_version"]) == (
            want.software or (None, None)
        )
        assert identity["principal"] is None
        assert entry["requests"] >= 1 and entry["bytes_in"] > 0 and entry["bytes_out"] > 0
    # The gauge counts the open connections /clients lists, by software. Connections may
    # come and go between the two reads, so compare until both agree.
    consistent = eventually(lambda: _gauges_match(px, name, version))
    assert consistent, px.metrics().text
    return entries


def _gauges_match(px: ObservedProxy, name: str, version: str) -> bool:
    clients, metrics = px.http_clients(), px.metrics()
    if [c["conn_id"] for c in clients] != [c["conn_id"] for c in px.http_clients()]:
        return False  # a connection came or went meanwhile: read again
    identities = [c["identity"] for c in clients]
    listed = Counter(
        (i["client_software_name"] or "unknown", i["client_software_version"] or "unknown")
        for i in identities
    )
    gauges = metrics.by_labels(
        "kafkalens_connections", "client_software_name", "client_software_version"
    )
    instances = {i["client_instance_id"] for i in identities} - {None}
    return (
        listed[(name, version)] > 0
        and {k: v for k, v in gauges.items() if v} == dict(listed)
        and metrics.value("kafkalens_client_instances") == len(instances)
    )


def _of(requests: list[Line], api: str) -> list[Line]:
    return [line for line in requests if line["api"] == api]


def _check_identity(requests: list[Line], want: Expected, held_id: str, held: list[Any]) -> None:
    assert {line["api_version"] for line in _of(requests, "ApiVersions")} == {
        want.api_versions_version
    }
    name, version = want.software or (None, None)
    for line in requests:
        assert (line["client_software_name"], line["client_software_version"]) == (name, version)
        assert line["principal"] is None
    client_ids = {line["client_id"] for line in requests}
    assert set(want.default_client_ids) | {held_id} <= client_ids
    instances = {line["client_instance_id"] for line in requests} - {None}
    if not want.telemetry:
        assert instances == set() and not _of(requests, "GetTelemetrySubscriptions")
        return
    # librdkafka (KIP-714): GetTelemetrySubscriptions v0 with a zero id; the broker
    # assigns one, which every later line of that connection carries.
    asks = _of(requests, "GetTelemetrySubscriptions")
    assert asks and all(a["api_version"] == 0 and a["client_instance_id"] for a in asks)
    for ask in asks:
        after = requests[requests.index(ask) :]
        on_conn = {r["client_instance_id"] for r in after if r["conn"] == ask["conn"]}
        assert on_conn == {ask["client_instance_id"]}
    held_instances = {c["identity"]["client_instance_id"] for c in held} - {None}
    assert held_instances and held_instances <= instances
    assert all(i != "00000000-0000-0000-0000-000000000000" for i in instances)


def _records(lines: list[Line], topic: str) -> int:
    return sum(line["record_stats"]["per_topic"][topic]["records"] for line in lines)


def _check_records(requests: list[Line], topic: str, compression: str, held_id: str) -> None:
    produced = [p for p in _of(requests, "Produce") if p["topics"] == [topic]]
    workload = [p for p in produced if p["client_id"] != held_id]
    held = [p for p in produced if p["client_id"] == held_id]
    assert workload and held
    assert _records(workload, topic) == COUNT and _records(held, topic) == 1
    for line in produced:
        stats = line["record_stats"]
        assert stats["compression"] == ([compression] if line in workload else ["none"])
        assert stats["batches"] >= 1 and stats["bytes"] > 0 and stats["control_batches"] == 0
        assert line["errors"] == [] and line["acks"] in (-1, 1)
    fetches = _of(requests, "Fetch")
    assert fetches and all(f["topics"] == [topic] for f in fetches)  # names, even by id
    assert {f["max_wait_ms"] for f in fetches} == {FETCH_MAX_WAIT_MS}  # the long poll asked
    with_records = [f for f in fetches if "record_stats" in f]
    assert _records(with_records, topic) >= COUNT
    assert {c for f in with_records for c in f["record_stats"]["compression"]} == {compression}
    assert any(m.get("topics") == [topic] for m in _of(requests, "Metadata"))


def _check_groups(
    lines: list[Line], group: str, topic: str, want: Expected, timeouts: GroupTimeouts
) -> None:
    joins = _of([line for line in lines if line["event"] == "request"], "JoinGroup")
    protocols = list(want.group_protocols)
    for join in joins:
        assert join["group_id"] == group and join["protocol_type"] == "consumer"
        assert join["group_protocols"] == protocols
        assert list(join["subscriptions"]) == protocols  # decoded, by protocol
        assert all(s["topics"] == [topic] for s in join["subscriptions"].values())
        # KIP-394's first answer; so are a coordinator's while its offsets partition is
        # still being set up (the first groups of a fresh Apache Kafka): retried
        assert set(join["errors"]) <= {"MEMBER_ID_REQUIRED", *COORDINATOR_NOT_READY}
        # librdkafka sends max.poll.interval.ms as the rebalance timeout, set to the session's
        assert (join["session_timeout_ms"], join["rebalance_timeout_ms"]) == (
            timeouts.session_ms, timeouts.rebalance_ms)
    # One generation, or more: a consumer that assigned before it knew the new topic's
    # partitions (kafka-python against Apache Kafka) joins again once it does.
    joined = [j for j in joins if not j["errors"]]
    syncs = _of([line for line in lines if line["event"] == "request"], "SyncGroup")
    assert joined and len(syncs) == len(joined)
    for join, sync in zip(joined, syncs, strict=True):
        member, generation = join["member_id"], join["generation_id"]
        assert member and isinstance(generation, int) and generation >= 0
        assert join["protocol_name"] in protocols and join["leader"] == member
        assert list(join["member_subscriptions"]) == [member]  # the leader sees every member
        assert join["member_subscriptions"][member]["topics"] == [topic]
        assert (sync["group_id"], sync["member_id"], sync["generation_id"]) == (
            group,
            member,
            generation,
        )
    # the last generation, in which the records were read: its assignment and connection
    # decoded even where the version carries no protocol type (v<5): from the JoinGroup
    assert sync["protocol_type"] == "consumer" and sync["errors"] == []
    assignment = {"version": 0, "assigned_partitions": [{"topic": topic, "partitions": [0]}]}
    assert sync["assignments"][member].items() >= assignment.items()
    assert sync["assignment"].items() >= assignment.items()
    [close] = [c for c in lines if c["event"] == "connection_close" and c["conn"] == join["conn"]]
    assert member in close["member_ids"]


def _check_connections(lines: list[Line]) -> None:
    opened = {line["conn"] for line in lines if line["event"] == "connection_open"}
    closes = {line["conn"]: line for line in lines if line["event"] == "connection_close"}
    assert opened and opened == set(closes)
    for conn, close in closes.items():
        mine = [line for line in lines if line["event"] == "request" and line["conn"] == conn]
        # A client closing with a FIN reads as client_eof; librdkafka sometimes resets.
        assert close["reason"] in ("client_eof", "client_error") and close["duration_s"] >= 0
        assert close["decode_errors"] == 0
        assert not mine or (close["bytes_in"] > 0 and close["bytes_out"] > 0)
        for api, answered in Counter(line["api"] for line in mine).items():
            assert close["requests"][api] >= answered  # a close may cut a long poll short
        errors = Counter(error for line in mine for error in line["errors"])
        assert close["error_counts"] == dict(errors)
        if mine:  # the close line carries what the connection's last line knew
            for key in ("client_id", "client_software_name", "client_instance_id"):
                assert close[key] == mine[-1][key]


def _check_metrics(lines: list[Line], requests: list[Line], metrics: Samples) -> None:
    for api, answered in Counter(line["api"] for line in requests).items():
        assert metrics.total("kafkalens_requests_total", api=api) >= answered
        count = metrics.value("kafkalens_request_duration_seconds_count", api=api)
        inf = metrics.value("kafkalens_request_duration_seconds_bucket", api=api, le="+Inf")
        assert count == inf == answered  # one histogram sample per response
    produces = len(_of(requests, "Produce"))
    assert metrics.total("kafkalens_requests_total", api="Produce") == produces
    errors = Counter((line["api"], e) for line in requests for e in line["errors"])
    for (api, error), seen in errors.items():
        assert metrics.value("kafkalens_request_errors_total", api=api, error=error) == seen
    assert metrics.total("kafkalens_request_errors_total") == sum(errors.values())
    events = Counter(line["event"] for line in lines)
    assert metrics.total("kafkalens_connections_opened_total") == events["connection_open"]
    closed = sum(
        metrics.value("kafkalens_connections_closed_total", reason=reason) or 0
        for reason in ("client_eof", "client_error")
    )
    assert closed == events["connection_close"]
    assert metrics.total("kafkalens_connections") == 0  # all closed
    assert metrics.total("kafkalens_decode_errors_total") == 0


def _check_missing_topic(requests: list[Line], metrics: Samples, missing: str) -> None:
    asked = [m for m in _of(requests, "Metadata") if m.get("topics") == [missing]]
    unknown = [m for m in asked if m["errors"] == [UNKNOWN_TOPIC]]
    assert unknown, asked
    assert not [p for p in _of(requests, "Produce") if p.get("topics") == [missing]]
    assert metrics.value(
        "kafkalens_request_errors_total", api="Metadata", error=UNKNOWN_TOPIC
    ) == len(unknown)
