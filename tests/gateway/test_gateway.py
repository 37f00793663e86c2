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
    BROKER_APIS,
    CONTROLLER_APIS,
    assert_only_gateway_addresses,
    find_coordinator_v1,
    gateway_config,
    gateway_in_front_of,
    listeners,
    metadata_v1,
    node_listener,
    opened,
    requests_of,
    spread_topic,
)
from support.mock_cluster import KAFKA_PYTHON_API_VERSION
from support.proxy_harness import LOCAL, FakeBroker, request_frame

from codec import ApiKey, HeaderPolicy, Response, decode_response, encode_response
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
async def gateway_server(
    upstream: str, broker_ports: dict[int, int], **gateway_keys: object
) -> AsyncIterator[Any]:
    config = gateway_config(upstream, broker_ports, **gateway_keys)
    metrics = Metrics()
    assert config.gateway is not None
    gateway = Gateway(config.gateway, metrics, HeaderPolicy(), config.upstream_tls)
    hooks = gateway.wrap(Hooks())
    server = Server(config, hooks, metrics)
    await server.start()
    await gateway.start(server)
    try:
        yield gateway, hooks, server
    finally:
        await server.close()


def rewrite(
    hooks: Hooks, api_key: int, version: int, body: dict[str, Any], listener: str = "bootstrap"
) -> bytes | None:
    """Run the hook on a response, as the connection would before sending it."""
    frame = encode_response(Response(api_key, version, {"correlation_id": 9}, body))
    info = ConnectionInfo("c-1", listener, LOCAL, 1, "upstream")
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
    # an api whose answers name no node: nothing to rewrite (a node's ApiVersions
    # answers are the route check's, support.gateway.node_listener)
    await loop.sock_sendall(sock, request_frame(ApiKey.HEARTBEAT, 0, 5))
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 4096), 5)
        assert chunk, "closed"
        data += chunk
    return data[8:]


def replying(payload: bytes) -> Any:
    """A broker's listener, answering `payload` to what is not the route's check."""
    return node_listener(payload, BROKER_APIS)


def controller_replying(payload: bytes) -> Any:
    return node_listener(payload, CONTROLLER_APIS)


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
    assert "node addresses not rewritten" in out and "v99" in out, out


def metadata_naming(node_id: int, host: str, port: int) -> dict[str, Any]:
    broker = {"node_id": node_id, "host": host, "port": port, "rack": None}
    return {"brokers": [broker], "controller_id": node_id, "topics": []}


def counted(server: Server, name: str, **labels: str) -> float:
    return server.metrics.registry.get_sample_value(name, labels) or 0.0


async def connect(port: int) -> socket.socket:
    sock = socket.create_connection((LOCAL, port))
    sock.setblocking(False)
    return sock


def test_a_broker_that_moves_gets_new_connections_at_its_new_address(
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = free_port()

    async def scenario() -> None:
        with FakeBroker(replying(b"old")) as old, FakeBroker(replying(b"new")) as new:
            async with gateway_server(old.address, {5: port}) as (gateway, hooks, server):
                assert rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, old.port))
                await until(lambda: "broker-5" in server.listeners)
                before = await connect(port)
                assert await exchange(before) == b"old"
                assert rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, new.port))
                await until(lambda: gateway.brokers[5].upstream.port == new.port)
                after = await connect(port)
                with before, after:
                    assert await exchange(after) == b"new"
                    assert await exchange(before) == b"old"  # an open connection stays put
                moved = counted(server, "kafkalens_gateway_routes_moved_total", kind="broker")
                assert moved == 1

    uvloop.run(scenario())
    out = capsys.readouterr().out
    assert "route moved" in out and "named_by=MetadataResponse" in out, out


