"""`python -m bench.proxy.versus`: kafkalens beside the proxies users would pick instead, in
front of Apache Kafka, every arm in one run with the arms interleaved.

See bench/README.md ("In front of Apache Kafka"). One broker, every front up at once
(`bench/proxy/versus_arms.py`); each workload runs on every arm in turn before the next
workload starts, the arms' order rotated from one round to the next, so no arm has the
quiet or the busy minutes to itself. Workloads, in order:

1. small: ApiVersions, Metadata (one topic), OffsetCommit, one at a time on one
   connection, blocks of 50 alternating with the same requests straight to the broker
   (`bench/proxy/latency.py`): added p50/p99 and the front's CPU per request.
2. session: a real client session (`bench/proxy/session.py`): a librdkafka producer at a
   steady rate and a consumer in a classic group, bootstrap to close; the front's CPU
   per request of that mix, the requests counted by the clients themselves.
3. saturation: librdkafka produces N records of 1 KiB as fast as it can, then consumes
   them (`bench/proxy/throughput.py`); rounds, the best MB/s; the front's CPU per GB.
4. fixed rate: the Java client and librdkafka at a rate every arm sustains and one near
   the direct arm's limit (`bench/proxy/fixed_rate.py`): publish and end-to-end p50/p99/p99.9.
5. idle: 1,000 and 10,000 connections, each after one ApiVersions, held open; the
   front's RSS before and with them open, per connection.

Writes results.jsonl, RESULTS.md and chart.png to `--out` (default bench/proxy/versus/).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support import wire
from support.procs import CpuWindow

from bench.proxy import (
    conns,
    fixed_rate,
    latency,
    session,
    throughput,
    versus_arms,
    versus_report,
)
from bench.proxy.versus_arms import Bench, Front

Row = dict[str, Any]
DEFAULT_OUT = Path(__file__).resolve().parent / "versus"
COMMIT_GROUP = "kafkalens-bench-commit"
SMALL_TOPIC = "bench-small"
RATE_PARTITIONS = 4  # as bench.proxy.throughput's topic


@dataclass(frozen=True)
class Sizes:
    requests: int  # per small-request api and arm, after `warmup`
    warmup: int
    records: int  # saturation: produced then consumed per round and arm
    rounds: int
    low_rate: float  # records/s every arm sustains
    high_fraction: float  # the high rate: this fraction of direct's saturation produce rate
    rate_warmup: float
    rate_seconds: float
    idle: tuple[int, ...]
    warm_records: int  # produced and consumed through each arm before anything is timed
    session_seconds: float  # the client session's steady part, per arm
    session_rate: float  # records/s its producer sends
    rate_repeats: int  # fixed-rate runs per arm, rate and client, interleaved arm by arm


PRESETS = {
    "full": Sizes(5000, 500, 200_000, 2, 5000, 0.7, 10, 20, (1000, 10_000), 50_000, 30, 1000, 5),
    "quick": Sizes(1000, 100, 20_000, 1, 2000, 0.5, 5, 10, (1000,), 10_000, 10, 1000, 2),
    "tiny": Sizes(100, 20, 2000, 1, 500, 0.3, 2, 3, (50,), 0, 3, 200, 1),
}
# The arms the fixed-rate latencies rank (the relays' and forwarding-only arms' CPU is
# what they are there for).
RATE_ARMS = ("direct", "haproxy", "kroxylicious", "kafka-proxy", "kafkalens")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.proxy.versus", description=__doc__.split("\n")[0]
    )
    p.add_argument("--size", choices=sorted(PRESETS), default="full")
    p.add_argument("--arms", default=",".join(versus_arms.ARMS), help="comma-separated")
    p.add_argument("--clients", default=",".join(fixed_rate.CLIENTS), help="fixed-rate clients")
    p.add_argument("--workloads", default="small,session,saturation,rate,idle")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--kafka-version", default=_newest_kafka())
    p.add_argument("--no-pin", action="store_true", help="no taskset: every process anywhere")
    p.add_argument(
        "--placement",
        choices=versus_arms.PLACEMENTS,
        default="front-alone",
        help="which cores the fronts, the broker and the clients share (bench/README.md)",
    )
    p.add_argument("--rate-arms", default=",".join(RATE_ARMS), help="arms of the fixed rates")
    p.add_argument("--rate-repeats", type=int, help="fixed-rate runs per arm, rate and client")
    p.add_argument("--high-rate", type=float, help="records/s (default: from direct's saturation)")
    p.add_argument("--rate-seconds", type=float, help="steady seconds of each fixed-rate run")
    p.add_argument("--idle", help="idle connection counts, comma-separated (e.g. 1000,10000)")
    p.add_argument("--note", default="")
    return p.parse_args(argv)


def _newest_kafka() -> str:
    versions = versus_arms.REPO / "tests" / "peers" / "kafka-versions"
    return versions.read_text().split()[0]


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM (and SIGINT, which a shell's background job ignores) unwinds the run, so
    # the fronts, in sessions of their own, are stopped with the broker.
    signal.signal(signal.SIGTERM, _exit_on_term)
    args = parse(argv)
    sizes = PRESETS[args.size]
    if args.rate_seconds:
        sizes = replace(sizes, rate_seconds=args.rate_seconds)
    if args.rate_repeats:
        sizes = replace(sizes, rate_repeats=args.rate_repeats)
    if args.idle:
        sizes = replace(sizes, idle=tuple(int(n) for n in args.idle.split(",")))
    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    clients = tuple(c.strip() for c in args.clients.split(",") if c.strip())
    workloads = {w.strip() for w in args.workloads.split(",")}
    _raise_fd_limit()
    out: Path = args.out
    work = out / "work"
    run = _run_row(args, sizes)
    pinning = None if args.no_pin else versus_arms.default_pinning(args.placement)
    run["pinning"] = pinning.describe() if pinning else "none"
    run["fd_limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    run["idle_counts"] = idle_counts(sizes)
    rows: list[Row] = []
    # The tiny run (the test's) creates one offsets partition, not Kafka's 50: on a loaded
    # 2-core machine creating 50 took ~20 s of a ~60 s run.
    # It also joins groups without Kafka's 3 s initial rebalance delay.
    props = {}
    if args.size == "tiny":
        props = {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}
    with Bench(work, arms, pinning, args.kafka_version, broker_properties=props) as bench:
        for name, reason in bench.skipped.items():
            _say(name, f"skipped: {reason}")
        live = [bench.fronts[a] for a in arms if a in bench.fronts]
        run["arms"] = {f.name: f.notes for f in live}
        run["skipped"] = bench.skipped
        rated = [f for f in live if f.name in args.rate_arms.split(",")]
        warm(live, sizes)
        steps: list[tuple[str, Callable[[], Iterator[Row]]]] = [
            ("small", lambda: small(bench, live, sizes)),
            ("session", lambda: sessions(live, sizes)),
            ("saturation", lambda: saturation(live, sizes)),
            ("rate", lambda: rates(bench, rated, sizes, clients, args.high_rate)),
            ("idle", lambda: idle(live, sizes)),
        ]
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "rows.partial.jsonl", "w") as partial:
            partial.write(json.dumps(run, default=str) + "\n")
            for name, step in steps:
                if name not in workloads:
                    continue
                for row in step():
                    if row["workload"] == "session" and row["arm"] in versus_report.KAFKALENS:
                        # counted now: the later workloads write hundreds of MB into the
                        # same log, and its rotation (100 MB x 5) drops the session's lines
                        row["logged"] = settled_session_count(work, row["arm"])
                        row["logged_total"] = sum(row["logged"].values())
                    rows.append(row)
                    # as they come: a run that fails later keeps what it measured
                    partial.write(json.dumps(row) + "\n")
                    partial.flush()
                    _say(row["arm"], brief(row))
    _finish_run_row(run)
    shutil.rmtree(work / "kafka" / "node-1" / "data", ignore_errors=True)
    for log in work.glob("*-requests.log*"):
        run.setdefault("request_log_bytes", {})[log.name] = log.stat().st_size
        log.unlink()
    versus_report.write_all(out, run, rows)
    (out / "rows.partial.jsonl").unlink()
    print(f"results in {out}/RESULTS.md", file=sys.stderr)
    return 0


def rotations(fronts: list[Front], n: int) -> list[Front]:
    """The arms in round n's order: rotated by n, so each arm takes each turn in time."""
    k = n % len(fronts) if fronts else 0
    return fronts[k:] + fronts[:k]


