"""A request's line put together from pieces rendered once (request_line.compose) is the
line rendered from its dict, byte for byte but for its time and latency: real clients'
captured sessions (tests/data/golden) replayed through the shipped hooks both ways."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from support.replay import blank, connection, replayed_lines, shipped_hooks

from codec import ApiKey, Request, Response, encode_request, encode_response
from proxy.hooks import Pending
from proxy.observe.memo import RequestEntry


def counting(composed: list[int]) -> Any:
    def configure(hooks: Any) -> None:
        write_line = hooks.log.write_line

        def counted(line: bytes) -> None:
            composed[0] += 1
            write_line(line)

        hooks.log.write_line = counted

    return configure


def by_dict(hooks: Any) -> None:
    hooks.prerendered = False


def test_captured_sessions_make_the_same_lines_from_pieces_as_from_dicts(tmp_path: Path) -> None:
    composed = [0]
    pieces = replayed_lines(tmp_path / "pieces.log", counting(composed))
    dicts = replayed_lines(tmp_path / "dicts.log", by_dict)
    assert len(pieces) == len(dicts) > 700
    for made, rendered in zip(pieces, dicts, strict=True):
        assert made == rendered
    requests = sum(b'"event":"request"' in line for line in pieces)
    # every session's second and later rounds repeat its frames: most of those lines are
    # put together from pieces (a first-seen frame, a link's api or an error is not)
    assert composed[0] > requests // 3


def forward(hooks: Any, info: Any, request: Request) -> Pending:
    frame = encode_request(request)
    pending = Pending(request.correlation_id, request.api_key, request.api_version, time.perf_counter(), len(frame) + 4)
    hooks.request_forwarded(info, memoryview(frame), pending)
    return pending


def answer(hooks: Any, info: Any, pending: Pending, response: Response) -> None:
    """As the connection hands an answer over: rewritten first where the hooks ask."""
    frame = encode_response(response)
    if pending.api_key in hooks.rewrite_api_keys:
        frame = hooks.rewrite_response(info, memoryview(frame), pending) or frame
    hooks.response_forwarded(info, memoryview(frame), pending)


def exchange(hooks: Any, info: Any, request: Request, response: Response) -> None:
    answer(hooks, info, forward(hooks, info, request), response)


def api_versions(corr: int, software: str) -> tuple[Request, Response]:
    request = Request(ApiKey.API_VERSIONS, 3, {"correlation_id": corr, "client_id": "c"},
                      {"client_software_name": software, "client_software_version": "1.0"})
    response = Response(ApiKey.API_VERSIONS, 3, {"correlation_id": corr}, {
        "error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}],
        "throttle_time_ms": 0, "supported_features": [], "finalized_features_epoch": -1,
        "finalized_features": [], "zk_migration_ready": False})
    return request, response


def metadata(corr: int, topics: list[str]) -> tuple[Request, Response]:
    request = Request(ApiKey.METADATA, 12, {"correlation_id": corr, "client_id": "c"}, {
        "topics": [{"topic_id": uuid.UUID(int=0), "name": t} for t in topics], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    response = Response(ApiKey.METADATA, 12, {"correlation_id": corr}, {
        "throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": 1, "topics": []})
    return request, response


def both_ways(tmp_path: Path, steps: Any) -> tuple[list[bytes], list[bytes], int]:
    """`steps(hooks, info)` run on hooks that put lines together from pieces, then on
    hooks that render them from dicts; both logs' lines, and how many were composed."""
    out = []
    composed = [0]
    for name, configure in (("pieces", counting(composed)), ("dicts", by_dict)):
        path = tmp_path / f"{name}.log"
        hooks, metrics = shipped_hooks(path)
        configure(hooks)
        steps(hooks, connection(hooks, metrics, "c-1", 50000))
        hooks.close()
        out.append([blank(line) for line in path.read_bytes().splitlines()])
    return out[0], out[1], composed[0]


def test_a_field_the_identity_also_gives_is_the_requests_own_value(tmp_path: Path) -> None:
    """An ApiVersions request's software fields stand where the identity's are: a line put
    together from pieces uses the identity's, which are the request's only while no other
    ApiVersions changed them."""

    def steps(hooks: Any, info: Any) -> None:
        for corr in (1, 2, 3):
            exchange(hooks, info, *api_versions(corr, "one"))
        # pipelined: a second software's request reaches the hooks before the first's answer
        first, first_answer = api_versions(4, "one")
        second, second_answer = api_versions(5, "two")
        pendings = [forward(hooks, info, request) for request in (first, second)]
        for pending, response in zip(pendings, (first_answer, second_answer), strict=True):
            answer(hooks, info, pending, response)

    pieces, dicts, composed = both_ways(tmp_path, steps)
    assert pieces == dicts
    assert composed >= 2  # the second and third
    fourth = next(line for line in pieces if b'"correlation_id":4,' in line)
    assert b'"client_software_name":"one"' in fourth  # its own, not the identity's of then


def test_fields_a_request_and_its_answer_both_have_are_rendered_from_the_dict(tmp_path: Path) -> None:
    """A Metadata request for more than 100 topics says topic_count, as its answer does:
    the line has the key once, where the request's stands, with the answer's value."""
    many = [f"t{n}" for n in range(150)]

    def steps(hooks: Any, info: Any) -> None:
        for corr in (1, 2, 3):
            exchange(hooks, info, *metadata(corr, many))

    pieces, dicts, composed = both_ways(tmp_path, steps)
    assert pieces == dicts
    assert composed == 0
    assert [line.count(b'"topic_count"') for line in pieces] == [0, 1, 1, 1]  # connection_open, then three


def test_a_quiet_request_is_observed_again_once_the_identity_changed(tmp_path: Path) -> None:
    """A memoised request that changed nothing is not observed again on its connection,
    until something of the identity changes: its lines then carry the new identity."""

    def steps(hooks: Any, info: Any) -> None:
        for corr in (1, 2, 3):
            exchange(hooks, info, *metadata(corr, ["orders"]))
        state = hooks.states[info.conn_id]
        assert any(isinstance(entry, RequestEntry) for entry in state.quiet)
        exchange(hooks, info, *api_versions(4, "later"))  # the software becomes known
        assert not any(entry.api == "Metadata" for entry in state.quiet)
        for corr in (5, 6):
            exchange(hooks, info, *metadata(corr, ["orders"]))

    pieces, dicts, composed = both_ways(tmp_path, steps)
    assert pieces == dicts
    assert composed >= 3
    last = next(line for line in pieces if b'"correlation_id":6,' in line)
    assert b'"client_software_name":"later"' in last
