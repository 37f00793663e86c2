"""Consumer, committed and follower lag and topic traffic (proxy/observe/lag/tracker.py,
series.py, traffic.py), driven through the observing hooks with real frames: the
whole-frame and the streamed (codec/stream.py) paths, log fields, /metrics series,
caps, expiry and the 100,000-partition cardinality bound."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.hooks_harness import Harness, labels
from support.records_oracle import build_v2

from codec import Request, Response, encode_request, encode_response
from proxy.hooks import Pending
from proxy.metrics import Metrics
from proxy.observe.identity import kafka_uuid_text
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.feature import lag_link
from proxy.observe.lag.hooks import LagLink
from proxy.observe.lag.tracker import FetchAsk
from proxy.observe.summary import SummaryOptions, TopicIds

TOPIC_ID = uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100")


def fetch_request(
    partitions: dict[int, int], version: int = 11, topic: str = "orders", replica: int = -1, isolation: int = 0
) -> tuple[int, int, dict[str, Any]]:
    name_key: dict[str, Any] = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": topic}
    body: dict[str, Any] = {
        "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{**name_key, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}
            for p, offset in partitions.items()]}],
    }  # fmt: skip
    if version >= 15:
        body["replica_state"] = {"replica_id": replica, "replica_epoch": -1}
    else:
        body["replica_id"] = replica
    return (1, version, body)


def fetch_response(
    partitions: dict[int, tuple[int, int, bytes | None]], version: int = 11, topic: str = "orders",
    error: int = 0,
) -> dict[str, Any]:
    """partition -> (high watermark, last stable offset, records)."""
    name_key: dict[str, Any] = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": topic}
    return {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 0,
        "responses": [{**name_key, "partitions": [
            {"partition_index": p, "error_code": error, "high_watermark": high, "last_stable_offset": stable,
             "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1, "records": records}
            for p, (high, stable, records) in partitions.items()]}],
    }  # fmt: skip


def records(base_offset: int, count: int) -> bytes:
    return build_v2([(1000, b"k", b"v" * 20, [])] * count, base_offset=base_offset)


def join_group(group: str) -> tuple[int, int, dict[str, Any]]:
    return (12, 4, {"group_id": group, "generation_id": 1, "member_id": "m-1", "group_instance_id": None})


def commit(group: str, offsets: dict[int, int], topic: str = "orders") -> tuple[int, int, dict[str, Any]]:
    return (8, 8, {
        "group_id": group, "generation_id_or_member_epoch": 1, "member_id": "m-1", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
            for p, o in offsets.items()]}],
    })  # fmt: skip


def commit_answer(partitions: list[int], error: int = 0, topic: str = "orders") -> dict[str, Any]:
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "error_code": error} for p in partitions]}]}


HEARTBEAT_OK = {"throttle_time_ms": 0, "error_code": 0}


def test_positions_and_lag_from_a_fetch_whole_and_streamed(tmp_path: Path) -> None:
    for pieces in (0, 7):  # whole frame; streamed past in 7-byte pieces
        h = Harness(tmp_path / str(pieces))
        h.exchange(
            fetch_request({0: 10, 1: 5, 2: 0}),
            # partition 2 answered with an error: no position
            {**fetch_response({0: (20, 18, records(10, 3)), 1: (5, 5, None)}),},
            pieces=pieces,
        )
        h.exchange(fetch_request({2: 0}), fetch_response({2: (9, 9, None)}, error=6), pieces=pieces)
        first, errored = h.lines("Fetch")
        assert first["isolation_level"] == 0 and "replica_id" not in first and "consumer_group" not in first
        assert first["positions"] == [
            {"topic": "orders", "partition": 0, "fetch_offset": 10, "next_offset": 13, "high_watermark": 20,
             "last_stable_offset": 18, "log_start_offset": 0, "lag": 7},
            {"topic": "orders", "partition": 1, "fetch_offset": 5, "next_offset": 5, "high_watermark": 5,
             "last_stable_offset": 5, "log_start_offset": 0, "lag": 0},
        ], pieces  # fmt: skip
        assert "positions" not in errored
        lag = h.samples("kafkalens_consumer_lag_records")
        assert lag == {
            labels(group="", client="app-1", topic="orders", partition="0"): 7,
            labels(group="", client="app-1", topic="orders", partition="1"): 0,
        }
        assert h.samples("kafkalens_consumer_topic_lag_records") == {labels(group="", topic="orders"): 7}


def test_read_committed_lag_is_to_the_last_stable_offset(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.exchange(fetch_request({0: 10}, isolation=1), fetch_response({0: (30, 12, records(10, 2))}))
    (line,) = h.lines("Fetch")
    assert line["isolation_level"] == 1 and line["positions"][0]["lag"] == 0
    h.exchange(fetch_request({0: 12}, isolation=1), fetch_response({0: (30, 25, None)}))
    assert h.lines("Fetch")[1]["positions"][0]["lag"] == 13  # 25 - 12, not 30 - 12


def test_topic_ids_are_named_from_metadata_answers(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.hooks.topic_ids.learn({"topics": [{"topic_id": TOPIC_ID, "name": "orders"}]})
    h.exchange(fetch_request({0: 4}, version=13), fetch_response({0: (6, 6, None)}, version=13))
    assert h.lines("Fetch")[0]["positions"][0]["topic"] == "orders"
    assert h.samples("kafkalens_consumer_lag_records") == {
        labels(group="", client="app-1", topic="orders", partition="0"): 2}


def test_incremental_fetch_session_partitions_keep_their_position(tmp_path: Path) -> None:
    # KIP-227: a partition whose fetch offset did not change is left out of the request,
    # but its answer comes when there is news (records, a moved high watermark).
    h = Harness(tmp_path)
    h.exchange(fetch_request({0: 3, 1: 7}), fetch_response({0: (3, 3, None), 1: (7, 7, None)}))
    h.exchange(fetch_request({}), fetch_response({0: (8, 8, records(3, 5)), 1: (9, 9, None)}))
    second = h.lines("Fetch")[1]["positions"]
    assert [(p["partition"], p["fetch_offset"], p["next_offset"], p["lag"]) for p in second] == [
        (0, 3, 8, 0), (1, 7, 7, 2)]


def test_group_is_joined_from_membership_on_another_connection(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.exchange(join_group("billing"), HEARTBEAT_OK, conn="coordinator")
    h.exchange(fetch_request({0: 1}), fetch_response({0: (4, 4, None)}), conn="leader")
    # another client id on the same host is not in the group
    h.exchange(fetch_request({0: 1}), fetch_response({0: (4, 4, None)}), conn="other", client_id="app-2")
    ours, theirs = h.lines("Fetch")
    assert ours["consumer_group"] == "billing" and "consumer_group" not in theirs
    assert h.samples("kafkalens_consumer_lag_records") == {
        labels(group="billing", client="app-1", topic="orders", partition="0"): 3,
        labels(group="", client="app-2", topic="orders", partition="0"): 3,
    }


def telemetry_answer(instance: uuid.UUID) -> dict[str, Any]:
    """A broker's GetTelemetrySubscriptions answer naming the client's instance id."""
    return {
        "throttle_time_ms": 0, "error_code": 0, "client_instance_id": instance, "subscription_id": 1,
        "accepted_compression_types": [0], "push_interval_ms": 30000, "telemetry_max_bytes": 1 << 20,
        "delta_temporality": True, "requested_metrics": [],
    }  # fmt: skip


def test_a_connections_next_fetch_sees_what_others_taught_since(tmp_path: Path) -> None:
    """What a connection's Fetch requests are read against is kept while nothing changes
    (LagConnState.fetcher, TopicIds.clean_name): a group joined, a topic id named and an
    instance id learnt on other connections since are in its next Fetch all the same."""
    h = Harness(tmp_path)
    h.exchange(fetch_request({0: 1}, version=13), fetch_response({0: (4, 4, None)}, version=13), conn="fetcher")
    h.exchange(join_group("billing"), HEARTBEAT_OK, conn="coordinator")
    h.hooks.topic_ids.learn({"topics": [{"topic_id": TOPIC_ID, "name": "orders"}]})
    h.exchange(fetch_request({0: 2}, version=13), fetch_response({0: (4, 4, None)}, version=13), conn="fetcher")
    instance = uuid.UUID("11111111-2222-4333-8444-555555555555")
    h.exchange((71, 0, {"client_instance_id": uuid.UUID(int=0)}), telemetry_answer(instance), conn="telemetry")
    h.exchange(fetch_request({0: 3}, version=13), fetch_response({0: (4, 4, None)}, version=13), conn="fetcher")
    before, joined, known = h.lines("Fetch")
    assert "consumer_group" not in before and before["positions"][0]["topic"] == str(TOPIC_ID)
    assert joined["consumer_group"] == "billing" and joined["positions"][0]["topic"] == "orders"
    assert known["consumer_group"] == "billing"
    assert h.samples("kafkalens_consumer_lag_records") == {
        # (the group's entry under its client id is superseded by the one under its instance id)
        labels(group="billing", client=kafka_uuid_text(instance), topic="orders", partition="0"): 1,
        labels(group="", client="app-1", topic=str(TOPIC_ID), partition="0"): 3,
    }


def test_follower_fetches_are_replication_not_consumers(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.hooks.topic_ids.learn({"topics": [{"topic_id": TOPIC_ID, "name": "orders"}]})
    h.exchange(fetch_request({0: 10}, replica=2), fetch_response({0: (15, 15, records(10, 1))}))
    h.exchange(fetch_request({1: 0}, version=15, replica=3), fetch_response({1: (4, 4, None)}, version=15))
    old, new = h.lines("Fetch")
    assert old["replica_id"] == 2 and new["replica_id"] == 3
    assert h.samples("kafkalens_consumer_lag_records") == {}
    assert h.samples("kafkalens_consumer_topic_lag_records") == {}
    assert h.samples("kafkalens_follower_lag_records") == {
        labels(replica="2", topic="orders", partition="0"): 4,
        labels(replica="3", topic="orders", partition="1"): 4,
    }
    # replication is not topic traffic either
    assert h.samples("kafkalens_topic_records_total") == {}


def test_committed_lag_against_the_last_high_watermark_seen(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.exchange(fetch_request({0: 0}), fetch_response({0: (50, 50, None)}))
    h.exchange(commit("billing", {0: 20, 1: 5}), commit_answer([0, 1]))
    (line,) = h.lines("OffsetCommit")
    assert line["group_id"] == "billing"
    assert line["committed"] == [
        {"topic": "orders", "partition": 0, "offset": 20, "high_watermark": 50, "lag": 30},
        {"topic": "orders", "partition": 1, "offset": 5, "high_watermark": None, "lag": None},
    ]
    # a partition without a high watermark seen has no committed series yet
    assert h.samples("kafkalens_committed_lag_records") == {labels(group="billing", topic="orders", partition="0"): 30}
    h.exchange(fetch_request({0: 20}), fetch_response({0: (70, 70, None)}))
    assert h.samples("kafkalens_committed_lag_records") == {labels(group="billing", topic="orders", partition="0"): 50}
    # a refused commit moves nothing
    h.exchange(commit("billing", {0: 60}), commit_answer([0], error=25))
    assert h.samples("kafkalens_committed_lag_records") == {labels(group="billing", topic="orders", partition="0"): 50}


def test_the_same_commit_again_reads_the_watermarks_of_now(tmp_path: Path) -> None:
    """A member committing the same offsets again and again (memoised request and answer:
    the lag link's answer made once while no watermark moves, LagTracker.commit_answer):
    each line and series is as if read anew, a Fetch or a watermark's expiry between two
    commits seen by the next, the committed entry's time moved by each."""
    h = Harness(tmp_path)
    h.exchange(fetch_request({0: 0}), fetch_response({0: (50, 50, None)}))
    for _ in range(4):  # memoised, then the same answer made once
        h.exchange(commit("billing", {0: 20}), commit_answer([0]))
    lag = h.hooks.link(LagLink)
    assert lag is not None
    entry = lag.lag.committed[("billing", "orders", 0)]
    seen = entry.seen
    h.exchange(commit("billing", {0: 20}), commit_answer([0]))
    assert entry.seen > seen
    h.exchange(fetch_request({0: 20}), fetch_response({0: (70, 70, None)}))
    h.exchange(commit("billing", {0: 20}), commit_answer([0]))
    lag.lag.expire(time.monotonic() + lag.lag.options.idle_expiry_seconds + 1)
    h.exchange(commit("billing", {0: 20}), commit_answer([0]))
    h.exchange(commit("billing", {0: 20}), commit_answer([0]))
    lines = h.lines("OffsetCommit")
    assert [line["committed"][0]["high_watermark"] for line in lines] == [50] * 5 + [70] + [None] * 2
    assert [line["committed"][0]["lag"] for line in lines] == [30] * 5 + [50] + [None] * 2


def test_a_commit_naming_topics_by_id_is_named_from_metadata_answers(tmp_path: Path) -> None:
    """OffsetCommit v10 (KIP-848, what Kafka 4.4's consumer sends) has topic ids, no names."""
    h = Harness(tmp_path)
    h.hooks.topic_ids.learn({"topics": [{"topic_id": TOPIC_ID, "name": "orders"}]})
    h.exchange(fetch_request({0: 0}, version=17), fetch_response({0: (50, 50, None)}, version=17))
    api, _, body = commit("billing", {0: 20})
    body["topics"] = [{"topic_id": TOPIC_ID, "partitions": body["topics"][0]["partitions"]}]
    answer = {"throttle_time_ms": 0, "topics": [{"topic_id": TOPIC_ID, "partitions": [
        {"partition_index": 0, "error_code": 0}]}]}  # fmt: skip
    h.exchange((api, 10, body), answer)
    (line,) = h.lines("OffsetCommit")
    assert line["topics"] == ["orders"]
    assert line["committed"] == [{"topic": "orders", "partition": 0, "offset": 20, "high_watermark": 50, "lag": 30}]
    assert h.samples("kafkalens_committed_lag_records") == {labels(group="billing", topic="orders", partition="0"): 30}


def test_topic_traffic_by_direction_software_and_principal(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    batch = records(0, 4)
    produce = (0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                      "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": batch}]}]})
    h.exchange(produce, {"responses": [], "throttle_time_ms": 0})
    h.exchange(fetch_request({0: 0}), fetch_response({0: (4, 4, batch)}))
    h.exchange(fetch_request({0: 0}), fetch_response({0: (4, 4, batch)}))
    records_total = h.samples("kafkalens_topic_records_total")
    bytes_total = h.samples("kafkalens_topic_bytes_total")
    common = {"topic": "orders", "software": "unknown/unknown", "principal": "unknown"}
    assert records_total == {labels(direction="produce", **common): 4, labels(direction="fetch", **common): 8}
    assert bytes_total == {labels(direction="produce", **common): len(batch),
                           labels(direction="fetch", **common): 2 * len(batch)}


