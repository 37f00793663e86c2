"""Share groups (KIP-932) and group heartbeats as the observing hooks read them
(proxy/observe/lag/share.py), with real frames, whole and streamed past: the line's
acknowledgements and acquired records, the share counters, what is not counted
(malformed batches, acknowledgements the broker refused), the caps, and a cost linear
in what a frame holds."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.hooks_harness import Harness, labels
from support.readme import recipe

from codec import ApiKey
from proxy.observe.lag.config import LagConfig

TOPIC_ID = uuid.UUID("5a5a5a5a-0b0a-4908-8706-050403020100")
OTHER_ID = uuid.UUID("6b6b6b6b-0b0a-4908-8706-050403020100")
GROUP = "billing"
ACCEPT, RELEASE, REJECT, GAP, RENEW = 1, 2, 3, 0, 4
INVALID_RECORD_STATE = 121
DELIVERED = "kafkalens_share_records_delivered_total"
REDELIVERED = "kafkalens_share_records_redelivered_total"
ACKED = "kafkalens_share_records_acknowledged_total"
INVALID = "kafkalens_share_ranges_invalid_total"
TRUNCATED = "kafkalens_log_lists_truncated_total"


def harness(tmp_path: Path, **lag: Any) -> Harness:
    h = Harness(tmp_path, LagConfig(**lag))
    h.hooks.topic_ids.names[TOPIC_ID] = "orders"  # as a Metadata answer teaches it
    h.hooks.topic_ids.names[OTHER_ID] = "audit"
    return h


Batches = list[tuple[int, int, list[int]]]


def share_fetch(acks: dict[int, Batches], version: int = 2, topic: uuid.UUID = TOPIC_ID) -> tuple[int, int, dict[str, Any]]:
    """partition -> acknowledgement batches (first, last, types)."""
    body = {
        "group_id": GROUP, "member_id": "m-1", "share_session_epoch": 3, "max_wait_ms": 500,
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
        "topics": [{"topic_id": topic, "partitions": [
            {"partition_index": p, "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": types} for f, last, types in batches]}
            for p, batches in acks.items()]}],
        "forgotten_topics_data": [],
    }  # fmt: skip
    return (78, version, body)


def share_acknowledge(acks: dict[int, Batches], version: int = 2) -> tuple[int, int, dict[str, Any]]:
    _, _, body = share_fetch(acks)
    return (79, version, {k: body[k] for k in ("group_id", "member_id", "share_session_epoch", "topics")})


def fetch_answer(
    acquired: dict[int, list[tuple[int, int, int]]], ack_errors: dict[int, int] | None = None,
    errors: dict[int, int] | None = None, top_error: int = 0, topic: uuid.UUID = TOPIC_ID,
) -> dict[str, Any]:
    """partition -> acquired ranges (first, last, delivery count); acknowledge and
    fetch error codes by partition."""
    ack_errors, errors = ack_errors or {}, errors or {}
    partitions = sorted({*acquired, *ack_errors, *errors})
    return {
        "throttle_time_ms": 0, "error_code": top_error, "acquisition_lock_timeout_ms": 30000,
        "responses": [{"topic_id": topic, "partitions": [
            {"partition_index": p, "error_code": errors.get(p, 0), "acknowledge_error_code": ack_errors.get(p, 0),
             "current_leader": {"leader_id": 1, "leader_epoch": 0}, "records": b"",
             "acquired_records": [{"first_offset": f, "last_offset": last, "delivery_count": d}
                                  for f, last, d in acquired.get(p, [])]}
            for p in partitions]}],
        "node_endpoints": [],
    }  # fmt: skip


def acknowledge_answer(errors: dict[int, int], top_error: int = 0) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0, "error_code": top_error,
        "responses": [{"topic_id": TOPIC_ID, "partitions": [
            {"partition_index": p, "error_code": code, "current_leader": {"leader_id": 1, "leader_epoch": 0}}
            for p, code in errors.items()]}],
        "node_endpoints": [],
    }  # fmt: skip


def counted(h: Harness, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of `name` above 0 (its known label values start at 0)."""
    return {labels: value for labels, value in h.samples(name).items() if value}


def acked(h: Harness) -> dict[str, float]:
    return {dict(k)["type"]: v for k, v in h.samples(ACKED).items()}


