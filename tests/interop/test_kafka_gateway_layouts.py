"""The gateway in front of every KRaft layout of Apache Kafka, with the admin tools users
run through it.

Two layouts, a class each, every check of `Checks` run on both:
- **combined**: the session's 3-node cluster, each node broker and controller
  (conftest's `apache_kafka_cluster`): node N's broker and controller listeners share
  one node id, and the gateway serves them on a broker port and a controller port;
- **dedicated**: three controller-only processes (ids 1-3) and three broker-only ones
  (ids 4-6), started for this class (support.kraft), and a fourth broker (id 7) that
  joins later, while the gateway runs, and then moves to another port (the one route
  that moves, counted, and only once the new address answers as a broker).

The gateway has a bootstrap for brokers and one for controllers (KIP-919). Kafka's own
command-line tools, run from its jars by their main classes (support.kafka_tools), give
each answer once directly and once through the gateway: `kafka-metadata-quorum` (describe
--status, --replication; --bootstrap-server and --bootstrap-controller),
`kafka-topics`, `kafka-consumer-groups`, `kafka-configs`, `kafka-features`,
`kafka-cluster cluster-id`, `kafka-log-dirs`. The two answers must be the same, with
what differs by design between two runs set aside (a high watermark, a fetch time), and
the addresses checked apart against the truth: directly, the nodes' own listeners;
through the gateway, its own port for that node and that kind of endpoint.

After them, every route the gateway has goes where the cluster says that node's endpoint
of that kind is, and answers as it does: an ApiVersions through each broker port lists
exactly what the broker's own listener lists (Produce and Fetch among them), and through
each controller port what the controller's does (the bug this guards against: DescribeQuorum's
controller endpoints moved each broker route onto its node's CONTROLLER listener, which
answers neither). No route moved and none was refused (`/metrics`).

Each layout gives the compatibility table a row for the tools and one for each client
library of the fault test's load.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from support import ck_client, compat
from support.clients import APACHE_KAFKA_GROUPS, client_version, make_records
from support.faults import (
    UPSTREAM_GONE,
    Load,
    check_nothing_lost,
    check_request_log,
    create_topic,
    finish_and_check,
    listeners_of,
    readyz,
    survive,
    until,
)
from support.gateway import LayoutGateway, api_keys_at, layout_gateway, routes
from support.kafka import NEWEST
from support.kafka_tools import (
    Addresses,
    as_printed,
    as_set,
    features,
    group_state,
    log_dirs,
    quorum_replication,
    quorum_status,
    run_tool,
)
from support.kraft import (
    KraftCluster,
    NoQuorumAnswer,
    broker_listeners,
    controller_listeners,
    describe_quorum,
    kraft_cluster,
)

from proxy.apache_kafka import KafkaCluster

SERVER, CONTROLLER = "--bootstrap-server", "--bootstrap-controller"
TOPIC, GROUP = "gw-tools", "gw-tools-group"
# The compatibility table's rows (support.compat), one per layout.
TOOLS = "Kafka tools (kafka-*.sh)"
TOOLS_FEATURE = ("kafka-metadata-quorum, -topics, -consumer-groups, -configs, -features,"
                 " -cluster, -log-dirs: answers as directly, {layout}")  # fmt: skip
FAULT_FEATURES = {
    "combined": "the quorum leader and its broker killed under load: nothing acknowledged lost",
    "dedicated": "the active controller (dedicated) killed under load: nothing acknowledged lost",
}


@contextmanager
def tools_row(gw: LayoutGateway) -> Iterator[None]:
    """The tools' row of the compatibility table for this layout: passed if every check
    recording it passed."""
    broker = compat.apache_kafka(NEWEST)
    feature = TOOLS_FEATURE.format(layout=LAYOUT_NAMES[gw.layout])
    with compat.checking(broker, TOOLS, NEWEST, "gateway", feature):
        yield


@contextmanager
def fault_rows(gw: LayoutGateway) -> Iterator[None]:
    """The rows of the load's client libraries (support.faults.Load) for this layout."""
    broker = compat.apache_kafka(NEWEST)
    feature = FAULT_FEATURES[gw.layout]
    ck = client_version("confluent-kafka")
    with (
        compat.checking(broker, "confluent-kafka", ck, "gateway", feature),
        compat.checking(broker, "Java (kafka-clients)", NEWEST, "gateway", feature),
    ):
        yield


