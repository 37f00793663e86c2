"""The C steady-state path (proxy/_steady.c) does what the Python path does: real
clients' captured sessions (tests/data/golden) proxied to a broker answering with the
captured answers, once with the C path and once without (KAFKALENS_PURE_CODEC's
setting: `proxy.steady.ACTIVE`, the record batch headers read and the entities of a
decoded body collected in C or in Python), give the same request log lines byte
for byte (but for times, latencies and the peers' ports) and the same request metrics;
and the C path took most reads."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from support.proxy_harness import ProxyThread, proxy_config
from support.replay import (
    Exchange,
    ScriptedBroker,
    blank_peer,
    exchange,
    read_frame,
    renumbered,
    send_session,
    sessions,
    small_requests,
)

from codec import accel
from codec.entities import collector
from codec.records import stats as record_stats
from proxy import steady
from proxy.config import Overrides
from proxy.features import build_hooks, load_config
from proxy.forward.sides import Relay
from proxy.metrics import Metrics


def test_the_extension_is_built_where_required() -> None:
    """CI sets KAFKALENS_REQUIRE_ACCEL=1 (as for the codec's): there, a build that fell
    back to the Python path alone (setup.py's optional=True) fails here."""
    if os.environ.get("KAFKALENS_REQUIRE_ACCEL") != "1":
        pytest.skip("KAFKALENS_REQUIRE_ACCEL is not set")
    assert steady.AVAILABLE
    assert steady.ACTIVE is not bool(os.environ.get("KAFKALENS_PURE_CODEC"))


def test_a_sanitized_run_runs_the_sanitized_build() -> None:
    """In tests/proxy/test_steady_sanitized.py's child run: the extensions imported are
    those it built, in the folder it runs in (not the installed ones)."""
    folder = os.environ.get("KAFKALENS_SANITIZED")
    if not folder:
        pytest.skip("not the sanitized run")
    import codec._accel
    import proxy._steady

    for module in (codec._accel, proxy._steady):
        assert module.__file__ is not None and module.__file__.startswith(folder), module.__file__


needs_c = pytest.mark.skipif(not steady.AVAILABLE, reason="proxy._steady was not built (no C compiler)")

# Sample names whose values depend on timing, not on what was counted.
TIMED = ("kafkalens_request_duration_seconds_bucket", "kafkalens_request_duration_seconds_sum")


def run(
    tmp_path: Path, active: bool, monkeypatch: pytest.MonkeyPatch, script: list[Exchange] | None = None,
    rounds: tuple[int, ...] = (3, 1), between: Callable[[Any], object] | None = None,
    cores: list[Any] | None = None, send: Callable[[int, list[Exchange], int], None] = send_session,
    prepare: Callable[[Any], object] | None = None,
) -> tuple[list[bytes], dict[Any, float], int]:
    """`script` (the captured sessions, by default) through a proxy, `rounds` times on
    each of its connections, the C path on or off: the log's lines, the request metrics,
    and how many reads the C path took. `between(hooks)` runs on the proxy's loop after
    each round but the last, once its connections closed. Off, the record batches'
    headers are read and the topics, groups and error codes collected in Python too
    (codec.records.stats, codec.entities), as KAFKALENS_PURE_CODEC does. `cores` gets
    the connections' C paths; `send(port, script, rounds)` is the client;
    `prepare(hooks)` runs before the proxy starts."""
    monkeypatch.setattr(steady, "ACTIVE", active)
    monkeypatch.setattr(record_stats, "_ACTIVE_C", record_stats.C_SUMMARIZE if active else None)
    monkeypatch.setattr(accel, "ACTIVE", accel.ACTIVE and active)
    collector.cache_clear()  # made again under this ACTIVE (and after this run: see below)
    if script is None:
        script = [exchange for _, exchanges in sorted(sessions().items()) for exchange in exchanges]
    broker = ScriptedBroker(script)
    path = tmp_path / f"requests-{active}.log"
    config = load_config(None, Overrides(request_log=str(path)))
    metrics = Metrics()
    hooks = build_hooks(config, metrics)
    if prepare is not None:
        prepare(hooks)
    cores = [] if cores is None else cores
    if active:
        made = steady.core

        def core(*args: Any) -> Any:
            cores.append(made(*args))
            return cores[-1]

        monkeypatch.setattr(steady, "core", core)
    proxied = dataclasses.replace(proxy_config(f"127.0.0.1:{broker.port}"), request_log=config.request_log)
    try:
        with ProxyThread(proxied, hooks) as px:
            for n, times in enumerate(rounds):
                send(px.port, script, times)
                if between is not None and n < len(rounds) - 1:
                    assert px.wait_until(lambda: not px.server.clients())
                    px.call(functools.partial(between, hooks))
            assert px.wait_until(lambda: not px.server.clients())
            text = metrics.render().decode()
    finally:
        broker.close()
        collector.cache_clear()
    hooks.close()
    assert not broker.errors
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("kafkalens_request")
        for sample in family.samples
        if sample.name not in TIMED
    }
    taken = sum(sum(core.taken) for core in cores)
    return [blank_peer(line) for line in path.read_bytes().splitlines()], samples, taken


@needs_c
def test_the_c_path_makes_the_python_paths_lines_and_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c_lines, c_metrics, taken = run(tmp_path, True, monkeypatch)
    py_lines, py_metrics, none = run(tmp_path, False, monkeypatch)
    assert none == 0
    assert len(c_lines) == len(py_lines) > 700
    for made, expected in zip(c_lines, py_lines, strict=True):
        assert made == expected
    assert c_metrics == py_metrics
    with_stats = {json.loads(line)["api"] for line in c_lines if b'"record_stats"' in line}
    assert {"Produce", "Fetch"} <= with_stats
    requests = sum(b'"event":"request"' in line for line in c_lines)
    # each request and each answer is a read; the second and later rounds' memoised
    # exchanges (of apis no link reads) are the C path's
    assert taken > requests // 2
    assert json.loads(c_lines[1])["event"] == "request"


@needs_c
def test_repeated_small_requests_are_the_c_paths_lag_link_and_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apis the benchmark times: each request and its answer a read of its own; after
    a request was seen twice on a connection (memoised, then quiet) and its answer twice
    (memoised, then rendered), the C path takes both reads, an OffsetCommit's too (the
    lag link reading it through the hooks)."""
    script = small_requests()
    c_lines, c_metrics, taken = run(tmp_path, True, monkeypatch, script, rounds=(20,))
    py_lines, py_metrics, _ = run(tmp_path, False, monkeypatch, script, rounds=(20,))
    assert c_lines == py_lines
    assert c_metrics == py_metrics
    assert taken >= 2 * len(script) * (20 - 3)
    commits = [json.loads(line) for line in c_lines if b'"api":"OffsetCommit"' in line]
    assert len(commits) == 20 and all(line["committed"][0]["offset"] == 42 for line in commits)


@needs_c
def test_memos_emptied_under_the_c_path_send_their_frames_to_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full memo starts again empty (memo.FrameMemo.put): the keys the C path kept of
    its last hits (proxy/_steady.c's memo_get) then find nothing, the reads go to the
    Python path, which memoises them again, and the C path takes them once more; every
    line and metric stays the Python path's."""

    def empty_memos(hooks: Any) -> None:
        for memo in (hooks.request_memo, hooks.response_memo, hooks.api_versions_memo):
            memo._entries.clear()

    script = small_requests()
    c_lines, c_metrics, taken = run(tmp_path, True, monkeypatch, script, rounds=(8, 8), between=empty_memos)
    py_lines, py_metrics, _ = run(tmp_path, False, monkeypatch, script, rounds=(8, 8), between=empty_memos)
    assert c_lines == py_lines
    assert c_metrics == py_metrics
    # both rounds: memoised, then quiet and rendered, then the C path's
    assert taken >= 2 * 2 * len(script) * (8 - 3), taken