def test_a_move_to_a_listener_that_is_not_a_brokers_is_refused_and_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The cluster names broker 5 at a controller's listener (what DescribeQuorum's
    endpoints, taken for brokers, did): the route stays where it was."""
    port = free_port()

    async def scenario() -> None:
        with (
            FakeBroker(replying(b"broker")) as broker,
            FakeBroker(controller_replying(b"controller")) as controller,
        ):
            async with gateway_server(broker.address, {5: port}) as (gateway, hooks, server):
                assert rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, broker.port))
                await until(lambda: "broker-5" in server.listeners)
                new = rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, controller.port))
                assert new is not None  # still the gateway's port in the answer
                (named,) = decode_response(new, METADATA, 1).body["brokers"]
                assert (named["host"], named["port"]) == (LOCAL, port)
                refused = "kafkalens_gateway_routes_refused_total"
                await until(lambda: counted(server, refused, kind="broker", reason="wrong_kind"))
                assert gateway.brokers[5].upstream.port == broker.port
                with await connect(port) as sock:
                    assert await exchange(sock) == b"broker"
                # the next answer within the retry delay checks nothing again
                rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, controller.port))
                assert gateway.brokers[5].checking is None
                assert counted(server, refused, kind="broker", reason="wrong_kind") == 1
                assert counted(server, "kafkalens_gateway_routes_moved_total", kind="broker") == 0

    uvloop.run(scenario())
    out = capsys.readouterr().out
    assert "route not moved" in out and "reason=wrong_kind" in out, out


def test_a_route_does_not_open_onto_a_listener_of_the_other_kind() -> None:
    port = free_port()

    async def scenario() -> None:
        with FakeBroker(controller_replying(b"controller")) as controller:
            async with gateway_server(f"{LOCAL}:9", {6: port}) as (gateway, hooks, server):
                rewrite(hooks, METADATA, 1, metadata_naming(6, LOCAL, controller.port))
                refused = "kafkalens_gateway_routes_refused_total"
                await until(lambda: counted(server, refused, kind="broker", reason="wrong_kind"))
                assert 6 not in gateway.brokers and "broker-6" not in server.listeners
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection((LOCAL, port), timeout=2).close()

    uvloop.run(scenario())


def test_only_the_clusters_word_on_its_brokers_moves_a_route() -> None:
    """A coordinator named elsewhere (FindCoordinator) is rewritten to the broker's
    route, which stays where Metadata put it."""
    port = free_port()

    async def scenario() -> None:
        with FakeBroker(replying(b"a")) as first, FakeBroker(replying(b"b")) as other:
            async with gateway_server(first.address, {3: port}) as (gateway, hooks, server):
                rewrite(hooks, METADATA, 1, metadata_naming(3, LOCAL, first.port))
                await until(lambda: "broker-3" in server.listeners)
                body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                        "node_id": 3, "host": LOCAL, "port": other.port}  # fmt: skip
                new = rewrite(hooks, FIND_COORDINATOR, 3, body)
                assert new is not None
                assert decode_response(new, FIND_COORDINATOR, 3).body["port"] == port
                await asyncio.sleep(0.2)
                assert gateway.brokers[3].upstream.port == first.port
                assert gateway.brokers[3].checking is None

    uvloop.run(scenario())


def describe_quorum_naming(node_id: int, host: str, port: int) -> dict[str, Any]:
    """DescribeQuorum v2's answer: node `node_id`'s CONTROLLER listener."""
    listener = {"name": "CONTROLLER", "host": host, "port": port}
    return {"error_code": 0, "error_message": None, "topics": [],
            "nodes": [{"node_id": node_id, "listeners": [listener]}]}  # fmt: skip


def test_a_controllers_endpoint_gets_a_route_of_its_own_and_never_moves_the_brokers() -> None:
    """Combined mode: node 1 is a broker on one listener and a controller on another. The
    controller's endpoint (DescribeQuorum, as kafka-metadata-quorum asks any broker)
    opens a controller route on the controller port; the broker's route stays put."""
    broker_port, controller_port = free_port(), free_port()

    async def scenario() -> None:
        with (
            FakeBroker(replying(b"broker-1")) as broker,
            FakeBroker(controller_replying(b"controller-1")) as controller,
        ):
            async with gateway_server(
                broker.address, {1: broker_port}, controller_ports={1: controller_port}
            ) as (gateway, hooks, server):
                rewrite(hooks, METADATA, 1, metadata_naming(1, LOCAL, broker.port))
                new = rewrite(hooks, ApiKey.DESCRIBE_QUORUM, 2,
                              describe_quorum_naming(1, LOCAL, controller.port))  # fmt: skip
                assert new is not None
                (node,) = decode_response(new, ApiKey.DESCRIBE_QUORUM, 2).body["nodes"]
                assert [(x["host"], x["port"]) for x in node["listeners"]] == [
                    (LOCAL, controller_port)
                ]
                await until(lambda: {"broker-1", "controller-1"} <= set(server.listeners))
                assert gateway.snapshot() == {
                    "broker-1": broker.address,
                    "controller-1": controller.address,
                }
                with await connect(broker_port) as b, await connect(controller_port) as c:
                    assert await exchange(b) == b"broker-1"
                    assert await exchange(c) == b"controller-1"
                moved = "kafkalens_gateway_routes_moved_total"
                assert counted(server, moved, kind="broker") == 0
                assert counted(server, "kafkalens_gateway_routes", kind="controller") == 1

    uvloop.run(scenario())