LAYOUT_NAMES = {
    "combined": "combined nodes",
    "dedicated": "dedicated controllers, a broker joining later",
}


@dataclass(frozen=True)
class Check:
    """One tool's invocation: `args` with "{boot}" for the bootstrap option and its value
    (`via`: brokers or controllers), and how to read what it printed."""

    tool: str
    args: tuple[str, ...]
    via: str
    read: Callable[[str], tuple[object, Addresses]]
    # who the addresses it prints belong to: "controller" or "broker" node endpoints
    names: str = "broker"

    def argv(self, bootstrap: str) -> list[str]:
        out: list[str] = []
        for arg in self.args:
            out.extend([self.via, bootstrap] if arg == "{boot}" else [arg])
        return out


CHECKS = {
    "quorum-status": Check("kafka-metadata-quorum", ("{boot}", "describe", "--status"), SERVER,
                           quorum_status, "controller"),
    "quorum-status-via-controllers": Check(
        "kafka-metadata-quorum", ("{boot}", "describe", "--status"), CONTROLLER, quorum_status,
        "controller"),
    "quorum-replication": Check("kafka-metadata-quorum", ("{boot}", "describe", "--replication"),
                                SERVER, quorum_replication),
    "cluster-id": Check("kafka-cluster", ("cluster-id", "{boot}"), SERVER, as_printed),
    "cluster-id-via-controllers": Check("kafka-cluster", ("cluster-id", "{boot}"), CONTROLLER,
                                        as_printed),
    "features": Check("kafka-features", ("{boot}", "describe"), SERVER, features),
    "features-via-controllers": Check("kafka-features", ("{boot}", "describe"), CONTROLLER,
                                      features),
    "topics-describe": Check("kafka-topics", ("{boot}", "--describe", "--topic", TOPIC), SERVER,
                             as_printed),
    "topics-list": Check("kafka-topics", ("{boot}", "--list"), SERVER, as_set),
    "groups-offsets": Check("kafka-consumer-groups", ("{boot}", "--describe", "--group", GROUP),
                            SERVER, as_printed),
    "groups-state": Check("kafka-consumer-groups",
                          ("{boot}", "--describe", "--group", GROUP, "--state"), SERVER,
                          group_state),
    "groups-list": Check("kafka-consumer-groups", ("{boot}", "--list"), SERVER, as_set),
    "configs-topic": Check("kafka-configs", ("{boot}", "--describe", "--entity-type", "topics",
                                             "--entity-name", TOPIC), SERVER, as_printed),
    "configs-brokers": Check("kafka-configs", ("{boot}", "--describe", "--entity-type", "brokers",
                                               "--entity-default"), SERVER, as_printed),
    "configs-brokers-via-controllers": Check(
        "kafka-configs", ("{boot}", "--describe", "--entity-type", "brokers", "--entity-default"),
        CONTROLLER, as_printed),
    "log-dirs": Check("kafka-log-dirs", ("{boot}", "--describe", "--topic-list", TOPIC), SERVER,
                      log_dirs),
}  # fmt: skip


def run_check(check: Check, bootstrap: str) -> tuple[object, Addresses]:
    done = run_tool(check.tool, *check.argv(bootstrap)).check()
    return check.read(done.stdout)


