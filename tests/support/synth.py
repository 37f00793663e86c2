"""Synthetic kafkalens request logs, for the tests and the benchmark.

A handful of client profiles (modern Java clients with KIP-714 instance ids, an
old kafka-python producer on Produce v2, a sarama consumer on removed Fetch and
JoinGroup versions, consumer groups with different assignors, a KIP-848 group,
an admin tool) make requests over connections that open, learn their identity
part way through (ApiVersions, GetTelemetrySubscriptions, SASL) and close. Bad lines
are mixed in on request. `events` yields the records as dicts so a test can compute
what the report must say; `write_rotated` lays them out as the proxy does.

The clients talk to a fleet of brokers (synth_fleet.py): Fetch and OffsetCommit lines
carry the lag fields (#21), and on request followers' fetches (`follower_every`) and
client telemetry lines (`telemetry_every`, #20) are mixed in; `sidecar(event)` names
the broker whose sidecar wrote a line, to lay the logs out per sidecar.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import random
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.synth_fleet import Fleet

Event = dict[str, Any]

API_KEYS = {
    "Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8,
    "OffsetFetch": 9, "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12,
    "SyncGroup": 14, "SaslHandshake": 17, "ApiVersions": 18, "CreateTopics": 19,
    "DescribeConfigs": 32, "SaslAuthenticate": 36, "InitProducerId": 22,
    "GetTelemetrySubscriptions": 71, "ConsumerGroupHeartbeat": 68,
}
# Median latency (ms) per api; Fetch is a long poll.
LATENCY = {"Produce": 4.0, "Fetch": 300.0, "Metadata": 1.5, "Heartbeat": 1.0,
           "OffsetCommit": 3.0, "JoinGroup": 50.0, "ConsumerGroupHeartbeat": 2.0}
BAD_SAMPLES = ("not json at all", '{"ts": "2025-01-01T00:00:00Z", "event": "request", "ap',
               "\x00\x01binary", '{"ts": "yesterday", "event": "request"}', "[1, 2, 3]")


@dataclass(frozen=True)
class Profile:
    client_id: str
    software: tuple[str | None, str | None]
    role: str  # producer | consumer | consumer848 | admin
    versions: dict[str, int]
    topics: tuple[str, ...]
    instances: int = 1
    weight: float = 1.0
    kip714: bool = False
    principal: str | None = None
    group: str | None = None
    assignor: str | None = None
    compression: str = "none"
    acks0: bool = False
    fetch_max_wait_ms: int = 500  # 0: Fetches answered at once (no long poll)
    isolation_level: int = 0  # 1: read_committed (lag against the last stable offset)


PROFILES = (
    Profile("orders-service", ("apache-kafka-java", "3.7.0"), "producer",
            {"Produce": 10, "Metadata": 12, "ApiVersions": 3, "InitProducerId": 4},
            ("orders", "payments"), instances=3, weight=4, kip714=True,
            principal="User:orders", compression="zstd"),
    Profile("kafka-python-2.0.2", (None, None), "producer",
            {"Produce": 2, "Metadata": 1, "ApiVersions": 0}, ("legacy-events",),
            instances=2, weight=1.5, compression="gzip"),
    Profile("metrics-agent", ("librdkafka", "2.3.0"), "producer",
            {"Produce": 9, "Metadata": 12, "ApiVersions": 3}, ("metrics",),
            weight=1, acks0=True, compression="lz4"),
    Profile("billing", ("apache-kafka-java", "3.7.0"), "consumer",
            {"Fetch": 16, "Metadata": 12, "ApiVersions": 3, "Heartbeat": 4,
             "OffsetCommit": 9, "JoinGroup": 9, "FindCoordinator": 4},
            ("orders", "payments"), instances=4, weight=3, kip714=True,
            group="billing", assignor="cooperative-sticky", isolation_level=1),
    Profile("legacy-reader", ("sarama", "1.27.0"), "consumer",
            {"Fetch": 3, "Metadata": 1, "ApiVersions": 3, "Heartbeat": 0,
             "OffsetCommit": 1, "JoinGroup": 1, "FindCoordinator": 0},
            ("legacy-events",), instances=2, weight=1.5, group="legacy", assignor="range"),
    Profile("audit", ("apache-kafka-java", "4.0.0"), "consumer848",
            {"Fetch": 17, "Metadata": 13, "ApiVersions": 4, "ConsumerGroupHeartbeat": 0},
            ("payments",), instances=2, weight=1, kip714=True, group="audit",
            fetch_max_wait_ms=0),
    Profile("ops-admin", ("kcat", "1.7.1"), "admin",
            {"Metadata": 4, "ApiVersions": 3, "DescribeConfigs": 0, "CreateTopics": 1},
            ("orders", "metrics"), weight=0.2),
)


@dataclass
class Client:
    profile: Profile
    index: int
    host: str
    instance_id: str
    member_id: str
    conn: str | None = None
    broker: int = 0  # the broker (sidecar) its connection goes to
    port: int = 0
    left: int = 0
    step: int = 0
    opened: float = 0.0
    tally: dict[str, int] = field(default_factory=dict)
    errs: dict[str, int] = field(default_factory=dict)


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Synth:
    """A deterministic stream of log events (seeded), `rate` lines a second on average."""

    def __init__(self, seed: int = 7, start: str = "2025-03-01T12:00:00",
                 rate: float = 200.0, bad_every: int = 0, other_every: int = 0,
                 profiles: tuple[Profile, ...] = PROFILES, brokers: int = 3,
                 follower_every: int = 0, telemetry_every: int = 0) -> None:
        self.rng = random.Random(seed)
        # The fleet's offsets draw from their own generator, so the rest of the stream
        # is what it was before they were added.
        self.fleet = Fleet(random.Random(seed + 1), brokers)
        self.follower_every = follower_every
        self.telemetry_every = telemetry_every
        self.t = dt.datetime.fromisoformat(start).replace(tzinfo=dt.UTC).timestamp()
        self.rate = rate
        self.bad_every = bad_every
        self.other_every = other_every
        self.conns = 0
        self.clients = [
            Client(p, i, f"10.0.{n}.{i + 1}", str(uuid.UUID(int=self.rng.getrandbits(128))),
                   f"{p.client_id}-{i}-{self.rng.getrandbits(32):08x}")
            for n, p in enumerate(profiles) for i in range(p.instances)
        ]
        self.weights = [c.profile.weight for c in self.clients]
        self.correlation = 0

    def events(self, n: int) -> Iterator[Event | str]:
        """n lines: dicts for good lines, str for the raw text of a bad line."""
        for i in range(1, n + 1):
            if self.bad_every and i % self.bad_every == 0:
                yield self.rng.choice(BAD_SAMPLES)
                continue
            self.t += self.rng.expovariate(self.rate)
            client = self.rng.choices(self.clients, self.weights)[0]
            if self.other_every and i % self.other_every == 0:
                yield self._other(client)
                continue
            if self.follower_every and i % self.follower_every == 0:
                yield self.fleet.follower_fetch(iso(self.t))
                continue
            if self.telemetry_every and i % self.telemetry_every == 0:
                yield self.fleet.telemetry(iso(self.t), self.clients)
                continue
            yield self._next(client)

    def sidecar(self, event: Event | str) -> int:
        """The broker whose sidecar wrote the line (bad lines: the first)."""
        return self.fleet.sidecar(event) if isinstance(event, dict) else 0

    def _other(self, c: Client) -> Event:
        """An event the report ignores; its `errors` is not even a list."""
        e = self._base(c, "kip1313_violation", with_identity=True)
        e.update(errors=42, expected_instance_id=c.instance_id)
        return e

    def _next(self, c: Client) -> Event:
        if c.conn is None:
            return self._open(c)
        if c.left <= 0:
            return self._close(c)
        c.left -= 1
        c.step += 1
        return self._request(c, self._pick_api(c))

    def _open(self, c: Client) -> Event:
        self.conns += 1
        c.conn, c.port, c.step = f"c{self.conns}", self.rng.randint(30000, 60000), 0
        c.broker = self.fleet.connect(c.conn)
        c.left, c.opened, c.tally, c.errs = self.rng.randint(50, 400), self.t, {}, {}
        return self._base(c, "connection_open", with_identity=False)

    def _close(self, c: Client) -> Event:
        e = self._base(c, "connection_close", with_identity=True)
        e.update(duration_s=round(self.t - c.opened, 3), bytes_in=sum(c.tally.values()) * 120,
                 bytes_out=sum(c.tally.values()) * 300, requests=dict(c.tally),
                 error_counts=dict(c.errs))
        c.conn = None
        return e

    def _pick_api(self, c: Client) -> str:
        p = c.profile
        handshake = ["ApiVersions"] + (["SaslHandshake", "SaslAuthenticate"] if p.principal else [])
        handshake += ["GetTelemetrySubscriptions"] if p.kip714 else []
        if c.step <= len(handshake):
            return handshake[c.step - 1]
        if c.step == len(handshake) + 1 and p.role == "consumer":
            return "JoinGroup"
        work = {"producer": ["Produce"] * 8 + ["Metadata"],
                "consumer": ["Fetch"] * 6 + ["Heartbeat", "Heartbeat", "OffsetCommit", "Metadata"],
                "consumer848": ["Fetch"] * 6 + ["ConsumerGroupHeartbeat"] * 2 + ["Metadata"],
                "admin": ["Metadata", "Metadata", "DescribeConfigs", "CreateTopics"]}[p.role]
        return self.rng.choice(work)

    def _base(self, c: Client, event: str, with_identity: bool) -> Event:
        p = c.profile
        known = with_identity and c.step >= 1
        after_auth = known and (p.principal is None or c.step > 3)
        telemetry = known and p.kip714 and c.step >= (4 if p.principal else 2)
        return {
            "ts": iso(self.t), "event": event, "conn": c.conn, "listener": "plaintext",
            "client_address": f"{c.host}:{c.port}", "client_id": p.client_id,
            "client_instance_id": c.instance_id if telemetry else None,
            "client_software_name": p.software[0] if known else None,
            "client_software_version": p.software[1] if known else None,
            "principal": p.principal if after_auth else None,
        }

    def _request(self, c: Client, api: str) -> Event:
        p = c.profile
        e = self._base(c, "request", with_identity=True)
        self.correlation += 1
        median = LATENCY.get(api, 2.0)
        if api == "Fetch" and not p.fetch_max_wait_ms:
            median = 5.0  # no long poll: the broker's service time
        e.update(api_key=API_KEYS[api], api=api, api_version=p.versions.get(api, 0),
                 correlation_id=self.correlation,
                 latency_ms=round(median * self.rng.lognormvariate(0, 0.6), 3),
                 request_bytes=self.rng.randint(60, 400), response_bytes=self.rng.randint(40, 900),
                 errors=[])
        if self.rng.random() < 0.01:
            e["errors"] = [self.rng.choice(["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"])]
        self._details(c, api, e)
        c.tally[api] = c.tally.get(api, 0) + 1
        for name in e["errors"]:
            c.errs[name] = c.errs.get(name, 0) + 1
        return e

    def _details(self, c: Client, api: str, e: Event) -> None:
        p = c.profile
        if api in ("Produce", "Fetch"):
            e["topics"] = list(p.topics)
            e["record_stats"] = self._record_stats(p, api)
        if api == "Fetch":
            e["max_wait_ms"] = p.fetch_max_wait_ms
        # Protocol steps answered with an error by design (expected_errors.json).
        if api == "JoinGroup":
            e.update(session_timeout_ms=45_000, rebalance_timeout_ms=300_000)
            if not c.tally.get("JoinGroup"):
                e["errors"] = ["MEMBER_ID_REQUIRED"]
        elif api == "Heartbeat" and c.tally.get("Heartbeat", 0) % 7 == 3:
            e["errors"] = ["REBALANCE_IN_PROGRESS"]
        elif api == "Metadata":
            e["topics"] = list(p.topics)
            if self.rng.random() < 0.05:
                e["errors"] = ["UNKNOWN_TOPIC_OR_PARTITION"]
        if api == "Produce":
            self.fleet.produced(c, e["record_stats"]["per_topic"])
        elif api == "Fetch":
            self.fleet.fetched(c, e)
        elif api == "OffsetCommit" and p.group:
            e["committed"] = self.fleet.committed(c)
        if api == "Produce" and p.acks0:
            e.update(event="request_no_response", latency_ms=None, response_bytes=None)
        if p.group and api in ("JoinGroup", "Heartbeat", "OffsetCommit", "ConsumerGroupHeartbeat"):
            e.update(group_id=p.group, member_id=c.member_id, generation_id=1 + c.index)
            if api == "JoinGroup":
                e.update(protocol_type="consumer", protocol_name=p.assignor)
                if c.index == 0:  # the leader gets the member list
                    e["members"] = p.instances

    def _record_stats(self, p: Profile, api: str) -> dict[str, Any]:
        per_topic = {}
        for topic in p.topics:
            records = self.rng.randint(1, 50)
            per_topic[topic] = {"batches": 1, "records": records, "bytes": records * 100 + 61}
        return {
            "batches": len(per_topic), "records": sum(v["records"] for v in per_topic.values()),
            "bytes": sum(v["bytes"] for v in per_topic.values()), "compression": [p.compression],
            "producer_id": 1000 + p.instances if api == "Produce" else -1, "producer_epoch": 0,
            "transactional": False, "control_batches": 0, "per_topic": per_topic,
        }


def to_line(event: Event | str) -> str:
    return event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))


def _rotate(directory: Path, name: str, gz: bool) -> None:
    """Shift name.N -> name.N+1, then name -> name.1 (compressed if gz): the proxy's way."""
    suffix = ".gz" if gz else ""
    numbered = sorted(
        (int(p.name[len(name) + 1:].removesuffix(".gz")), p)
        for p in directory.glob(f"{name}.*")
        if p.name[len(name) + 1:].removesuffix(".gz").isdigit()
    )
    for n, path in reversed(numbered):
        path.rename(directory / f"{name}.{n + 1}{'.gz' if path.name.endswith('.gz') else ''}")
    active = directory / name
    if gz:
        with active.open("rb") as src, gzip.open(directory / f"{name}.1{suffix}", "wb") as dst:
            dst.write(src.read())
        active.unlink()
    else:
        active.rename(directory / f"{name}.1")


def write_rotated(directory: Path, lines: Iterable[str], lines_per_file: int,
                  gz: bool = False, name: str = "requests.log",
                  truncate_last: bool = False) -> None:
    """Append lines as the proxy would: rotating every `lines_per_file` lines.

    Appends to an existing active file; with truncate_last the final line is cut
    short, as a line still being written when the file is read.
    """
    directory.mkdir(parents=True, exist_ok=True)
    active = directory / name
    count = sum(1 for _ in active.open("rb")) if active.exists() else 0
    out = active.open("a", encoding="utf-8")
    it = iter(lines)
    line = next(it, None)
    while line is not None:
        following = next(it, None)
        if count >= lines_per_file:
            out.close()
            _rotate(directory, name, gz)
            out, count = active.open("a", encoding="utf-8"), 0
        cut = truncate_last and following is None
        out.write(line[: len(line) // 2] if cut else line + "\n")
        count += 1
        line = following
    out.close()