# --- the workloads -----------------------------------------------------------------


def warm(fronts: list[Front], sizes: Sizes) -> None:
    """Unmeasured: records produced and consumed through every arm, so the broker's and
    the JVM fronts' JIT compilers have done their work before anything is timed (a cold
    broker answered the first fixed-rate second 10-100x slower)."""
    if not sizes.warm_records:
        return
    for front in fronts:
        topic = f"bench-warm-{front.name}"
        throughput.create_topic(front.bootstrap, topic)
        throughput.produce(front.bootstrap, sizes.warm_records, 1024, topic)
        throughput.consume(front.bootstrap, sizes.warm_records, topic)
        drop_topic(front.bootstrap, topic)
    _say("all", "warmed up")


def small(bench: Bench, fronts: list[Front], sizes: Sizes) -> Iterator[Row]:
    throughput.create_topic(fronts[0].bootstrap, SMALL_TOPIC, 1)
    _coordinator_ready(bench, COMMIT_GROUP)
    templates = [
        wire.api_versions(),
        wire.metadata([SMALL_TOPIC]),
        wire.offset_commit(COMMIT_GROUP, SMALL_TOPIC),
    ]
    for n, template in enumerate(templates):
        for front in rotations(fronts, n):
            sock = wire.connect(versus_arms.HOST, front.port)
            try:
                errors = wire.response_errors(sock, template)
            finally:
                sock.close()
            baseline = None if front.pid is None else bench.direct_port
            result = latency.sequential(
                versus_arms.HOST,
                front.port,
                template,
                sizes.requests,
                sizes.warmup,
                front.pid,
                baseline,
            )
            row = {"kind": "workload", "workload": "small", "arm": front.name, **result}
            yield {**row, "response_errors": errors}


