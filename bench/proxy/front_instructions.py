"""Instructions a front executes per small request/response pair, counted by callgrind.

`/proc` CPU time per request moves 2x with this shared host's phases and mixes the
kernel's socket work with the front's own. Instructions in user space do not move:
the same build and the same requests count the same, so this is the figure to
compare before and after a change on the forwarding path. It does not count the
kernel (the system calls, the same for every front) nor cache misses.

Each arm runs as in `bench.proxy.run` (its own tansu broker, the topic created), with the
front under `valgrind --tool=callgrind --instr-atstart=no`: warm-up round trips
first, then counting is switched on (`callgrind_control -i on`) for `--requests`
round trips on one connection, one at a time. A slow run (valgrind is ~50x slower).

`--apis` picks the requests: small ones (ApiVersions, Metadata, OffsetCommit), or the
Produce and Fetch a client at a low rate sends (`Produce`, `Fetch`): librdkafka's
largest Produce of its captured session (tests/data/golden: v10, 4 records in one
batch), its topic renamed to the benchmark's, and librdkafka's Fetch v16 of that topic's
partition 0 from offset 0, after two such Produces (its answer: ~800 bytes, both
batches). Neither is memoised by the observing hooks: each pair takes the whole front,
sockets, forwarding and observation (decoding, lag, metrics, the line).

    .venv/bin/python -m bench.proxy.front_instructions
    .venv/bin/python -m bench.proxy.front_instructions --arms kafkalens --requests 500
    .venv/bin/python -m bench.proxy.front_instructions --arms kafkalens-pure,kafkalens --apis Produce,Fetch
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import wire

from bench.proxy import arms, fronts, raw_broker, throughput
from codec import ApiKey, decode_response, encode_request
from proxy.tansu import TansuBroker, free_port, wait_for_port

DEFAULT_ARMS = ("python-relay", "kafkalens-bare", "kafkalens", "haproxy")
WARMUP = 300
START_SECONDS = 180.0  # an interpreter starting under valgrind


def count(arm: str, template_of: Maker, requests: int, work: Path) -> int:
    """User-space instructions of `arm`'s front per round trip of the template
    `template_of` makes (given a connection to the front, before warm-up)."""
    front, broker_port = free_port(arms.HOST), free_port(arms.HOST)
    broker = TansuBroker(
        host=arms.HOST, port=broker_port, advertised_port=front, log_path=work / "tansu.log"
    )
    broker.start()
    out = work / f"{arm}.callgrind"
    proc = _start_front(arm, arms.Launch(arm, work, front, broker_port, []), out)
    try:
        if not wait_for_port(arms.HOST, front, START_SECONDS):
            raise RuntimeError(
                f"{arm} did not listen under valgrind: {fronts.log_tail(work / f'{arm}.log')}"
            )
        throughput.create_topic(f"{arms.HOST}:{front}", partitions=1)
        sock = wire.connect(arms.HOST, front, timeout=60.0)
        template = template_of(sock)
        for n in range(WARMUP):
            wire.roundtrip(sock, template.frame(n))
        _control(proc.pid, "-i", "on")
        for n in range(requests):
            wire.roundtrip(sock, template.frame(n))
        _control(proc.pid, "-i", "off")
        _control(proc.pid, "--dump")
        sock.close()
    finally:
        fronts.stop_process(proc, timeout=60.0)
        broker.stop()
    return round(_instructions(work) / requests)


def _start_front(arm: str, launch: arms.Launch, out: Path) -> subprocess.Popen[bytes]:
    builder = arms.FRONTS[arm]
    plain_spawn = fronts.spawn

    def under_valgrind(
        cmd: list[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        tool = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        return plain_spawn([*tool, f"--callgrind-out-file={out}.%p", *cmd], log, env)

    fronts.spawn = under_valgrind  # the builders start their front through fronts.spawn
    try:
        return builder(launch)
    finally:
        fronts.spawn = plain_spawn


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _instructions(work: Path) -> int:
    """The counted instructions: the dump's (the file written at exit counts none)."""
    total = 0
    for path in work.glob("*.callgrind.*"):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    return total


