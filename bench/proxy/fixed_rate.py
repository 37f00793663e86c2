"""Fixed-rate produce and consume, OpenMessaging-Benchmark style, with two clients.

One producer sends records of 1 KiB at a fixed rate (a uniform schedule: record n is due
at start + n / rate, as OMB's rate limiter), one consumer reads them back as they come;
after a warm-up the steady state is measured. Publish
latency runs from the send call to its acknowledgement (acks=all), end-to-end latency
from the send call to the consumer holding the record (the sender's monotonic clock in
the record's first 8 bytes; one machine, one clock); records sent during the warm-up are
not sampled. Producer settings as OMB's Kafka
driver: acks=all, linger.ms=1, batch.size=1 MiB, no compression.

* `java`: the Java client (Apache Kafka's, the broker's version) in
  `bench/peers/java/load/FixedRate.java`, producer and consumer in one JVM, as OMB runs.
* `librdkafka`: confluent-kafka, producer and consumer in one Python process
  (`python -m bench.proxy.fixed_rate`); the consumer is a thread (librdkafka releases the GIL).

Both print one JSON object (the same fields): target and reached rates, counts,
errors, and `publish` / `end_to_end` with p50, p99, p99.9 (`p999_us`), max, mean.
A rate is *sustained* when the steady-state send rate is within 2 % of the target and
every record sent was acknowledged and received.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.proxy.stats import percentile

REPO = Path(__file__).resolve().parents[2]
CLIENTS = ("java", "librdkafka")
RECORD_BYTES = 1024
SUSTAINED = 0.98
# The load JVM: the same for every arm (it is the client, not what is measured).
CLIENT_JVM_OPTS = ("-Xms512m", "-Xmx512m", "-XX:+UseG1GC")
PRODUCER = {
    "acks": "all",
    "linger.ms": 1,
    "batch.size": 1_048_576,
    "compression.type": "none",
    "queue.buffering.max.messages": 1_000_000,
}
CONSUMER = {
    "group.id": "kafkalens-bench-rate",
    "enable.auto.commit": False,
    "max.partition.fetch.bytes": 10_485_760,
}


def run(
    client: str,
    bootstrap: str,
    topic: str,
    rate: float,
    warmup: float,
    seconds: float,
    kafka_version: str,
) -> dict[str, Any]:
    """One fixed-rate run with `client`; its JSON result (`sustained` added)."""
    args = ["--bootstrap", bootstrap, "--topic", topic, "--rate", str(rate)]
    args += ["--size", str(RECORD_BYTES), "--warmup", str(warmup), "--seconds", str(seconds)]
    if client == "java":
        libs = REPO / "tests" / "peers" / "build" / f"kafka-{kafka_version}"
        classes = REPO / "bench" / "peers" / "build" / "load"
        if not (classes / "FixedRate.class").exists():
            raise RuntimeError("the Java load program is not built: bash bench/peers/install")
        cp = f"{libs}/*{os.pathsep}{classes}"
        cmd = ["java", *CLIENT_JVM_OPTS, "-cp", cp, "FixedRate", *args]
    elif client == "librdkafka":
        cmd = [sys.executable, "-m", "bench.proxy.fixed_rate", *args]
    else:
        raise ValueError(f"unknown client {client!r}")
    timeout = warmup + seconds + 120
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{client} fixed-rate run failed: {done.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["sustained"] = sustained(result)
    return result


def sustained(result: dict[str, Any]) -> bool:
    target = result["target_rate"]
    return (
        result["errors"] == 0
        and result["acked"] == result["sent"]
        and result["received"] >= result["sent"]
        and (target <= 0 or result["achieved_rate"] >= SUSTAINED * target)
    )


# --- the librdkafka client, run as `python -m bench.proxy.fixed_rate` --------------------


def _summary(ns: list[int]) -> dict[str, Any]:
    if not ns:
        return {"count": 0}
    ns.sort()
    return {
        "count": len(ns),
        "p50_us": round(percentile(ns, 50) / 1e3, 1),
        "p99_us": round(percentile(ns, 99) / 1e3, 1),
        "p999_us": round(percentile(ns, 99.9) / 1e3, 1),
        "max_us": round(ns[-1] / 1e3, 1),
        "mean_us": round(sum(ns) / len(ns) / 1e3, 1),
    }


def rdkafka_main(argv: Sequence[str] | None = None) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--rate", type=float, default=5000)
    p.add_argument("--size", type=int, default=RECORD_BYTES)
    p.add_argument("--warmup", type=float, default=10)
    p.add_argument("--seconds", type=float, default=60)
    a = p.parse_args(argv)
    clock = time.monotonic_ns
    producer = Producer({"bootstrap.servers": a.bootstrap, **PRODUCER})
    consumer = Consumer({"bootstrap.servers": a.bootstrap, **CONSUMER})
    meta = producer.list_topics(a.topic, timeout=30).topics[a.topic]
    # Each partition's end before the first record is sent: the consumer starts there.
    parts = []
    for n in sorted(meta.partitions):
        _low, high = consumer.get_watermark_offsets(TopicPartition(a.topic, n), timeout=30)
        parts.append(TopicPartition(a.topic, n, high))
    consumer.assign(parts)
    publish: list[int] = []
    e2e: list[int] = []
    counts = {"acked": 0, "errors": 0, "received": 0}
    stop = threading.Event()

    # Only records sent after the warm-up are sampled (as in FixedRate.java).
    start = clock()
    warm_end = start + int(a.warmup * 1e9)

    def delivered(err: object, msg: Any) -> None:
        if err is not None:
            counts["errors"] += 1
            return
        sent = int.from_bytes((msg.value() or b"")[:8], "big")
        if sent >= warm_end:
            publish.append(clock() - sent)
        counts["acked"] += 1

    def read() -> None:
        while not stop.is_set():
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is None:
                    now = clock()
                    sent = int.from_bytes((msg.value() or b"")[:8], "big")
                    if sent >= warm_end:
                        e2e.append(now - sent)
                    counts["received"] += 1

    reader = threading.Thread(target=read, name="consumer")
    reader.start()
    tail = bytes(i % 251 for i in range(8, a.size))
    interval = 1e9 / a.rate if a.rate > 0 else 0.0
    end = warm_end + int(a.seconds * 1e9)
    sent = steady_sent = 0
    steady_start = 0
    at_steady = {"acked": 0, "received": 0}
    steady = False
    while True:
        now = clock()
        if not steady and now >= warm_end:
            steady, steady_start = True, now
            at_steady = {"acked": counts["acked"], "received": counts["received"]}
        if now >= end:
            break
        if interval:
            due = start + int(sent * interval)
            if due > now:
                producer.poll((due - now) / 1e9)
                continue
        try:
            producer.produce(a.topic, clock().to_bytes(8, "big") + tail, on_delivery=delivered)
        except BufferError:
            producer.poll(0.001)
            continue
        producer.poll(0)
        sent += 1
        steady_sent += steady
    steady_s = (clock() - steady_start) / 1e9
    acked_steady = counts["acked"] - at_steady["acked"]
    received_steady = counts["received"] - at_steady["received"]
    producer.flush(30)
    drain = time.monotonic() + 10
    while counts["received"] < sent and time.monotonic() < drain:
        time.sleep(0.01)
    stop.set()
    reader.join()
    consumer.close()
    out = {
        "target_rate": a.rate,
        "achieved_rate": round(steady_sent / steady_s, 1),
        "acked_rate": round(acked_steady / steady_s, 1),
        "received_rate": round(received_steady / steady_s, 1),
        "steady_seconds": round(steady_s, 1),
        "sent": sent,
        "acked": counts["acked"],
        "received": counts["received"],
        "errors": counts["errors"],
        "record_bytes": a.size,
        "publish": _summary(publish),
        "end_to_end": _summary(e2e),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    rdkafka_main()