def _coordinator_ready(bench: Bench, group: str, timeout: float = 120.0) -> None:
    """Asks for the group's coordinator until the broker names one, as a client would
    before committing."""
    deadline = time.monotonic() + timeout
    template = wire.find_coordinator(group)
    while True:
        sock = wire.connect(versus_arms.HOST, bench.direct_port)
        try:
            if not wire.response_errors(sock, template):
                return
        finally:
            sock.close()
        if time.monotonic() > deadline:
            raise RuntimeError(f"no coordinator for {group} within {timeout:.0f}s")
        time.sleep(0.2)


def sessions(fronts: list[Front], sizes: Sizes) -> Iterator[Row]:
    """The client session on every arm: the front's CPU over the whole session, per
    request the clients counted (`bench/proxy/session.py`)."""
    for front in fronts:
        topic = f"bench-session-{front.name}"
        throughput.create_topic(front.bootstrap, topic)
        window = CpuWindow(front.pid).start()
        row: Row = {"kind": "workload", "workload": "session", "arm": front.name}
        try:
            result = session.run(
                front.bootstrap,
                topic,
                f"kafkalens-bench-session-{front.name}",
                sizes.session_seconds,
                sizes.session_rate,
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            row["error"] = str(exc)[-500:]
            yield row
            continue
        cpu = window.stop()
        drop_topic(front.bootstrap, topic)
        row.update(result)
        row["cpu_s"] = None if cpu is None else round(cpu, 2)
        row["cpu_system_s"] = None if window.system is None else round(window.system, 2)
        yield row


SESSION_MARK = b'"client_id":"' + session.CLIENT_ID.encode() + b'"'
# a line per request sent: answered, sent without an answer due (acks=0), or left
# unanswered when a side closed (a consumer's long-polling Fetch at its close)
REQUEST_EVENTS = ("request", "request_no_response", "request_incomplete")


def settled_session_count(work: Path, arm: str, timeout: float = 10.0) -> dict[str, int]:
    """`logged_session_requests` once two looks a second apart agree: the request log
    writes its queue out every flush_interval (0.5 s by default), so the session's last
    lines may still be queued when its clients have closed."""
    deadline = time.monotonic() + timeout
    counts = logged_session_requests(work, arm)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        again = logged_session_requests(work, arm)
        if again == counts:
            break
        counts = again
    return counts


def logged_session_requests(work: Path, arm: str) -> dict[str, int]:
    """The session's requests as a kafkalens arm's request log has them (its rotated
    files included), by api: beside the clients' own count, the truth it is checked
    against. Empty for an arm with no request log (kafkalens-bare)."""
    counts: dict[str, int] = {}
    for path in sorted(work.glob(f"{arm}-requests.log*")):
        with open(path, "rb") as f:
            for line in f:
                if SESSION_MARK not in line:
                    continue
                event = json.loads(line)
                if event.get("event") in REQUEST_EVENTS:
                    counts[event["api"]] = counts.get(event["api"], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def saturation(fronts: list[Front], sizes: Sizes) -> Iterator[Row]:
    for n in range(sizes.rounds):
        for front in rotations(fronts, n):
            topic = f"bench-saturation-{front.name}-{n}"
            throughput.create_topic(front.bootstrap, topic)
            for name in ("produce", "consume"):
                # the other fronts are up and idle meanwhile, on the same core: what
                # they burn (a JVM's compiler and collector threads) is taken from the
                # measured arm, so it is measured too
                others = {f.name: CpuWindow(f.pid).start() for f in fronts if f is not front}
                window = CpuWindow(front.pid).start()
                if name == "produce":
                    moved = throughput.produce(front.bootstrap, sizes.records, 1024, topic)
                else:
                    moved = throughput.consume(front.bootstrap, sizes.records, topic)
                cpu = window.stop()
                idle_cpu = {n: w.stop() for n, w in others.items()}
                if name == "consume":
                    drop_topic(front.bootstrap, topic)
                yield {
                    "kind": "workload",
                    "workload": name,
                    "arm": front.name,
                    "round": n,
                    "records": moved.records,
                    "bytes": moved.bytes,
                    "seconds": round(moved.seconds, 3),
                    "mb_s": round(moved.mb_s, 1),
                    "cpu_s": None if cpu is None else round(cpu, 2),
                    "idle_fronts_cpu_s": {n: round(c, 3) for n, c in idle_cpu.items() if c is not None},
                }


def drop_topic(bootstrap: str, topic: str) -> None:
    """A topic done with is deleted: a full run writes some 20 GB otherwise."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer came
    futures = admin.delete_topics([topic], operation_timeout=60)
    for future in futures.values():
        future.result(timeout=60)


def client_limit(bench: Bench, client: str, sizes: Sizes) -> Row:
    """`client`'s own limit through no proxy: the fixed-rate program with no schedule
    (as fast as the producer accepts) against the broker for `rate_warmup` + a third of
    `rate_seconds`; the acknowledged rate is the direct arm's limit for that client."""
    topic = f"bench-rate-{client}-limit"
    bootstrap = f"{versus_arms.HOST}:{bench.direct_port}"
    throughput.create_topic(bootstrap, topic, RATE_PARTITIONS)
    seconds = max(3.0, sizes.rate_seconds / 3)
    result = fixed_rate.run(
        client, bootstrap, topic, 0, sizes.rate_warmup, seconds, bench.kafka_version
    )
    drop_topic(bootstrap, topic)
    row: Row = {"kind": "workload", "workload": "rate-limit", "arm": "direct", "client": client}
    row.update(result)
    row["high_rate"] = round(result["acked_rate"] * sizes.high_fraction, -2)
    return row


def rates(
    bench: Bench,
    fronts: list[Front],
    sizes: Sizes,
    clients: tuple[str, ...],
    chosen_high: float | None,
) -> Iterator[Row]:
    """Each client at `low_rate`, then at its high rate: `chosen_high`, else
    `high_fraction` of its own limit through no proxy (a Python producer's limit is not
    the Java client's)."""
    turn = 0
    highs: dict[str, float] = {}
    for client in clients:
        if chosen_high:
            highs[client] = chosen_high
            continue
        limit = client_limit(bench, client, sizes)
        highs[client] = limit["high_rate"]
        yield limit
    for level in ("low", "high"):
        for client in clients:
            rate = sizes.low_rate if level == "low" else highs[client]
            for rep in range(sizes.rate_repeats):
                yield from _rate_round(bench, fronts, sizes, client, level, rate, rep, turn)
                turn += 1


def _rate_round(
    bench: Bench,
    fronts: list[Front],
    sizes: Sizes,
    client: str,
    level: str,
    rate: float,
    rep: int,
    turn: int,
) -> Iterator[Row]:
    """One repetition: every arm in turn, the order rotated by `turn` (so each arm
    runs in each place in turn), a fresh client process and topic each."""
    for front in rotations(fronts, turn):
        topic = f"bench-rate-{client}-{level}-{front.name}-{rep}"
        throughput.create_topic(front.bootstrap, topic, RATE_PARTITIONS)
        window = CpuWindow(front.pid).start()
        row: Row = {"kind": "workload", "workload": "rate", "arm": front.name}
        row.update(level=level, client=client, rate=rate, rep=rep)
        try:
            result = fixed_rate.run(
                client,
                front.bootstrap,
                topic,
                rate,
                sizes.rate_warmup,
                sizes.rate_seconds,
                bench.kafka_version,
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            row["error"] = str(exc)[-500:]
            yield row
            continue
        cpu = window.stop()
        drop_topic(front.bootstrap, topic)
        row.update(result)
        moved = (result["acked"] + result["received"]) * result["record_bytes"]
        row["bytes"] = moved
        row["cpu_s"] = None if cpu is None else round(cpu, 2)
        yield row


def idle_counts(sizes: Sizes) -> tuple[int, ...]:
    """The preset's counts, each at most what a front's descriptors allow (a front holds
    two per connection: where the hard limit is 20,000 and cannot be raised, 10,000
    connections do not fit in any front, and 9,950 is the most)."""
    budget = versus_arms.connection_budget() - 50
    return tuple(min(n, budget) for n in sizes.idle)


def idle(fronts: list[Front], sizes: Sizes) -> Iterator[Row]:
    for n, count in enumerate(idle_counts(sizes)):
        for front in rotations(fronts, n):
            row: Row = {"kind": "workload", "workload": "idle", "arm": front.name}
            try:
                row.update(conns.idle(versus_arms.HOST, front.port, count, front.pid))
            except OSError as exc:
                row.update(connections=count, error=f"{type(exc).__name__}: {exc}")
            yield row


# --- the run's own row -------------------------------------------------------------


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _run_row(args: argparse.Namespace, sizes: Sizes) -> Row:
    import confluent_kafka

    head = subprocess.run(
        ["git", "-C", str(versus_arms.REPO), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "kind": "run",
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "size": args.size,
        "sizes": asdict(sizes),
        "command": "python -m bench.proxy.versus " + " ".join(sys.argv[1:]),
        "commit": head,
        "cpus": os.cpu_count(),
        "python": versus_arms.python_note(),
        "java": _java_version(),
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka": args.kafka_version,
        "uptime_start": _uptime(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "note": args.note,
        "_t0": time.monotonic(),
    }


def _java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return (done.stderr or done.stdout).splitlines()[0] if (done.stderr or done.stdout) else "?"


def _finish_run_row(run: Row) -> None:
    run["took_seconds"] = round(time.monotonic() - run.pop("_t0"), 1)
    run["uptime_end"] = _uptime()
    run["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]


def brief(row: Row) -> str:
    keys: tuple[str, ...] = ("api", "client", "level", "rate", "mb_s", "p50_us", "p99_us")
    keys += ("requests_total", "connections", "kb_per_connection", "cpu_s", "sustained", "error")
    shown = " ".join(f"{k}={row[k]}" for k in keys if row.get(k) is not None)
    extra = ""
    if "publish" in row:
        extra = f" publish p50/p99={row['publish'].get('p50_us')}/{row['publish'].get('p99_us')}"
    return f"{row['workload']}: {shown}{extra}"


def _say(arm: str, text: str) -> None:
    print(f"[{arm}] {text}", file=sys.stderr, flush=True)


def _raise_fd_limit() -> None:
    """10,000 idle connections: the client's, and each front's twice over (inherited)."""
    want = 65_536
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    except (ValueError, OSError):  # not allowed to raise the hard limit: as far as it goes
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def dump(rows: list[Row]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    sys.exit(main())
