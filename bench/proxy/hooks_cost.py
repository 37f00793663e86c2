"""What kafkalens's hooks cost per request/response pair, without sockets.

Real frames (librdkafka's Produce and Fetch, the raw clients' ApiVersions and
Metadata) are captured through the tests' recording relay in front of a tansu
broker, then replayed through the hooks `kafkalens proxy` runs, whole and stage by
stage. Run from the repository root: .venv/bin/python -m bench.proxy.hooks_cost

`--share` adds a ShareFetch and a ShareAcknowledge pair of Kafka's own share consumer
(tests/peers/java/share/ShareDriver.java: accepts, releases, rejects and renews),
captured in front of Apache Kafka from tests/peers (needs Java and the installed
peers), and the ShareFetch re-encoded with its acknowledgements and acquired records
contiguous. For them "lag off" is the observation before share groups were tracked
(the answers skimmed, no acknowledgement or acquired-record fields), "log on" the one
with.

Replaying a frame repeats it byte for byte, which the observer memoises
(proxy/observe/memo.py): "all hooks, log on" is the cost of such a repeat, "first seen" that
of a frame the process has not met before (the memo never answers).

`--small` replays instead the Produce and Fetch a client at a low rate sends: a few
records per batch, librdkafka's largest Produce pair and largest Fetch answer in its
captured session (tests/data/golden; no broker started).

`--instructions` counts instead of timing: the same captured pairs replayed through all
the hooks (log on, lag on; lag off with `--lag-off`), repeated and first seen, by bench/proxy/hooks_replay.py under
callgrind, user-space instructions per pair. With KAFKALENS_BASELINE_TREE set to
another checkout (as for bench.proxy.run's kafkalens-baseline) it replays through that
checkout's proxy/ too, in the same run, and prints both and the change:

    KAFKALENS_BASELINE_TREE=../baseline .venv/bin/python -m bench.proxy.hooks_cost --instructions
    .venv/bin/python -m bench.proxy.hooks_cost --small --instructions
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support import wire  # noqa: E402
from support.relay import Frame, RecordingRelay  # noqa: E402

from bench.proxy import metadata, throughput  # noqa: E402
from codec import ApiKey, decode_request, decode_response  # noqa: E402
from proxy.config import Overrides  # noqa: E402
from proxy.features import (
    build_hooks,  # noqa: E402
    load_config,  # noqa: E402
)
from proxy.hooks import ConnectionInfo, Hooks, Pending  # noqa: E402
from proxy.metrics import Metrics  # noqa: E402
from proxy.observe.api_versions import cap_api_versions  # noqa: E402
from proxy.observe.memo import FrameMemo  # noqa: E402
from proxy.observe.summary import SummaryOptions, TopicIds, request_fields, response_fields  # noqa: E402
from proxy.tansu import TansuBroker, free_port  # noqa: E402

Pair = tuple[Frame, Frame]
HOST = "127.0.0.1"
API_VERSIONS = ApiKey.API_VERSIONS


def capture(records: int = 5000, partitions: int = 1000) -> dict[str, Pair]:
    """One representative request/response pair per case, captured from real clients."""
    port = free_port(HOST)
    with (
        TansuBroker(advertised_port=port) as broker,
        RecordingRelay(HOST, broker.port, port=port) as relay,
    ):
        throughput.create_topic(relay.bootstrap)
        throughput.produce(relay.bootstrap, records)
        throughput.consume(relay.bootstrap, records)
        _raw(port, wire.api_versions(), wire.metadata([throughput.TOPIC]))
        metadata.create_topics(relay.bootstrap, partitions)
        _raw(port, wire.metadata(None))
        time.sleep(0.2)
        pairs = [(q, r) for q, r in relay.pairs() if r is not None]
    return {
        "Produce (librdkafka batch)": _largest(pairs, 0, request=True),
        "Fetch (librdkafka)": _largest(pairs, 1, request=False),
        "ApiVersions v3": _ours(pairs, API_VERSIONS)[0],
        "Metadata v12, 1 topic": _ours(pairs, 3)[0],
        f"Metadata v12, {partitions:,} partitions": _ours(pairs, 3)[-1],
    }


def capture_small() -> dict[str, Pair]:
    """librdkafka's (confluent-kafka's) largest Produce pair and largest Fetch answer of its
    captured session (tests/data/golden, in front of tansu): a few records per batch, the
    traffic a producer and a consumer at a low fixed rate make. No broker needed."""
    import struct

    from support.replay import sessions

    def pair(exchange: Any) -> Pair:
        corr = struct.unpack_from(">i", exchange.request, 4)[0]
        key, version = exchange.api_key, exchange.api_version
        return (
            Frame(0, 0, "request", key, version, corr, exchange.request),
            Frame(1, 0, "response", key, version, corr, exchange.response),
        )

    session = [e for e in sessions()["confluent-kafka"] if e.response is not None]
    produce = max((e for e in session if e.api_key == ApiKey.PRODUCE), key=lambda e: len(e.request))
    fetch = max((e for e in session if e.api_key == ApiKey.FETCH), key=lambda e: len(e.response or b""))
    return {
        f"Produce v{produce.api_version}, librdkafka, small batch": pair(produce),
        f"Fetch v{fetch.api_version}, librdkafka, small batches": pair(fetch),
    }


def capture_share(records: int = 2000) -> dict[str, Pair]:
    """The largest ShareFetch that acknowledged and was answered with acquired records,
    and the largest ShareAcknowledge, of the Java share consumer in front of Apache Kafka."""
    import tempfile

    from support.kafka import NEWEST, kafka_libs
    from support.share import ShareDriver

    from proxy.apache_kafka import KafkaCluster

    port = free_port(HOST)
    with tempfile.TemporaryDirectory(prefix="kafkalens-bench-share-") as work:
        cluster = KafkaCluster(libs=kafka_libs(NEWEST), work_dir=Path(work), advertise_proxied={1: f"{HOST}:{port}"})
        with cluster, RecordingRelay(HOST, cluster.node(1).proxied_port or 0, port=port) as relay:
            with ShareDriver(NEWEST) as driver:
                driver.must("topic", cluster.bootstrap, "bench-share", 4)
                driver.must("produce", cluster.bootstrap, "bench-share", records)
                driver.must("earliest", cluster.bootstrap, "bench-share-group")
                driver.must("renewable", cluster.bootstrap, "bench-share-group")
                driver.must("consume", relay.bootstrap, "bench-share-group", "bench-share", records)
                driver.must("close")
            time.sleep(0.2)
            pairs = [(q, r) for q, r in relay.pairs() if r is not None]
    fetches = [p for p in pairs if p[0].api_key == ApiKey.SHARE_FETCH and _acknowledges(p[0]) and _acquires(p[1])]
    acks = [p for p in pairs if p[0].api_key == ApiKey.SHARE_ACKNOWLEDGE]
    fetch = max(fetches, key=lambda p: len(p[0].data) + len(p[1].data))
    return {
        "ShareFetch (Java, acks + records)": fetch,
        "ShareFetch, the same contiguous": _contiguous(fetch),
        "ShareAcknowledge (Java)": max(acks, key=lambda p: len(p[0].data)),
    }


def _contiguous(pair: Pair) -> Pair:
    """`pair` re-encoded with each partition's acknowledgement batches merged into one
    batch of accepts and its acquired ranges into one first delivery: what a consumer
    accepting everything exchanges."""
    from codec import Request, Response, encode_request, encode_response

    request, response = pair
    asked = decode_request(request.data)
    for topic in asked.body["topics"]:
        for partition in topic["partitions"]:
            batches = partition["acknowledgement_batches"]
            if batches:
                partition["acknowledgement_batches"] = [{
                    "first_offset": batches[0]["first_offset"], "last_offset": batches[-1]["last_offset"],
                    "acknowledge_types": [1]}]  # fmt: skip
    answer = decode_response(response.data, response.api_key, response.api_version)
    for topic in answer.body["responses"]:
        for partition in topic["partitions"]:
            ranges = partition["acquired_records"]
            if ranges:
                partition["acquired_records"] = [{
                    "first_offset": ranges[0]["first_offset"], "last_offset": ranges[-1]["last_offset"],
                    "delivery_count": 1}]  # fmt: skip
    data = encode_request(Request(request.api_key, request.api_version, asked.header, asked.body))
    body = encode_response(Response(response.api_key, response.api_version, answer.header, answer.body))
    return dataclasses.replace(request, data=data), dataclasses.replace(response, data=body)


def _acknowledges(request: Frame) -> bool:
    body = decode_request(request.data).body
    return any(p.get("acknowledgement_batches") for t in body.get("topics") or () for p in t.get("partitions") or ())


def _acquires(response: Frame) -> bool:
    body = decode_response(response.data, response.api_key, response.api_version).body
    return any(p.get("acquired_records") for t in body.get("responses") or () for p in t.get("partitions") or ())


def _raw(port: int, *templates: wire.Template) -> None:
    sock = wire.connect(HOST, port)
    try:
        for n, template in enumerate(templates):
            wire.roundtrip(sock, template.frame(n))
    finally:
        sock.close()


def _largest(pairs: list[Pair], api_key: int, request: bool) -> Pair:
    mine = [p for p in pairs if p[0].api_key == api_key]
    return max(mine, key=lambda p: len(p[0 if request else 1].data))


def _ours(pairs: list[Pair], api_key: int) -> list[Pair]:
    """The raw client's pairs for `api_key`, smallest response first."""
    mine = [p for p in pairs if p[0].api_key == api_key and wire.CLIENT_ID.encode() in p[0].data]
    return sorted(mine, key=lambda p: len(p[1].data))


