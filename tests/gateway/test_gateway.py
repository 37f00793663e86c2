"""Gateway mode: a whole cluster behind one bootstrap address and a port per broker.

Real clients run against librdkafka's 3-broker mock cluster (partition leaders spread
over the brokers) and against tansu, through the gateway's bootstrap address only;
the tests check that nothing the clients were told names a broker's own address,
and that they connected to the per-broker listeners. Unit tests drive the rewriting
hook directly, on an event loop that does not run in between, to show that a broker's
listener accepts before the response naming it is sent.

The gateway in front of Apache Kafka's 3-node cluster, with these clients and Kafka's
Java client: test_kafka_clients_gateway.py, test_kafka_java_clients.py.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvloop
from support import aio_client, ck_client, kp_client
from support.clients import make_records, sort_records
from support.gateway import (
    assert_only_gateway_addresses,
    find_coordinator_v1,
    gateway_config,
    gateway_in_front_of,
    listeners,
    metadata_v1,
    opened,
    requests_of,
    spread_topic,
)
from support.mock_cluster import KAFKA_PYTHON_API_VERSION
from support.proxy_harness import LOCAL, FakeBroker, read_frame, request_frame, write_frame

from codec import ApiKey, Response, decode_response, encode_response
from proxy.forward.server import Server
from proxy.gateway.gateway import Gateway
from proxy.hooks import ConnectionInfo, Hooks, Pending
from proxy.metrics import Metrics
from proxy.tansu import free_port

METADATA, FIND_COORDINATOR, FETCH = ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.FETCH

# --- the mock cluster: three brokers, leaders spread -----------------------------------------


def test_broker_listeners_accept_as_soon_as_the_metadata_names_them(
    mock_cluster: str, tmp_path: Path
) -> None:
    with gateway_in_front_of(mock_cluster, tmp_path) as gw:
        px, ports = gw.px, gw.ports
        assert listeners(px) == ["bootstrap"]
        with socket.create_connection((LOCAL, px.port), timeout=5) as sock:
            brokers = metadata_v1(sock)
        # straight away, with no retry: each port must be listening already
        for _, port in brokers.values():
            with socket.create_connection((LOCAL, port), timeout=5) as broker:
                assert_only_gateway_addresses(metadata_v1(broker), ports)
        assert_only_gateway_addresses(brokers, ports)
        assert listeners(px) == ["bootstrap", "broker-1", "broker-2", "broker-3"]


def test_confluent_kafka_through_the_gateway_only(mock_cluster: str, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    records = make_records(12, "ck")
    with gateway_in_front_of(mock_cluster, tmp_path) as gw:
        px, ports = gw.px, gw.ports
        producer = Producer({"bootstrap.servers": px.bootstrap, "logger": ck_client.LOG})
        topic = spread_topic(producer, "gw-ck")
        for i, r in enumerate(records):
            producer.produce(topic, r.value, r.key, partition=i % 4, headers=list(r.headers))
        assert producer.flush(15) == 0
        metadata = producer.list_topics(topic, timeout=10)
        leaders = {p.leader for p in metadata.topics[topic].partitions.values()}
        seen = {node: (b.host, b.port) for node, b in metadata.brokers.items()}
        on_listeners = {c["listener"] for c in px.clients()}
        del producer
        consumed = ck_client.consume(px.bootstrap, topic, "gw-ck-group", len(records))
        assert sort_records(consumed) == sort_records(records)
        assert len(leaders) > 1  # the partitions really are spread over brokers
        assert_only_gateway_addresses(seen, ports)
        assert {f"broker-{node}" for node in leaders} <= on_listeners
        assert all(opened(px, f"broker-{node}") > 0 for node in leaders)


def test_kafka_python_through_the_gateway_only(mock_cluster: str, tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient

    records = make_records(12, "kp")
    pin = KAFKA_PYTHON_API_VERSION
    with gateway_in_front_of(mock_cluster, tmp_path) as gw:
        px, ports = gw.px, gw.ports
        chooser = Producer({"bootstrap.servers": px.bootstrap, "logger": ck_client.LOG})
        topic = spread_topic(chooser, "gw-kp")
        del chooser
        kp_client.produce(px.bootstrap, topic, records, api_version=pin)
        consumed = kp_client.consume(px.bootstrap, topic, "gw-kp-group", len(records), pin)
        assert sort_records(consumed) == sort_records(records)
        admin = KafkaAdminClient(bootstrap_servers=px.bootstrap, api_version=pin)
        try:
            cluster = admin.describe_cluster()
            (described,) = admin.describe_topics([topic])
        finally:
            admin.close()
        seen = {b["broker_id"]: (b["host"], b["port"]) for b in cluster["brokers"]}
        assert_only_gateway_addresses(seen, ports)
        leaders = {p["leader_id"] for p in described["partitions"]}
        assert len(leaders) > 1
        assert all(opened(px, f"broker-{node}") > 0 for node in leaders)


# --- tansu: one broker, consumer groups ------------------------------------------------------


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_a_consumer_group_through_the_gateway_on_tansu(
    tansu: Any, tmp_path: Path, client: str
) -> None:
    topic, group = f"gw-{client.replace('-', '')}", f"gw-{client}-group"
    records = make_records(10, topic)
    with gateway_in_front_of(tansu.bootstrap, tmp_path) as gw:
        px, ports = gw.px, gw.ports
        (node,) = ports
        with socket.create_connection((LOCAL, px.port), timeout=5) as sock:
            assert find_coordinator_v1(sock, group) == (node, LOCAL, ports[node])
        if client == "kafka-python":
            kp_client.create_topic(px.bootstrap, topic)
            kp_client.produce(px.bootstrap, topic, records)
            consumed = kp_client.consume(px.bootstrap, topic, group, len(records))
        else:
            asyncio.run(aio_client.create_topic_async(px.bootstrap, topic))
            asyncio.run(aio_client.produce_async(px.bootstrap, topic, records))
            consumed = asyncio.run(aio_client.consume_async(px.bootstrap, topic, group, 10))
        assert sort_records(consumed) == sort_records(records)
        # the group's requests went to the coordinator the gateway named: itself
        assert opened(px, f"broker-{node}") > 0
        for api in ("JoinGroup", "SyncGroup", "OffsetCommit"):
            assert requests_of(gw.hook_metrics, api) > 0, api


# --- the rewriting hook, on a loop that does not run in between --------------------------------


@asynccontextmanager
async def gateway_server(upstream: str, broker_ports: dict[int, int]) -> AsyncIterator[Any]:
    config = gateway_config(upstream, broker_ports)
    metrics = Metrics()
    gateway = Gateway(config, metrics)
    hooks = gateway.wrap(Hooks())
    server = Server(config, hooks, metrics)
    await server.start()
    await gateway.start(server)
    try:
        yield gateway, hooks, server
    finally:
        await server.close()


def rewrite(hooks: Hooks, api_key: int, version: int, body: dict[str, Any]) -> bytes | None:
    """Run the hook on a response, as the connection would before sending it."""
    frame = encode_response(Response(api_key, version, {"correlation_id": 9}, body))
    info = ConnectionInfo("c-1", "bootstrap", LOCAL, 1, "upstream")
    return hooks.rewrite_response(info, memoryview(frame), Pending(9, api_key, version, 0.0, 0))


def coordinator(key: str, node_id: int, host: str, port: int, error: int = 0) -> dict[str, Any]:
    return {"key": key, "node_id": node_id, "host": host, "port": port,
            "error_code": error, "error_message": None}  # fmt: skip


async def until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def exchange(sock: socket.socket) -> bytes:
    """One request through a non-blocking socket, its response back (off the loop's back)."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, request_frame(ApiKey.API_VERSIONS, 0, 5))
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 4096), 5)
        assert chunk, "closed"
        data += chunk
    return data[8:]


