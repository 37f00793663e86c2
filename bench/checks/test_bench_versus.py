"""`python -m bench.proxy.versus` (kafkalens beside the other proxies, in front of Apache Kafka).

Two guards, neither judging the figures: the goals' arithmetic on made-up summaries
(met, missed and not measured as the issue states them), and a tiny run of the real
harness (small requests and idle connections only) in which every arm that can run here
starts, answers each small request without an error code, and lands in RESULTS.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.proxy import versus_report

REPO = Path(__file__).resolve().parents[2]


def _summary(arm: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "summary", "arm": arm, **fields}


def test_goals_against_kroxylicious_and_haproxy() -> None:
    summaries = [
        _summary(
            "direct", rate_low_java_publish_p50_us=1000.0, rate_low_java_publish_p99_us=3000.0
        ),
        _summary(
            "haproxy",
            produce_mb_s=100.0,
            consume_mb_s=200.0,
            apiversions_added_p50_us=80.0,
            rate_low_java_publish_p50_us=1100.0,
        ),
        _summary(
            "kroxylicious",
            cpu_s_per_gb=2.0,
            cpu_us_per_small_request=150.0,
            rate_low_java_publish_p50_us=1300.0,
            rate_low_java_publish_p99_us=3500.0,
            idle_1000_kb_per_connection=9.0,
        ),
        _summary(
            "kafkalens",
            produce_mb_s=96.0,  # 0.96x haproxy: met
            consume_mb_s=180.0,  # 0.90x: missed
            apiversions_added_p50_us=101.0,  # 1.26x haproxy's 80: missed
            cpu_s_per_gb=2.0,  # equal: "at most" is met
            cpu_us_per_small_request=151.0,  # missed
            rate_low_java_publish_p50_us=1200.0,  # +200 against Kroxylicious's +300: met
            rate_low_java_publish_p99_us=3500.0,  # +500, equal to Kroxylicious's: not lower
            idle_1000_kb_per_connection=3.0,
        ),
    ]
    versus_report.add_relative(summaries)
    verdicts = {g["goal"]: g["met"] for g in versus_report.judge(summaries)}
    assert verdicts == {
        "java, low rate: added publish p50 (µs) < Kroxylicious's": True,
        "java, low rate: added publish p99 (µs) < Kroxylicious's": False,
        "CPU s per GB (saturation) <= Kroxylicious's": True,
        "CPU µs per small request <= Kroxylicious's": False,
        "produce MB/s >= 0.95x haproxy's": True,
        "consume MB/s >= 0.95x haproxy's": False,
        "added p50 µs, ApiVersions <= 1.25x haproxy's": False,
        "added p50 µs, Metadata <= 1.25x haproxy's": None,  # not measured
        "added p50 µs, OffsetCommit <= 1.25x haproxy's": None,
        "KB per idle connection (1,000) <= Kroxylicious's": True,
    }
    kafkalens = next(s for s in summaries if s["arm"] == "kafkalens")
    assert kafkalens["rate_low_java_publish_p50_added_us"] == 200.0


def _install_bench_peers() -> str | None:
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        return f"no {', '.join(missing)} on PATH"
    done = subprocess.run(
        ["bash", str(REPO / "bench" / "peers" / "install")], capture_output=True, text=True
    )
    return None if done.returncode == 0 else f"bench/peers/install failed: {done.stderr[-2000:]}"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    reason = _install_bench_peers()
    if reason is not None:
        if os.environ.get("KAFKALENS_REQUIRE_PEERS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("versus")
    cmd = [sys.executable, "-m", "bench.proxy.versus", "--size", "tiny", "--workloads", "small,idle"]
    cmd += ["--arms", "direct,haproxy,kroxylicious,kafkalens", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return out, rows


@pytest.mark.broker  # Apache Kafka, and Kroxylicious in front of it: JVMs
@pytest.mark.java
def test_every_arm_answers_small_requests(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = tiny_run
    run = rows[0]
    expected = {"direct", "kroxylicious", "kafkalens"} | (
        {"haproxy"} if shutil.which("haproxy") else set()
    )
    assert expected <= set(run["arms"]), run["skipped"]
    small = [r for r in rows if r.get("workload") == "small"]
    for arm in run["arms"]:
        apis = {r["api"]: r for r in small if r["arm"] == arm}
        assert set(apis) == {"ApiVersions", "Metadata", "OffsetCommit"}, arm
        for api, row in apis.items():
            assert row["response_errors"] == [], (arm, api)
            assert row["count"] == 100 and 0 < row["p50_us"] <= row["p99_us"]
            if arm != "direct":  # paired with the broker itself; the front's own CPU
                assert row["baseline"]["count"] == 100 and row["cpu_s"] is not None
    idle = {r["arm"]: r for r in rows if r.get("workload") == "idle"}
    assert set(idle) == set(run["arms"])
    assert idle["kafkalens"]["rss_open_mb"] > 0
    markdown = (out / "RESULTS.md").read_text()
    assert (
        "## Goals" in markdown and "| kafkalens |" in markdown and "Kroxylicious 0.12.0" in markdown
    )
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