class FirstSeen(FrameMemo):
    """A memo that never remembers: every frame costs what a new one does."""

    __slots__ = ()

    def get(self, key: tuple[int, int, bytes]) -> Any:
        return None


def make_hooks(sample_rate: float, memo: bool = True, lag: bool = True) -> tuple[Hooks, ConnectionInfo]:
    """The proxy's hooks, request log to /dev/null, and one open connection; `memo`
    False makes every replayed frame cost what a frame seen for the first time does;
    `lag` False turns consumer lag and topic traffic off (lag.enabled)."""
    config = load_config(None, Overrides(request_log="/dev/null"))
    log = dataclasses.replace(config.request_log, sample_rate=sample_rate)
    metrics = Metrics()
    config = dataclasses.replace(config, request_log=log, lag=dataclasses.replace(config.lag, enabled=lag))
    hooks = build_hooks(config, metrics)
    if not memo:
        for name in ("request_memo", "response_memo", "api_versions_memo"):
            setattr(hooks, name, FirstSeen(getattr(hooks, name).max_entries))
    info = ConnectionInfo("bench-1", "plaintext", HOST, 50000, "127.0.0.1:9092")
    info.metrics = metrics.connection_opened("plaintext")
    hooks.connection_opened(info)
    return hooks, info


def cycle(hooks: Hooks, info: ConnectionInfo, pair: Pair) -> None:
    """What a connection calls for one request and its response."""
    request, response = pair
    pending = Pending(
        request.correlation_id,
        request.api_key,
        request.api_version,
        time.perf_counter(),
        len(request.data) + 4,
    )
    hooks.request_forwarded(info, memoryview(request.data), pending)
    body = response.data
    if request.api_key in hooks.rewrite_api_keys:
        body = hooks.rewrite_response(info, memoryview(body), pending) or body
    hooks.response_forwarded(info, memoryview(body), pending)