@pytest.mark.parametrize("pieces", [0, 7])
def test_a_share_fetch_line_and_the_counters(tmp_path: Path, pieces: int) -> None:
    h = harness(tmp_path)
    request = share_fetch({
        0: [(0, 4, [ACCEPT]), (5, 9, [ACCEPT, RELEASE, REJECT, GAP, RENEW])],
        1: [(20, 21, [REJECT])],
    })  # fmt: skip
    request[2]["topics"][0]["partitions"].append({"partition_index": 2, "acknowledgement_batches": []})
    request[2]["forgotten_topics_data"] = [{"topic_id": OTHER_ID, "partitions": [3, 4]}]
    answer = fetch_answer({0: [(10, 14, 1), (15, 15, 3)], 2: [(7, 7, 2)]}, ack_errors={1: 0})
    h.exchange(request, answer, pieces=pieces)
    (line,) = h.lines("ShareFetch")
    assert line["group_id"] == GROUP and line["member_id"] == "m-1" and line["share_session_epoch"] == 3
    assert line["fetch_partitions"] == [{"topic": "orders", "partitions": [0, 1, 2]}]
    assert line["forgotten_partitions"] == [{"topic": "audit", "partitions": [3, 4]}]
    assert line["acknowledgements"] == [
        {"topic": "orders", "partition": 0, "accept": 6, "release": 1, "reject": 1, "renew": 1, "gap": 1,
         "ranges": {"accept": [[0, 4], [5, 5]], "release": [[6, 6]], "reject": [[7, 7]], "gap": [[8, 8]],
                    "renew": [[9, 9]]},
         "confirmed": True, "error": None},
        {"topic": "orders", "partition": 1, "accept": 0, "release": 0, "reject": 2, "renew": 0, "gap": 0,
         "ranges": {"reject": [[20, 21]]}, "confirmed": True, "error": None},
    ]  # fmt: skip
    assert line["acquired"] == [
        {"topic": "orders", "partition": 0, "records": 6, "redelivered": 1, "ranges": [[10, 14, 1], [15, 15, 3]]},
        {"topic": "orders", "partition": 2, "records": 1, "redelivered": 1, "ranges": [[7, 7, 2]]},
    ]
    assert (line["delivered_records"], line["redelivered_records"]) == (7, 2)
    pair = labels(group=GROUP, topic="orders")
    assert h.samples(DELIVERED) == {pair: 7} and h.samples(REDELIVERED) == {pair: 2}
    assert acked(h) == {"accept": 6, "release": 1, "reject": 3, "renew": 1}  # gaps are no records


def test_share_acknowledge_counts_what_the_broker_confirmed(tmp_path: Path) -> None:
    h = harness(tmp_path)
    h.exchange(share_acknowledge({0: [(0, 9, [ACCEPT])], 1: [(0, 4, [RELEASE])], 2: [(0, 0, [REJECT])]}),
               acknowledge_answer({0: 0, 1: INVALID_RECORD_STATE}))  # 2 not answered
    (line,) = h.lines("ShareAcknowledge")
    verdicts = {a["partition"]: (a["confirmed"], a["error"]) for a in line["acknowledgements"]}
    assert verdicts == {0: (True, None), 1: (False, "INVALID_RECORD_STATE"), 2: (False, None)}
    assert "acquired" not in line and "delivered_records" not in line
    assert acked(h) == {"accept": 10}
    # A top-level error: nothing confirmed.
    h.exchange(share_acknowledge({0: [(10, 19, [ACCEPT])]}), acknowledge_answer({0: 0}, top_error=72))
    assert acked(h) == {"accept": 10}
    # A ShareFetch's acknowledgement refused, its fetch answered: records counted, acks not.
    h.exchange(share_fetch({0: [(20, 29, [ACCEPT])]}), fetch_answer({0: [(30, 31, 1)]}, ack_errors={0: INVALID_RECORD_STATE}))
    assert acked(h) == {"accept": 10} and h.samples(DELIVERED) == {labels(group=GROUP, topic="orders"): 2}
    # A partition answered with a fetch error: its acquired records are not delivered.
    h.exchange(share_fetch({}), fetch_answer({0: [(40, 41, 1)]}, errors={0: 6}))
    assert h.samples(DELIVERED) == {labels(group=GROUP, topic="orders"): 2}