def test_clients_bootstrap_on_controllers_through_the_controller_bootstrap() -> None:
    """KIP-919: DescribeCluster answered with endpoint_type 2 (what a client that
    bootstraps on controllers asks) names controllers: routes of their kind."""
    controller_port = free_port()

    async def scenario() -> None:
        with FakeBroker(controller_replying(b"controller-2")) as controller:
            async with gateway_server(
                f"{LOCAL}:9",
                {},
                controller_bootstrap_listen=f"{LOCAL}:0",
                controller_bootstrap_servers=[controller.address],
                controller_ports={2: controller_port},
            ) as (gateway, hooks, server):
                bootstrap = server.listeners["controller-bootstrap"]
                with await connect(bootstrap.bound.port) as sock:
                    assert await exchange(sock) == b"controller-2"
                body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                        "endpoint_type": 2, "cluster_id": "c", "controller_id": 2,
                        "brokers": [{"broker_id": 2, "host": LOCAL, "port": controller.port,
                                     "rack": None}],
                        "cluster_authorized_operations": 0}  # fmt: skip
                new = rewrite(hooks, ApiKey.DESCRIBE_CLUSTER, 1, body, "controller-bootstrap")
                assert new is not None
                (named,) = decode_response(new, ApiKey.DESCRIBE_CLUSTER, 1).body["brokers"]
                assert (named["host"], named["port"]) == (LOCAL, controller_port)
                await until(lambda: "controller-2" in server.listeners)
                assert gateway.brokers == {}

    uvloop.run(scenario())


def test_a_port_two_routes_would_share_is_refused_and_the_address_left_alone() -> None:
    port = free_port()

    async def scenario() -> None:
        with (
            FakeBroker(replying(b"broker")) as broker,
            FakeBroker(controller_replying(b"controller")) as controller,
        ):
            async with gateway_server(
                broker.address, {5: port}, controller_port_base=port
            ) as (gateway, hooks, server):
                rewrite(hooks, METADATA, 1, metadata_naming(5, LOCAL, broker.port))
                # controller 0 maps onto broker 5's port
                assert rewrite(hooks, ApiKey.DESCRIBE_QUORUM, 2,
                               describe_quorum_naming(0, LOCAL, controller.port)) is None  # fmt: skip
                errors = "kafkalens_gateway_listener_errors_total"
                assert counted(server, errors, reason="port_conflict") == 1
                assert gateway.controllers == {}

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


# --- the route check: what an address answers ---------------------------------------------