@needs_c
def test_hooks_that_observe_nothing_get_the_forwarding_only_c_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """No-op hooks hold, keep and rewrite nothing: the C path forwards and pairs their
    reads (Plan.forwarding), a Produce's and a SaslHandshake's aside: the client gets the
    broker's answers as they were, and the connection's counts are the Python path's."""
    script = small_requests()
    counts = {}
    for active in (True, False):
        monkeypatch.setattr(steady, "ACTIVE", active)
        cores: list[Any] = []
        made = steady.core

        def core(*args: Any, cores: list[Any] = cores, made: Any = made) -> Any:
            cores.append(made(*args))
            return cores[-1]

        monkeypatch.setattr(steady, "core", core)
        broker = ScriptedBroker(script)
        try:
            with (
                ProxyThread(proxy_config(f"127.0.0.1:{broker.port}")) as px,
                socket.create_connection(("127.0.0.1", px.port), timeout=10) as sock,
            ):
                corr = 0
                for _ in range(10):
                    for exchange in script:
                        corr += 1
                        request = renumbered(exchange.request, 4, corr)
                        sock.sendall(struct.pack(">i", len(request)) + request)
                        answer = read_frame(sock)
                        assert answer == renumbered(exchange.response or b"", 0, corr)
                counts[active] = px.call(lambda: [
                    (c.info.requests, c.info.responses, c.info.bytes_in, c.info.bytes_out, c.in_flight)
                    for c in px.server.ctx.connections.values()
                ])  # fmt: skip
        finally:
            broker.close()
            monkeypatch.setattr(steady, "core", made)
        taken = sum(sum(c.taken) for c in cores)
        assert taken >= 2 * len(script) * 9 if active else taken == 0, [c.taken for c in cores]
    assert counts[True] == counts[False] == [(40, 40, counts[True][0][2], counts[True][0][3], 0)]