def prepare(gw: LayoutGateway) -> None:
    """Through the gateway, as a user would: a topic made and configured with the tools,
    records produced and read by a group that committed its offsets."""
    made = run_tool("kafka-topics", SERVER, gw.bootstrap, "--create", "--topic", TOPIC,
                    "--partitions", "3", "--replication-factor", "3").check()  # fmt: skip
    assert f"Created topic {TOPIC}." in made.stdout
    altered = run_tool("kafka-configs", SERVER, gw.bootstrap, "--alter", "--entity-type",
                       "topics", "--entity-name", TOPIC, "--add-config",
                       "retention.ms=3600000").check()  # fmt: skip
    assert "Completed updating config" in altered.stdout, altered.stdout
    records = make_records(12, TOPIC)
    ck_client.produce(gw.bootstrap, TOPIC, records, acks="all")
    got = ck_client.consume(gw.bootstrap, TOPIC, GROUP, len(records), APACHE_KAFKA_GROUPS)
    assert len(got) == len(records)


class Checks:
    """What every layout is held to; a subclass gives the `gw` fixture."""

    @pytest.fixture(scope="class")
    @classmethod
    def prepared(cls, gw: LayoutGateway) -> LayoutGateway:
        prepare(gw)
        return gw

    @pytest.mark.parametrize("name", list(CHECKS))
    def test_an_admin_tool_answers_the_same_through_the_gateway(
        self, prepared: LayoutGateway, name: str
    ) -> None:
        gw, check = prepared, CHECKS[name]
        with tools_row(gw):
            direct_boot = gw.direct if check.via == SERVER else gw.direct_controllers
            gateway_boot = gw.bootstrap if check.via == SERVER else gw.controller_bootstrap
            direct, direct_addresses = run_check(check, direct_boot)
            through, gateway_addresses = run_check(check, gateway_boot)
            assert through == direct
            # the addresses, each against where it should point
            assert direct_addresses.keys() == gateway_addresses.keys()
            own = gw.controllers if check.names == "controller" else gw.brokers
            for what, address in direct_addresses.items():
                node = int(what.split()[1])
                assert address == own[node], (what, address)
                assert gateway_addresses[what] == gw.gateway_address(check.names, node), what
            if name.startswith("quorum-status"):
                voters = {f"voter {n} endpoint 0" for n in gw.controllers}
                assert set(direct_addresses) >= voters

    def test_every_route_goes_to_its_node_and_answers_as_it_does(
        self, prepared: LayoutGateway
    ) -> None:
        """After the tools (kafka-metadata-quorum through a broker among them): each
        broker port lists what the broker lists, each controller port what the controller
        lists; nothing moved, nothing refused."""
        gw = prepared
        with tools_row(gw):
            run_tool("kafka-metadata-quorum", SERVER, gw.bootstrap, "describe", "--status").check()
            assert routes(gw.px) == gw.expected_routes()
            for node, address in gw.brokers.items():
                broker = api_keys_at(address)
                assert {0, 1} <= broker  # Produce, Fetch
                assert api_keys_at(gw.gateway_address("broker", node)) == broker, node
            for node, address in gw.controllers.items():
                controller = api_keys_at(address)
                assert 52 in controller and 0 not in controller  # Vote, not Produce
                assert api_keys_at(gw.gateway_address("controller", node)) == controller, node
            metrics = gw.px.metrics()
            assert metrics.total("kafkalens_gateway_routes_moved_total") == 0
            assert metrics.total("kafkalens_gateway_routes_refused_total") == 0
            assert metrics.value("kafkalens_gateway_routes", kind="broker") == len(gw.brokers)
            assert metrics.value("kafkalens_gateway_routes", kind="controller") == len(gw.controllers)
            # every request the tools sent went through the gateway's listeners, decoded
            lines = [x for x in gw.px.lines() if x["event"] == "request"]
            on = {line["listener"] for line in lines if line["api"] == "DescribeQuorum"}
            via_controllers = {x for x in on if x.startswith("controller")}
            assert via_controllers and on - via_controllers, on  # via a broker, via a controller
            undecoded = {(x["api"], x["api_version"]) for x in lines if "decode_error" in x}
            assert not undecoded, undecoded


