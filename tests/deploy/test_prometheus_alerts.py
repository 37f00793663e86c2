"""The shipped alert rules and dashboard, evaluated by a real Prometheus that scrapes
`kafkalens proxy` processes in front of a real Apache Kafka, with real clients
(kafka-python, confluent-kafka). Alerts, metrics and panels are judged by Prometheus's
own answers (its /api/v1/alerts and query API), lag also against the broker's own
offsets; besides, /readyz is read as the kubelet reads it, and the proxy's log only for
the bound on its own warnings.

The rules are deploy/prometheus/alerts.yml with only the `for:` durations shortened
(tests/deploy/test_prometheus_rules.py proves it); their windows ([5m], [10m] ...) are the
shipped ones, so a rate is an increase divided by the whole window, as in production.
How long each alert takes to fire and to resolve with the real `for:` is held by the
promtool unit tests beside the rules.

One broker for the module (support.prometheus.alerting_kafka): topics are not created
on first use, a SASL listener enforces ACLs, idle connections are closed after 5 s.
Each scenario starts its own kafkalens and Prometheus. After each, every query of the
dashboards is evaluated over the scenario with its variables resolved as Grafana would
(`$instance` the scenario's kafkalens, `$group`/`$topic` its group and topic), and the
panels the scenario must fill (support.prometheus.DASHBOARD_FILLS) must show a non-zero
number; the ones no scenario can fill are in UNFILLABLE there, with why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic, OffsetSpec
from kafka.errors import KafkaError
from support.needs import needs
from support.prometheus import (
    SASL_USERS,
    AlertingKafka,
    PrometheusServer,
    Sidecar,
    alert_rules,
    alerting_kafka,
    check_dashboard,
    prometheus,
    shipped_rules,
    small_tmpfs,
)
from support.proxy_harness import request_frame

from codec import ApiKey


@pytest.fixture(scope="module")
@needs("broker", "java")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertingKafka]:
    with alerting_kafka(tmp_path_factory.mktemp("alerting-kafka")) as broker:
        yield broker


def create_topic(kafka: AlertingKafka, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.direct)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def sidecar(kafka: AlertingKafka, work_dir: Path, listener: str = "PROXIED", **sections: Any) -> Sidecar:
    """A kafkalens in front of one of the broker's listeners, where it advertises it."""
    name = listener.lower()
    return Sidecar(work_dir, [(name, kafka.sidecar_address(listener), kafka.upstream(listener))], **sections)


class Loop:
    """`step()` over and over in a thread until stopped. A client's errors are part of
    the scenarios (a broker killed, a topic missing): counted, the last one kept."""

    def __init__(self, step: Callable[[], None]) -> None:
        self.step = step
        self.stopping = threading.Event()
        self.failures = 0
        self.last_error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - the scenario decides what matters
                self.failures += 1
                self.last_error = exc
                self.stopping.wait(0.05)  # a step that fails at once must not spin

    def __enter__(self) -> Loop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(60)


def quiet(prom: PrometheusServer, name: str, instance: str) -> bool:
    return not [a for a in prom.alerts(name) if a["labels"].get("instance") == instance]


# --- the error-rate alert ------------------------------------------------------------------


def churn_group(bootstrap: str, topic: str, group: str) -> Callable[[], None]:
    """One member's life: join `group`, consume a little, leave (LeaveGroup)."""

    def member() -> None:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=100,
            session_timeout_ms=6000,
        )
        try:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=100)
        finally:
            consumer.close()

    return member


