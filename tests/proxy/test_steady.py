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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
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
) -> tuple[list[bytes], dict[Any, float], int]:
    """`script` (the captured sessions, by default) through a proxy, `rounds` times on
    each of its connections, the C path on or off: the log's lines, the request metrics,
    and how many reads the C path took. `between(hooks)` runs on the proxy's loop after
    each round but the last, once its connections closed. Off, the record batches'
    headers are read and the topics, groups and error codes collected in Python too
    (codec.records.stats, codec.entities), as KAFKALENS_PURE_CODEC does."""
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
    cores: list[Any] = []
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
                send_session(px.port, script, rounds=times)
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