@needs_c
def test_a_header_v3_connection_is_held_to_its_id_on_the_c_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KIP-1313 (logged, the default): a connection whose first request used header v3
    repeats it until the C path takes it (memoised, then quiet), then sends one with
    another id and one without any: both are violations, as on the Python path, and
    every line is the Python path's."""
    import uuid

    from codec import ApiKey, Request, Response

    def offset_delete(instance: uuid.UUID | None) -> Exchange:
        version = 0 if instance is None else 1
        head: dict[str, Any] = {"correlation_id": 0, "client_id": "steady"}
        if instance is not None:
            head["client_instance_id"] = instance
        return exchange(
            Request(ApiKey.OFFSET_DELETE, version, head, {"group_id": "g", "topics": []}),
            Response(ApiKey.OFFSET_DELETE, version, {"correlation_id": 0},
                     {"error_code": 0, "throttle_time_ms": 0, "topics": []}),
        )  # fmt: skip

    same = offset_delete(uuid.UUID(int=5))
    script = [same] * 12 + [offset_delete(uuid.UUID(int=9)), offset_delete(None), same]
    c_lines, c_metrics, taken = run(tmp_path, True, monkeypatch, script, rounds=(1,))
    py_lines, py_metrics, _ = run(tmp_path, False, monkeypatch, script, rounds=(1,))
    assert c_lines == py_lines
    assert c_metrics == py_metrics
    assert taken >= 2 * (12 - 3), taken
    violations = [json.loads(line) for line in c_lines if b'"event":"kip1313_violation"' in line]
    assert [v["correlation_id"] for v in violations] == [13, 14]


def _low_rate_client() -> list[Exchange]:
    """What a client at a low rate sends most: librdkafka's Produces and Fetches of its
    captured session (neither memoised), between a Metadata that is."""
    session = [e for e in sessions()["confluent-kafka"] if e.response is not None]
    metadata = next(e for e in session if e.api_key == 3)
    return [metadata, *(e for e in session if e.api_key in (0, 1))]


def _pipelined(port: int, exchanges: list[Exchange], rounds: int) -> None:
    """Each round's requests in one write, then their answers: reads of several frames,
    memoised ones beside ones that are not."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        corr = 1
        for _ in range(rounds):
            frames = []
            for exchange in exchanges:
                request = renumbered(exchange.request, 4, corr)
                frames.append(struct.pack(">i", len(request)) + request)
                corr += 1
            sock.sendall(b"".join(frames))
            for n in range(len(exchanges)):
                answer = read_frame(sock)
                assert answer is not None and struct.unpack_from(">i", answer, 0)[0] == corr - len(exchanges) + n


@needs_c
@pytest.mark.parametrize("send", [send_session, _pipelined], ids=["one-at-a-time", "pipelined"])
def test_frames_the_memo_does_not_answer_are_framed_in_c_and_observed_by_the_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, send: Callable[[int, list[Exchange], int], None]
) -> None:
    """A Produce or a Fetch is never memoised: the C path frames, forwards and pairs its
    reads all the same, and hands each frame to the hooks (request_forwarded,
    response_forwarded) once the read went on; a read with a memoised frame beside one
    is handed over whole the same way. The lines and metrics are the Python path's."""
    script = _low_rate_client()
    cores: list[Any] = []
    c_lines, c_metrics, taken = run(tmp_path, True, monkeypatch, script, rounds=(6,), cores=cores, send=send)
    py_lines, py_metrics, _ = run(tmp_path, False, monkeypatch, script, rounds=(6,), send=send)
    assert c_lines == py_lines
    assert c_metrics == py_metrics
    produced = sum(b'"api":"Produce"' in line for line in c_lines)
    assert produced == 6 * sum(e.api_key == 0 for e in script) > 0
    observed = [sum(side) for side in zip(*(core.observed for core in cores), strict=True)]
    if send is send_session:  # every Produce and Fetch read, both ways, the C path's
        assert observed[0] >= 6 * (len(script) - 1) and observed[1] >= 6 * (len(script) - 1), observed
    else:  # every request read holds a Produce or a Fetch (the first came before the broker connection)
        assert observed[0] >= 6 - 1 and taken >= observed[0] + observed[1], (observed, taken)