def test_a_rebalancing_group_keeps_the_error_rate_alert_silent_failures_fire_it(
    kafka: AlertingKafka, tmp_path: Path
) -> None:
    """Three kafkalens of one broker, three alerts apart (the rule is by instance): the
    first sees a group rebalancing all along and must stay silent; meanwhile the second
    sees a producer to a topic that does not exist and the third (SASL) a user without
    any ACL, and each must fire."""
    topic = create_topic(kafka, partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with (
        sidecar(kafka, tmp_path / "group") as rebalancing,
        sidecar(kafka, tmp_path / "missing", "OTHER") as missing,
        sidecar(kafka, tmp_path / "sasl", "SASL") as sasl,
        prometheus(tmp_path / "prometheus", [rebalancing.target, missing.target, sasl.target]) as prom,
    ):
        started = time.time()
        spike = alert_rules(shipped_rules())["KafkalensErrorRateSpike"]["expr"]
        # the same alert without its list of protocol steps: every error code a failure
        naive = spike.replace(
            "kafkalens:request_failures:rate5m",
            "sum by (instance, api) (rate(kafkalens_request_errors_total[5m]))",
        )
        producer = KafkaProducer(bootstrap_servers=kafka.sidecar_address(), linger_ms=20)
        # a producer to topics that do not exist (auto-creation is off)
        lost = KafkaProducer(bootstrap_servers=kafka.sidecar_address("OTHER"), max_block_ms=1000, retry_backoff_ms=10)
        sasl_client = {
            "bootstrap_servers": kafka.sidecar_address("SASL"), "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        }  # fmt: skip
        admin = KafkaProducer(**sasl_client, sasl_plain_username="admin", sasl_plain_password=SASL_USERS["admin"])

        def to_missing_topic() -> None:
            with contextlib.suppress(KafkaError):
                lost.send(f"missing-{uuid.uuid4().hex[:6]}", b"x").get(1)

        def unauthorized() -> None:  # alice may do nothing on the SASL listener
            alice = KafkaProducer(
                **sasl_client, sasl_plain_username="alice", sasl_plain_password=SASL_USERS["alice"],
                max_block_ms=500, retry_backoff_ms=10,
            )  # fmt: skip
            try:
                with contextlib.suppress(KafkaError):
                    alice.send(topic, b"x").get(1)
            finally:
                alice.close()

        steps: list[Callable[[], None]] = [
            lambda: producer.send(topic, b"x" * 100).get(30) and time.sleep(0.02),
            lambda: admin.send(topic, b"y" * 200).get(30) and time.sleep(0.05),
            *[churn_group(kafka.sidecar_address(), topic, group)] * 6,  # members joining and leaving
            # two of each: a rate over the rule's 5-minute window passes 1/s after 300 failures
            *[to_missing_topic, unauthorized] * 2,
        ]
        with contextlib.ExitStack() as stack:
            for step in steps:
                stack.enter_context(Loop(step))
                time.sleep(0.2)  # members join one after another
            fired: dict[str, dict[str, Any]] = {}
            # Until both fired, and the rebalances were enough to fire a rule that counted
            # their protocol steps: 300 in its 5-minute window, half a minute of churn on an
            # idle machine, but the churn's rate follows the CPU (150 s ran out once with the
            # machine loaded). The bound is the window itself: a group that cannot make 300
            # errors in 5 minutes would not fire the naive rule at all, and the test's premise
            # fails with that message.
            naive_true: set[str] = set()
            deadline = time.monotonic() + 300
            while len(fired) < 2 or not naive_true:
                # the rebalancing group: silent all along, neither pending nor firing
                assert quiet(prom, "KafkalensErrorRateSpike", rebalancing.target), prom.alerts()
                for alert in prom.alerts("KafkalensErrorRateSpike", "firing"):
                    fired.setdefault(alert["labels"]["instance"], alert)
                naive_true |= {s["metric"]["api"] for s in prom.query(naive) if
                               s["metric"]["instance"] == rebalancing.target}  # fmt: skip
                assert time.monotonic() < deadline, f"fired only for {list(fired)}, naive for {naive_true}"
                time.sleep(0.5)
        for client in (producer, lost, admin):
            client.close()
        ended = time.time()
        window = f"{int(ended - started) + 2}s"
        errors = {
            (s["metric"]["api"], s["metric"]["error"]): round(float(s["value"][1]))
            for s in prom.query(
                f'sum by (api, error) (increase(kafkalens_request_errors_total{{instance="{rebalancing.target}"}}[{window}]))'
            )
        }
        failures = {
            (s["metric"]["instance"], s["metric"]["api"], s["metric"]["error"]): round(float(s["value"][1]), 2)
            for s in prom.query("kafkalens:request_failures:rate5m > 0")
        }
        print(
            f"\nrebalancing ({ended - started:.0f} s): {errors}; a rule counting every error would fire for"
            f" {naive_true}\nfired: {[(a['labels'], a['annotations']['summary']) for a in fired.values()]}"
            f"\nfailures/s: {failures}"
        )
        # the rebalances happened, as Kafka answers them, and were enough to fire a rule
        # that counted them: what keeps the shipped rule silent is its list of protocol steps
        assert errors.get(("JoinGroup", "MEMBER_ID_REQUIRED")), errors
        assert any(e == "REBALANCE_IN_PROGRESS" for _, e in errors), errors
        assert not [s for s in prom.query_range(spike, started, ended) if s["metric"]["instance"] == rebalancing.target]
        assert fired[missing.target]["labels"]["api"] == "Metadata"
        assert fired[missing.target]["annotations"]["summary"].startswith("Metadata error rate ")
        assert (missing.target, "Metadata", "UNKNOWN_TOPIC_OR_PARTITION") in failures
        assert (sasl.target, "Metadata", "TOPIC_AUTHORIZATION_FAILED") in failures
        assert fired[sasl.target]["labels"]["severity"] == "warning"
        by_principal = {
            s["metric"]["principal"]: float(s["value"][1])
            for s in prom.query(f'sum by (principal) (kafkalens_topic_bytes_total{{instance="{sasl.target}"}})')
        }
        assert by_principal.get("admin"), by_principal
        check_dashboard(prom, "errors", {"instance": rebalancing.target}, started)
        check_dashboard(prom, "errors-sasl", {"instance": sasl.target}, started)


# --- consumer lag -----------------------------------------------------------------------------


def broker_lag(kafka: AlertingKafka, group: str, topic: str) -> int:
    """The broker's own: end offsets (ListOffsets) minus the group's committed offsets
    (OffsetFetch), straight from the broker."""
    admin = KafkaAdminClient(bootstrap_servers=kafka.direct)
    try:
        committed = {tp: meta.offset for tp, meta in admin.list_group_offsets(group)[group].items() if tp.topic == topic}
        ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in committed})
        return sum(ends[tp].offset - offset for tp, offset in committed.items())
    finally:
        admin.close()


