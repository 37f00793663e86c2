"""codec/layout/: the one description of the wire, lowered from the schema facts.

What the layouts decide is held by what decodes with them (golden frames, round trips,
kio as an oracle, the C interpreter against the Python one); here: that every message
version lowers, that the description says what Kafka's definitions say where it can be
read off them directly, and that `python -m codec.layout` prints it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.paths import REPO

from codec import accel, layout
from codec.kinds import Entity, Framing, Kind
from codec.schema import MESSAGES, Field, message

ALL = [(name, version) for name in sorted(MESSAGES) for version in message(name).versions]


def test_every_message_version_lowers_and_the_c_interpreter_loads_it() -> None:
    for name, version in ALL:
        struct = layout.layout(name, version)
        assert struct.name == name
        if accel.AVAILABLE:
            accel.c_decoder(struct)
    assert len(ALL) > 650  # every request and response version, headers, data messages


def test_produce_v11_request_as_kafka_defines_it() -> None:
    produce = layout.layout("ProduceRequest", 11)
    assert produce.flexible and not produce.tagged
    names = [f.name for f in produce.fields]
    assert names == ["transactional_id", "acks", "timeout_ms", "topic_data"]
    transactional, acks, timeout, topics = produce.fields
    assert (transactional.kind, transactional.framing, transactional.nullable) == (Kind.STRING, Framing.COMPACT, True)
    assert transactional.entity is Entity.TRANSACTIONAL_ID
    # acks and timeout_ms: one check of their 6 bytes and the count of topic_data after
    assert (acks.kind, acks.check, timeout.kind, timeout.check) == (Kind.INT16, 7, Kind.INT32, 0)
    assert topics.kind is Kind.ARRAY and topics.framing is Framing.COMPACT
    topic = topics.element
    assert topic is not None and topic.struct is not None
    assert topic.struct.fields[0].entity is Entity.TOPIC
    partition = topic.struct.fields[1].element
    assert partition is not None and partition.struct is not None
    index, records = partition.struct.fields
    assert (records.kind, records.nullable) == (Kind.RECORDS, True)
    assert partition.struct.min_size == 4 + 1 + 1  # int32, an empty compact records, no tags


def test_classic_versions_frame_lengths_as_int16_and_int32() -> None:
    join = layout.layout("JoinGroupResponse", 5)
    assert not join.flexible
    members = next(f for f in join.fields if f.name == "members")
    assert members.framing is Framing.INT32 and members.min_size == 2 + 2 + 4  # string, nullable string, bytes
    assert [f.framing for f in members.element.struct.fields] == [Framing.INT16, Framing.INT16, Framing.INT32]  # type: ignore[union-attr]


def test_tagged_fields_absent_take_their_default_shared_structs_read_only() -> None:
    partition = layout.layout("FetchResponse", 17).fields[-1].element.struct.fields[-1].element  # type: ignore[union-attr]
    assert partition is not None and partition.struct is not None
    tagged = {f.name: f for f in partition.struct.tagged}
    assert [f.tag for f in partition.struct.tagged] == [0, 1, 2]
    assert tagged["current_leader"].default == {"leader_id": -1, "leader_epoch": -1}
    assert partition.struct.template["current_leader"] is tagged["current_leader"].default
    with pytest.raises(TypeError):
        tagged["current_leader"].default["leader_id"] = 3
    fetch = layout.layout("FetchResponse", 17)
    assert [f.name for f in fetch.fresh] == ["node_endpoints"]  # a list of its own per decode
    assert fetch.template["node_endpoints"] is None


def test_topic_ids_pair_with_the_one_topic_name_beside_them() -> None:
    topics = next(f for f in layout.layout("MetadataResponse", 12).fields if f.name == "topics")
    assert topics.element is not None and topics.element.struct is not None
    assert topics.element.struct.topic_pair == ("topic_id", "name")
    two_names = (
        Field("topic_id", "uuid", (0, 9), None, None, ..., ..., False, None, None),
        Field("name", "string", (0, 9), None, None, ..., ..., False, "topicName", None),
        Field("other", "string", (0, 9), None, None, ..., ..., False, "topicName", None),
    )
    with pytest.raises(ValueError, match="two topic names"):
        layout._Lowering(0, False).struct("Odd", two_names)


def test_python_m_codec_layout_prints_one() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "codec.layout", "Produce", "11", "request"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert done.stderr == ""  # no runpy warning: the package has not imported what -m runs
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ProduceRequest v11 (flexible")
    assert any(line.split()[:3] == ["acks", "int16", "2"] and "check 7" in line for line in lines)
    assert any("records" in line and "compact length, nullable" in line for line in lines)
    unknown = subprocess.run(
        [sys.executable, "-m", "codec.layout", "Produce", "99", "request"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert unknown.returncode == 2 and "ProduceRequest has no version 99" in unknown.stderr