def stages(pair: Pair) -> dict[str, Callable[[], object]]:
    """The hooks' main pieces, each callable alone."""
    request, response = pair
    key, version = request.api_key, request.api_version
    options, ids = SummaryOptions(), TopicIds()
    decoded_request = decode_request(request.data)
    decoded_response = decode_response(response.data, key, version)
    hooks: Any = make_hooks(1.0)[0]
    api = hooks.metrics.api(hooks.api_name(key))
    line = _log_line(pair)
    out: dict[str, Callable[[], object]] = {
        "decode request": lambda: decode_request(request.data),
        "request fields": lambda: request_fields(decoded_request, options, ids),
        "decode response": lambda: decode_response(response.data, key, version),
        "response fields": lambda: response_fields(decoded_response, options, ids),
        "metrics": lambda: (api.request(version, 100), api.response(0.001, 100)),
        "log line": lambda: hooks.log.write("request", dict(line)),
    }
    if key == API_VERSIONS:
        out["ApiVersions cap"] = lambda: cap_api_versions(
            memoryview(response.data), version, hooks.policy
        )
    return out


def _log_line(pair: Pair) -> dict[str, Any]:
    """The fields of the request log line the hooks write for `pair`."""
    hooks: Any
    hooks, info = make_hooks(1.0)
    lines: list[dict[str, Any]] = []
    hooks.log.write = lambda event, fields: lines.append(fields)
    cycle(hooks, info, pair)
    return lines[-1]