MALFORMED: dict[str, Batches] = {
    "overlapping": [(0, 5, [ACCEPT]), (5, 9, [ACCEPT])],
    "out of order": [(10, 19, [ACCEPT]), (0, 9, [ACCEPT])],
    "reversed": [(9, 0, [ACCEPT])],
    "negative": [(-5, 3, [ACCEPT])],
    "absurd length": [(0, 2**62, [ACCEPT])],
    "types length": [(0, 9, [ACCEPT, RELEASE])],
    "unknown type": [(0, 1, [ACCEPT, 9])],
    "unknown single type": [(0, 9, [-1])],
}
REASON = {
    "overlapping": "overlapping", "out of order": "overlapping", "reversed": "reversed",
    "negative": "negative_offset", "absurd length": "too_long", "types length": "types_length",
    "unknown type": "unknown_type", "unknown single type": "unknown_type",
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_acknowledgement_batches_are_named_and_not_counted(tmp_path: Path, case: str) -> None:
    h = harness(tmp_path)
    # The broker (lax, or hostile) confirms everything: kafkalens still counts only the
    # well-formed partition.
    h.exchange(share_fetch({0: MALFORMED[case], 1: [(0, 2, [ACCEPT])]}), fetch_answer({}, ack_errors={0: 0, 1: 0}))
    (line,) = h.lines("ShareFetch")
    first, second = line["acknowledgements"]
    assert first["invalid"] == REASON[case] and "invalid" not in second
    assert (first["accept"], first["ranges"]) == (0, {})  # none of it stands
    assert acked(h) == {"accept": 3}
    assert counted(h, INVALID) == {labels(what="acknowledgement", reason=REASON[case]): 1}


def test_malformed_acquired_ranges_are_named_and_not_counted(tmp_path: Path) -> None:
    h = harness(tmp_path, max_range_offsets=1000)
    answer = fetch_answer({0: [(5, 9, 1), (0, 3, 1)], 1: [(0, 5000, 1)], 2: [(0, 0, 0)], 3: [(0, 1, 1)]})
    h.exchange(share_fetch({}), answer)
    (line,) = h.lines("ShareFetch")
    assert [p.get("invalid") for p in line["acquired"]] == ["overlapping", "too_long", "delivery_count", None]
    assert line["delivered_records"] == 2
    assert counted(h, INVALID) == {
        labels(what="acquired", reason="overlapping"): 1, labels(what="acquired", reason="too_long"): 1,
        labels(what="acquired", reason="delivery_count"): 1,
    }


def test_lists_are_capped_and_what_they_left_out_counted(tmp_path: Path) -> None:
    h = harness(tmp_path, max_logged_partitions=2, max_logged_ranges=3)
    acks = {p: [(0, 3, [ACCEPT, RELEASE, ACCEPT, REJECT])] for p in range(4)}  # 4 runs each
    h.exchange(share_fetch(acks), fetch_answer({p: [(10, 10, 1), (12, 12, 1)] for p in range(3)},
                                               ack_errors=dict.fromkeys(range(4), 0)))
    (line,) = h.lines("ShareFetch")
    assert len(line["acknowledgements"]) == 2 and line["acknowledgements_dropped"] == 2
    assert len(line["acquired"]) == 2 and line["acquired_dropped"] == 1
    logged = sum(len(r) for a in line["acknowledgements"] for r in a["ranges"].values())
    logged += sum(len(a["ranges"]) for a in line["acquired"])
    assert logged == 3 and line["ranges_dropped"] == 4 * 4 + 3 * 2 - 3
    # the counts are whole whatever the caps
    assert line["delivered_records"] == 6 and acked(h) == {"accept": 8, "release": 4, "reject": 4}
    assert line["fetch_partitions"] == [{"topic": "orders", "partitions": [0, 1]}]
    assert (line["fetch_partitions_partitions"], line["fetch_partitions_dropped"]) == (4, 2)
    assert counted(h, TRUNCATED) == {
        labels(field="acknowledgements"): 1, labels(field="acquired"): 1, labels(field="ranges"): 1,
        labels(field="fetch_partitions"): 1,
    }


def test_group_topic_pairs_past_the_cap_are_other(tmp_path: Path) -> None:
    h = harness(tmp_path, max_topics=2)
    for group in ("a", "b", "c"):
        request = share_fetch({})
        request[2]["group_id"] = group
        h.exchange(request, fetch_answer({0: [(0, 9, 1)]}))
    assert h.samples(DELIVERED) == {
        labels(group="a", topic="orders"): 10, labels(group="b", topic="orders"): 10,
        labels(group="other", topic="other"): 10,
    }
    assert h.samples("kafkalens_lag_series_dropped_total")[labels(kind="share")] == 1
    # past lag.max_tracked pairs, what comes is summed under "other" at once
    h = harness(tmp_path / "tracked", max_tracked=1)
    for group in ("a", "b"):
        request = share_fetch({})
        request[2]["group_id"] = group
        h.exchange(request, fetch_answer({0: [(0, 4, 1)]}))
    assert h.samples(DELIVERED) == {labels(group="a", topic="orders"): 5, labels(group="other", topic="other"): 5}
    assert h.samples("kafkalens_lag_series_dropped_total")[labels(kind="tracked")] == 1


def heartbeat_answer(assignment: dict[uuid.UUID, list[int]] | None, api_key: int = 76) -> dict[str, Any]:
    body: dict[str, Any] = {
        "throttle_time_ms": 0, "error_code": 0, "member_id": "m-1", "member_epoch": 2,
        "heartbeat_interval_ms": 5000,
        "assignment": None if assignment is None else {
            "topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in assignment.items()]},
    }  # fmt: skip
    return body


def test_heartbeat_assignments_and_owned_partitions(tmp_path: Path) -> None:
    h = harness(tmp_path, max_logged_partitions=3)
    share_beat = (76, 1, {"group_id": GROUP, "member_id": "m-1", "member_epoch": 1, "rack_id": None,
                          "subscribed_topic_names": ["orders"]})  # fmt: skip
    h.exchange(share_beat, heartbeat_answer({TOPIC_ID: [0, 1], OTHER_ID: [4]}))
    h.exchange(share_beat, heartbeat_answer(None))  # unchanged: no assignment
    first, second = h.lines("ShareGroupHeartbeat")
    assert first["assignment"] == [{"topic": "orders", "partitions": [0, 1]}, {"topic": "audit", "partitions": [4]}]
    assert first["assignment_partitions"] == 3 and "assignment_dropped" not in first
    assert "assignment" not in second
    owned = [{"topic_id": TOPIC_ID, "partitions": list(range(5))}]
    consumer_beat = (68, 1, {"group_id": "classic", "member_id": "m-2", "member_epoch": 3, "instance_id": None,
                             "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": None,
                             "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": owned})  # fmt: skip
    h.exchange(consumer_beat, heartbeat_answer({TOPIC_ID: [0, 1, 2, 3, 4, 5]}, api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT))
    (line,) = h.lines("ConsumerGroupHeartbeat")
    assert line["owned_partitions"] == [{"topic": "orders", "partitions": [0, 1, 2]}]
    assert (line["owned_partitions_partitions"], line["owned_partitions_dropped"]) == (5, 2)
    assert line["assignment"] == [{"topic": "orders", "partitions": [0, 1, 2]}] and line["assignment_dropped"] == 3
    assert counted(h, TRUNCATED) == {labels(field="owned_partitions"): 1, labels(field="assignment"): 1}


# One pass over what a frame holds: 60,000 per-offset types, 20,000 batches and 20,000
# acquired ranges take well under a second here; anything quadratic in them would take
# minutes (20,000^2 = 4e8 steps).
LINEAR_BOUND_SECONDS = 10.0


def test_the_work_is_linear_in_the_frame(tmp_path: Path) -> None:
    h = harness(tmp_path)
    many = [(2 * i, 2 * i, [ACCEPT]) for i in range(20_000)]
    per_offset = [(100_000, 159_999, [ACCEPT, RELEASE, REJECT] * 20_000)]
    request = share_fetch({0: many, 1: per_offset})
    answer = fetch_answer({2: [(3 * i, 3 * i + 1, 1 + i % 3) for i in range(20_000)]}, ack_errors={0: 0, 1: 0})
    started = time.perf_counter()
    h.exchange(request, answer)
    took = time.perf_counter() - started
    (line,) = h.lines("ShareFetch")
    assert took < LINEAR_BOUND_SECONDS, took
    assert acked(h) == {"accept": 40_000, "release": 20_000, "reject": 20_000}
    assert line["delivered_records"] == 40_000
    listed = sum(len(r) for a in line["acknowledgements"] for r in a["ranges"].values())
    listed += sum(len(a["ranges"]) for a in line["acquired"])
    assert listed == LagConfig().max_logged_ranges


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_readme_recipe_for_records_delivered_three_times(tmp_path: Path) -> None:
    h = harness(tmp_path)
    h.exchange(share_fetch({}), fetch_answer({0: [(0, 4, 1), (5, 5, 3)], 1: [(9, 10, 4)]}))
    h.exchange(share_acknowledge({0: [(0, 4, [ACCEPT])]}), acknowledge_answer({0: 0}))
    h.log.flush()
    out = subprocess.run(
        ["bash", "-c", recipe("records delivered three times or more")], cwd=tmp_path,
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    assert [json.loads(line) for line in out.splitlines()] == [
        {"group": GROUP, "topic": "orders", "partition": 0, "offsets": [5, 5], "delivery_count": 3},
        {"group": GROUP, "topic": "orders", "partition": 1, "offsets": [9, 10], "delivery_count": 4},
    ]


def test_the_share_bounds_are_config_keys() -> None:
    from proxy.config import ConfigError
    from proxy.features import parse_config

    lag = parse_config({"lag": {"max_logged_ranges": 0, "max_range_offsets": 5}}).lag
    assert (lag.max_logged_ranges, lag.max_range_offsets) == (0, 5)
    for bad in ({"max_logged_ranges": -1}, {"max_range_offsets": 0}, {"max_range_offsets": 2**31},
                {"max_logged_ranges": 10**7}):
        with pytest.raises(ConfigError):
            parse_config({"lag": bad})