def test_a_node_that_does_not_answer_is_served_all_the_same(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The cluster named it (a broker restarting, say): its route opens, its clients'
    connections fail until it is back; only a listener of the other kind is refused."""
    port, nowhere = free_port(), free_port()

    async def scenario() -> None:
        async with gateway_server(f"{LOCAL}:9", {8: port}) as (gateway, hooks, server):
            rewrite(hooks, METADATA, 1, metadata_naming(8, LOCAL, nowhere))
            await until(lambda: "broker-8" in server.listeners)
            assert gateway.snapshot() == {"broker-8": f"{LOCAL}:{nowhere}"}

    uvloop.run(scenario())
    assert "route opened unchecked" in capsys.readouterr().out


def test_what_a_check_makes_of_what_an_address_answers() -> None:
    from support.gateway import api_versions_v0

    from proxy.gateway.addresses import BROKER, CONTROLLER
    from proxy.gateway.route_check import Verdict, listener_api_keys, read_api_keys, verdict

    correlation = struct.pack(">i", 0x6B6C)
    assert read_api_keys(api_versions_v0(correlation, BROKER_APIS)) == set(BROKER_APIS)
    assert read_api_keys(api_versions_v0(b"\0\0\0\1", BROKER_APIS)) is None  # not our ask
    assert read_api_keys(correlation + struct.pack(">h", 35)) is None  # an error, cut short
    assert verdict(BROKER, frozenset(BROKER_APIS)) is Verdict.FITS
    assert verdict(BROKER, frozenset(CONTROLLER_APIS)) is Verdict.WRONG_KIND  # Fetch, no Produce
    assert verdict(CONTROLLER, frozenset(CONTROLLER_APIS)) is Verdict.FITS
    assert verdict(CONTROLLER, frozenset(BROKER_APIS)) is Verdict.WRONG_KIND
    assert verdict(BROKER, None) is Verdict.UNREACHABLE

    def huge(sock: socket.socket) -> None:
        sock.recv(1024)
        sock.sendall(struct.pack(">i", 1 << 30))  # a length past any ApiVersions answer

    def silent(sock: socket.socket) -> None:
        sock.recv(1024)
        time.sleep(3)

    async def ask(address: str, timeout: float = 5.0) -> frozenset[int] | None:
        host, port = address.rsplit(":", 1)
        from proxy.config import Address

        return await listener_api_keys(Address(host, int(port)), timeout)

    async def scenario() -> None:
        with FakeBroker(replying(b"x")) as broker, FakeBroker(huge) as big:
            assert await ask(broker.address) == set(BROKER_APIS)
            assert await ask(big.address) is None
        with FakeBroker(silent) as quiet:
            started = time.monotonic()
            assert await ask(quiet.address, timeout=0.5) is None
            assert time.monotonic() - started < 2.0

    uvloop.run(scenario())


def test_the_nodes_a_cluster_names_are_bounded_by_max_nodes() -> None:
    """Node ids are the brokers' to name: past gateway.max_nodes of one kind no listener
    opens; the address is still the gateway's (its clients fail visibly), and counted."""
    ports = {node: free_port() for node in (1, 2, 3)}

    async def scenario() -> None:
        with FakeBroker(replying(b"b")) as broker:
            async with gateway_server(broker.address, ports, max_nodes=2) as (gateway, hooks, server):
                body = {"brokers": [{"node_id": n, "host": LOCAL, "port": broker.port, "rack": None}
                                    for n in (1, 2, 3)], "controller_id": 1, "topics": []}  # fmt: skip
                new = rewrite(hooks, METADATA, 1, body)
                assert new is not None
                named = decode_response(new, METADATA, 1).body["brokers"]
                assert [(b["host"], b["port"]) for b in named] == [(LOCAL, ports[n]) for n in (1, 2, 3)]
                await until(lambda: {"broker-1", "broker-2"} <= set(server.listeners))
                assert sorted(gateway.brokers) == [1, 2]
                errors = "kafkalens_gateway_listener_errors_total"
                assert counted(server, errors, reason="too_many_nodes") == 1
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection((LOCAL, ports[3]), timeout=2).close()

    uvloop.run(scenario())


def test_a_move_to_an_address_that_does_not_answer_is_refused() -> None:
    """A broker's route stays where it works rather than follow an answer naming an
    address nothing listens on; it moves once the address answers as a broker."""
    port, nowhere = free_port(), free_port()

    async def scenario() -> None:
        with FakeBroker(replying(b"here")) as broker:
            async with gateway_server(broker.address, {4: port}) as (gateway, hooks, server):
                rewrite(hooks, METADATA, 1, metadata_naming(4, LOCAL, broker.port))
                await until(lambda: "broker-4" in server.listeners)
                rewrite(hooks, METADATA, 1, metadata_naming(4, LOCAL, nowhere))
                refused = "kafkalens_gateway_routes_refused_total"
                await until(lambda: counted(server, refused, kind="broker", reason="unreachable"))
                assert gateway.brokers[4].upstream.port == broker.port
                with await connect(port) as sock:
                    assert await exchange(sock) == b"here"

    uvloop.run(scenario())


def test_a_gateway_is_ready_while_a_broker_answers_whatever_its_controllers_do() -> None:
    """/readyz: the controllers' routes and bootstrap are probed and named when down, but
    only the brokers make the gateway ready (a controller answering carries no client)."""
    from proxy.runner import start_proxy

    dead = f"{LOCAL}:{free_port()}"

    async def scenario() -> None:
        with FakeBroker(controller_replying(b"c")) as controller:
            config = gateway_config(dead, {}, controller_bootstrap_listen=f"{LOCAL}:0",
                                    controller_bootstrap_servers=[controller.address])  # fmt: skip
            running = await start_proxy(config, Hooks(), Metrics())
            try:
                await running.probe.probe_once()
                assert running.readiness() == (False, f"upstream unreachable: {dead}")
            finally:
                await running.stop(0)
        with FakeBroker(replying(b"b")) as broker:
            config = gateway_config(broker.address, {}, controller_bootstrap_listen=f"{LOCAL}:0",
                                    controller_bootstrap_servers=[dead])  # fmt: skip
            running = await start_proxy(config, Hooks(), Metrics())
            try:
                await running.probe.probe_once()
                assert running.readiness() == (True, f"ready; unreachable: {dead}")
            finally:
                await running.stop(0)

    uvloop.run(scenario())
