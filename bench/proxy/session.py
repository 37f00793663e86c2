"""A real client session, its requests counted by the client itself: `bench.proxy.versus`'s
*session* workload (CPU per request of a realistic mix, not three small apis alike).

One librdkafka producer and one librdkafka consumer in a classic group, as an
application runs them: the producer sends `--rate` records of `--size` bytes a second
(acks=all, librdkafka's defaults otherwise: linger.ms 5), the consumer subscribes to
the topic in group `--group` (auto commit every second, heartbeats every 3 s) and reads
every record back. The session runs from the clients' start (bootstrap, ApiVersions,
Metadata, FindCoordinator, the group join) through `--seconds` of steady traffic to
their close (LeaveGroup).

Which requests the session made is what the clients say they sent: librdkafka's
statistics (`statistics.interval.ms`), each broker connection's `req` counts by api,
summed over every connection of both clients, taken after the producer flushed and the
consumer's last commit. What the clients send while closing (LeaveGroup, and a final
commit) comes after that snapshot and is not counted: a handful of requests in a
session of thousands.

    python -m bench.proxy.session --bootstrap HOST:PORT --topic T --group G --seconds 30

prints one JSON object: `requests` (api name: count, zero counts left out),
`requests_total`, `produced`, `consumed`, `bytes` (record values produced and consumed),
`seconds` (the whole session).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
STATS_MS = 200
PRODUCER = {"acks": "all", "linger.ms": 5, "compression.type": "none"}
COMMIT_SECONDS = 1.0
CONSUMER = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": int(COMMIT_SECONDS * 1000),
    "heartbeat.interval.ms": 3000,
    "session.timeout.ms": 45000,
}
CLIENT_ID = "kafkalens-bench-session"


def run(
    bootstrap: str, topic: str, group: str, seconds: float, rate: float, size: int = 1024
) -> dict[str, Any]:
    """The session in a subprocess (its own librdkafka threads, off this process's
    GIL); its JSON result."""
    cmd = [sys.executable, "-m", "bench.proxy.session", "--bootstrap", bootstrap, "--topic", topic]
    cmd += ["--group", group, "--seconds", str(seconds), "--rate", str(rate), "--size", str(size)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 180, cwd=REPO)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"session failed: {done.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# librdkafka's statistics name one api otherwise than Kafka's protocol does
KAFKA_NAMES = {"ApiVersion": "ApiVersions"}


class Requests:
    """The latest `req` counts of one client's statistics, summed over its brokers."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.updates = 0

    def stats(self, text: str) -> None:
        stats = json.loads(text)
        counts: Counter[str] = Counter()
        for broker in stats.get("brokers", {}).values():
            for api, n in (broker.get("req") or {}).items():
                counts[KAFKA_NAMES.get(api, api)] += n
        self.counts = counts
        self.updates += 1


def _fresh(client: Any, requests: Requests, timeout: float = 10.0) -> None:
    """Polls `client` until two more statistics arrived: counts taken after this call
    include every request made before it."""
    want = requests.updates + 2
    deadline = time.monotonic() + timeout
    while requests.updates < want and time.monotonic() < deadline:
        client.poll(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    from confluent_kafka import Consumer, KafkaError, Producer

    p = argparse.ArgumentParser(prog="python -m bench.proxy.session")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=1000.0, help="records a second")
    p.add_argument("--size", type=int, default=1024)
    a = p.parse_args(argv)

    produced_stats, consumed_stats = Requests(), Requests()
    common = {"bootstrap.servers": a.bootstrap, "statistics.interval.ms": STATS_MS}
    start = time.monotonic()
    producer = Producer(
        {**common, **PRODUCER, "client.id": CLIENT_ID, "stats_cb": produced_stats.stats}
    )
    consumer = Consumer(
        {
            **common,
            **CONSUMER,
            "group.id": a.group,
            "client.id": CLIENT_ID,
            "stats_cb": consumed_stats.stats,
        }
    )
    consumer.subscribe([a.topic])
    value = bytes(i % 251 for i in range(a.size))
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    produced = consumed = 0
    step = 1.0 / a.rate
    due = time.monotonic()
    end = due + a.seconds
    while time.monotonic() < end:
        now = time.monotonic()
        while due <= now and due < end:
            try:
                producer.produce(a.topic, value, on_delivery=delivered)
                produced += 1
                due += step
            except BufferError:
                break
        producer.poll(0)
        for msg in consumer.consume(1000, min(0.01, max(0.0, due - time.monotonic()))):
            error = msg.error()
            if error is None:
                consumed += 1
            elif error.code() != KafkaError._PARTITION_EOF:
                failed.append(str(error))
    left = producer.flush(60)
    deadline = time.monotonic() + 60
    while consumed < produced and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.1):
            if msg.error() is None:
                consumed += 1
    # the last auto commit after the last record, then the counts
    time.sleep(COMMIT_SECONDS + 0.2)
    consumer.poll(0)
    _fresh(producer, produced_stats)
    _fresh(consumer, consumed_stats)
    requests = produced_stats.counts + consumed_stats.counts
    consumer.close()
    seconds = time.monotonic() - start
    if left or failed or consumed < produced:
        print(
            f"session: {left} undelivered, {consumed} of {produced} consumed, {failed[:3]}",
            file=sys.stderr,
        )
        return 1
    out = {
        "requests": dict(sorted(((k, v) for k, v in requests.items() if v), key=lambda kv: -kv[1])),
        "requests_total": sum(requests.values()),
        "producer_requests": sum(produced_stats.counts.values()),
        "consumer_requests": sum(consumed_stats.counts.values()),
        "produced": produced,
        "consumed": consumed,
        "bytes": (produced + consumed) * a.size,
        "rate": a.rate,
        "steady_seconds": a.seconds,
        "seconds": round(seconds, 2),
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
