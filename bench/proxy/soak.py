"""Soak a `kafkalens proxy` process: a steady mix of real clients' requests for half an
hour or more, its RSS, open files and pending requests looked at every few seconds, a
least-squares line fitted through RSS and open files after a warm-up, and once the
clients leave, what is still held (bench/README.md, "Soak").

    .venv/bin/python -m bench.proxy.soak --minutes 30 --json soak.json

In front of one Apache Kafka node (default; `--broker tansu` for tansu): two librdkafka
producers, a consumer group of two reading it all back (Fetch, Heartbeat, OffsetCommit,
Metadata), a member joining and leaving every `--churn` seconds, and small requests on
connections that come and go. It exits 1 when RSS or open files grow by more than their
tolerance over the span, or something is left once the clients are gone.

The proxy process and the load are tests/support/load.py's, the measure and the verdict
tests/support/soak.py's; tests/proxy/test_soak.py holds the same for a few minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from support.load import HOST, GroupLoad, Load, ProxyProcess
from support.paths import REPO
from support.soak import Look, Plan, Verdict, hold

from proxy.tansu import TansuBroker, free_port

Row = dict[str, Any]


def soak_tansu(plan: Plan, out: Path) -> tuple[Verdict, list[Look], dict[str, int]]:
    """In front of tansu: producers, consumers without a group (tansu's group joins wait
    out the rebalance timeout), small requests."""
    broker_port = free_port()
    proxy = ProxyProcess(out, f"{HOST}:{broker_port}").start()
    broker = TansuBroker(port=broker_port, advertised_port=proxy.port, log_path=out / "tansu.log")
    try:
        broker.start()
        return hold(proxy, Load(proxy.bootstrap).start, plan, _say)
    finally:
        proxy.kill()
        broker.stop()


def soak_kafka(
    plan: Plan, out: Path, version: str, churn: float = 60.0
) -> tuple[Verdict, list[Look], dict[str, int]]:
    """In front of one Apache Kafka node that advertises the proxy: `GroupLoad`."""
    from proxy.apache_kafka import KafkaCluster

    libs = REPO / "tests" / "peers" / "build" / f"kafka-{version}"
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise SystemExit(f"no Apache Kafka {version} jars in {libs}: bash tests/peers/install")
    port = free_port()
    cluster = KafkaCluster(
        libs=libs,
        work_dir=out / "kafka",
        nodes=1,
        advertise_proxied={1: f"{HOST}:{port}"},
        # a soak of hours writes some GB: old segments go
        properties={"log.retention.bytes": str(256 * 1024 * 1024)},
    )
    with cluster:
        proxy = ProxyProcess(out, cluster.node(1).proxied_address, port=port).start()
        try:
            return hold(proxy, lambda: GroupLoad(proxy.bootstrap).start(churn=churn), plan, _say)
        finally:
            proxy.kill()


def _say(text: str) -> None:
    print(text, flush=True)


def report(verdict: Verdict, looks: list[Look], counts: dict[str, int], plan: Plan) -> Row:
    return {
        "plan": asdict(plan),
        "counts": counts,
        "rss": {**asdict(verdict.rss), "growth": verdict.rss.growth, "flat": verdict.rss_flat},
        "open_files": {
            **asdict(verdict.files),
            "growth": verdict.files.growth,
            "flat": verdict.files_flat,
        },
        "after": asdict(verdict.after),
        "idle_files": verdict.idle_files,
        "ok": verdict.ok,
        "looks": [{"seconds": round(look.seconds, 1), **asdict(look.figures)} for look in looks],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.soak", description=__doc__)
    parser.add_argument("--broker", choices=("apache-kafka", "tansu"), default="apache-kafka")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument(
        "--warmup", type=float, help="minutes left out of the trend (default: a sixth, at most 5)"
    )
    parser.add_argument("--every", type=float, default=15.0, help="seconds between lines")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between looks")
    parser.add_argument("--rss-tolerance", type=float, default=3.0, help="MB over the span")
    parser.add_argument("--churn", type=float, default=60.0, help="seconds between joins, 0: none")
    parser.add_argument("--kafka-version", default=_newest_kafka())
    parser.add_argument("--json", type=Path, help="write the looks and the trend here")
    parser.add_argument("--out", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    warmup = args.warmup if args.warmup is not None else min(5.0, args.minutes / 6)
    plan = Plan(args.minutes, warmup, args.every, args.sample, args.rss_tolerance)

    def run(out: Path) -> int:
        if args.broker == "tansu":
            verdict, looks, counts = soak_tansu(plan, out)
        else:
            verdict, looks, counts = soak_kafka(plan, out, args.kafka_version, args.churn)
        _say(f"totals    {'  '.join(f'{k} {v}' for k, v in counts.items())}")
        for line in verdict.lines():
            _say(line)
        if args.json is not None:
            args.json.write_text(json.dumps(report(verdict, looks, counts, plan), indent=1))
        return 0 if verdict.ok else 1

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        return run(args.out)
    with tempfile.TemporaryDirectory(prefix="kafkalens-soak-") as work:
        return run(Path(work))


def _newest_kafka() -> str:
    return (REPO / "tests" / "peers" / "kafka-versions").read_text().split()[0]


if __name__ == "__main__":
    sys.exit(main())
