"""Capture golden Kafka protocol frames from real client libraries talking to tansu.

    .venv/bin/python bench/codec/capture_golden.py [--out tests/data/golden]

Each client scenario gets a fresh in-memory tansu broker behind a RecordingRelay
(tests/support/relay.py) and runs the workloads of tests/support/clients.py:
kafka-python (current, and pinned to api_version (0, 10, 1), (0, 10, 0) and (0, 9)
for old protocol versions), aiokafka and confluent-kafka (librdkafka).

Output: <out>/<client>/<seq>-<req|resp>-k<api_key>-v<api_version>.bin holding the
frame body without its 4-byte length prefix, and <out>/index.json describing every
file. At most 3 request/response pairs are kept per (client, api_key, api_version);
Produce is kept per compression phase as well, so every codec is present. A Produce
with acks=0 should get no response; tansu sends one anyway, kept with "unexpected":
true when the client was still connected to receive it. `kafka_python_decodes` says
whether kafka-python's own decoder accepts a response (null: it has no schema for
it); false would mark a malformed answer. The index's "notes" list the tansu quirks
met while capturing. Takes about 25 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support import aio_client, ck_client, kp_client  # noqa: E402
from support.clients import Record, attempt, make_records, supported_compressions  # noqa: E402
from support.relay import Frame, RecordingRelay  # noqa: E402

from codec import ApiKey  # noqa: E402
from proxy.tansu import TansuBroker, free_port, tansu_binary  # noqa: E402

PER_KIND = 3
NOTES = [
    "tansu answers Produce v1/v2 (magic 0/1 message sets) with UNKNOWN_PRODUCER_ID (59)",
    "tansu answers InitProducerId v0/v1 with UNKNOWN_SERVER_ERROR (-1): aiokafka idempotence",
    "tansu's first JoinGroup generation_id is 0 (Kafka: 1); aiokafka then sends no LeaveGroup",
    "tansu sends MEMBER_ID_REQUIRED (79) on JoinGroup v0/v1 too (Kafka: v4+ only)",
    "tansu's DescribeGroups authorized_operations is -1, not INT32_MIN, when not requested",
    "tansu answers Produce with acks=0 (Kafka sends nothing): such responses have unexpected=true",
    "not captured: tansu's ListOffsets v0 and all-topics OffsetFetch v3 answers are malformed",
]
PRODUCE = ApiKey.PRODUCE
Step = tuple[str, Callable[[str], object]]


@dataclass
class Scenario:
    client: str
    library_version: str
    steps: list[Step]


def _produce_step(produce: Callable[..., object], records: list[Record], codec: str) -> Step:
    def step(bootstrap: str) -> object:
        return produce(bootstrap, "codecs", records, codec)

    return (f"produce-{codec}", step)


def _codec_steps(client: str, produce: Callable[..., object], create: Step) -> list[Step]:
    codecs = supported_compressions(client)
    return [create, *(_produce_step(produce, make_records(2, f"{client}-{c}"), c) for c in codecs)]


def kafka_python(version: str) -> list[Scenario]:
    def legacy(pin: tuple[int, ...]) -> Step:
        return ("legacy", lambda bs: kp_client.legacy_workload(bs, "legacy", pin))

    acks0 = make_records(2, "acks0")
    main = [
        ("workload", lambda bs: kp_client.workload(bs, "kp", partitions=2)),
        *_codec_steps(
            "kafka-python",
            kp_client.produce,
            ("create", lambda bs: kp_client.create_topic(bs, "codecs")),
        ),
        (
            "produce-acks0",
            lambda bs: kp_client.produce(bs, "codecs", acks0, acks=0, enable_idempotence=False),
        ),
    ]
    return [
        Scenario("kafka-python", version, main),
        Scenario("kafka-python-0.10.1", version, [legacy((0, 10, 1))]),
        Scenario("kafka-python-0.10.0", version, [legacy((0, 10, 0))]),
        Scenario("kafka-python-0.9", version, [legacy((0, 9))]),
    ]


def aiokafka(version: str) -> list[Scenario]:
    def create(bs: str) -> object:
        return aio_client.asyncio.run(aio_client.create_topic_async(bs, "codecs"))

    def produce(bs: str, topic: str, records: object, codec: str, **extra: object) -> object:
        return aio_client.asyncio.run(aio_client.produce_async(bs, topic, records, codec, **extra))  # type: ignore[arg-type]

    idem = make_records(2, "idem")
    steps = [
        ("workload", lambda bs: aio_client.workload(bs, "aio", partitions=2)),
        *_codec_steps("aiokafka", produce, ("create", create)),
        # tansu answers InitProducerId v0 with UNKNOWN_SERVER_ERROR: kept as a sample
        (
            "idempotent",
            lambda bs: attempt(
                lambda: produce(bs, "codecs", idem, "none", enable_idempotence=True)
            ),
        ),
    ]
    return [Scenario("aiokafka", version, steps)]


def confluent(version: str) -> list[Scenario]:
    steps = [
        ("workload", lambda bs: ck_client.workload(bs, "ck", partitions=2, idempotent=True)),
        *_codec_steps(
            "confluent-kafka",
            ck_client.produce,
            ("create", lambda bs: ck_client.create_topic(bs, "codecs")),
        ),
    ]
    return [Scenario("confluent-kafka", version, steps)]


def scenarios() -> list[Scenario]:
    import aiokafka as aio
    import confluent_kafka
    import kafka

    ck_version = f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"
    return [*kafka_python(kafka.__version__), *aiokafka(aio.__version__), *confluent(ck_version)]


def run_scenario(scenario: Scenario) -> list[tuple[str, Frame, Frame | None]]:
    """(phase, request, response) for every attributed request, in order."""
    upstream = free_port()
    phases: list[tuple[int, str]] = []
    with RecordingRelay("127.0.0.1", upstream) as relay:
        with TansuBroker(port=upstream, advertised_port=relay.port):
            for phase, step in scenario.steps:
                phases.append((len(relay.frames), phase))
                started = time.monotonic()
                step(relay.bootstrap)
                print(f"  {scenario.client} {phase}: {time.monotonic() - started:.1f}s")
            time.sleep(0.2)  # let the last responses land
        pairs = relay.pairs()
    return [(_phase_of(req.seq, phases), req, resp) for req, resp in pairs]


def _phase_of(seq: int, phases: list[tuple[int, str]]) -> str:
    name = phases[0][1]
    for start, phase in phases:
        if seq >= start:
            name = phase
    return name


def select(pairs: list[tuple[str, Frame, Frame | None]]) -> list[tuple[str, Frame, Frame | None]]:
    kept: Counter[tuple[int, int, str]] = Counter()
    chosen = []
    for phase, req, resp in pairs:
        kind = (req.api_key, req.api_version, phase if req.api_key == PRODUCE else "")
        if kept[kind] < PER_KIND:
            kept[kind] += 1
            chosen.append((phase, req, resp))
    return chosen


def kafka_python_decodes(api_key: int, api_version: int, data: bytes) -> bool | None:
    """Whether kafka-python's response decoder accepts `data` (None: no schema for it)."""
    from kafka.protocol.api_header import ResponseClassRegistry

    cls = ResponseClassRegistry._response_class_registry.get(api_key)
    if cls is None or not cls.min_version <= api_version <= cls.max_version:
        return None
    try:
        cls[api_version].decode(data, header=True)
    except Exception:  # noqa: BLE001 - any failure means "does not decode"
        return False
    return True