class TestCombined(Checks):
    """Each node broker and controller: the session's 3-node cluster."""

    @pytest.fixture(scope="class")
    @classmethod
    def gw(
        cls, apache_kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[LayoutGateway]:
        cluster = apache_kafka_cluster
        log = tmp_path_factory.mktemp("gw-combined") / "requests.log"
        brokers, controllers = broker_listeners(cluster), controller_listeners(cluster)
        with layout_gateway("combined", brokers, controllers, log) as gw:
            yield gw

    def test_the_quorum_leader_killed_under_load(
        self, prepared: LayoutGateway, apache_kafka_cluster: KafkaCluster
    ) -> None:
        """The active controller is a broker too: `kill -9` takes both at once, under
        load through the gateway. A new quorum leader takes over, the clients follow
        the new partition leaders, nothing acknowledged is lost (support.faults), and
        the node comes back where it was: every route as before, none moved."""
        gw, cluster = prepared, apache_kafka_cluster
        with fault_rows(gw):
            before = describe_quorum(gw.direct)
            leader = before["leader_id"]
            routes_before = routes(gw.px)
            assert routes_before == gw.expected_routes()
            topic = f"gw-quorum-{uuid.uuid4().hex[:8]}"
            create_topic(cluster.bootstrap, topic, replicas=3)
            load = Load(gw.bootstrap, topic)
            try:
                load.goes_on()
                survive(cluster, gw.px, gw.broker_ports, load, leader, "kill",
                        also_down=(gw.controllers[leader],))  # fmt: skip
                after = describe_quorum(gw.direct)
                assert after["leader_epoch"] > before["leader_epoch"]  # an election took place
                faulted = {"bootstrap", f"broker-{leader}", f"controller-{leader}"}
                finish_and_check(gw.px, load, cluster.bootstrap, faulted, gateway=True)
            finally:
                load.kill()
                cluster.start_node(leader)
            assert routes(gw.px) == routes_before
            assert_nothing_moved(gw)


class TestDedicated(Checks):
    """Three controller-only processes, three broker-only ones, a broker joining later."""

    @pytest.fixture(scope="class")
    @classmethod
    def cluster(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KraftCluster]:
        with kraft_cluster(tmp_path_factory.mktemp("kraft-dedicated"), 3, 3) as cluster:
            yield cluster

    @pytest.fixture(scope="class")
    @classmethod
    def gw(
        cls, cluster: KraftCluster, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[LayoutGateway]:
        log = tmp_path_factory.mktemp("gw-dedicated") / "requests.log"
        brokers, controllers = broker_listeners(cluster), controller_listeners(cluster)
        with layout_gateway("dedicated", brokers, controllers, log) as gw:
            yield gw

    def test_a_broker_that_joins_later_gets_its_route_and_it_follows_the_broker(
        self, cluster: KraftCluster, prepared: LayoutGateway
    ) -> None:
        """Broker 7 (broker-only) joins the running cluster: the gateway learns it from
        Metadata, a topic placed on it alone is written and read through the gateway,
        over broker 7's route, and the quorum lists it as an observer both ways. Then
        broker 7 moves to another port: the route follows once the cluster names the new
        address and it answers as a broker (counted), and clients reach it there."""
        gw = prepared
        with tools_row(gw):
            joined = cluster.add_broker()
            brokers = {**gw.brokers, joined.node_id: joined.address}
            topic = "gw-joined"
            run_tool("kafka-topics", SERVER, gw.bootstrap, "--create", "--topic", topic,
                     "--replica-assignment", str(joined.node_id)).check()  # fmt: skip
            ck_client.produce(gw.bootstrap, topic, make_records(10, topic), acks="all")
            got = ck_client.consume(gw.bootstrap, topic, f"{topic}-1", 10, APACHE_KAFKA_GROUPS)
            assert len(got) == 10
            assert routes(gw.px) == gw.expected_routes(brokers)
            assert gw.px.metric("kafkalens_connections_opened_total", listener="broker-7") > 0
            check = CHECKS["quorum-replication"]
            direct, _ = run_check(check, gw.direct)
            through, _ = run_check(check, gw.bootstrap)
            assert through == direct
            observers = {row[0] for row in direct if row[2] == "Observer"}  # type: ignore[attr-defined]
            assert str(joined.node_id) in observers

            moved = "kafkalens_gateway_routes_moved_total"
            assert gw.px.metric(moved, kind="broker") == 0
            new_address = cluster.move_broker(joined.node_id)
            brokers[joined.node_id] = new_address
            ck_client.produce(gw.bootstrap, topic, make_records(10, topic), acks="all")
            until(lambda: routes(gw.px) == gw.expected_routes(brokers), "broker-7's route to move")
            got = ck_client.consume(gw.bootstrap, topic, f"{topic}-2", 20, APACHE_KAFKA_GROUPS)
            assert len(got) == 20
            assert gw.px.metric(moved, kind="broker") == 1
            assert gw.px.metric("kafkalens_gateway_routes_refused_total") == 0

    def test_the_active_controller_killed_under_load(
        self, prepared: LayoutGateway, cluster: KraftCluster
    ) -> None:
        """The active controller alone (`kill -9`), under load through the gateway: a new
        quorum leader takes over, the clients notice nothing (no request of theirs is cut
        short by a broker going away), the admin tools still answer through the gateway,
        nothing acknowledged is lost, and every route stays where it was."""
        gw = prepared
        with fault_rows(gw):
            before = describe_quorum(gw.direct)
            leader = before["leader_id"]
            routes_before, counts_before = routes(gw.px), route_counts(gw)
            topic = f"gw-controller-{uuid.uuid4().hex[:8]}"
            create_topic(gw.direct, topic, replicas=3)
            load = Load(gw.bootstrap, topic)
            try:
                load.goes_on()
                cluster.kill_node(leader)
                try:
                    down = gw.controllers[leader]
                    until(lambda: readyz(gw.px.http_port) == (200, f"ready; unreachable: {down}"),
                          f"/readyz to name {down}", 30)  # fmt: skip

                    def elected() -> bool:
                        try:
                            return describe_quorum(gw.direct)["leader_id"] not in (-1, leader)
                        except NoQuorumAnswer:  # no leader yet
                            return False

                    until(elected, "a new quorum leader", 60)
                    load.goes_on()
                    status = run_tool("kafka-metadata-quorum", CONTROLLER, gw.controller_bootstrap,
                                      "describe", "--status").check()  # fmt: skip
                    assert f"LeaderId:               {leader}" not in status.stdout
                finally:
                    cluster.start_node(leader)
                until(lambda: readyz(gw.px.http_port) == (200, "ready"), "/readyz ready again", 30)
                until(lambda: caught_up(gw.direct, leader), f"{leader} to catch up")
                load.goes_on()
                load.finish()
                gw.px.wait_all_closed(60)
                check_nothing_lost(load, gw.direct)
                reasons = check_request_log(gw.px.lines(), load, set(), listeners_of(gw.px, True))
                assert not reasons.keys() & UPSTREAM_GONE, reasons
            finally:
                load.kill()
                cluster.start_node(leader)
            assert routes(gw.px) == routes_before
            assert route_counts(gw) == counts_before  # nothing moved, nothing refused


def caught_up(address: str, node: int) -> bool:
    """Whether voter `node` has the metadata log up to the quorum's high watermark."""
    try:
        quorum = describe_quorum(address)
    except NoQuorumAnswer:
        return False
    (voter,) = [v for v in quorum["current_voters"] if v["replica_id"] == node]
    return bool(voter["log_end_offset"] >= quorum["high_watermark"])


def assert_nothing_moved(gw: LayoutGateway) -> None:
    assert route_counts(gw) == (0, 0)


def route_counts(gw: LayoutGateway) -> tuple[float, float]:
    """(routes moved, routes refused) so far."""
    metrics = gw.px.metrics()
    return (
        metrics.total("kafkalens_gateway_routes_moved_total"),
        metrics.total("kafkalens_gateway_routes_refused_total"),
    )
