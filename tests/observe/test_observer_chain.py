"""The observers' chain (proxy/observe/chain.py) as its docstring promises it: a link
sees only the apis it names, after the request log's hooks decoded the frame; what it
adds to the request's token reaches the line; the response to a request it asked about
comes back to it, decoded whole or skimmed as its ask says, whether the frame came whole
or streamed past; links run in the order they were composed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.hooks_harness import Harness

from codec import ApiKey, Response
from codec.skim import Picks
from proxy.hooks import ConnectionInfo, Pending
from proxy.observe.chain import ConnState, Observer, Token

METADATA, HEARTBEAT = ApiKey.METADATA, ApiKey.HEARTBEAT
METADATA_REQUEST = (METADATA, 12, {
    "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
})  # fmt: skip
METADATA_ANSWER = {"throttle_time_ms": 0, "brokers": [], "cluster_id": "c-1", "controller_id": 1, "topics": []}
HEARTBEAT_REQUEST = (HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None})
HEARTBEAT_ANSWER = {"throttle_time_ms": 0, "error_code": 0}


class Ask:
    def __init__(self, whole: bool, picks: Picks | None = None) -> None:
        self.whole, self.picks = whole, picks


class Recorder(Observer):
    """Names Metadata; asks about its response, decoded whole or not."""

    request_apis = frozenset({METADATA})
    response_apis = frozenset({METADATA})

    def __init__(
        self, name: str, calls: list[tuple[str, str, Any]], whole: bool = True,
        picks: Picks | None = None,
    ) -> None:
        self.name, self.calls, self.whole, self.picks = name, calls, whole, picks

    def request(
        self, info: ConnectionInfo, state: ConnState, token: Token, request: Any,
        partition_stats: dict[tuple[str, int], Any] | None,
    ) -> None:
        self.calls.append((self.name, "request", request.api_key))
        assert state.identity.client_id == "app-1"  # identity learnt before the links
        token.fields[f"{self.name}_saw"] = request.correlation_id
        token.ask, token.asked_by = Ask(self.whole, self.picks), self

    def response(self, info: ConnectionInfo, state: ConnState, pending: Pending, response: Response) -> None:
        self.calls.append((self.name, "response", response.api_key))

    def answered(
        self, info: ConnectionInfo, state: ConnState | None, token: Token, response: Response | None,
        fields: dict[str, Any] | None,
    ) -> dict[str, Any]:
        self.calls.append((self.name, "answered", "whole" if response is not None else "skimmed"))
        if token.picked is not None:
            self.calls.append((self.name, "picked", token.picked))
        if response is not None:
            return {"errors": [], "cluster": response.body["cluster_id"]}
        assert fields is not None
        return {**fields, "skimmed_errors": len(fields["errors"])}


def test_a_link_sees_its_apis_only_and_its_fields_reach_the_line(tmp_path: Path) -> None:
    for pieces in (0, 7):  # whole frames; the answer streamed past in 7-byte pieces
        calls: list[tuple[str, str, Any]] = []
        h = Harness(tmp_path / str(pieces), lag=None, links=(Recorder("first", calls),))
        h.exchange(HEARTBEAT_REQUEST, HEARTBEAT_ANSWER, pieces=pieces)
        assert calls == []  # Heartbeat is not its api
        h.exchange(METADATA_REQUEST, METADATA_ANSWER, pieces=pieces)
        assert calls == [("first", "request", METADATA), ("first", "response", METADATA), ("first", "answered", "whole")]
        (line,) = h.lines("Metadata")
        assert line["first_saw"] == line["correlation_id"]
        assert line["cluster"] == "c-1"  # the link's answer fields are the line's
        assert len(h.lines("Heartbeat")) == 1


def test_links_run_in_the_order_composed_and_a_skimmed_ask_gets_fields(tmp_path: Path) -> None:
    calls: list[tuple[str, str, Any]] = []
    first, second = Recorder("first", calls), Recorder("second", calls, whole=False)
    h = Harness(tmp_path, lag=None, links=(first, second))
    h.exchange(METADATA_REQUEST, METADATA_ANSWER)
    # the last link to ask is the one its response goes back to; it asked for no whole decoding
    assert calls == [
        ("first", "request", METADATA), ("second", "request", METADATA), ("second", "answered", "skimmed"),
    ]
    (line,) = h.lines("Metadata")
    assert line["first_saw"] == line["second_saw"] == line["correlation_id"]
    assert line["skimmed_errors"] == 0 and "cluster" not in line


def test_an_ask_that_picks_gets_the_rows_of_its_answer(tmp_path: Path) -> None:
    """An ask not whole with `picks`: the skim of its answer also reads those fields
    (codec.skim.Picks), or they are read from the answer decoded as it streamed
    past; `answered` finds them in `token.picked`."""
    answer = {**METADATA_ANSWER, "brokers": [
        {"node_id": node, "host": f"b{node}", "port": 9092, "rack": None} for node in (3, 5)
    ]}  # fmt: skip
    for pieces in (0, 7):
        calls: list[tuple[str, str, Any]] = []
        picks = Picks((("throttle_time_ms",), ("brokers", "node_id"), ("brokers", "host")))
        h = Harness(tmp_path / str(pieces), lag=None, links=(Recorder("first", calls, whole=False, picks=picks),))
        h.exchange(METADATA_REQUEST, answer, pieces=pieces)
        assert calls[-2:] == [
            ("first", "answered", "skimmed"), ("first", "picked", [(0, 3, "b3"), (0, 5, "b5")]),
        ]