def write_frame(
    out: Path, client: str, seq: int, frame: Frame, phase: str, version: str
) -> dict[str, object]:
    name = f"{seq:04d}-{frame.direction}-k{frame.api_key}-v{frame.api_version}.bin"
    path = out / client / name
    path.write_bytes(frame.data)
    entry: dict[str, object] = {
        "file": f"{client}/{name}",
        "client": client,
        "client_version": version,
        "direction": frame.direction,
        "api_key": frame.api_key,
        "api_version": frame.api_version,
        "correlation_id": frame.correlation_id,
        "phase": phase,
        "size": len(frame.data),
    }
    if frame.unexpected:
        entry["unexpected"] = True  # the broker answered a request that wants no answer
    if frame.direction == "resp":
        entry["kafka_python_decodes"] = kafka_python_decodes(
            frame.api_key, frame.api_version, frame.data
        )
    return entry


def capture(out: Path) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = []
    for scenario in scenarios():
        print(f"{scenario.client} {scenario.library_version}")
        chosen = select(run_scenario(scenario))
        shutil.rmtree(out / scenario.client, ignore_errors=True)
        (out / scenario.client).mkdir(parents=True)
        seq = 0
        for phase, req, resp in chosen:
            for frame in (req, resp):
                if frame is not None:
                    entries.append(
                        write_frame(
                            out, scenario.client, seq, frame, phase, scenario.library_version
                        )
                    )
                    seq += 1
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "golden")
    args = parser.parse_args(argv)
    entries = capture(args.out)
    index = {
        "generated_by": "bench/codec/capture_golden.py",
        "broker": Path(tansu_binary()).name,
        "frame_format": "frame body without the 4-byte length prefix",
        "notes": NOTES,
        "frames": entries,
    }
    (args.out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    total = sum(int(e["size"]) for e in entries)  # type: ignore[call-overload]
    print(f"{len(entries)} frames, {total} bytes in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
