"""Apache Kafka brokers failing under load for as long as asked, through kafkalens's
gateway: the load, faults and checks of tests/interop/test_kafka_faults.py, in cycles.

    .venv/bin/python -m bench.proxy.kafka_faults --minutes 30
    .venv/bin/python -m bench.proxy.kafka_faults --minutes 10 --version 4.2.2

Starts a 3-node KRaft cluster of its own (replication factor 3, min.insync.replicas=2)
from the jars `bash tests/peers/install` put in tests/peers/build, a gateway in this
process with the hooks `kafkalens proxy` runs (request log in the work directory), and
the test's four clients (librdkafka: an idempotent producer, a classic group consumer;
the Java client: a producer that is not idempotent, a KIP-848 consumer). Then, until
`--minutes` are up, cycles: a broker killed (`kill -9`) and started again, another shut
down cleanly and started again, each time /readyz, the gateway's leaders against the
cluster's own and the clients' progress checked, one line printed per fault. At the end
the test's checks: every acknowledged record consumed by both groups with its checksum,
the idempotent producer's records once each in the topic, a request log line for every
request the clients sent, nothing left pending. Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.faults import (  # noqa: E402
    Load,
    check_nothing_lost,
    check_request_log,
    create_topic,
    listeners_of,
    observed_gateway,
    survive,
)
from support.kafka import NEWEST, kafka_libs  # noqa: E402

from proxy.apache_kafka import KafkaCluster  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--version", default=NEWEST, help="of tests/peers/kafka-versions")
    parser.add_argument("--out", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        work = args.out or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        cluster = KafkaCluster(libs=kafka_libs(args.version), work_dir=work / "cluster", nodes=3)
        with cluster:
            return soak(cluster, work, args.minutes)


def soak(cluster: KafkaCluster, work: Path, minutes: float) -> int:
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, replicas=3)
    start = time.monotonic()
    end = start + minutes * 60
    with observed_gateway(cluster, work / "requests.log") as (px, ports):
        load = Load(px.bootstrap, topic)
        try:
            load.goes_on()
            cycle = 0
            while time.monotonic() < end:
                cycle += 1
                for node, how in (((cycle - 1) % 3 + 1, "kill"), (cycle % 3 + 1, "stop")):
                    survive(cluster, px, ports, load, node, how)
                    acked, consumed = load.progress()[:2], load.progress()[2:]
                    print(
                        f"{time.monotonic() - start:7.0f}s  cycle {cycle}: node {node} {how}"
                        f" and back; acknowledged {acked}, consumed {consumed}",
                        flush=True,
                    )
            load.finish()
            px.wait_all_closed(60)
            pending = px.pending_total()
            lines = px.lines()
            listener_of = listeners_of(px, gateway=True)
        except AssertionError as failed:
            print(f"FAILED: {failed}", flush=True)
            return 1
        finally:
            load.kill()
    try:
        assert pending == 0, f"{pending} requests still pending"
        duplicates = check_nothing_lost(load, cluster.bootstrap)
        reasons = check_request_log(
            lines, load, {"bootstrap", "broker-1", "broker-2", "broker-3"}, listener_of
        )
    except AssertionError as failed:
        print(f"FAILED: {failed}", flush=True)
        return 1
    total = sum(len(p.acked) for p in load.producers)
    print(
        f"passed: {total:,} records acknowledged, all consumed by both groups;"
        f" duplicates {duplicates} (jvp is not idempotent);"
        f" {len(lines):,} request log lines, incomplete by reason {dict(reasons)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