def test_caps_fold_into_other_and_the_topic_sum_stays_whole(tmp_path: Path) -> None:
    h = Harness(tmp_path, LagConfig(max_partitions=2, max_logged_partitions=1))
    h.exchange(fetch_request({0: 0, 1: 0, 2: 0}), fetch_response({0: (5, 5, None), 1: (6, 6, None), 2: (7, 7, None)}))
    (line,) = h.lines("Fetch")
    assert len(line["positions"]) == 1 and line["positions_dropped"] == 2
    h.exchange(commit("billing", {0: 1, 1: 1}), commit_answer([0, 1]))
    (line,) = h.lines("OffsetCommit")
    assert len(line["committed"]) == 1 and line["committed_dropped"] == 1
    truncated = h.samples("kafkalens_log_lists_truncated_total")
    assert {k: v for k, v in truncated.items() if v} == {labels(field="positions"): 1, labels(field="committed"): 1}
    lag = h.samples("kafkalens_consumer_lag_records")
    assert lag == {
        labels(group="", client="app-1", topic="orders", partition="0"): 5,
        labels(group="", client="app-1", topic="orders", partition="1"): 6,
        labels(group="other", client="other", topic="other", partition="other"): 7,
    }
    assert h.samples("kafkalens_consumer_topic_lag_records") == {labels(group="", topic="orders"): 18}
    dropped = h.samples("kafkalens_lag_series_dropped_total")
    h.metrics.render()  # a second publication does not count the same partition again
    assert dropped[labels(kind="consumer")] == 1
    assert h.samples("kafkalens_lag_series_dropped_total")[labels(kind="consumer")] == 1


