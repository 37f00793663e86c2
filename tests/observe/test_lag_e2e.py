"""Consumer lag as a real client reports it, through the proxy in front of tansu.

kafka-python produces a known number of records to two partitions; a consumer in a
group reads them all and commits, more are produced, it reads on until it has seen every
partition's new high watermark and pauses. The proxy's lag per partition is
then the client's own `highwater() - position()` within one fetch (the proxy counts
records as fetched, the client as handed to the application, and tansu answers a
fetch with everything there is), its high watermark the client's exactly; its
committed lag is what the broker itself answers ListOffsets and OffsetFetch (asked
directly, on the broker's own port, bypassing the proxy). A raw Fetch with a replica
id sent through the proxy is replication, not a consumer.
"""

from __future__ import annotations

import signal
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from support.kp_client import create_topic
from support.observed import ObservedProxy, eventually

from codec import Request, decode_response, encode_request
from proxy.tansu import free_port

LOCAL = "127.0.0.1"
FIRST = {0: 30, 1: 12}  # records produced per partition before the consumer starts
THEN = {0: 25, 1: 9}  # and after it has read those
COUNTS = {p: FIRST[p] + THEN[p] for p in FIRST}
MAX_POLL = 4
CONNECTIONS = 16


@contextmanager
def proxy_and_broker(tansu_factory: Any, log_path: Path) -> Iterator[tuple[ObservedProxy, int]]:
    """The proxy in front of tansu (which advertises the proxy), and tansu's own port."""
    broker_port = free_port()
    with ObservedProxy(f"{LOCAL}:{broker_port}", log_path) as px:
        tansu_factory(advertised_port=px.port, port=broker_port)
        yield px, broker_port


def raw(port: int, api_key: int, version: int, body: dict[str, Any], client_id: str = "oracle") -> dict[str, Any]:
    """One request on a fresh connection; the decoded response body."""
    return raw_many(port, [(api_key, version, body)], client_id)[0]


def raw_many(port: int, requests: list[tuple[int, int, dict[str, Any]]], client_id: str) -> list[dict[str, Any]]:
    """Requests one after another on one fresh connection; the decoded response bodies."""
    answers = []
    with socket.create_connection((LOCAL, port), timeout=15) as sock:
        for correlation, (api_key, version, body) in enumerate(requests):
            header = {"correlation_id": correlation, "client_id": client_id}
            frame = encode_request(Request(api_key, version, header, body))
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", _exactly(sock, 4))[0]
            answers.append(decode_response(_exactly(sock, size), api_key, version).body)
    return answers


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def broker_end_offsets(port: int, topic: str) -> dict[int, int]:
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in COUNTS]}]}  # fmt: skip
    answer = raw(port, 2, 4, body)
    return {p["partition_index"]: p["offset"] for t in answer["topics"] for p in t["partitions"]}


