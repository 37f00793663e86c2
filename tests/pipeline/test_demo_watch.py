"""The demo rotates its request log on a timer, so that `kafkalens watch` (which reads
rotated files) can be shown on it: rotated files appear while clients work, and the
watch's spool stages each exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.paths import REPO

from pipeline.spool import Spool
from proxy.demo import rotate_log
from proxy.observe.request_log import LineSink
from proxy.tansu import free_port


def test_rotate_log_shifts_files_and_the_sink_writes_anew(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    sink = LineSink(str(log), max_bytes=0, backups=3)
    rotate_log(sink, 3)  # nothing written: no empty rotated file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.log"]
    for n in range(4):
        sink.msg(b'{"n":%d}' % n)
        sink.flush()
        rotate_log(sink, 3)
    sink.msg(b'{"n":4}')
    sink.close()
    assert log.read_text() == '{"n":4}\n'
    # the oldest beyond `backups` is overwritten, as the proxy's own rotation does
    assert [(tmp_path / f"requests.log.{i}").read_text() for i in (1, 2, 3)] == [
        '{"n":3}\n', '{"n":2}\n', '{"n":1}\n']
    assert not (tmp_path / "requests.log.4").exists()


def _requests(paths: list[Path]) -> list[dict]:
    lines = [json.loads(x) for p in paths for x in p.read_text().splitlines() if x]
    return [e for e in lines if e["event"] == "request"]


@pytest.mark.broker  # `kafkalens demo` starts its tansu broker
def test_demo_log_rotates_for_watch(tmp_path: Path) -> None:
    from kafka import KafkaProducer

    port, metrics_port = free_port(), free_port()
    log = tmp_path / "demo" / "requests.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "demo", "--port", str(port), "--metrics-port",
         str(metrics_port), "--log", str(log), "--rotate-every", "1"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        banner = ""
        while "Ctrl-C" not in banner:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            banner += line
        assert f"rotated every 1 s (kafkalens watch {log.parent})" in banner
        for n in range(2):
            producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}",
                                     client_id=f"demo-{n}")
            producer.send("demo-topic", b"hello").get(15)
            producer.close()
            time.sleep(2.5)  # a rotation or two in between
        rotated = sorted(log.parent.glob("requests.log.[0-9]*"))
        produced = {e["client_id"] for e in _requests(rotated) if e["api"] == "Produce"}
        assert produced == {"demo-0", "demo-1"}, [p.name for p in rotated]
        # The watch's spool stages every rotated file once, however they shift.
        spool = Spool(log.parent, tmp_path / "spool", "*.log.[0-9]*", settle_seconds=0)
        staged = spool.collect()
        assert staged and spool.collect() == []
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.communicate()
