"""Probes and scrapes always get through: a `kafkalens proxy` process, with the shipped
admin limits, flooded from one loopback address (127.0.0.2) while the kubelet's probes
(/healthz, /readyz) and a real Prometheus's scrapes come from another (127.0.0.1).
Judged by the probes' own answers and by Prometheus's `up` and alerts, never by what
kafkalens says about itself.

The upstream is a plain TCP listener: /readyz only checks that the broker accepts a TCP
connection, and no Kafka traffic is involved here.
"""

from __future__ import annotations

import socket
import statistics
import time
from pathlib import Path

from support.prometheus import Sidecar, check_dashboard, churning, open_idle, prometheus, timed_get

from proxy.tansu import free_port

PATHS = ("/healthz", "/readyz", "/metrics")
# The sidecar's probes in deploy/kubernetes give up after timeoutSeconds: 3.
PROBE_TIMEOUT_SECONDS = 3.0
FLOOD = 1000


def probe_for(port: int, seconds: float) -> dict[str, list[tuple[int | str, float]]]:
    """Every path in turn, every 50 ms, for `seconds`: {path: [(status, seconds), ...]}."""
    answers: dict[str, list[tuple[int | str, float]]] = {path: [] for path in PATHS}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in PATHS:
            answers[path].append(timed_get(port, path))
        time.sleep(0.05)
    return answers


def summary(answers: dict[str, list[tuple[int | str, float]]]) -> str:
    parts = []
    for path, got in answers.items():
        took = sorted(t for _, t in got)
        p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
        parts.append(
            f"{path}: {len(got)} answers, p50 {statistics.median(took) * 1000:.1f} ms,"
            f" p99 {p99 * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms"
        )
    return "; ".join(parts)


def all_answered(answers: dict[str, list[tuple[int | str, float]]]) -> None:
    for path, got in answers.items():
        statuses = {status for status, _ in got}
        assert statuses == {200}, (path, statuses)
        slowest = max(t for _, t in got)
        assert slowest < PROBE_TIMEOUT_SECONDS, (path, slowest)


def test_a_flood_from_one_address_denies_no_probe_or_scrape_from_another(tmp_path: Path) -> None:
    broker = socket.create_server(("127.0.0.1", 0))  # accepts: all /readyz looks at
    upstream = f"127.0.0.1:{broker.getsockname()[1]}"
    # the admin limits (max_connections, max_connections_per_address) as shipped
    proc = Sidecar(tmp_path / "kafkalens", [("main", f"127.0.0.1:{free_port()}", upstream)]).start()
    admin = proc.admin
    try:
        deadline = time.monotonic() + 30
        while proc.status("/readyz") != 200:
            assert time.monotonic() < deadline, proc.output.read_text()
            time.sleep(0.1)
        with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{admin}"]) as prom:
            started = time.time()
            # 1,000 idle connections held open from one address
            idle = open_idle("127.0.0.2", admin, FLOOD)
            try:
                held = probe_for(admin, 3)
            finally:
                for sock in idle:
                    sock.close()
            # the same address coming back as fast as it is turned away
            flooder = churning("127.0.0.2", admin, FLOOD, 6)
            try:
                churned = probe_for(admin, 4)
            finally:
                out, _ = flooder.communicate(timeout=60)
            flood_connections = int(out.strip())
            ended = time.time()
            window = f"{int(ended - started) + 1}s"

            # Prometheus scraped it every second all along, from 127.0.0.1
            assert prom.value(f'min_over_time(up{{job="kafkalens"}}[{window}])') == 1
            scrapes = prom.value(f'count_over_time(up{{job="kafkalens"}}[{window}])')
            # (a scrape Prometheus itself skipped on a loaded machine is no failure: the
            # failed ones are the up == 0 samples above)
            assert scrapes is not None and scrapes >= (ended - started) / 2, scrapes
            slowest_scrape = prom.value(f'max_over_time(scrape_duration_seconds{{job="kafkalens"}}[{window}])')
            # ... and the flood made the admin port's alert fire
            alert = prom.wait_firing("KafkalensAdminPortRefusing", 30, reason="per_address_limit")
            assert alert["labels"]["instance"] == f"127.0.0.1:{admin}"
            replaced = prom.value(
                f'sum(increase(kafkalens_admin_refused_total{{reason="per_address_limit"}}[{window}]))'
            )
            check_dashboard(prom, "flood", {"instance": f"127.0.0.1:{admin}"}, started)
    finally:
        proc.stop()
        broker.close()
    print(
        f"\n1,000 idle connections held from 127.0.0.2: {summary(held)}"
        f"\n127.0.0.2 reconnecting ({flood_connections} connections in 6 s): {summary(churned)}"
        f"\nPrometheus: {scrapes:.0f} scrapes, all up, slowest {slowest_scrape:.3f} s;"
        f" per_address_limit replacements (increase) {replaced:.0f}"
    )
    all_answered(held)
    all_answered(churned)
    assert flood_connections > FLOOD  # it did come back
