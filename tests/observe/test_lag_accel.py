"""The lag tracker's walks of a Fetch in C (proxy/_steady.c's fetch_offsets and
fetch_positions) against its Python loops (LagTracker.fetch_ask and _fetch_walk, the
reference, which runs where the extension is not built or KAFKALENS_PURE_CODEC=1): from
the same tables, for the same request and answer, the same asks, tables (every entry's
fields, of the same types), counters, line fields and rendered line bytes; for values
the codec never decodes (None, text, floats, ints beyond 64 bits, mappings that are not
dicts) the same, or the same exception with the tables as far as both walks got.
Real clients' captured Fetch exchanges (tests/data/golden) go through both too.
tests/proxy/test_steady_sanitized.py runs this module with the C built under
AddressSanitizer and UBSan."""

from __future__ import annotations

import copy
import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.replay import sessions

from codec import ApiKey, decode_request, decode_response
from proxy import steady
from proxy.observe.lag import tracker as tracker_module
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.tracker import Entry, LagTracker
from proxy.observe.request_log import render
from proxy.observe.summary import SummaryOptions, TopicIds, response_fields

pytestmark = pytest.mark.skipif(steady.lag_walks() is None, reason="proxy._steady is not built (or KAFKALENS_PURE_CODEC)")

PROPERTY = settings(
    max_examples=examples(400), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
NOW = 1234.5
BIG = [2**63 - 1, -(2**63), 2**63, 2**64 + 5, -(2**70)]
NUMBERS = st.one_of(st.integers(-3, 40), st.sampled_from(BIG))
ODD = st.sampled_from([None, "7", 1.5, float("nan"), True, False, b"x"])
IDS = [uuid.UUID(int=n) for n in (1, 2, 3)]
# The codec shares a topic id's object between frames (codec.wire.uuid_of): a request's and
# its answer's are the same object, but for this one, equal to the first and not it
TWIN = uuid.UUID(int=1)
NAMES = ["orders", 'q"uote\\d', "caf\u00e9"]


class Stats:
    """A partition's RecordStats, as far as the walk reads it."""

    __slots__ = ("next_offset",)

    def __init__(self, next_offset: Any) -> None:
        self.next_offset = next_offset


class OtherDict(dict):  # type: ignore[type-arg]
    """A mapping that is not exactly a dict: the C asks its own `get`."""


def value(hostile: bool) -> st.SearchStrategy[Any]:
    return st.one_of(NUMBERS, ODD) if hostile else NUMBERS


@st.composite
def partition(draw: st.DrawFn, keys: tuple[str, ...], hostile: bool) -> dict[str, Any]:
    made = {key: draw(value(hostile)) for key in keys if draw(st.integers(0, 9))}  # a key now and then missing
    if "partition" in made or "partition_index" in made:
        key = "partition" if "partition" in keys else "partition_index"
        made[key] = draw(st.integers(0, 3)) if not hostile or draw(st.booleans()) else made[key]
    if "error_code" in keys:
        made["error_code"] = draw(st.sampled_from([0, 0, 0, 3, None]) if not hostile else st.one_of(ODD, st.just(0)))
    return OtherDict(made) if hostile and draw(st.integers(0, 7)) == 0 else made


@st.composite
def topics(draw: st.DrawFn, keys: tuple[str, ...], hostile: bool) -> list[dict[str, Any]]:
    made = []
    for _ in range(draw(st.integers(0, 3))):
        topic: dict[str, Any] = (
            {"topic_id": draw(st.sampled_from([*IDS, TWIN]))}
            if draw(st.booleans())
            else {"topic": draw(st.sampled_from(NAMES))}
        )
        parts = draw(st.lists(partition(keys, hostile), max_size=5))
        topic["partitions"] = tuple(parts) if hostile and draw(st.booleans()) else parts
        made.append(topic)
    return made


@st.composite
def cases(draw: st.DrawFn, hostile: bool = False) -> dict[str, Any]:
    request = topics(("partition", "fetch_offset"), hostile)
    answer = topics(("partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset"), hostile)
    return {
        "request": draw(request),
        "answer": draw(answer),
        "replica": draw(st.sampled_from([-1, -1, 0, 2])),
        "isolation": draw(st.sampled_from([0, 1])),
        "client": draw(st.sampled_from(["c1", "c2"])),
        "group": draw(st.sampled_from(["", "g"])),
        "stats": {
            (draw(st.sampled_from(NAMES + [str(i) for i in IDS])), draw(st.integers(0, 3))): Stats(draw(value(hostile)))
            for _ in range(draw(st.integers(0, 4)))
        },
        "known": [  # entries already in the tables: (table, key, offset)
            (draw(st.sampled_from(["consumers", "followers", "watermarks"])), draw(st.integers(0, 3)), draw(NUMBERS))
            for _ in range(draw(st.integers(0, 6)))
        ],
        "max_tracked": draw(st.integers(1, 8)),
        "max_logged": draw(st.integers(0, 4)),
        "named": draw(st.booleans()),  # the topic ids' names learnt
        "renamed": draw(st.booleans()),  # a topic id named between the request and its answer
    }


def tracker(case: dict[str, Any], in_c: bool) -> LagTracker:
    options = dataclasses.replace(LagConfig(), max_tracked=case["max_tracked"], max_logged_partitions=case["max_logged"])
    ids = TopicIds()
    if case["named"]:
        ids.learn_pairs([(IDS[0], "orders"), (IDS[1], "caf\u00e9")])
    made = LagTracker(options, ids, 100)
    if not in_c:
        made.walks = None
    for table, index, offset in case["known"]:
        where = (NAMES[index % 3], index)
        if table == "consumers":
            made.consumers[(case["client"], *where)] = Entry("old", offset, 0, 1.0)
        elif table == "followers":
            made.followers[(2, *where)] = Entry("", offset, 0, 1.0)
        else:
            made.watermarks[where] = Entry("", offset, 0, 1.0)
    return made


def state(made: LagTracker) -> Any:
    def table(entries: dict[Any, Entry]) -> dict[Any, Any]:
        return {
            key: tuple((v, type(v)) for v in (e.group, e.offset, e.lag, e.seen)) for key, e in entries.items()
        }  # fmt: skip

    return (
        table(made.consumers), table(made.followers), table(made.watermarks), made.marks_moved, made.dropped
    )  # fmt: skip


def shared(topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of `topics` but for their topic ids, which stay the objects they are."""
    return copy.deepcopy(topics, {id(u): u for u in (*IDS, TWIN)})


def walk(case: dict[str, Any], in_c: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The ask, line fields and tables of one request and answer, or the exception."""
    monkeypatch.setattr(tracker_module.time, "monotonic", lambda: NOW)
    made = tracker(case, in_c)
    request = {"replica_id": case["replica"], "isolation_level": case["isolation"], "topics": shared(case["request"])}
    fields: dict[str, Any] = {}
    try:
        ask = made.fetch_ask(request, fields, case["client"], case["group"])
    except Exception as exc:  # noqa: BLE001 - what each walk raises is compared
        return ("request", type(exc), fields, state(made))
    out: dict[str, Any] = {}
    asked = (ask.client, ask.group, ask.replica, ask.isolation, {k: (v, type(v)) for k, v in ask.offsets.items()})
    if case["renamed"]:  # the answer's topics named anew, not as the request's were
        made.topic_ids.learn_pairs([(IDS[0], "renamed"), (IDS[2], "new")])
    try:
        made.fetch_done(ask, {"responses": shared(case["answer"])}, case["stats"], out)
    except Exception as exc:  # noqa: BLE001
        tables = state(made)[:3]  # the counters are added when the C walk returns
        return ("answer", type(exc), fields, asked, tables)
    return ("done", fields, asked, out, render(out), state(made))


@PROPERTY
@given(cases())
def test_the_c_walks_are_the_python_loops(case: dict[str, Any]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert walk(case, True, monkeypatch) == walk(case, False, monkeypatch)


@PROPERTY
@given(cases(hostile=True))
def test_values_no_codec_decodes_give_what_python_gives(case: dict[str, Any]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        in_c, in_python = walk(case, True, monkeypatch), walk(case, False, monkeypatch)
    assert in_c == in_python or _both_nan(in_c, in_python)


def _both_nan(a: Any, b: Any) -> bool:
    """NaN is not equal to itself: the same outcome but for a NaN at the same place."""
    return repr(a) == repr(b)


@pytest.mark.parametrize("known", [False, True])
def test_a_value_none_is_no_value(known: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`offsets.get(where)` is None for a key whose value is None: as if it were missing
    (and the entry's own offset the start, when there is an entry)."""
    case = {
        "request": [{"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": None}]}],
        "answer": [{"topic": "orders", "partitions": [{"partition_index": 0, "error_code": 0, "high_watermark": 9}]}],
        "replica": -1, "isolation": 0, "client": "c1", "group": "", "stats": {}, "max_tracked": 8, "max_logged": 4,
        "named": False, "renamed": False, "known": [("consumers", 0, 5)] if known else [],
    }  # fmt: skip
    in_c = walk(case, True, monkeypatch)
    assert in_c == walk(case, False, monkeypatch)
    assert in_c[0] == "done" and in_c[3] == ({"positions": [dict(POSITION, lag=4)]} if known else {})


POSITION = {
    "topic": "orders", "partition": 0, "fetch_offset": 5, "next_offset": 5, "high_watermark": 9,
    "last_stable_offset": None, "log_start_offset": None,
}  # fmt: skip


def test_the_walks_refuse_what_they_cannot_walk() -> None:
    offsets, positions = steady.lag_walks()
    with pytest.raises(TypeError):
        offsets([], str, 10)
    with pytest.raises(TypeError):
        offsets(None, str, 10, {})
    with pytest.raises(TypeError):  # offsets not a dict
        offsets([{"topic": "t", "partitions": [{}]}], lambda t, n: "t", 10, [])
    args = [[], str, 10, {}, "c", "", {}, {}, {}, False, NOW, [], 5, 10, Entry]
    with pytest.raises(TypeError):
        positions(*args[:-1])
    for at in (3, 6, 7, 8):  # a table that is not exactly a dict
        with pytest.raises(TypeError):
            positions(*args[:at], OtherDict(), *args[at + 1 :])
    with pytest.raises(TypeError):
        positions(None, *args[1:])
    with pytest.raises(ZeroDivisionError):  # a clean_name that fails fails the walk
        positions([{"topic": "t"}], lambda t, n: 1 / 0, *args[2:])


def test_real_clients_fetches_walk_the_same() -> None:
    """Every Fetch exchange the golden clients made, both walks, one tracker each, in order."""
    walked = 0
    for exchanges in sessions().values():
        trackers = []
        for in_c in (True, False):
            made = LagTracker(LagConfig(), TopicIds(), 100)
            if not in_c:
                made.walks = None
            trackers.append(made)
        for exchange in exchanges:
            if exchange.api_key != ApiKey.FETCH or exchange.response is None:
                continue
            request = decode_request(exchange.request)
            response = decode_response(exchange.response, exchange.api_key, exchange.api_version)
            seen = []
            for made in trackers:
                stats: dict[tuple[str, int], Any] = {}
                out = response_fields(response, SummaryOptions(), made.topic_ids, None, stats)
                ask = made.fetch_ask(request.body, out, "client", "group")
                made.fetch_done(ask, response.body, stats, out)
                seen.append((render(out), sorted(ask.offsets.items(), key=repr)))
            assert seen[0] == seen[1]
            walked += 1
        tables = [{k: (e.offset, e.lag) for k, e in t.consumers.items()} for t in trackers]
        assert tables[0] == tables[1]
    assert walked >= 6  # the golden sessions hold six answered Fetches
