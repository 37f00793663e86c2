"""Absent tagged structs decode to one shared read-only default (codec/absent.py)."""

from __future__ import annotations

import copy
import pickle
from uuid import UUID

import pytest

from codec import ApiKey, Response, decode_response, encode_response
from codec.absent import ReadOnlyDict, shared_default
from codec.schema import message

FETCH = ApiKey.FETCH
CURRENT_LEADER_TAG = 1
TOPIC_ID = UUID(int=42)


def fetch_response(version: int, partitions: int, leader: dict | None = None) -> bytes:
    """A Fetch response frame; `leader` puts current_leader on the wire for partition 0."""
    parts = []
    for index in range(partitions):
        part = {"partition_index": index, "high_watermark": 10, "records": b""}
        if leader is not None and index == 0:
            part["current_leader"] = leader
            part["_explicit_tags"] = [CURRENT_LEADER_TAG]  # written even when default
        parts.append(part)
    body = {"responses": [{"topic_id": TOPIC_ID, "topic": "t", "partitions": parts}]}
    return encode_response(Response(FETCH, version, {"correlation_id": 7}, body))


def partitions_of(response: Response) -> list[dict]:
    return response.body["responses"][0]["partitions"]


@pytest.mark.parametrize("version", [12, 17])
def test_absent_tagged_structs_share_one_read_only_default(version: int) -> None:
    first, second = (decode_response(fetch_response(version, 3), FETCH, version) for _ in range(2))
    leaders = [p["current_leader"] for p in partitions_of(first) + partitions_of(second)]
    assert all(leader is leaders[0] for leader in leaders)
    assert leaders[0] == {"leader_id": -1, "leader_epoch": -1}
    with pytest.raises(TypeError):
        leaders[0]["leader_id"] = 3
    with pytest.raises(TypeError):
        leaders[0].update(leader_id=3)
    assert leaders[0]["leader_id"] == -1


def test_a_struct_on_the_wire_is_a_plain_dict_of_its_own() -> None:
    # Even one that holds exactly the default values (it is written back, byte-exactly).
    for leader in ({"leader_id": 2, "leader_epoch": 5}, {"leader_id": -1, "leader_epoch": -1}):
        frame = fetch_response(12, 2, leader)
        decoded = decode_response(frame, FETCH, 12)
        sent, absent = (p["current_leader"] for p in partitions_of(decoded))
        assert type(sent) is dict and sent == leader
        assert isinstance(absent, ReadOnlyDict)
        sent["leader_id"] = 9  # an ordinary dict
        assert encode_response(decode_response(frame, FETCH, 12)) == frame


def test_replacing_the_default_is_how_a_field_changes() -> None:
    decoded = decode_response(fetch_response(12, 1), FETCH, 12)
    partitions_of(decoded)[0]["current_leader"] = {"leader_id": 4, "leader_epoch": 1}
    again = decode_response(encode_response(decoded), FETCH, 12)
    assert partitions_of(again)[0]["current_leader"] == {"leader_id": 4, "leader_epoch": 1}
    fresh = decode_response(fetch_response(12, 1), FETCH, 12)
    assert partitions_of(fresh)[0]["current_leader"] == {"leader_id": -1, "leader_epoch": -1}


def test_copies_and_pickles_keep_the_values() -> None:
    default = ReadOnlyDict({"epoch": -1, "end_offset": -1})
    for clone in (copy.copy(default), copy.deepcopy(default), pickle.loads(pickle.dumps(default))):
        assert clone == default and isinstance(clone, ReadOnlyDict)
    writable = default.copy()
    writable["epoch"] = 3
    assert type(writable) is dict and default["epoch"] == -1


def test_only_tagged_structs_of_immutable_defaults_are_shared() -> None:
    fields = {f.name: f for f in message("FetchResponse").versions[12].fields}
    assert shared_default(fields["node_endpoints"]) is None  # a tagged array: fresh list
    assert shared_default(fields["responses"]) is None  # not tagged
    partition = next(f for f in fields["responses"].children or () if f.name == "partitions")
    kids = {f.name: f for f in partition.children or ()}
    assert shared_default(kids["snapshot_id"]) == {"end_offset": -1, "epoch": -1}
