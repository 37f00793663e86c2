"""The fleet behind support.synth's clients: brokers leading partitions, offsets that
move, and the fields the proxy logs about them (the shared contract of #20 and #21).

Each connection goes to one broker, whose sidecar writes its lines; a Fetch there
names the partitions that broker leads (`positions`), the consumer's group only when
that broker coordinates the group (a sidecar knows the group only if it saw the
membership), an OffsetCommit the group's offsets with the high watermark that
sidecar last saw. Followers fetch with a replica id; KIP-714 clients push their own
metrics to the telemetry log.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from support.synth import Client

Event = dict[str, Any]

PARTITIONS = {"orders": 6, "payments": 3, "legacy-events": 2, "metrics": 4}
MAX_FETCH_RECORDS = 40  # per partition and Fetch: consumers fall behind
FOLLOWER_FETCH_RECORDS = 2000  # followers keep up, mostly
TELEMETRY = {  # role -> (OTLP metric name, type, attribute name or None)
    "producer": (("org.apache.kafka.producer.record.queue.time.avg", "gauge", None),
                 ("org.apache.kafka.producer.node.request.latency.avg", "gauge", "node.id"),
                 ("org.apache.kafka.producer.topic.record.send.total", "sum", "topic")),
    "consumer": (("org.apache.kafka.consumer.poll.idle.ratio.avg", "gauge", None),
                 ("org.apache.kafka.consumer.fetch.manager.fetch.latency", "histogram", None)),
}


def _name_sum(text: str) -> int:
    return sum(map(ord, text))


class Fleet:
    def __init__(self, rng: random.Random, brokers: int) -> None:
        self.rng = rng
        self.brokers = max(1, brokers)
        self.conn_broker: dict[str | None, int] = {}
        self.hw = {(t, p): 10_000 + rng.randrange(5000)
                   for t, n in PARTITIONS.items() for p in range(n)}
        self.position: dict[tuple[str, str, int], int] = {}
        self.seen_hw: dict[tuple[int, str, int], int] = {}
        self.home: dict[str, int] = {}
        self.sums: dict[tuple[str, str, str], float] = {}
        self.correlation = 0

    # --- where things are ---------------------------------------------------------

    def partitions(self, topic: str) -> range:
        return range(PARTITIONS.get(topic, 1))

    def leader(self, topic: str, partition: int) -> int:
        return (_name_sum(topic) + partition) % self.brokers

    def coordinator(self, group: str) -> int:
        return _name_sum(group) % self.brokers

    def connect(self, conn: str) -> int:
        broker = self.rng.randrange(self.brokers)
        self.conn_broker[conn] = broker
        return broker

    def sidecar(self, event: Event) -> int:
        if event.get("event") == "client_metric":
            return self.home[event["client_instance_id"]]
        return self.conn_broker.get(event.get("conn"), 0)

    # --- offsets ------------------------------------------------------------------

    def produced(self, c: Client, per_topic: dict[str, Any]) -> None:
        for topic, counts in per_topic.items():
            led = [p for p in self.partitions(topic) if self.leader(topic, p) == c.broker]
            partition = self.rng.choice(led or list(self.partitions(topic)))
            key = (topic, partition)
            self.hw[key] = self.hw.get(key, 0) + counts["records"]

    def _assigned(self, c: Client, broker: int | None) -> list[tuple[str, int]]:
        p = c.profile
        return [(t, q) for t in p.topics for q in self.partitions(t)
                if q % p.instances == c.index and (broker is None or self.leader(t, q) == broker)]

    def _advance(self, key: tuple[str, str, int], hw: int, isolation: int,
                 most: int = MAX_FETCH_RECORDS) -> Event:
        """The position of `key` (owner, topic, partition) moved by one Fetch."""
        start = self.position.setdefault(key, hw - self.rng.randrange(300))
        lso = max(start, hw - self.rng.randint(0, 3)) if isolation else hw
        end = lso if isolation else hw
        got = min(end - start, self.rng.randint(0, most))
        self.position[key] = start + got
        return {"topic": key[1], "partition": key[2], "fetch_offset": start,
                "next_offset": start + got, "high_watermark": hw, "last_stable_offset": lso,
                "log_start_offset": 0, "lag": max(0, end - start - got)}

    def fetched(self, c: Client, e: Event) -> None:
        """A consumer's Fetch to its connection's broker: positions and matching counts."""
        p = c.profile
        owner = p.group or c.instance_id
        positions = []
        for topic, q in self._assigned(c, c.broker):
            hw = self.hw.get((topic, q), 0)
            self.seen_hw[(c.broker, topic, q)] = hw
            positions.append(self._advance((owner, topic, q), hw, p.isolation_level))
        e.update(isolation_level=p.isolation_level, positions=positions)
        _record_counts(e, positions)
        if p.group and self.coordinator(p.group) == c.broker:
            e["consumer_group"] = p.group

    def committed(self, c: Client) -> list[Event]:
        group = c.profile.group
        assert group is not None
        out = []
        for topic, q in self._assigned(c, None):
            offset = self.position.get((group, topic, q))
            if offset is None:
                continue
            hw = self.seen_hw.get((c.broker, topic, q))
            out.append({"topic": topic, "partition": q, "offset": offset, "high_watermark": hw,
                        "lag": None if hw is None else max(0, hw - offset)})
        return out

    def follower_fetch(self, ts: str) -> Event:
        """A follower broker's Fetch (replica id set) from a partition leader's sidecar."""
        follower = self.rng.randrange(self.brokers)
        leader = (follower + 1 + self.rng.randrange(max(1, self.brokers - 1))) % self.brokers
        conn = f"r{follower}-{leader}"
        self.conn_broker[conn] = leader
        positions = [self._advance((f"replica-{follower}", t, q), self.hw[(t, q)], 0,
                                   FOLLOWER_FETCH_RECORDS)
                     for t in PARTITIONS for q in self.partitions(t) if self.leader(t, q) == leader]
        self.correlation += 1
        e: Event = {
            "ts": ts, "event": "request", "conn": conn, "listener": "plaintext",
            "client_address": f"10.1.0.{follower + 1}:{40000 + leader}",
            "client_id": f"broker-{follower}", "client_instance_id": None,
            "client_software_name": None, "client_software_version": None, "principal": None,
            "api_key": 1, "api": "Fetch", "api_version": 15, "correlation_id": self.correlation,
            "latency_ms": round(self.rng.uniform(1, 500), 3), "errors": [],
            "max_wait_ms": 500, "replica_id": follower, "isolation_level": 0,
            "topics": sorted({p["topic"] for p in positions}), "positions": positions,
        }
        _record_counts(e, positions)
        return e

    # --- telemetry ----------------------------------------------------------------

    def telemetry(self, ts: str, clients: list[Client]) -> Event:
        """One data point a KIP-714 client pushed (a line of the telemetry log)."""
        pushing = [c for c in clients if c.profile.kip714] or clients
        c = self.rng.choice(pushing)
        p = c.profile
        role = "producer" if p.role == "producer" else "consumer"
        metric, kind, attribute = self.rng.choice(TELEMETRY[role])
        attributes = {}
        if attribute == "node.id":
            attributes[attribute] = str(self.rng.randrange(self.brokers))
        elif attribute == "topic":
            attributes[attribute] = self.rng.choice(p.topics)
        value = round(self.rng.uniform(0, 100), 3)
        count = None
        if kind == "sum":  # cumulative: grows from push to push
            series = (c.instance_id, metric, repr(sorted(attributes.items())))
            value = self.sums[series] = round(self.sums.get(series, 0.0) + value, 3)
        elif kind == "histogram":
            count = self.rng.randint(1, 500)
            value = round(value * count, 3)
        self.home.setdefault(c.instance_id, self.rng.randrange(self.brokers))
        return {
            "ts": ts, "event": "client_metric", "client_instance_id": c.instance_id,
            "client_id": p.client_id, "client_software_name": p.software[0],
            "client_software_version": p.software[1], "principal": p.principal,
            "listener": "plaintext", "metric": metric, "type": kind, "value": value,
            "count": count, "attributes": attributes,
        }


def _record_counts(e: Event, positions: list[Event]) -> None:
    """The response's record counts per topic, as the positions advanced."""
    per_topic: dict[str, dict[str, int]] = {}
    for p in positions:
        records = p["next_offset"] - p["fetch_offset"]
        if records:
            counts = per_topic.setdefault(p["topic"], {"batches": 0, "records": 0, "bytes": 0})
            counts["batches"] += 1
            counts["records"] += records
            counts["bytes"] += records * 100 + 61
    stats = e.setdefault("record_stats", {})
    stats.update(per_topic=per_topic,
                 **{k: sum(v[k] for v in per_topic.values()) for k in ("batches", "records", "bytes")})
