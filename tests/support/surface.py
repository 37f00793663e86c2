"""What an operator sees of kafkalens, written out as text to compare across a change
of the code's structure: the metrics `/metrics` shows (every family's name, type, help
and label names, the series at 0 from the start, and the counts after a replay), the
request log's lines for real clients' sessions and for scripted share-group and
KIP-1313 exchanges, and the documented configuration file.

The snapshots in tests/data/surface/ were written by this module from the code before
the observing features became slices of their own (proxy/features.py);
tests/project/test_surface.py holds the code to them. A change that means to change
what operators see rewrites them, `python tests/support/surface.py`, and says so.

The sessions are the golden captures of tests/data/golden (bench/codec/capture_golden.py),
each on a connection of its own and then again on a second one (the memoised path),
through the hooks `kafkalens proxy` builds from its config, in process, no sockets.
Fields that differ between two runs whatever the code does are masked (`VOLATILE`).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from codec import ApiKey, HeaderPolicy, Request, Response, encode_request, encode_response
from proxy.hooks import ConnectionInfo, Hooks, Pending
from support.replay import sessions

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "data" / "surface"
VOLATILE = ("ts", "latency_ms", "duration_s")
# Samples whose values depend on the clock or the machine, not on the traffic.
TIMED = ("kafkalens_request_duration_seconds_bucket", "kafkalens_request_duration_seconds_sum")
OPENED_AT = 1_800_000_000.0


# --- the proxy, as `kafkalens proxy` builds it ---------------------------------------------


def _build(config_data: dict[str, Any], log_path: Path) -> tuple[Any, Hooks]:
    """(metrics, hooks) as proxy/runner.py builds them from a config document."""
    from proxy.features import build_hooks, parse_config, proxy_metrics

    data = {
        **config_data,
        "request_log": {**config_data.get("request_log", {}), "path": str(log_path)},
    }
    config = parse_config(data)
    metrics = proxy_metrics(config, build_version="snapshot")
    return metrics, build_hooks(config, metrics)


# --- metrics ---------------------------------------------------------------------------


def metrics_text(metrics: Any, with_values: bool = True) -> str:
    """Every family of `metrics.registry` but the process's own (process_*, python_*),
    sorted by name: `# HELP`, `# TYPE`,
    `# LABELS` (the label names a labelled metric declares), then its samples (with
    `with_values`: those whose values do not depend on the clock)."""
    families = {
        family.name: family
        for family in metrics.registry.collect()
        if not family.name.startswith(("process_", "python_"))
    }
    labelnames: dict[str, tuple[str, ...]] = {}
    for collector in list(metrics.registry._collector_to_names):  # noqa: SLF001
        declared = getattr(collector, "_labelnames", None)
        name = getattr(collector, "_name", None)
        if declared is not None and name is not None:
            labelnames[name] = tuple(declared)
    out: list[str] = []
    for name in sorted(families):
        family = families[name]
        out.append(f"# HELP {name} {family.documentation}")
        out.append(f"# TYPE {name} {family.type}")
        if name in labelnames:
            out.append(f"# LABELS {name} {','.join(labelnames[name])}")
        samples = [] if not with_values else [
            f"{s.name}{_labels(s.labels)} {s.value!r}" for s in family.samples if s.name not in TIMED
        ]  # fmt: skip
        out.extend(sorted(samples))
    return "\n".join(out) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def fresh_metrics(tmp: Path) -> str:
    """The metrics of a proxy just started with the default config (every feature's
    families, the series at 0 from the start)."""
    metrics, hooks = _build({}, tmp / "fresh.log")
    hooks.close()
    return metrics_text(metrics)


# --- the request log -------------------------------------------------------------------


class Replay:
    """The hooks of one config, fed exchanges as a connection feeds them."""

    def __init__(self, config_data: dict[str, Any], tmp: Path, name: str) -> None:
        self.path = tmp / f"{name}.log"
        self.metrics, self.hooks = _build(config_data, self.path)
        self.infos: dict[str, ConnectionInfo] = {}
        self.correlation = 0

    def conn(self, name: str) -> ConnectionInfo:
        info = self.infos.get(name)
        if info is None:
            port = 40000 + len(self.infos)
            info = ConnectionInfo(
                name, "plaintext", "10.1.2.3", port, "broker:9092", opened_at=OPENED_AT
            )
            info.metrics = self.metrics.connection_opened("plaintext")
            self.infos[name] = info
            self.hooks.connection_opened(info)
        return info

    def frames(
        self, conn: str, api_key: int, version: int, request: bytes, response: bytes | None
    ) -> None:
        """One exchange from frame bodies (`request` from its api key on; `response` from
        its correlation id on), renumbered; held for admit_request or rewritten where the
        hooks ask, as the connection does."""
        info = self.conn(conn)
        hooks = self.hooks
        self.correlation += 1
        corr = self.correlation
        request = request[:4] + corr.to_bytes(4, "big", signed=True) + request[8:]
        pending = Pending(corr, api_key, version, time.perf_counter(), len(request) + 4)
        if hooks.inspects_requests or api_key in hooks.admit_api_keys:
            reply = hooks.admit_request(info, memoryview(request), api_key, version, corr)
            if reply is not None:
                return  # answered by the proxy (its line is written) or refused
        if response is None:
            hooks.request_without_response(info, memoryview(request), pending)
            return
        hooks.request_forwarded(info, memoryview(request), pending)
        response = corr.to_bytes(4, "big", signed=True) + response[4:]
        if api_key in hooks.rewrite_api_keys:
            rewritten = hooks.rewrite_response(info, memoryview(response), pending)
            if rewritten is not None:
                response = rewritten
        hooks.response_forwarded(info, memoryview(response), pending)

    def send(
        self,
        conn: str,
        request: Request,
        response_body: dict[str, Any] | None,
        policy: HeaderPolicy | None = None,
    ) -> None:
        frame = encode_request(request, policy) if policy is not None else encode_request(request)
        answer = None
        if response_body is not None:
            answer = encode_response(
                Response(
                    request.api_key,
                    request.api_version,
                    {"correlation_id": request.correlation_id},
                    response_body,
                )
            )
        self.frames(conn, request.api_key, request.api_version, frame, answer)

    def pending_at_close(self, conn: str, request: Request) -> None:
        """A request forwarded and never answered: its connection closes first."""
        info = self.conn(conn)
        self.correlation += 1
        frame = encode_request(
            Request(
                request.api_key,
                request.api_version,
                {**request.header, "correlation_id": self.correlation},
                request.body,
            )
        )
        pending = Pending(
            self.correlation,
            request.api_key,
            request.api_version,
            time.perf_counter(),
            len(frame) + 4,
        )
        self.hooks.request_forwarded(info, memoryview(frame), pending)
        self.hooks.request_incomplete(info, pending, "client_eof")

    def close(self) -> list[str]:
        for info in self.infos.values():
            self.hooks.connection_closed(info, "client_eof")
        self.hooks.close()
        return [masked(line) for line in self.path.read_text().splitlines()]


def masked(line: str) -> str:
    fields = json.loads(line)
    for key in VOLATILE:
        if key in fields and fields[key] is not None:
            fields[key] = "~"
    return json.dumps(fields, sort_keys=False)


# Every observing feature on: telemetry observed, lag, share groups, KIP-1313 logged.
FEATURES_ON: dict[str, Any] = {
    "request_log": {"record_detail": True},
    "telemetry": {"observe": True},
    "lag": {"enabled": True},
    "kip1313": {"enforcement": "log"},
}


def golden_replay(tmp: Path) -> tuple[list[str], str]:
    """The request log's lines and the metrics after every golden session, twice."""
    replay = Replay(FEATURES_ON, tmp, "golden")
    for client, exchanges in sorted(sessions().items()):
        for round_ in (1, 2):
            for e in exchanges:
                replay.frames(f"{client}#{round_}", e.api_key, e.api_version, e.request, e.response)
    lines = replay.close()
    return lines, metrics_text(replay.metrics)