def broker_committed(port: int, group: str, topic: str) -> dict[int, int]:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(COUNTS)}]}
    answer = raw(port, 9, 5, body)
    return {p["partition_index"]: p["committed_offset"] for t in answer["topics"] for p in t["partitions"]}


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """One record per batch: fetches of a few hundred bytes then return a few records
    each (a fetch returns whole batches), and tansu's ListOffsets, which answers the
    last batch's base offset + 1 for the latest offset, is then the true end offset."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    for partition, count in counts.items():
        for i in range(count):
            producer.send(topic, f"record-{i}".encode(), partition=partition)
            producer.flush()
    producer.close()


def consumer(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    reader = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, client_id="lag-reader", enable_auto_commit=False,
        auto_offset_reset="earliest", max_poll_records=MAX_POLL, fetch_max_wait_ms=100,
    )  # fmt: skip
    reader.subscribe([topic])
    return reader


def read_until(reader: KafkaConsumer, done: Any) -> None:
    for _ in range(200):
        reader.poll(timeout_ms=300)
        if done():
            return
    raise AssertionError("the consumer did not get there")


def highwaters(reader: KafkaConsumer) -> dict[int, int | None]:
    return {tp.partition: reader.highwater(tp) for tp in reader.assignment()}


def positions(reader: KafkaConsumer) -> dict[int, int]:
    return {tp.partition: reader.position(tp) for tp in reader.assignment()}


def last_positions(lines: list[dict[str, Any]], topic: str) -> dict[int, dict[str, Any]]:
    """Each partition's position in the last Fetch answer that had it, with the records
    the last fetch that returned any returned ("step")."""
    last: dict[int, dict[str, Any]] = {}
    for line in lines:
        for point in line.get("positions") or ():
            if point["topic"] == topic:
                step = point["next_offset"] - point["fetch_offset"]
                before = last.get(point["partition"], {}).get("step", 0)
                last[point["partition"]] = {**point, "step": step or before}
    return last


def test_lag_matches_the_clients_own_and_committed_lag_the_brokers(tansu_factory: Any, tmp_path: Path) -> None:
    topic, group = "lag-e2e", "lag-e2e-group"
    with proxy_and_broker(tansu_factory, tmp_path / "requests.log") as (px, broker_port):
        create_topic(px.bootstrap, topic, partitions=len(COUNTS))
        produce(px.bootstrap, topic, FIRST)
        reader = consumer(px.bootstrap, topic, group)
        try:
            read_until(reader, lambda: positions(reader) == FIRST)
            # committed before more arrive: the committed lag is then THEN whatever
            # the consumer reads next (it may read everything: how far depends on timing)
            reader.commit()
            produce(px.bootstrap, topic, THEN)
            read_until(reader, lambda: highwaters(reader) == COUNTS)
            reader.pause(*reader.assignment())
            client_view = {p: (highwaters(reader)[p], position) for p, position in positions(reader).items()}
        finally:
            reader.close()
        end, committed = broker_end_offsets(broker_port, topic), broker_committed(broker_port, group, topic)
        lines = [line for line in px.lines() if line.get("api") == "Fetch"]
        metrics = px.metrics()
    lag = metrics.by_labels("kafkalens_consumer_lag_records", "group", "client", "topic", "partition")
    committed_lag = metrics.by_labels("kafkalens_committed_lag_records", "group", "topic", "partition")
    assert end == COUNTS
    seen = last_positions(lines, topic)
    assert set(seen) == set(COUNTS) == set(client_view)
    for partition, (highwater, position) in client_view.items():
        point = seen[partition]
        proxy_lag = lag[(group, "lag-reader", topic, str(partition))]
        assert point["high_watermark"] == highwater == COUNTS[partition]
        assert proxy_lag == point["lag"] == highwater - point["next_offset"]
        # the client's position is behind the proxy's by records fetched, not yet handed out
        assert 0 <= (highwater - position) - proxy_lag <= point["step"], (partition, point, position)
    # the committed lag follows the newest high watermark, not the one seen at the commit
    assert committed == FIRST
    assert {int(k[2]): v for k, v in committed_lag.items() if k[:2] == (group, topic)} == {
        p: end[p] - FIRST[p] for p in COUNTS} == THEN  # fmt: skip


def test_a_fetch_with_a_replica_id_is_a_follower_not_a_consumer(tansu_factory: Any, tmp_path: Path) -> None:
    topic = "lag-follower"
    with proxy_and_broker(tansu_factory, tmp_path / "requests.log") as (px, _):
        create_topic(px.bootstrap, topic, partitions=1)
        produce(px.bootstrap, topic, {0: 5})
        body = {
            "replica_id": 1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                        "fetch_offset": 2, "last_fetched_epoch": -1, "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20}]}],
        }  # fmt: skip
        raw(px.port, 1, 11, body, client_id="follower-1")
        # the same fetch as a consumer's (replica id -1): the control
        raw(px.port, 1, 11, {**body, "replica_id": -1}, client_id="consumer-1")
        fetches = eventually(lambda: len(_fetch_lines(px)) == 2 and _fetch_lines(px))
        metrics = px.metrics()
    follower, control = fetches
    assert follower["client_id"] == "follower-1" and follower["replica_id"] == 1
    assert "replica_id" not in control
    # both answered alike: high watermark 5, position 2 + the 3 records returned
    for line in (follower, control):
        (point,) = line["positions"]
        assert (point["fetch_offset"], point["next_offset"], point["high_watermark"]) == (2, 5, 5)
    clients = {key[1] for key in metrics.by_labels("kafkalens_consumer_lag_records", "group", "client")}
    assert clients == {"consumer-1"}
    assert metrics.by_labels("kafkalens_follower_lag_records", "replica", "topic", "partition") == {
        ("1", topic, "0"): 0}
    # replication is no topic traffic: only the control's 3 records were fetched
    assert metrics.total("kafkalens_topic_records_total", topic=topic, direction="fetch") == 3


def _fetch_lines(px: ObservedProxy) -> list[dict[str, Any]]:
    return [line for line in px.lines() if line.get("api") == "Fetch" and line.get("event") == "request"]


def test_with_workers_the_parent_shows_each_workers_lag_series(tansu_factory: Any, tmp_path: Path) -> None:
    """`workers: 2`: each worker publishes its series from a thread every second into
    prometheus-client's files; an expired one reads 0 (files cannot drop a series).
    Each connection fetches (the worker learns the high watermark, 4) and commits
    offset 1 for a group of its own: committed lag 3 per group, whichever worker."""
    from support.cli import http_get, kafkalens, workers_config
    from support.observed import Samples

    port, metrics_port, broker_port = free_port(), free_port(), free_port()
    tansu_factory(advertised_port=port, port=broker_port)
    config = workers_config(tmp_path, port, metrics_port, f"{LOCAL}:{broker_port}", tmp_path / "requests.log")
    config.write_text(config.read_text() + "lag: {idle_expiry_seconds: 4}\n")
    proc = kafkalens("proxy", "--config", str(config))
    try:
        assert eventually(lambda: _answers(metrics_port), timeout=30), proc.stderr
        bootstrap = f"{LOCAL}:{port}"
        create_topic(bootstrap, "lag-workers", partitions=1)
        produce(bootstrap, "lag-workers", {0: 4})
        for n in range(CONNECTIONS):  # new connections: SO_REUSEPORT spreads them over both workers
            fetched, committed = raw_many(
                port, [(1, 11, _fetch("lag-workers", 0)), (8, 2, _commit(f"group-{n}", "lag-workers", 1))],
                client_id=f"reader-{n}")  # fmt: skip
            assert committed["topics"][0]["partitions"][0]["error_code"] == 0

        def series() -> dict[tuple[str, ...], float]:
            return Samples(http_get(metrics_port, "/metrics")).by_labels(
                "kafkalens_committed_lag_records", "group", "topic", "partition")

        want = {(f"group-{n}", "lag-workers", "0"): 3.0 for n in range(CONNECTIONS)}
        assert eventually(lambda: series() == want), series()
        # expired 4 s after the last fetch of the partition: 0, still listed
        assert eventually(lambda: series() == dict.fromkeys(want, 0.0)), series()
        # both workers had commits (16 connections all on one: a chance of 1 in 32,768)
        logs = sorted(tmp_path.glob("requests-w*.log"))
        assert len(logs) == 2 and all("OffsetCommit" in log.read_text() for log in logs)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        _stop(proc)


def _stop(proc: Any) -> None:
    """The parent passes SIGTERM on to its workers; a killed parent would leave them."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except Exception:
            proc.kill()
    proc.communicate(timeout=20)


def _answers(metrics_port: int) -> bool:
    from support.cli import http_status

    try:
        return http_status(metrics_port, "/readyz") == 200
    except OSError:
        return False


def _commit(group: str, topic: str, offset: int) -> dict[str, Any]:
    """A standalone commit (no generation, no member), as admin tools make."""
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]}  # fmt: skip


def _fetch(topic: str, fetch_offset: int, replica: int = -1) -> dict[str, Any]:
    return {
        "replica_id": replica, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                    "fetch_offset": fetch_offset, "last_fetched_epoch": -1, "log_start_offset": -1,
                    "partition_max_bytes": 1 << 20}]}],
    }  # fmt: skip