@needs_c
def test_a_hook_that_raises_on_a_frame_the_c_path_hands_over_is_counted_as_on_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """request_forwarded raising on every other Produce, response_forwarded on every
    third Fetch answer: each is a decode error of its api and direction, logged, and the
    next frame's hook still runs, on either path; lines and metrics the same."""

    def prepare(hooks: Any) -> None:
        calls = {"request": 0, "response": 0}
        request_forwarded, response_forwarded = hooks.request_forwarded, hooks.response_forwarded

        def failing_request(info: Any, frame: memoryview, pending: Any) -> None:
            request_forwarded(info, frame, pending)
            if pending.api_key == 0:
                calls["request"] += 1
                if calls["request"] % 2:
                    raise RuntimeError("a broken hook")

        def failing_response(info: Any, frame: memoryview, pending: Any) -> None:
            if pending.api_key == 1:
                calls["response"] += 1
                if calls["response"] % 3 == 0:
                    raise ValueError("a broken hook")
            response_forwarded(info, frame, pending)

        hooks.request_forwarded, hooks.response_forwarded = failing_request, failing_response

    failed: list[tuple[str, int, str, str]] = []
    counted = Relay.hook_failed

    def hook_failed(relay: Relay, hook: str, api_key: int, direction: str) -> None:
        failed.append((hook, api_key, direction, repr(sys.exc_info()[1])))
        counted(relay, hook, api_key, direction)

    monkeypatch.setattr(Relay, "hook_failed", hook_failed)
    script = _low_rate_client()
    cores: list[Any] = []
    c_lines, c_metrics, _ = run(tmp_path, True, monkeypatch, script, rounds=(4,), cores=cores, prepare=prepare)
    c_failed, failed[:] = failed[:], []
    py_lines, py_metrics, _ = run(tmp_path, False, monkeypatch, script, rounds=(4,), prepare=prepare)
    assert c_lines == py_lines
    assert c_metrics == py_metrics
    assert c_failed == failed
    assert {f[:3] for f in failed} == {("failing_request", 0, "request"), ("failing_response", 1, "response")}
    assert "RuntimeError('a broken hook')" in failed[0][3]  # the exception being handled, as logged
    assert sum(sum(core.observed) for core in cores) > 0


def _produce_headers() -> list[tuple[bytes, int]]:
    """Real clients' Produce requests (tests/data/golden), with their versions."""
    found = []
    for exchanges in sessions().values():
        for e in exchanges:
            if e.api_key == 0:
                found.append((e.request, e.api_version))
    return found


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_c_path_reads_a_produces_acks_as_the_codec_does(data: st.DataObject) -> None:
    """The acks the C path reads of a Produce (acks 0: no answer, the Python path's) are
    codec.peek.produce_acks's, over real clients' Produces cut anywhere, bytes flipped,
    any version: where the codec's raises, the C path reads none (the Python path has
    the read)."""
    from codec.errors import DecodeError
    from codec.peek import produce_acks

    frame, version = data.draw(st.sampled_from(_produce_headers()))
    frame = bytearray(frame)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(8, max(8, min(len(frame) - 1, 80))))
        if at < len(frame):
            frame[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(8, len(frame)))
    body = bytes(frame[:cut])
    version = data.draw(st.sampled_from([version, 0, 2, 3, 8, 9, 12]))
    try:
        expected: int | None = produce_acks(body, version)
    except DecodeError:
        expected = None
    assert steady._steady.produce_acks(body, version) == expected
