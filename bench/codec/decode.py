"""Decode time of kafkalens's codec vs kio's (native reader) on the same frames.

Not a test. Run from the repository root (kio comes with the test extras):

    .venv/bin/python -m bench.codec.decode              # JSON lines, then a markdown table
    .venv/bin/python -m bench.codec.decode --profile    # plus cProfile of kafkalens per case

Cases (each at the newest version both codecs know): a Produce request carrying one
1 MiB record batch; a Fetch response with 100 partitions of 256-byte record blobs; a
Metadata response with 1,000 partitions (50 topics, 3 replicas each); a JoinGroup
response with 50 members of 100-byte metadata. Both sides decode the whole frame
(header and body) from the same bytes; kafkalens returns `bytes`/`records` fields as
zero-copy memoryviews, kio copies them. kafkalens is timed twice: with its C
interpreter (codec/accel.py, what a kafkalens built with a C compiler runs; "–" when the
extension is not built or KAFKALENS_PURE_CODEC is set) and with its Python interpreter
(the reference, codec/interpreter.py). Times are CPU microseconds per decode, best of 15
alternating samples (other processes share the machine); ratios are kafkalens / kio.
The extra column times kafkalens's skimmer (codec/skim.py, what the proxy's observer
runs on most responses) on the same response frames; requests have no skimmer.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from codec import (
    DEFAULT_POLICY,
    ApiKey,
    HeaderPolicy,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from codec.accel import ACTIVE
from codec.messages import PURE_POLICY
from codec.skim import skim_response


@dataclass(frozen=True)
class Case:
    name: str
    api_key: int
    version: int
    kind: str  # "request" or "response"
    frame: bytes


def produce_case() -> Case:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {"name": "bench", "partition_data": [{"index": 0, "records": bytes(1 << 20)}]}
        ],
    }
    header = {
        "request_api_key": 0,
        "request_api_version": 12,
        "correlation_id": 7,
        "client_id": "bench",
    }
    return Case("produce_1mib", ApiKey.PRODUCE, 12, "request", encode_request(Request(ApiKey.PRODUCE, 12, header, body)))


def topic_id(n: int) -> uuid.UUID:
    """The same ids in every run: random ones (uuid4) moved callgrind's count of one
    Fetch decode by up to 13 % between runs of the same build (237,248 to 268,805)."""
    return uuid.UUID(int=(n + 1) * 0x9E3779B97F4A7C15F39CC0605CEDC834 % 2**128, version=4)


def fetch_case() -> Case:
    def partition(index: int) -> dict[str, Any]:
        return {
            "partition_index": index,
            "high_watermark": 1_000_000 + index,
            "last_stable_offset": 1_000_000 + index,
            "log_start_offset": 0,
            "aborted_transactions": [],
            "preferred_read_replica": -1,
            "records": bytes(range(256)),
        }

    topics = [
        {"topic_id": topic_id(t), "partitions": [partition(p) for p in range(25)]}
        for t in range(4)
    ]
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 1, "responses": topics}
    frame = encode_response(Response(ApiKey.FETCH, 17, {"correlation_id": 7}, body))
    return Case("fetch_100_partitions", ApiKey.FETCH, 17, "response", frame)


def metadata_case() -> Case:
    def partition(index: int) -> dict[str, Any]:
        replicas = [(index + r) % 6 for r in range(3)]
        return {
            "partition_index": index,
            "leader_id": replicas[0],
            "leader_epoch": 5,
            "replica_nodes": replicas,
            "isr_nodes": replicas,
            "offline_replicas": [],
        }

    brokers = [
        {"node_id": n, "host": f"broker-{n}.example", "port": 9092, "rack": "r1"} for n in range(6)
    ]
    topics = [
        {
            "name": f"topic-{t:02d}",
            "topic_id": topic_id(t),
            "partitions": [partition(p) for p in range(20)],
        }
        for t in range(50)
    ]
    body = {"brokers": brokers, "cluster_id": "bench", "controller_id": 0, "topics": topics}
    frame = encode_response(Response(ApiKey.METADATA, 13, {"correlation_id": 7}, body))
    return Case("metadata_1000_partitions", ApiKey.METADATA, 13, "response", frame)


def join_group_case() -> Case:
    members = [
        {
            "member_id": f"consumer-{m}-{uuid.UUID(int=m)}",
            "group_instance_id": None,
            "metadata": bytes(100),
        }
        for m in range(50)
    ]
    body = {
        "generation_id": 3,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": members[0]["member_id"],
        "member_id": members[0]["member_id"],
        "members": members,
    }
    frame = encode_response(Response(ApiKey.JOIN_GROUP, 9, {"correlation_id": 7}, body))
    return Case("join_group_50_members", ApiKey.JOIN_GROUP, 9, "response", frame)


def kafkalens_decoder(case: Case, policy: HeaderPolicy = DEFAULT_POLICY) -> Callable[[], object]:
    """With DEFAULT_POLICY, the interpreter kafkalens runs (C when active); with
    PURE_POLICY, the Python one."""
    frame = case.frame
    if case.kind == "request":
        return lambda: decode_request(frame, policy)
    return lambda: decode_response(frame, case.api_key, case.version, policy)


def kafkalens_skimmer(case: Case) -> Callable[[], object] | None:
    if case.kind == "request":
        return None
    frame = case.frame
    return lambda: skim_response(frame, case.api_key, case.version)


def kio_decoder(case: Case) -> Callable[[], object]:
    entity: Any = (
        load_request_schema(case.api_key, case.version)
        if case.kind == "request"
        else load_response_schema(case.api_key, case.version)
    )
    read_header = entity_reader(entity.__header_schema__)
    read_body: Any = entity_reader(entity)
    frame = case.frame

    def decode() -> object:
        header, size = read_header(frame, 0)
        body, rest = read_body(frame, size)
        assert size + rest == len(frame)
        return header, body

    return decode


def per_call(fns: list[Callable[[], object]]) -> list[float]:
    """CPU microseconds per call of each function: the best of 15 samples of ~50 ms,
    the functions taking turns so that a change of load on the machine hits all."""
    calls = [_calls_for(fn) for fn in fns]
    best = [float("inf")] * len(fns)
    for _ in range(15):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], _timed(fn, calls[i]) / calls[i] * 1e6)
    return best


def _calls_for(fn: Callable[[], object], seconds: float = 0.05) -> int:
    fn()
    calls = 1
    while _timed(fn, calls) < seconds:
        calls *= 2
    return calls


def _timed(fn: Callable[[], object], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return time.process_time() - start


def profile(case: Case, calls: int = 200) -> None:
    """cProfile of the Python interpreter (the C one shows as a single call)."""
    decode = kafkalens_decoder(case, PURE_POLICY)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        decode()
    profiler.disable()
    print(f"\n### cProfile of kafkalens's Python interpreter, {case.name}, {calls} decodes\n```")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    print("```")


def _num(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", action="store_true", help="cProfile kafkalens's Python interpreter per case")
    args = parser.parse_args()
    cases = [produce_case(), fetch_case(), metadata_case(), join_group_case()]
    # As a serving kafkalens process does (proxy/runner.py): what start-up built is out
    # of the cyclic GC's reach, so collections triggered by decoding walk only young
    # objects. Both codecs benefit alike.
    gc.collect()
    gc.freeze()
    rows = []
    for case in cases:
        skim = kafkalens_skimmer(case)
        fns = [kafkalens_decoder(case, PURE_POLICY), kio_decoder(case)]
        fns += [kafkalens_decoder(case)] if ACTIVE else []
        fns += [skim] if skim else []
        pure, theirs, *rest = per_call(fns)
        accel = rest.pop(0) if ACTIVE else None
        skimmed = rest[0] if rest else None
        row = {
            "case": case.name,
            "api_version": case.version,
            "frame_bytes": len(case.frame),
            "kafkalens_us": round(accel, 2) if accel is not None else None,
            "kafkalens_pure_us": round(pure, 2),
            "kio_us": round(theirs, 2),
            "ratio": round(accel / theirs, 3) if accel is not None else None,
            "pure_ratio": round(pure / theirs, 3),
            "kafkalens_skim_us": round(skimmed, 2) if skimmed is not None else None,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        "\n| case | version | frame bytes | kafkalens C µs | kafkalens Python µs | kio µs"
        " | C / kio | Python / kio | kafkalens skim µs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['case']} | v{r['api_version']} | {r['frame_bytes']:,} | {_num(r['kafkalens_us'], 1)}"
            f" | {r['kafkalens_pure_us']:,.1f} | {r['kio_us']:,.1f} | {_num(r['ratio'], 2)}"
            f" | {r['pure_ratio']:.2f} | {_num(r['kafkalens_skim_us'], 1)} |"
        )
    if args.profile:
        for case in cases:
            profile(case)


if __name__ == "__main__":
    main()