def replying(payload: bytes) -> Any:
    def handler(sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            write_frame(sock, request[4:8] + payload)

    return handler


def test_find_coordinator_v4_batched_with_a_group_that_has_no_coordinator() -> None:
    port = free_port()

    async def scenario() -> None:
        with FakeBroker(replying(b"broker-3")) as real:
            async with gateway_server(real.address, {3: port}) as (_, hooks, server):
                new = rewrite(hooks, FIND_COORDINATOR, 4, {"throttle_time_ms": 0, "coordinators": [
                    coordinator("g1", 3, LOCAL, real.port),
                    coordinator("g2", -1, "", -1, error=15)]})  # fmt: skip
                # no await since the rewrite: only the kernel can have accepted this
                queued = socket.create_connection((LOCAL, port), timeout=2)
                assert "broker-3" not in server.listeners
                assert new is not None
                body = decode_response(new, FIND_COORDINATOR, 4).body
                got = [(c["node_id"], c["host"], c["port"]) for c in body["coordinators"]]
                assert got == [(3, LOCAL, port), (-1, "", -1)]
                queued.setblocking(False)
                with queued:
                    assert await exchange(queued) == b"broker-3"
                assert sorted(server.listeners) == ["bootstrap", "broker-3"]

    uvloop.run(scenario())


def test_what_names_no_broker_is_forwarded_as_it_came() -> None:
    async def scenario() -> None:
        async with gateway_server(f"{LOCAL}:9", {}) as (gateway, hooks, server):
            no_coordinator = {"throttle_time_ms": 0, "error_code": 15, "error_message": None,
                              "node_id": -1, "host": "", "port": -1}  # fmt: skip
            assert rewrite(hooks, FIND_COORDINATOR, 3, no_coordinator) is None
            # Fetch before v16 has no broker addresses: not even decoded
            info = ConnectionInfo("c-1", "bootstrap", LOCAL, 1, "upstream")
            garbage = memoryview(b"\x00\x00\x00\x09not a fetch response")
            assert hooks.rewrite_response(info, garbage, Pending(9, FETCH, 12, 0.0, 0)) is None
            assert gateway.brokers == {} and sorted(server.listeners) == ["bootstrap"]

    uvloop.run(scenario())


def test_a_response_newer_than_the_codec_is_logged_as_not_rewritten(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Produce of a version the codec does not know may name leaders (KIP-951): it goes
    on as it came, and the log says its addresses were not rewritten (clients that
    negotiate never get there: the ApiVersions cap)."""

    async def scenario() -> None:
        async with gateway_server(f"{LOCAL}:9", {}) as (gateway, hooks, server):
            info = ConnectionInfo("c-1", "bootstrap", LOCAL, 1, "upstream")
            future = memoryview(b"\x00\x00\x00\x09a Produce response of v99")
            assert hooks.rewrite_response(info, future, Pending(9, 0, 99, 0.0, 0)) is None

    uvloop.run(scenario())
    out = capsys.readouterr().out
    assert "broker addresses not rewritten" in out and "v99" in out, out


def metadata_naming(node_id: int, host: str, port: int) -> dict[str, Any]:
    broker = {"node_id": node_id, "host": host, "port": port, "rack": None}
    return {"brokers": [broker], "controller_id": node_id, "topics": []}


def test_a_broker_that_moves_gets_new_connections_at_its_new_address() -> None:
    port = free_port()

    async def scenario() -> None:
        with FakeBroker(replying(b"old")) as old, FakeBroker(replying(b"new")) as new:
            async with gateway_server(old.address, {5: port}) as (_, hooks, server):
                assert rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, old.port))
                await until(lambda: "broker-5" in server.listeners)
                before = socket.create_connection((LOCAL, port))
                before.setblocking(False)
                assert await exchange(before) == b"old"
                assert rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, new.port))
                after = socket.create_connection((LOCAL, port))
                after.setblocking(False)
                with before, after:
                    assert await exchange(after) == b"new"
                    assert await exchange(before) == b"old"  # an open connection stays put

    uvloop.run(scenario())


def test_a_port_in_use_is_counted_and_logged_and_still_advertised() -> None:
    taken = socket.create_server((LOCAL, 0))
    port = taken.getsockname()[1]

    async def scenario() -> None:
        async with gateway_server(f"{LOCAL}:9", {7: port}) as (gateway, hooks, server):
            for _ in range(2):  # the second is within the retry delay: not counted again
                new = rewrite(hooks, METADATA, 1, metadata_naming(7, "10.0.0.7", 9092))
                assert new is not None
                (broker,) = decode_response(new, METADATA, 1).body["brokers"]
                assert (broker["host"], broker["port"]) == (LOCAL, port)
            errors = server.metrics.registry.get_sample_value(
                "kafkalens_gateway_listener_errors_total", {"reason": "port_in_use"}
            )
            assert errors == 1
            assert gateway.brokers == {} and "broker-7" not in server.listeners

    with taken:
        uvloop.run(scenario())