def test_series_of_consumers_that_left_expire(tmp_path: Path) -> None:
    h = Harness(tmp_path, LagConfig(idle_expiry_seconds=0.2))
    h.exchange(fetch_request({0: 0}), fetch_response({0: (5, 5, None)}))
    assert h.samples("kafkalens_consumer_lag_records")
    time.sleep(0.3)
    assert h.samples("kafkalens_consumer_lag_records") == {}
    assert h.samples("kafkalens_consumer_topic_lag_records") == {}
    link = h.hooks.link(LagLink)
    assert link is not None and not link.lag.consumers


def test_tracked_entries_are_bounded_and_counted(tmp_path: Path) -> None:
    h = Harness(tmp_path, LagConfig(max_tracked=2))
    h.exchange(fetch_request({0: 0, 1: 0, 2: 0}), fetch_response({0: (1, 1, None), 1: (1, 1, None), 2: (1, 1, None)}))
    link = h.hooks.link(LagLink)
    assert link is not None and len(link.lag.consumers) == 2
    # the third partition's position, and its high watermark (a table of its own)
    assert h.samples("kafkalens_lag_series_dropped_total")[labels(kind="tracked")] == 2


def test_disabled_adds_no_fields_and_no_series(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    h.exchange(fetch_request({0: 0}), fetch_response({0: (5, 5, records(0, 2))}))
    (line,) = h.lines("Fetch")
    assert not {"positions", "isolation_level"} & line.keys()
    assert h.samples("kafkalens_consumer_lag_records") == {}
    assert h.samples("kafkalens_topic_records_total") == {}


# 10,000 topics of 10 partitions, each fetched once, with the default caps: /metrics
# stays under this size and renders (tracker publication included) within this time on
# the shared 2-core test machine (measured: 1.14 MB, 0.3-0.8 s; bench/RELIABILITY.md).
CARDINALITY_MAX_BYTES = 3_000_000
CARDINALITY_MAX_SECONDS = 5.0


@pytest.mark.slow
def test_100k_partitions_keep_metrics_within_bounds() -> None:
    metrics = Metrics()
    lag = lag_link(LagConfig(), metrics, TopicIds(), SummaryOptions()).lag
    for t in range(10_000):
        ask = FetchAsk(f"client-{t % 50}", f"group-{t % 20}", -1, 0)
        ask.offsets = {(f"topic-{t}", p): 0 for p in range(10)}
        body = {"responses": [{"topic": f"topic-{t}", "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 100 + p, "last_stable_offset": -1}
            for p in range(10)]}]}  # fmt: skip
        lag.fetch_done(ask, body, {}, {})
    assert len(lag.consumers) == 100_000
    started = time.perf_counter()
    text = metrics.render()
    took = time.perf_counter() - started
    assert len(text) < CARDINALITY_MAX_BYTES and took < CARDINALITY_MAX_SECONDS, (len(text), took)
    lines = text.decode().splitlines()
    per_partition = [line for line in lines if line.startswith("kafkalens_consumer_lag_records{")]
    per_topic = [line for line in lines if line.startswith("kafkalens_consumer_topic_lag_records{")]
    assert len(per_partition) == LagConfig().max_partitions + 1  # and one "other"
    assert len(per_topic) == LagConfig().max_topics + 1
    # every partition's lag is in the per-topic sums, capped or not
    total = sum(float(line.rsplit(" ", 1)[1]) for line in per_topic)
    assert total == sum(100 + p for p in range(10)) * 10_000


