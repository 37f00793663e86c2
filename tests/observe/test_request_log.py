"""proxy.observe.request_log: lines as JSON, stdout writes that keep lines whole, rotation; the
writer thread's flush deadline, reopening, bound and failures; then the same against a
live proxy with its real hooks, while a well-behaved client keeps round-tripping.

The live broker is tansu: the log's writing is kafkalens's own, the same whatever the
broker (real clients in front of Apache Kafka, their lines checked: test_proxy_clients.py,
test_observability_e2e.py, test_kafka_java_clients.py).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import socket
import subprocess
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs
from support.hostile import ScriptedBroker, Sentinel, api_versions_v0_answer, connect
from support.observed import ObservedProxy
from support.paths import REPO
from support.proxy_harness import LOCAL, FakeBroker, is_closed, read_frame, request_frame

from codec import ApiKey
from proxy.config import ConfigError
from proxy.features import Config, load_config, parse_config
from proxy.metrics import Metrics
from proxy.observe import request_log
from proxy.observe.request_log import PIPE_BUF, LineSink, RequestLog, render


def test_render_is_compact_json_and_falls_back_for_what_orjson_refuses() -> None:
    fields = {"topic": "café", "id": uuid.UUID(int=1), "n": 2**70, "view": memoryview(b"x")}
    line = render(fields)
    decoded = json.loads(line)
    assert decoded["topic"] == "café" and decoded["n"] == 2**70
    assert decoded["id"] == "00000000-0000-0000-0000-000000000001"
    assert json.loads(render({"lone": "\ud800"}))["lone"] == "\ud800"  # escaped, not lost


def test_a_rendered_line_holds_about_its_length_not_the_encoders_buffer() -> None:
    """Lines wait in the queue up to flush_interval: 2,000 request_incomplete lines at a
    sweep held 8 KiB each (orjson's buffer), 15 MiB, where their text is 0.8 MB."""
    fields = {"api": "Metadata", "conn": "1-2", "topics": ["t" * 40] * 6, "n": 2**40}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        lines = [render({**fields, "correlation_id": n}) for n in range(1000)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    text = sum(map(len, lines))
    assert held < 1.5 * text, (held, text)  # bytes objects' headers and the list: ~15%


def test_line_is_fields_then_event_then_timestamp(tmp_path: Path) -> None:
    log = RequestLog(LineSink(str(tmp_path / "r.log")))
    log.write("request", {"api": "Metadata", "errors": []})
    log.warning("kip1313_violation", {"api": "Produce"})
    log.close()
    first, second = (json.loads(x) for x in (tmp_path / "r.log").read_text().splitlines())
    assert list(first) == ["api", "errors", "event", "ts"] and first["event"] == "request"
    assert first["ts"].endswith("Z") and len(first["ts"]) == len("2026-11-22T09:00:00.000000Z")
    assert second["level"] == "warning" and second["event"] == "kip1313_violation"


def test_stdout_gets_whole_lines_in_writes_of_at_most_pipe_buf(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes: list[bytes] = []
    monkeypatch.setattr(request_log, "_write_all", lambda _fd, data: writes.append(data))
    sink = LineSink("-")
    lines = [
        json.dumps({"n": n, "pad": "é" * (n * 37 % 900)}, ensure_ascii=False).encode()
        for n in range(300)
    ]
    lines.append(b'{"big":"' + b"y" * 5000 + b'"}')  # longer than PIPE_BUF: a write of its own
    for line in lines:
        sink.msg(line)
    sink.close()
    assert all(w.endswith(b"\n") for w in writes)
    assert all(len(w) <= PIPE_BUF or w.count(b"\n") == 1 for w in writes)
    assert b"".join(writes).splitlines() == lines


def test_rotation_by_size_keeps_backups(tmp_path: Path) -> None:
    path = tmp_path / "requests.log"
    sink = LineSink(str(path), max_bytes=4000, backups=2)
    for n in range(200):
        sink.msg(json.dumps({"n": n, "pad": "x" * 80}).encode())
        if n % 20 == 19:
            sink.flush()
    sink.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["requests.log", "requests.log.1", "requests.log.2"]
    assert all(os.path.getsize(tmp_path / f) <= 4000 for f in files)
    numbers = [
        json.loads(x)["n"]
        for f in ("requests.log.2", "requests.log.1", "requests.log")
        for x in (tmp_path / f).read_text().splitlines()
    ]
    assert numbers == sorted(numbers) and numbers[-1] == 199


# --- the writer thread: deadlines, reopening, failures, the bound ----------------------


def file_lines(path: Path) -> list[dict[str, Any]]:
    """The whole lines in `path`, read through a handle of our own (no flush asked)."""
    if not path.exists():
        return []
    text = path.read_bytes()
    assert not text or text.endswith(b"\n"), "a line was written in part"
    return [json.loads(line) for line in text.splitlines()]


def eventually_true(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def test_lines_reach_the_file_within_the_interval_with_no_line_after_them(tmp_path: Path) -> None:
    path = tmp_path / "r.log"
    sink = LineSink(str(path), flush_interval=0.2)
    try:
        for n in range(3):
            sink.msg(json.dumps({"n": n}).encode())
        queued = time.monotonic()
        assert eventually_true(lambda: len(file_lines(path)) == 3, timeout=2.0)
        assert time.monotonic() - queued < 0.2 + 0.3
    finally:
        sink.close()


def test_reopen_puts_earlier_lines_in_the_renamed_file_and_later_ones_at_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.log"
    sink = LineSink(str(path), flush_interval=30)  # only the markers make it write
    for n in range(5):
        sink.msg(json.dumps({"n": n}).encode())
    path.rename(tmp_path / "r.log.1")  # what logrotate does before its postrotate
    sink.reopen()
    for n in range(5, 8):
        sink.msg(json.dumps({"n": n}).encode())
    sink.close()
    assert [x["n"] for x in file_lines(tmp_path / "r.log.1")] == [0, 1, 2, 3, 4]
    assert [x["n"] for x in file_lines(path)] == [5, 6, 7]


def test_close_writes_every_queued_line_and_msg_never_blocks_on_a_stuck_reader(
    tmp_path: Path,
) -> None:
    """A FIFO nobody reads stands for a disk that hangs: `msg` still returns at once,
    lines beyond the bound are dropped and counted, and once the reader drains it
    the episode ends with one report."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    metrics = Metrics()
    sink = LineSink(str(fifo), flush_interval=0.05, max_queued_bytes=256 * 1024, metrics=metrics)
    line = json.dumps({"pad": "x" * 1000}).encode()
    with capture_logs() as logs:
        slowest = 0.0
        for _ in range(2000):  # 2 MB: the pipe holds 64 KiB, the queue 256 KiB
            started = time.perf_counter()
            sink.msg(line)
            slowest = max(slowest, time.perf_counter() - started)
        assert slowest < 0.05
        assert eventually_true(lambda: dropped(metrics, "queue_full") > 0, timeout=3)
        received = bytearray()

        def drained() -> bool:
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(reader, 1 << 20):
                    received.extend(chunk)
            return not sink_waiting(sink) and received.endswith(b"\n")

        assert eventually_true(drained, timeout=5)
        sink.msg(b'{"last":true}')  # room again: the episode ends
        assert eventually_true(lambda: drained() and received.endswith(b'{"last":true}\n'), 5)
        sink.close()
    os.close(reader)
    lost = dropped(metrics, "queue_full")
    written = received.count(b"\n")
    assert written + lost == 2001 and 0 < lost < 2000
    events = [entry["event"] for entry in logs]
    assert events == [
        "request log: writing falls behind; dropping lines",
        "request log: writing caught up",
    ]
    assert logs[1]["dropped_lines"] == lost


def sink_waiting(sink: LineSink) -> int:
    return sink._waiting


def dropped(metrics: Metrics, reason: str) -> float:
    return sample(metrics, "kafkalens_request_log_dropped_lines_total", reason=reason)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


# --- against a live proxy --------------------------------------------------------------

APIVERSIONS = ApiKey.API_VERSIONS


def live_config(upstream: str, log_path: Path, **request_log: Any) -> Config:
    return parse_config(
        {
            "listeners": [{"name": "plaintext", "listen": f"{LOCAL}:0", "upstream": upstream}],
            "metrics": {"listen": f"{LOCAL}:0"},
            "request_log": {"path": str(log_path), **request_log},
        }
    )


@contextlib.contextmanager
def live_proxy(
    log_path: Path, scripts: dict[str, Any] | None = None, **request_log: Any
) -> Iterator[ObservedProxy]:
    """The proxy as `kafkalens proxy` runs it (real hooks, real request log) in front of
    an honest broker, except for requests whose client id names a script."""
    with (
        FakeBroker(ScriptedBroker(scripts)) as fake,
        ObservedProxy(live_config(fake.address, log_path, **request_log)) as px,
    ):
        yield px


def round_trip(sock: socket.socket, corr: int, client_id: str) -> None:
    sock.sendall(request_frame(APIVERSIONS, 0, corr, client_id=client_id))
    assert read_frame(sock) == api_versions_v0_answer(corr)


def logged(path: Path, client_id: str, event: str = "request") -> list[int]:
    return sorted(
        line["correlation_id"]
        for line in file_lines(path)
        if line["event"] == event and line.get("client_id") == client_id
    )


def longest_wait(sentinel: Sentinel) -> float:
    """The longest the well-behaved client went without an answer, up to now."""
    times = [*sentinel.times, time.monotonic()]
    return max(b - a for a, b in itertools.pairwise(times))


def test_live_lines_are_in_the_file_within_the_interval_after_traffic_stops(
    tmp_path: Path,
) -> None:
    log = tmp_path / "requests.log"
    with live_proxy(log, flush_interval_seconds=0.3) as px:
        sock = connect(px.port)
        for corr in range(1, 6):
            round_trip(sock, corr, "burst")
        answered = time.monotonic()  # and nothing more: no later line pushes these out
        assert eventually_true(lambda: logged(log, "burst") == [1, 2, 3, 4, 5], timeout=5)
        assert time.monotonic() - answered < 0.3 + 0.5
        sock.close()


def test_live_unanswered_requests_get_a_request_incomplete_line_with_why(
    tmp_path: Path,
) -> None:
    def hang_up(sock: socket.socket, _request: bytes) -> str:
        sock.close()
        return "stop"

    log = tmp_path / "requests.log"
    scripts = {"hang": lambda _sock, _request: None, "hangup": hang_up}
    with FakeBroker(ScriptedBroker(scripts)) as fake:
        px = ObservedProxy(live_config(fake.address, log, flush_interval_seconds=0.1)).start()
        try:
            with Sentinel(px.port) as sentinel:
                leaver = connect(px.port)
                leaver.sendall(request_frame(APIVERSIONS, 0, 7, client_id="hang"))
                assert eventually_true(lambda: px.pending_total() >= 1, timeout=5)
                time.sleep(0.05)
                leaver.close()  # the client leaves with its request unanswered
                abandoned = connect(px.port)
                abandoned.sendall(request_frame(APIVERSIONS, 0, 8, client_id="hangup"))
                assert is_closed(abandoned, timeout=5)  # the broker hung up on it
                for client_id, corr in (("hang", 7), ("hangup", 8)):
                    assert eventually_true(
                        lambda c=client_id, n=corr: logged(log, c, "request_incomplete") == [n],
                        timeout=5,
                    )
                sentinel.healthy()
                assert longest_wait(sentinel) < 1.0
            stuck = connect(px.port)
            stuck.sendall(request_frame(APIVERSIONS, 0, 9, client_id="hang"))
            assert eventually_true(lambda: px.pending_total() >= 1, timeout=5)
        finally:
            px.stop(grace=0.2)  # SIGTERM's path: drain for the grace period, then close
    incomplete = {
        line["correlation_id"]: line
        for line in file_lines(log)
        if line["event"] == "request_incomplete"
    }
    assert sorted(incomplete) == [7, 8, 9]
    assert {corr: line["reason"] for corr, line in incomplete.items()} == {
        7: "client_eof",
        8: "upstream_eof",
        9: "shutdown",
    }
    for line in incomplete.values():
        assert line["api"] == "ApiVersions" and line["api_key"] == APIVERSIONS
        assert line["latency_ms"] >= 0 and line["response_bytes"] is None
        assert line["conn"] and line["client_address"].startswith(LOCAL)
    assert incomplete[9]["latency_ms"] >= 150  # it waited out the grace period
    stuck.close()


@pytest.fixture(params=["tmpfs", "injected"])
def full_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DiskFull]:
    """A real filesystem that fills up (a tiny tmpfs; root only), else a write that
    raises ENOSPC (the fault injected into the writer's write call)."""
    if request.param == "injected":
        disk: DiskFull = InjectedDiskFull(tmp_path)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(request_log, "_write_all", disk.write_all)  # type: ignore[attr-defined]
            yield disk
        return
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the injected case runs")
    try:
        yield TmpfsDiskFull(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


class DiskFull:
    directory: Path

    def fill(self) -> None: ...

    def free(self) -> None: ...


class TmpfsDiskFull(DiskFull):
    def __init__(self, mount: Path) -> None:
        self.directory = mount
        self.filler = mount / "filler"

    def fill(self) -> None:
        with contextlib.suppress(OSError), open(self.filler, "wb", buffering=0) as out:
            while True:
                out.write(b"\0" * 4096)

    def free(self) -> None:
        self.filler.unlink()


class InjectedDiskFull(DiskFull):
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.full = False
        self._real = request_log._write_all

    def write_all(self, fd: int, data: bytes) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._real(fd, data)

    def fill(self) -> None:
        self.full = True

    def free(self) -> None:
        self.full = False


@pytest.mark.slow
def test_live_disk_full_is_counted_reported_once_and_never_slows_forwarding(
    full_disk: DiskFull,
) -> None:
    log = full_disk.directory / "requests.log"
    with (
        live_proxy(log, flush_interval_seconds=0.1) as px,
        Sentinel(px.port, pause=0.005) as sentinel,
        capture_logs() as logs,
    ):
        sentinel.wait_for_more(10)
        px.call(px.server.hooks.log.flush)  # type: ignore[attr-defined]
        before = logged(log, "sentinel")
        assert len(before) >= 10
        full_disk.fill()
        assert eventually_true(
            lambda: (
                px.metric("kafkalens_request_log_dropped_lines_total", reason="write_failed") > 0
            ),
            timeout=5,
        )
        assert sentinel.wait_for_more(50)
        full_disk.free()
        assert eventually_true(lambda: "request log: writing again" in events(logs), timeout=5)
        assert sentinel.wait_for_more(20)
        px.call(px.server.hooks.log.flush)  # type: ignore[attr-defined]
        sentinel.healthy()
        assert longest_wait(sentinel) < 1.0
        after = logged(log, "sentinel")
        errors = px.metric("kafkalens_request_log_errors_total")
        lost = px.metric("kafkalens_request_log_dropped_lines_total", reason="write_failed")
        assert px.decode_errors() == 0  # a full disk is not the codec's failure
    assert set(before) <= set(after)  # nothing written before the fault is gone
    assert after[-1] > before[-1] + 50 and len(after) < after[-1]  # a gap, then lines again
    assert errors >= 1 and lost >= 1
    reports = [e for e in logs if e["event"].startswith("request log")]
    assert [e["event"] for e in reports] == [
        "request log: cannot write; dropping lines",
        "request log: writing again",
    ]
    assert "ENOSPC" in reports[0]["error"]
    assert reports[1]["dropped_lines"] == lost and reports[1]["write_errors"] == errors


def events(logs: list[dict[str, Any]]) -> list[str]:
    return [entry["event"] for entry in logs]


@pytest.mark.slow
def test_live_a_stuck_disk_drops_lines_beyond_the_bound_and_never_slows_forwarding(
    tmp_path: Path,
) -> None:
    """A FIFO nobody reads as the log: the writer thread blocks in write() as on a hung
    disk; the event loop goes on forwarding and refuses lines past max_queued_bytes."""
    fifo = tmp_path / "requests.log"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    received = bytearray()
    stop_draining = threading.Event()

    def drain() -> None:
        while not stop_draining.wait(0.01):
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(reader, 1 << 20):
                    received.extend(chunk)

    drainer = threading.Thread(target=drain, daemon=True)
    options = {"flush_interval_seconds": 0.05, "max_queued_bytes": 64 * 1024}
    try:
        with live_proxy(fifo, **options) as px, Sentinel(px.port, pause=0.002) as sentinel:
            assert eventually_true(
                lambda: (
                    px.metric("kafkalens_request_log_dropped_lines_total", reason="queue_full") > 0
                ),
                timeout=10,
            )
            assert sentinel.wait_for_more(50)
            sentinel.healthy()
            assert longest_wait(sentinel) < 1.0
            drainer.start()  # the disk is back
            sink = px.server.hooks.log.sink  # type: ignore[attr-defined]
            assert eventually_true(lambda: px.call(lambda: sink._refusing is None), timeout=10)
            assert sentinel.wait_for_more(50)
            sentinel.healthy()
            assert longest_wait(sentinel) < 1.0
            lost = px.metric("kafkalens_request_log_dropped_lines_total", reason="queue_full")
    finally:
        stop_draining.set()
        if drainer.is_alive():
            drainer.join(5)
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(reader, 1 << 20):
                received.extend(chunk)
        os.close(reader)
    assert received.endswith(b"\n")
    lines = [json.loads(line) for line in received.splitlines()]
    ids = [
        line["correlation_id"]
        for line in lines
        if line["event"] == "request" and line["client_id"] == "sentinel"
    ]
    assert ids[:50] == list(range(1, 51))  # what came before the disk stuck is all there
    missing = set(range(1, ids[-1] + 1)) - set(ids)
    assert 0 < len(missing) <= lost  # the gap: lines refused while it was stuck


def test_a_write_that_fails_halfway_is_cut_back_to_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = request_log._write_all
    failing = threading.Event()

    def half_then_enospc(fd: int, data: bytes) -> None:
        if not failing.is_set():
            return real(fd, data)
        real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(request_log, "_write_all", half_then_enospc)
    path = tmp_path / "r.log"
    metrics = Metrics()
    sink = LineSink(str(path), flush_interval=30, metrics=metrics)
    with capture_logs() as logs:
        sink.msg(b'{"n":1}')
        sink.flush()
        failing.set()
        for n in range(2, 12):
            sink.msg(json.dumps({"n": n}).encode())
        sink.flush()
        assert [x["n"] for x in file_lines(path)] == [1]  # not half of the batch
        failing.clear()
        sink.msg(b'{"n":12}')
        sink.close()
    assert [x["n"] for x in file_lines(path)] == [1, 12]
    assert dropped(metrics, "write_failed") == 10
    assert sample(metrics, "kafkalens_request_log_errors_total") == 1
    assert [e["event"] for e in logs] == [
        "request log: cannot write; dropping lines",
        "request log: writing again",
    ]
    assert logs[0]["error"] == "ENOSPC No space left on device"
    assert logs[1]["dropped_lines"] == 10 and logs[1]["write_errors"] == 1


def test_config_keys_have_the_documented_defaults_and_are_checked() -> None:
    documented = load_config(REPO / "config" / "kafkalens.yaml")
    assert documented.request_log.flush_interval_seconds == 0.5 <= 1.0
    assert documented.request_log.max_queued_bytes == 16 * 1024 * 1024
    assert parse_config({}).request_log == documented.request_log
    # durations take units (the config language's seconds kind): "1s" is one second
    assert (
        parse_config(
            {"request_log": {"flush_interval_seconds": "1s"}}
        ).request_log.flush_interval_seconds
        == 1.0
    )
    for key, value, error in (
        ("flush_interval_seconds", 0, "must be a positive number, got 0"),
        ("flush_interval_seconds", "0s", "must be a positive number, got '0s'"),
        (
            "flush_interval_seconds",
            "fast",
            "must be seconds, or with a unit: 500ms, 30s, 10m, 1h, 1d, 1h30m; got 'fast'",
        ),
        ("max_queued_bytes", 0, "must be a positive integer, got 0"),
    ):
        with pytest.raises(ConfigError) as raised:
            parse_config({"request_log": {key: value}})
        assert str(raised.value) == f"request_log.{key}: {error}"


def test_live_a_long_poll_fetch_at_consumer_close_gets_a_request_incomplete_line(
    tansu_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """The issue's case with a real client and broker: kafka-python's consumer long-polls
    an idle partition through the proxy to tansu and is closed while its Fetch waits."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic
    from support.observed import observed_in_front_of

    with observed_in_front_of(tansu_factory, tmp_path / "requests.log") as px:
        admin = KafkaAdminClient(bootstrap_servers=px.bootstrap)
        admin.create_topics([NewTopic("idle", 1, 1)])
        admin.close()
        consumer = KafkaConsumer(
            bootstrap_servers=px.bootstrap, fetch_max_wait_ms=8000, enable_auto_commit=False
        )
        consumer.assign([TopicPartition("idle", 0)])
        consumer.seek_to_end()
        assert consumer.poll(timeout_ms=1000) == {}
        assert px.pending_total() >= 1  # the Fetch, waiting for records that never come
        consumer.close()
        px.wait_all_closed()
        fetches = [
            line
            for line in px.lines()
            if line["event"] == "request_incomplete" and line["api"] == "Fetch"
        ]
    assert len(fetches) == 1
    fetch = fetches[0]
    assert fetch["reason"] == "client_eof"
    assert fetch["client_software_name"] == "kafka-python"  # identity, as on every line
    assert fetch["client_id"] and fetch["correlation_id"] >= 0
    assert 500 <= fetch["latency_ms"] < 8000  # closed while it long-polled
    assert fetch["topics"] == ["idle"]