def per_call_us(fn: Callable[[], object], seconds: float = 0.3) -> float:
    """Best of 5 runs, microseconds of CPU per call."""
    fn()
    calls = 1
    while _cpu(fn, calls) < seconds / 5:
        calls *= 2
    return min(_cpu(fn, calls) for _ in range(5)) / calls * 1e6


def _cpu(fn: Callable[[], object], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return time.process_time() - start


def measure(cases: dict[str, Pair]) -> list[dict[str, Any]]:
    rows = []
    for name, pair in cases.items():
        row: dict[str, Any] = {"case": name}
        row["request_bytes"], row["response_bytes"] = len(pair[0].data), len(pair[1].data)
        for label, rate, memo, lag in (
            ("all hooks, log on", 1.0, True, True),
            ("all hooks, lag off", 1.0, True, False),
            ("all hooks, first seen", 1.0, False, True),
            ("all hooks, log sampled 0", 0.0, True, True),
        ):
            hooks, info = make_hooks(rate, memo, lag)
            row[label] = per_call_us(functools.partial(cycle, hooks, info, pair))
        for label, fn in stages(pair).items():
            row[label] = per_call_us(fn)
        rows.append(row)
    return rows


COLUMNS = (
    "all hooks, log on",
    "all hooks, lag off",
    "all hooks, first seen",
    "all hooks, log sampled 0",
    "decode request",
    "request fields",
    "decode response",
    "response fields",
    "ApiVersions cap",
    "metrics",
    "log line",
)


def markdown(rows: list[dict[str, Any]]) -> str:
    heads = ["case", "request B", "response B", *(f"{c} µs" for c in COLUMNS)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for row in rows:
        cells = [row["case"], f"{row['request_bytes']:,}", f"{row['response_bytes']:,}"]
        cells += [f"{row[c]:,.1f}" if c in row else "–" for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def instructions(cases: dict[str, Pair], calls: int, work: Path, lag: bool = True) -> list[dict[str, Any]]:
    """Instructions per pair, repeated and first seen, for this tree and the baseline's;
    `lag` False: with lag.enabled false (consumer lag, share groups and topic traffic off)."""
    import os
    import pickle

    from bench.proxy.arms import BASELINE_TREE
    from bench.proxy.fronts import REPO

    pairs = [
        (name, q.api_key, q.api_version, q.correlation_id, q.data, r.data) for name, (q, r) in cases.items()
    ]
    (work / "pairs.pickle").write_bytes(pickle.dumps(pairs))
    trees = {"this tree": str(REPO)}
    if os.environ.get(BASELINE_TREE):
        trees["baseline"] = os.environ[BASELINE_TREE]
    rows = []
    for label, tree in trees.items():
        counts = _replay_counted(
            tree, work / "pairs.pickle", len(pairs), calls, work / label.replace(" ", "-"), lag
        )
        for n, (memo, (name, *_)) in enumerate((m, p) for m in ("repeated", "first seen") for p in pairs):
            rows.append({"tree": label, "case": name, "memo": memo, "instructions": counts[n] // calls})
    return rows


def _replay_counted(tree: str, pairs: Path, cases: int, calls: int, out: Path, lag: bool = True) -> list[int]:
    """Runs bench/proxy/hooks_replay.py on `tree`'s proxy/ under callgrind, counting only the
    replayed cycles of each case (switched on and off around them, one dump each)."""
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=tree, KAFKALENS_REPLAY_LAG="1" if lag else "0")
    replay = Path(__file__).resolve().parent / "hooks_replay.py"
    cmd = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}.%p",
        sys.executable, "-P", str(replay), str(pairs), str(calls),
    ]
    with open(f"{out}.valgrind.log", "wb") as log:  # valgrind's own chatter
        proc = subprocess.Popen(
            cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
    assert proc.stdin is not None and proc.stdout is not None
    counts = []
    try:
        for _ in range(2 * cases):
            _expect(proc, "ready")
            _callgrind(proc.pid, "-i", "on")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            _expect(proc, "done")
            _callgrind(proc.pid, "-i", "off")
            before = set(out.parent.glob(f"{out.name}.[0-9]*"))
            _callgrind(proc.pid, "--dump")
            (dump,) = set(out.parent.glob(f"{out.name}.[0-9]*")) - before
            counts.append(_totals(dump))
            proc.stdin.write("next\n")
            proc.stdin.flush()
        proc.stdin.close()
        proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return counts


def _expect(proc: Any, word: str) -> None:
    line = proc.stdout.readline()
    if line.strip() != word:
        raise RuntimeError(f"hooks_replay said {line!r}, not {word!r}")


def _callgrind(pid: int, *args: str) -> None:
    import subprocess

    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _totals(dump: Path) -> int:
    """A dump's count (its `summary:` line may say 0 where `totals:` has it)."""
    found = [
        int(line.split()[1])
        for line in dump.read_text(errors="replace").splitlines()
        if line.startswith(("summary:", "totals:"))
    ]
    if not found:
        raise RuntimeError(f"no totals in {dump}")
    return max(found)


def instructions_markdown(rows: list[dict[str, Any]]) -> str:
    """One row per case and memo mode: this tree, the baseline, the change."""
    by_key: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        by_key.setdefault((row["case"], row["memo"]), {})[row["tree"]] = row["instructions"]
    lines = [
        "| case | memo | baseline instructions / pair | this tree | change |",
        "|---|---|---:|---:|---:|",
    ]
    for (case, memo), trees in by_key.items():
        base, mine = trees.get("baseline"), trees["this tree"]
        change = "–" if not base else f"{(mine - base) / base * 100:+.2f} %"
        lines.append(f"| {case} | {memo} | {'–' if base is None else f'{base:,}'} | {mine:,} | {change} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.proxy.hooks_cost",
        description=(__doc__ or "").split("\n\n", 1)[0],
        epilog="It captures real frames (starts a tansu broker) and prints a table.",
    )
    parser.add_argument(
        "--share", action="store_true",
        help="also a ShareFetch and a ShareAcknowledge pair of Kafka's share consumer (Apache Kafka from tests/peers)",
    )
    parser.add_argument(
        "--instructions", action="store_true",
        help="count instructions per pair under callgrind (this tree, and KAFKALENS_BASELINE_TREE's) instead of timing",
    )
    parser.add_argument(
        "--small", action="store_true",
        help="librdkafka's captured Produce and Fetch of a few records per batch instead of the default cases",
    )
    parser.add_argument("--calls", type=int, default=500, help="counted pairs per case (--instructions)")
    parser.add_argument(
        "--lag-off", action="store_true",
        help="--instructions with lag.enabled false: the difference with lag on is what lag costs a pair",
    )
    args = parser.parse_args()
    cases = capture_small() if args.small else capture()
    if args.share:
        cases.update(capture_share())
    if args.instructions:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kafkalens-hooks-instructions-") as tmp:
            print(instructions_markdown(instructions(cases, args.calls, Path(tmp), not args.lag_off)))
        return
    gc.collect()
    gc.freeze()  # as a serving kafkalens process does (proxy/runner.py)
    print(markdown(measure(cases)))


if __name__ == "__main__":
    main()