def test_lag_config_keys_are_validated() -> None:
    from proxy.config import ConfigError
    from proxy.features import parse_config

    config = parse_config({"lag": {"enabled": False, "max_partitions": 5, "idle_expiry_seconds": 60}})
    assert config.lag == dataclasses.replace(LagConfig(), enabled=False, max_partitions=5, idle_expiry_seconds=60.0)
    for bad in ({"max_topics": 0}, {"max_partitions": 10**9}, {"idle_expiry_seconds": -1}, {"typo": 1}):
        try:
            parse_config({"lag": bad})
        except ConfigError:
            continue
        raise AssertionError(bad)


def test_a_kip714_instance_id_learnt_on_one_connection_labels_the_clients_others(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    instance = uuid.UUID("11111111-2222-4333-8444-555555555555")
    h.exchange((71, 0, {"client_instance_id": uuid.UUID(int=0)}), telemetry_answer(instance), conn="first")
    h.exchange(fetch_request({0: 1}), fetch_response({0: (3, 3, None)}), conn="second")
    # another host's client of the same client id is another client
    h.conn("elsewhere", host="10.9.9.9")
    h.exchange(fetch_request({1: 1}), fetch_response({1: (3, 3, None)}), conn="elsewhere")
    assert h.samples("kafkalens_consumer_lag_records") == {
        labels(group="", client=kafka_uuid_text(instance), topic="orders", partition="0"): 2,
        labels(group="", client="app-1", topic="orders", partition="1"): 2,
    }


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_readme_access_map_recipe(tmp_path: Path) -> None:
    from support.readme import recipe

    per_topic = {"batches": 1, "records": 1, "bytes": 70}
    lines = [
        {"event": "request", "api": "Produce", "client_id": "p", "client_instance_id": None,
         "record_stats": {"per_topic": {"orders": per_topic}}},
        {"event": "request", "api": "Fetch", "client_id": "c", "client_instance_id": "i-1",
         "record_stats": {"per_topic": {"orders": per_topic, "audit": per_topic}}},
        {"event": "request", "api": "Fetch", "client_id": "c", "client_instance_id": "i-1"},  # nothing returned
        {"event": "request", "api": "Metadata", "client_id": "m", "topics": ["orders"]},
    ]  # fmt: skip
    (tmp_path / "requests.log").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = subprocess.run(
        ["bash", "-c", recipe("topic access map")], cwd=tmp_path, capture_output=True, text=True, check=True,
        timeout=30,
    ).stdout  # fmt: skip
    assert out.splitlines() == ["audit i-1 Fetch", "orders i-1 Fetch", "orders p Produce"]


def test_record_stats_next_offset_is_past_the_last_whole_batch() -> None:
    from support.records_oracle import build_legacy

    from codec.records import summarize

    spec = [(1000, b"k", b"v", [])]
    assert summarize(records(10, 3) + records(13, 2)).next_offset == 15
    # a partial batch at the end (as a Fetch answer may cut one) does not count
    assert summarize(records(10, 3) + records(13, 2)[:-5], allow_partial_tail=True).next_offset == 13
    # a compressed legacy wrapper's offset is its last inner record's
    assert summarize(build_legacy(spec * 4, magic=1, compression="gzip", base_offset=20)).next_offset == 24
    assert summarize(build_legacy(spec * 4, magic=0, base_offset=20)).next_offset == 24
    assert summarize(b"").next_offset == -1


def test_lag_series_are_published_in_the_rendering_thread_not_the_loop(tmp_path: Path) -> None:
    # 100,000 tracked partitions take a few hundred ms to publish: never on the event loop
    import asyncio
    import threading

    h = Harness(tmp_path)
    h.exchange(fetch_request({0: 0}), fetch_response({0: (5, 5, None)}))
    (publish,) = h.metrics.collectors
    threads: list[int] = []

    def recorded() -> None:
        threads.append(threading.get_ident())
        publish()

    h.metrics.collectors[0] = recorded

    async def scrape() -> tuple[bytes, int]:
        h.metrics.flush()  # what the loop does for every scrape and worker tick
        assert threads == []
        return await h.metrics.render_off_loop(), threading.get_ident()

    text, loop_thread = asyncio.run(scrape())
    assert threads and loop_thread not in threads
    assert b'kafkalens_consumer_lag_records{client="app-1",group="",partition="0",topic="orders"} 5.0' in text


def produce(count: int, acks: int = -1, partition: int = 0, version: int = 9) -> tuple[int, int, dict[str, Any]]:
    topic: dict[str, Any] = {"topic_id": TOPIC_ID} if version >= 13 else {"name": "orders"}
    return (0, version, {"transactional_id": None, "acks": acks, "timeout_ms": 1000, "topic_data": [
        {**topic, "partition_data": [{"index": partition, "records": records(0, count)}]}]})


def produced(base_offset: int, error: int = 0, partition: int = 0, version: int = 9) -> dict[str, Any]:
    topic: dict[str, Any] = {"topic_id": TOPIC_ID} if version >= 13 else {"name": "orders"}
    return {"throttle_time_ms": 0, "responses": [{**topic, "partition_responses": [
        {"index": partition, "error_code": error, "base_offset": base_offset, "log_append_time_ms": -1,
         "log_start_offset": 0, "record_errors": [], "error_message": None}]}]}  # fmt: skip


@pytest.mark.parametrize(("version", "pieces"), [(9, 0), (9, 7), (13, 0), (13, 7)])
def test_produce_answers_read_whole_streamed_and_by_topic_id(tmp_path: Path, version: int, pieces: int) -> None:
    """A Produce answer's partitions' ends, picked in its skim (codec.skim.Picks)
    or read from it decoded as it streamed past; from v13 its topics are named by id (from
    Metadata answers). Its line says its errors either way."""
    h = Harness(tmp_path)
    h.hooks.topic_ids.learn({"topics": [{"topic_id": TOPIC_ID, "name": "orders"}]})
    h.exchange(fetch_request({0: 10}), fetch_response({0: (10, 10, None)}))
    consumer = labels(group="", client="app-1", topic="orders", partition="0")
    assert h.samples("kafkalens_consumer_lag_records") == {consumer: 0}
    producer = {"conn": "producer", "client_id": "orders-app", "pieces": pieces}
    h.exchange(produce(5, version=version), produced(10, version=version), **producer)
    assert h.samples("kafkalens_consumer_lag_records") == {consumer: 5}
    h.exchange(produce(9, version=version), produced(-1, error=3, version=version), **producer)
    h.exchange(produce(9, version=version, partition=1), produced(0, partition=1, version=version), **producer)
    assert h.samples("kafkalens_consumer_lag_records") == {consumer: 5}
    assert [line["errors"] for line in h.lines("Produce")] == [[], ["UNKNOWN_TOPIC_OR_PARTITION"], []]


def test_an_unreadable_produce_answer_moves_no_end(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.exchange(fetch_request({0: 10}), fetch_response({0: (10, 10, None)}))
    api_key, version, body = produce(5)
    request = Request(api_key, version, {"correlation_id": 99, "client_id": "orders-app"}, body)
    frame = encode_request(request)
    pending = Pending(99, api_key, version, time.perf_counter(), len(frame) + 4)
    h.hooks.request_forwarded(h.info, memoryview(frame), pending)
    answer = encode_response(Response(api_key, version, {"correlation_id": 99}, produced(10)))
    h.hooks.response_forwarded(h.info, memoryview(answer[:-5]), pending)
    assert h.samples("kafkalens_consumer_lag_records") == {labels(group="", client="app-1", topic="orders", partition="0"): 0}
    (line,) = h.lines("Produce")
    assert "response_decode_error" in line and line["errors"] == []


def test_a_consumer_that_stops_fetching_falls_behind_what_producers_append(tmp_path: Path) -> None:
    """The broker's lag (its end offset minus the position) grows while a consumer does
    not fetch and producers go on: so does kafkalens's, from the Produce answers."""
    h = Harness(tmp_path)
    h.exchange(join_group("billing"), HEARTBEAT_OK)
    h.exchange(fetch_request({0: 10}), fetch_response({0: (10, 10, None)}))
    h.exchange(commit("billing", {0: 10}), commit_answer([0]))
    consumer = labels(group="billing", client="app-1", topic="orders", partition="0")
    assert h.samples("kafkalens_consumer_lag_records") == {consumer: 0}
    h.exchange(produce(5), produced(10), conn="producer", client_id="orders-app")
    h.exchange(produce(7), produced(15), conn="producer", client_id="orders-app")
    assert h.samples("kafkalens_consumer_lag_records") == {consumer: 12}  # appended up to 22
    assert h.samples("kafkalens_consumer_topic_lag_records") == {labels(group="billing", topic="orders"): 12}
    assert h.samples("kafkalens_committed_lag_records") == {labels(group="billing", topic="orders", partition="0"): 12}
    # refused, unanswered (acks=0) or of another partition: nothing appended here
    h.exchange(produce(9), produced(-1, error=3), conn="producer", client_id="orders-app")
    h.exchange(produce(9, acks=0), produced(22), conn="producer", client_id="orders-app")
    h.exchange(produce(9, partition=1), produced(0, partition=1), conn="producer", client_id="orders-app")
    assert h.samples("kafkalens_consumer_lag_records")[consumer] == 12
    # it fetches again: the broker's high watermark is the word
    h.exchange(fetch_request({0: 10}), fetch_response({0: (22, 22, records(10, 12))}))
    assert h.samples("kafkalens_consumer_lag_records")[consumer] == 0


def test_a_partition_moved_to_another_member_counts_once_in_the_group(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    for conn, client in (("a", "app-1"), ("b", "app-2")):
        h.exchange(join_group("billing"), HEARTBEAT_OK, conn=conn, client_id=client)
    h.exchange(fetch_request({0: 5, 1: 0}), fetch_response({0: (10, 10, None), 1: (4, 4, None)}), conn="a", client_id="app-1")
    assert h.samples("kafkalens_consumer_topic_lag_records") == {labels(group="billing", topic="orders"): 9}
    # a rebalance gives partition 0 to app-2, which fetches it
    h.exchange(fetch_request({0: 8}), fetch_response({0: (10, 10, None)}), conn="b", client_id="app-2")
    assert h.samples("kafkalens_consumer_lag_records") == {
        labels(group="billing", client="app-1", topic="orders", partition="1"): 4,
        labels(group="billing", client="app-2", topic="orders", partition="0"): 2,
    }
    assert h.samples("kafkalens_consumer_topic_lag_records") == {labels(group="billing", topic="orders"): 6}