Maker = Callable[[socket.socket], wire.Template]


def _captured(api_key: int) -> Any:
    """librdkafka's request of `api_key` in its captured session (tests/data/golden),
    decoded: its largest Produce, or its Fetch whose answer was largest."""
    from support.replay import sessions

    from codec import decode_request

    session = [e for e in sessions()["confluent-kafka"] if e.response is not None and e.api_key == api_key]
    if api_key == ApiKey.PRODUCE:
        return decode_request(max(session, key=lambda e: len(e.request)).request)
    return decode_request(max(session, key=lambda e: len(e.response or b"")).request)


def produce_template() -> wire.Template:
    """librdkafka's Produce (v10, acks -1, 4 records in 1 batch) to the benchmark's topic."""
    request = _captured(ApiKey.PRODUCE)
    (topic,) = request.body["topic_data"]
    topic["name"] = throughput.TOPIC
    (partition,) = topic["partition_data"]
    partition["index"] = 0
    body = encode_request(request)
    return wire.Template("Produce", struct.pack(">i", len(body)) + body)


def _produce(sock: socket.socket) -> wire.Template:
    return produce_template()


def _fetch(sock: socket.socket) -> wire.Template:
    """librdkafka's Fetch v16 of the topic's partition 0 from offset 0 (by its topic id,
    asked of the front), after two Produces: the same answer each time, both batches."""
    produce = produce_template()
    for n in range(2):
        wire.roundtrip(sock, produce.frame(n))
    meta = wire.metadata([throughput.TOPIC])
    sock.sendall(meta.frame(0))
    answer = decode_response(raw_broker.read_frame(sock), ApiKey.METADATA, 12)
    (described,) = answer.body["topics"]
    request = _captured(ApiKey.FETCH)
    (topic,) = request.body["topics"][:1]
    topic["topic_id"] = described["topic_id"]
    topic["partitions"] = topic["partitions"][:1]
    topic["partitions"][0].update(partition=0, fetch_offset=0, current_leader_epoch=-1)
    request.body["topics"] = [topic]
    body = encode_request(request)
    return wire.Template("Fetch", struct.pack(">i", len(body)) + body)


TEMPLATES: dict[str, Maker] = {
    "ApiVersions": lambda _: wire.api_versions(),
    "Metadata": lambda _: wire.metadata([throughput.TOPIC]),
    "OffsetCommit": lambda _: wire.offset_commit("kafkalens-bench-commit", throughput.TOPIC),
    "Produce": _produce,
    "Fetch": _fetch,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS))
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--apis", default="ApiVersions,Metadata", help=f"of {', '.join(TEMPLATES)}")
    parser.add_argument(
        "--keep", type=Path, help="copy each callgrind output here (for callgrind_annotate)"
    )
    args = parser.parse_args(argv)
    apis = [a.strip() for a in args.apis.split(",") if a.strip()]
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    print("| arm | " + " | ".join(f"{api} instructions / request" for api in apis) + " |")
    print("|---|" + "---:|" * len(apis))
    for arm in args.arms.split(","):
        if arm == "haproxy" and shutil.which("haproxy") is None:
            print(f"| {arm} | skipped: haproxy is not installed |")
            continue
        counts = []
        for api in apis:
            with tempfile.TemporaryDirectory(prefix=f"kafkalens-{arm}-{api}-") as tmp:
                counts.append(count(arm, TEMPLATES[api], args.requests, Path(tmp)))
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    for path in Path(tmp).glob("*.callgrind.*"):
                        shutil.copy(path, args.keep / f"{arm}-{api}.{path.name}")
        print(f"| {arm} | " + " | ".join(f"{c:,}" for c in counts) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