# The lag scenario's producers together append at most this many records a second. The
# rules' floors are counts of records (consumer lag: 1000 over the topic's partitions;
# committed lag: 10000 on the one partition the cap leaves a series of its own), so
# whether a consumer that keeps up stays under them depends on the rate. Unpaced, it was
# whatever the machine allowed (10,000-17,000 records/s on a shared 2-core machine, more
# on an idle one): a fetch cycle 0.07 s late or an auto-commit 1.3 s late put a
# keeping-up group over a floor. At 2500/s those are 0.4 s and 8 s on any machine, and a
# stopped consumer fires both alerts within about 12 s.
RECORDS_PER_SECOND = 2500
BATCH = 50
LAG_ALERTS = "KafkalensConsumerLagGrowing|KafkalensCommittedLagGrowing"


def test_a_consumer_that_stops_fires_the_lag_alerts_which_resolve_when_it_catches_up(
    kafka: AlertingKafka, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = create_topic(kafka, partitions=2)
    group = f"lag-{uuid.uuid4().hex[:8]}"
    config = {
        # one partition series per kind: the second is folded (the caps' panel)
        "lag": {"max_partitions": 1},
        # KIP-714 answered by kafkalens (this broker has no telemetry receiver), one
        # client instance kept: the second producer's metrics are dropped
        "telemetry": {"collect": True, "push_interval_ms": 1000, "max_instances": 1},
    }
    with (
        sidecar(kafka, tmp_path / "sidecar", **config) as proxy,
        prometheus(tmp_path / "prometheus", [proxy.target]) as prom,
    ):
        started = time.time()
        producing, consuming, paused = threading.Event(), threading.Event(), threading.Event()
        producing.set()
        consuming.set()
        producer = KafkaProducer(bootstrap_servers=kafka.sidecar_address(), linger_ms=5)
        consumer = KafkaConsumer(
            topic, bootstrap_servers=kafka.sidecar_address(), group_id=group, auto_offset_reset="earliest",
            auto_commit_interval_ms=200, heartbeat_interval_ms=500,
        )  # fmt: skip
        reporting = [
            Producer({"bootstrap.servers": kafka.sidecar_address(), "client.id": f"reporting-{n}", "linger.ms": 5})
            for n in range(2)
        ]
        stack = contextlib.ExitStack()  # closed before kafkalens stops, whatever happens
        stack.callback(reporting.clear)  # librdkafka clients go with their last reference
        stack.callback(consumer.close)
        stack.callback(producer.close)

        def produce() -> None:
            if not producing.is_set():
                for client in reporting:
                    client.flush(30)
                paused.set()  # every record sent is acknowledged: the broker's end is final
                producing.wait(0.1)
                return
            paused.clear()
            began = time.monotonic()
            for _ in range(BATCH):
                producer.send(topic, b"r" * 50)
            producer.flush()
            for client in reporting:
                client.produce(topic, b"c" * 50)
                client.poll(0)
            # paced, never faster than RECORDS_PER_SECOND whatever the machine's speed
            time.sleep(max(0.0, (BATCH + len(reporting)) / RECORDS_PER_SECOND - (time.monotonic() - began)))

        def consume() -> None:
            if consuming.wait(0.1):
                consumer.poll(timeout_ms=100)

        with stack, Loop(produce), Loop(consume):
            # keeping up: a lag that does not grow fires nothing, not even pending, at any
            # evaluation (Prometheus's own ALERTS series over the whole phase)
            time.sleep(8)
            kept_up = prom.query_range(f'ALERTS{{alertname=~"{LAG_ALERTS}"}}', started, time.time())
            assert not kept_up, [(a["metric"], a["values"]) for a in kept_up]
            consuming.clear()  # the consumer stops; its producer goes on
            stopped = time.time()
            lag_alert = prom.wait_firing("KafkalensConsumerLagGrowing", 90, group=group, topic=topic)
            committed_alert = prom.wait_firing("KafkalensCommittedLagGrowing", 90, group=group, topic=topic)
            fired = time.time()
            # kafkalens's lag against the broker's, producers paused (all they sent acknowledged)
            producing.clear()
            assert paused.wait(60), "the producers did not pause"
            truth = broker_lag(kafka, group, topic)
            # (one partition's committed series is folded into "other" by the cap)
            committed = f'sum(kafkalens_committed_lag_records{{instance="{proxy.target}"}})'
            consumer_lag = f'sum(kafkalens_consumer_topic_lag_records{{group="{group}", topic="{topic}"}})'
            prom.wait(lambda: prom.value(committed) == truth, 15, f"committed lag {truth}, as the broker has it")
            # the consumer's position is what it fetched: past what it committed by at
            # most the fetches it had not handed to the application when it stopped
            fetched_ahead = truth - (prom.value(consumer_lag) or 0)
            assert 0 <= fetched_ahead <= 2 * 1048576 // 50, (truth, fetched_ahead)
            producing.set()
            consuming.set()  # it comes back and catches up
            prom.wait_resolved("KafkalensConsumerLagGrowing", 90, group=group, topic=topic)
            prom.wait_resolved("KafkalensCommittedLagGrowing", 90, group=group, topic=topic)
            resolved = time.time()
            dropped = prom.wait_firing("KafkalensClientTelemetryDropped", 60, reason="instances")
        print(
            f"\nlag alerts fired {fired - stopped:.0f} s after the consumer stopped"
            f" ({lag_alert['annotations']['summary']}; {committed_alert['annotations']['summary']}),"
            f" lag {truth} as the broker has it (consumer lag {fetched_ahead} less); resolved {resolved - fired:.0f} s after it resumed;"
            f" {dropped['labels']}"
        )
        check_dashboard(prom, "lag", {"instance": proxy.target, "group": group, "topic": topic}, started)


# --- the broker behind the sidecar -------------------------------------------------------------


def test_a_stuck_then_killed_broker_fires_the_upstream_alerts_and_readyz_follows_it(
    kafka: AlertingKafka, tmp_path: Path
) -> None:
    topic = create_topic(kafka)
    node = kafka.cluster.node(1)
    with (
        sidecar(kafka, tmp_path / "sidecar", limits={"request_timeout_seconds": 2}) as proxy,
        prometheus(tmp_path / "prometheus", [proxy.target]) as prom,
    ):
        started = time.time()
        instance = f'instance="{proxy.target}"'
        # The broker closes connections idle for connections.max.idle.ms: routine, no failure
        idle = KafkaAdminClient(bootstrap_servers=kafka.sidecar_address())
        idle.describe_cluster()
        prom.wait(
            lambda: prom.value(f'sum(kafkalens_connections_closed_total{{{instance}, reason="upstream_eof"}})'),
            60, "the broker closing the idle connections",
        )
        assert not prom.value(f"sum(kafkalens_upstream_failures_total{{{instance}}})")
        idle.close()

        producer = KafkaProducer(bootstrap_servers=kafka.sidecar_address(), linger_ms=5, retries=0)
        consumer = KafkaConsumer(topic, bootstrap_servers=kafka.sidecar_address(), group_id=f"g-{uuid.uuid4().hex[:6]}")
        stack = contextlib.ExitStack()
        stack.callback(consumer.close)
        stack.callback(producer.close)
        with stack, Loop(lambda: producer.send(topic, b"p").get(5) and time.sleep(0.05)), Loop(
            lambda: consumer.poll(timeout_ms=200)
        ):
            prom.wait(lambda: prom.value(f'sum(rate(kafkalens_requests_total{{{instance}, api="Fetch"}}[5s]))'),
                      30, "clients going through")  # fmt: skip
            # stuck: the broker's process stopped, its sockets open
            assert node.process is not None
            os.kill(node.process.pid, signal.SIGSTOP)
            try:
                timeouts = prom.wait_firing("KafkalensRequestTimeouts", 60, instance=proxy.target)
            finally:
                os.kill(node.process.pid, signal.SIGCONT)
            # killed: nothing listens on its port any more
            kafka.cluster.kill_node(1)
            try:
                assert prom.wait(lambda: proxy.status("/readyz") == 503, 15, "/readyz red")
                unreachable = prom.wait_firing("KafkalensUpstreamUnreachable", 60, instance=proxy.target)
                failures = prom.wait_firing("KafkalensUpstreamFailures", 120, instance=proxy.target)
            finally:
                kafka.cluster.start_node(1)
            back = time.time()
            prom.wait(lambda: proxy.status("/readyz") == 200, 30, "/readyz green again")
            prom.wait_resolved("KafkalensUpstreamUnreachable", 30, instance=proxy.target)
            recovered = time.time()
        attempts = prom.value(f'sum(kafkalens_upstream_failures_total{{{instance}, reason="connect_refused"}})')
        proxy.stop()  # (its series go stale in Prometheus: asked before)
        # Its clients reconnected as fast as they were turned away: logged once per 10 s
        # (kafka-python's two did 450 connections a second), counted in full
        lines = proxy.output.read_text().count("upstream connect failed")
        assert attempts is not None and attempts > lines
        assert lines <= (back - started) / 10 + 2, lines
        print(
            f"\nstuck: {timeouts['labels']}; killed: {unreachable['annotations']['summary']},"
            f" {failures['labels']} {failures['annotations']['description']};"
            f" /readyz and the unreachable alert recovered {recovered - back:.0f} s after the broker was back;"
            f" {attempts:.0f} connections refused, {lines} lines logged"
        )
        # the failures alert stays until the failures leave its 5-minute window (promtool
        # unit tests: alerts_test.yml); the unreachable one resolved already
        check_dashboard(prom, "broker", {"instance": proxy.target}, started)


# --- the proxy's own trouble -------------------------------------------------------------

METADATA, UNKNOWN_API_KEY = ApiKey.METADATA, 999


def test_a_full_log_disk_bad_frames_and_refused_connections_fire_their_alerts_and_a_stop_is_down(
    kafka: AlertingKafka, tmp_path: Path
) -> None:
    topic = create_topic(kafka)
    config = {
        "request_log": {"path": str(tmp_path / "disk" / "requests.log")},
        "limits": {"max_connections_per_ip": 4},  # the clients below come from 127.0.0.1
    }
    with (
        small_tmpfs(tmp_path / "disk", "64k"),
        sidecar(kafka, tmp_path / "sidecar", **config) as proxy,
        prometheus(tmp_path / "prometheus", [proxy.target]) as prom,
    ):
        started = time.time()
        sidecar_port = kafka.listeners["PROXIED"][1]
        producer = KafkaProducer(bootstrap_servers=kafka.sidecar_address(), linger_ms=5)
        with contextlib.closing(producer), Loop(lambda: producer.send(topic, b"z" * 100).get(10) and time.sleep(0.01)):
            # 64 KiB of request log lines: the disk is full within seconds
            lost = prom.wait_firing("KafkalensRequestLogLosingLines", 60, reason="write_failed")
            # undecodable and unknown requests (a Metadata v0 declaring 54 million
            # topics in 8 bytes; api key 999), forwarded to the broker, which hangs up
            for frame in (
                request_frame(METADATA, 0, 1, struct.pack(">i", 54_000_000)),
                request_frame(UNKNOWN_API_KEY, 0, 2),
            ):
                with socket.create_connection(("127.0.0.1", sidecar_port), 10, ("127.0.0.4", 0)) as sock:
                    sock.sendall(frame)
                    with contextlib.suppress(OSError):
                        sock.recv(1)  # until the broker's close comes through
            # connections past limits.max_connections_per_ip from another address
            crowd = [socket.socket() for _ in range(8)]
            for sock in crowd:
                sock.bind(("127.0.0.3", 0))
                sock.connect(("127.0.0.1", sidecar_port))
            decode = prom.wait_firing("KafkalensDecodeErrors", 60, instance=proxy.target)
            rejected = prom.wait_firing("KafkalensConnectionsRejected", 60, reason="per_ip_limit")
            for sock in crowd:
                sock.close()
        unknown = prom.value(f'sum(kafkalens_unknown_requests_total{{instance="{proxy.target}"}})')
        check_dashboard(prom, "trouble", {"instance": proxy.target}, started)
        proxy.stop()  # and then it is gone
        down = prom.wait_firing("KafkalensDown", 30, instance=proxy.target)
    print(
        f"\nfull disk: {lost['annotations']['summary']}; bad frames: {decode['labels']}, {unknown:.0f} unknown;"
        f" {rejected['annotations']['summary']}; stopped: {down['annotations']['summary']}"
    )
    assert "No space left on device" in proxy.stderr or "ENOSPC" in proxy.stderr