TOPIC_ID = uuid.UUID("5a5a5a5a-0b0a-4908-8706-050403020100")
HEADER_ID = uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100")
OTHER_ID = uuid.UUID("1f1e1d1c-0b0a-4908-8706-050403020100")


def _metadata_answer() -> dict[str, Any]:
    return {
        "throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "b1", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1,
        "topics": [{"error_code": 0, "name": "orders", "topic_id": TOPIC_ID, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": p, "leader_id": 1, "leader_epoch": 0,
                                    "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
                                   for p in range(3)],
                    "topic_authorized_operations": -2147483648}],
        "cluster_authorized_operations": -2147483648,
    }  # fmt: skip


def share_script(replay: Replay, conn: str) -> None:
    """A share consumer's exchanges: its topic learnt, a heartbeat with an assignment,
    fetches acquiring and acknowledging, an acknowledgement, one refused."""
    header = {"client_id": "share-app"}
    replay.send(conn, Request(ApiKey.METADATA, 12, {**header, "correlation_id": 0},
                              {"topics": [{"topic_id": uuid.UUID(int=0), "name": "orders"}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False}), _metadata_answer())  # fmt: skip
    replay.send(conn, Request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {**header, "correlation_id": 0}, {
        "group_id": "billing", "member_id": "m-1", "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": ["orders"]}), {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m-1", "member_epoch": 1,
        "heartbeat_interval_ms": 5000,
        "assignment": {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 1, 2]}]}})  # fmt: skip
    acks = [
        {0: [(0, 4, [1]), (5, 9, [1, 2, 3, 0, 4])], 1: [(20, 21, [3])]},
        {0: [(10, 14, [1])], 2: [(7, 7, [2])]},
        {},
    ]
    acquired = [
        {0: [(10, 14, 1), (15, 15, 3)], 2: [(7, 7, 2)]},
        {1: [(22, 30, 1)]},
        {0: [(16, 16, 1)]},
    ]
    for n, (ack, got) in enumerate(zip(acks, acquired, strict=True)):
        body = {
            "group_id": "billing", "member_id": "m-1", "share_session_epoch": n + 1, "max_wait_ms": 500,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
            "topics": [{"topic_id": TOPIC_ID, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": types} for f, last, types in b]}
                for p, b in ack.items()]}],
            "forgotten_topics_data": [{"topic_id": OTHER_ID, "partitions": [3]}] if n == 1 else [],
        }  # fmt: skip
        partitions = sorted({*ack, *got})
        answer = {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 30000,
            "responses": [{"topic_id": TOPIC_ID, "partitions": [
                {"partition_index": p, "error_code": 0, "error_message": None,
                 "acknowledge_error_code": 121 if (n, p) == (0, 1) else 0, "acknowledge_error_message": None,
                 "current_leader": {"leader_id": 1, "leader_epoch": 0}, "records": b"",
                 "acquired_records": [{"first_offset": f, "last_offset": last, "delivery_count": d}
                                      for f, last, d in got.get(p, [])]}
                for p in partitions]}],
            "node_endpoints": [],
        }  # fmt: skip
        replay.send(
            conn, Request(ApiKey.SHARE_FETCH, 2, {**header, "correlation_id": 0}, body), answer
        )
    replay.send(conn, Request(ApiKey.SHARE_ACKNOWLEDGE, 2, {**header, "correlation_id": 0}, {
        "group_id": "billing", "member_id": "m-1", "share_session_epoch": 4,
        "topics": [{"topic_id": TOPIC_ID, "partitions": [
            {"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 16, "last_offset": 16, "acknowledge_types": [1]}]}]}]}), {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "responses": [{"topic_id": TOPIC_ID, "partitions": [
            {"partition_index": 0, "error_code": 0, "error_message": None,
             "current_leader": {"leader_id": 1, "leader_epoch": 0}}]}],
        "node_endpoints": []})  # fmt: skip


def kip1313_script(replay: Replay) -> None:
    """Connections held to their first header v3 id, and the ways to break the rule."""

    def offset_delete(corr: int, instance: uuid.UUID | None) -> Request:
        return Request(ApiKey.OFFSET_DELETE, 1, {"correlation_id": corr, "client_id": "v3-app",
                                                 "client_instance_id": instance},
                       {"group_id": "g", "topics": []})  # fmt: skip

    answer = {"error_code": 0, "throttle_time_ms": 0, "topics": []}
    replay.send("v3-good", offset_delete(0, HEADER_ID), answer)
    replay.send("v3-good", offset_delete(0, HEADER_ID), answer)
    replay.send("v3-zero", offset_delete(0, uuid.UUID(int=0)), answer)
    replay.send("v3-other", offset_delete(0, HEADER_ID), answer)
    replay.send("v3-other", offset_delete(0, OTHER_ID), answer)
    replay.send("v3-other", Request(ApiKey.METADATA, 1, {"correlation_id": 0, "client_id": "v3-app"},
                                    {"topics": []}), {"brokers": [], "controller_id": 1, "topics": []})  # fmt: skip
    replay.send("v3-telemetry", offset_delete(0, HEADER_ID), answer)
    replay.send("v3-telemetry", Request(
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"correlation_id": 0, "client_id": "v3-app"},
        {"client_instance_id": OTHER_ID}), {
        "throttle_time_ms": 0, "error_code": 0, "client_instance_id": OTHER_ID, "subscription_id": 7,
        "accepted_compression_types": [0], "push_interval_ms": 30000, "telemetry_max_bytes": 1 << 20,
        "delta_temporality": True, "requested_metrics": []})  # fmt: skip


def telemetry_script(replay: Replay) -> None:
    """A client that asks for its subscription, then pushes its metrics (observed)."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import (
        Gauge,
        Metric,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )  # fmt: skip

    node = [KeyValue(key="node.id", value=AnyValue(string_value="1"))]
    payload = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[
        Metric(name="org.apache.kafka.producer.record.queue.time.avg",
               gauge=Gauge(data_points=[NumberDataPoint(as_double=2.5, attributes=node)])),
        Metric(name="org.apache.kafka.producer.node.request.latency.max",
               gauge=Gauge(data_points=[NumberDataPoint(as_double=7.0, attributes=node)])),
        Metric(name="org.apache.kafka.consumer.fetch.manager.records.consumed.total",
               sum=Sum(is_monotonic=True, aggregation_temporality=2, data_points=[NumberDataPoint(as_int=42)])),
    ])])]).SerializeToString()  # fmt: skip
    header = {"correlation_id": 0, "client_id": "pushing-app"}
    replay.send("pusher", Request(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, header,
                                  {"client_instance_id": uuid.UUID(int=0)}), {
        "throttle_time_ms": 0, "error_code": 0, "client_instance_id": OTHER_ID, "subscription_id": 7,
        "accepted_compression_types": [0], "push_interval_ms": 30000, "telemetry_max_bytes": 1 << 20,
        "delta_temporality": False, "requested_metrics": ["org.apache.kafka."]})  # fmt: skip
    replay.send("pusher", Request(ApiKey.PUSH_TELEMETRY, 0, header, {
        "client_instance_id": OTHER_ID, "subscription_id": 7, "terminating": False,
        "compression_type": 0, "metrics": payload}), {"throttle_time_ms": 0, "error_code": 0})  # fmt: skip


def scripted_replay(tmp: Path, enforcement: str) -> tuple[list[str], str]:
    replay = Replay(
        {**FEATURES_ON, "kip1313": {"enforcement": enforcement}}, tmp, f"scripted-{enforcement}"
    )
    share_script(replay, "share")
    kip1313_script(replay)
    telemetry_script(replay)
    replay.pending_at_close("share", Request(ApiKey.SHARE_FETCH, 2, {"client_id": "share-app"}, {
        "group_id": "billing", "member_id": "m-1", "share_session_epoch": 9, "max_wait_ms": 500,
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
        "topics": [], "forgotten_topics_data": []}))  # fmt: skip
    lines = replay.close()
    return lines, metrics_text(replay.metrics)


# --- the configuration -----------------------------------------------------------------


def documented_config() -> str:
    from proxy.features import documented_file

    return documented_file()


def config_views() -> str:
    """Every key path of the file with its bound and reason (MAXIMA), and every section
    path (SECTION_SCHEMAS): what the reader and `check-config` name."""
    from proxy.features import MAXIMA, SECTION_SCHEMAS

    out = [f"section {path or '(top)'}" for path in SECTION_SCHEMAS]
    out += [f"bound {key} {value!r} {why}" for key, (value, why) in sorted(MAXIMA.items())]
    return "\n".join(out) + "\n"


# --- all of it ---------------------------------------------------------------------------


def surfaces(tmp: Path) -> Iterator[tuple[str, str]]:
    """(snapshot file name, its text now)."""
    yield "metrics-fresh.txt", fresh_metrics(tmp)
    lines, metrics = golden_replay(tmp)
    yield "golden-lines.jsonl", "\n".join(lines) + "\n"
    yield "golden-metrics.txt", metrics
    for enforcement in ("log", "reject"):
        lines, metrics = scripted_replay(tmp, enforcement)
        yield f"scripted-{enforcement}-lines.jsonl", "\n".join(lines) + "\n"
        yield f"scripted-{enforcement}-metrics.txt", metrics
    yield "config-documented.yaml", documented_config()
    yield "config-views.txt", config_views()


def main() -> None:
    import tempfile

    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in surfaces(Path(tmp)):
            (SNAPSHOTS / name).write_text(text, encoding="utf-8")
            print(f"{SNAPSHOTS / name}: {len(text.splitlines())} lines")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
