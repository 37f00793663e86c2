"""`python -m bench`: the benchmarks and long runs, by room, each with the question it
answers; `python -m bench NAME [ARGS...]` runs one (`python -m bench versus --size
quick` is `python -m bench.proxy.versus --size quick`). Their figures, and how each was
measured, are in bench/README.md (and bench/PROFILE.md, bench/RELIABILITY.md,
bench/PIPELINE.md, which it links).

Every command runs from the repository root in the venv of the README's test command.
"""

from __future__ import annotations

import runpy
import sys
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    name: str  # what `python -m bench NAME` runs
    module: str  # bench.<room>.<module>
    question: str
    takes: str = ""  # how long a default run takes, where it is worth saying


BENCHMARKS = (
    # What the proxy costs, and how it holds up
    Benchmark("versus", "bench.proxy.versus",
              "What does kafkalens cost in front of Apache Kafka beside haproxy and Kroxylicious: "
              "CPU per small request and per GB, added latency, throughput, memory per connection?",
              "40-50 min (--size quick: 10)"),
    Benchmark("run", "bench.proxy.run",
              "What does kafkalens cost in front of tansu beside a direct connection, haproxy and "
              "tansu's proxy, and what do its parts cost (bare, no log, no lag, telemetry arms)?",
              "5-8 min (--quick: 1)"),
    Benchmark("per_gb", "bench.proxy.per_gb",
              "What does each front do per MB it moves: system calls, page faults, bytes "
              "copied, CPU (perf stat and perf record; strace -c without perf)?",
              "a few minutes"),
    Benchmark("front_instructions", "bench.proxy.front_instructions",
              "How many instructions does each front execute per small request/response pair "
              "(callgrind: steady on a busy machine; before/after against a baseline tree)?",
              "about a minute an arm"),
    Benchmark("hooks_cost", "bench.proxy.hooks_cost",
              "What do kafkalens's hooks cost per request/response pair, stage by stage, "
              "without sockets (--instructions: callgrind's count; --share: share groups)?"),
    Benchmark("request_log_cost", "bench.proxy.request_log_cost",
              "What does one request log line cost the event loop, and the writer thread?"),
    Benchmark("big_frames", "bench.proxy.big_frames",
              "What do 16 MB frames cost the proxy (MB/s, CPU per GB, RSS) at each "
              "limits.socket_buffer_bytes?"),
    Benchmark("decode_capture", "bench.proxy.decode_capture",
              "How fast does `kafkalens decode` read a capture, and what do connections left "
              "open cost it?", "a few seconds"),
    Benchmark("choices", "bench.proxy.choices",
              "What do the small measurements behind the code's choices say now (the codec's "
              "tables in RSS, the parent of workers' imports, a full GC with and without "
              "gc.freeze, the resource tracker, an enum member read, a log line rendered)?", "about 15 s"),
    Benchmark("inflight", "bench.proxy.inflight",
              "What does a proxy hold when a broker never answers, and does another client "
              "still get through?"),
    Benchmark("soak", "bench.proxy.soak",
              "Under a fixed mix of real clients in front of Apache Kafka, are the proxy's RSS "
              "and open files flat (their least-squares slope), and is nothing left when the "
              "clients leave?", "30 min (--minutes)"),
    Benchmark("valgrind_soak", "bench.proxy.valgrind_soak",
              "Run under valgrind's memcheck through a short soak (captured sessions, the small "
              "apis, hostile clients), do the C parts read or write any memory they should not?",
              "10-20 min"),
    Benchmark("kafka_faults", "bench.proxy.kafka_faults",
              "With Apache Kafka brokers killed and restarted under load behind a gateway, "
              "is anything acknowledged lost, and is every request logged?", "as asked"),
    # The codec
    Benchmark("codec.decode", "bench.codec.decode",
              "How long does a whole frame take to decode, C and Python interpreters, against kio?"),
    Benchmark("codec.instructions", "bench.codec.instructions",
              "How many instructions and estimated cycles per decode, against kio "
              "(--streamed: codec.stream's decode in pieces)?"),
    Benchmark("codec.records", "bench.codec.records",
              "How long do 1 MiB of records take: header summary, CRC, full iteration?"),
    Benchmark("codec.same", "bench.codec.same",
              "Does a change to the codec decode every frame of a corpus exactly as before "
              "(two checkouts)?"),
    Benchmark("codec.fuzz", "bench.codec.fuzz",
              "Does the codec, fed mutated real frames, only ever answer or raise DecodeError, "
              "in bounded memory?", "as asked (--seconds)"),
    Benchmark("codec.capture_golden", "bench.codec.capture_golden",
              "(a tool) The golden frames of tests/data/golden, captured again from real clients."),
    # The pipeline
    Benchmark("pipeline.speed", "bench.pipeline.speed",
              "How fast are `kafkalens report`, `ingest` and the report over the table, each "
              "beside the read floor, against their goals, locally and on a cluster?"),
    Benchmark("pipeline.read_floor", "bench.pipeline.read_floor",
              "What does reading and parsing the input alone cost (no report can be faster)?"),
    Benchmark("pipeline.write_floor", "bench.pipeline.write_floor",
              "What does writing the report's 16 tables cost Spark, whatever is in them?"),
    Benchmark("pipeline.after_scan", "bench.pipeline.after_scan",
              "Where does the report's work after the scan go: py4j calls building the "
              "tables' plans, the families' queries, Spark's jobs?"),
    Benchmark("pipeline.scan_cost", "bench.pipeline.scan_cost",
              "Where does the report's scan spend its CPU, variant by variant, interleaved?"),
    Benchmark("pipeline.report_arms", "bench.pipeline.report_arms",
              "Does a change to the pipeline make the whole report faster (source trees "
              "interleaved, round after round)?"),
    Benchmark("pipeline.report_inputs", "bench.pipeline.report_inputs",
              "Does the report finish inputs built to grow a driver (3M bad lines, 200,000 "
              "connections) in Spark's default 1 GB of driver memory?"),
)
# Modules with a command line of their own that are parts of the benchmarks above, not
# benchmarks: the arms' proxies, started as processes, and children of a parent's run.
PARTS = frozenset({
    "bench.proxy.bare_proxy",  # the kafkalens-bare arm: forwarding with no-op hooks
    "bench.proxy.plain_relay",  # the python-relay arm: bytes both ways, nothing else
    "bench.proxy.hooks_replay",  # hooks_cost --instructions's child under callgrind
    "bench.proxy.fixed_rate",  # versus's librdkafka fixed-rate client
    "bench.proxy.session",  # versus's real client session, a child process
})


def listing(width: int = 92) -> str:
    rooms = {"proxy": "What the proxy costs, and how it holds up", "codec": "The codec",
             "pipeline": "The pipeline"}
    out = [textwrap.fill((__doc__ or "").split("\n\n")[0], width), ""]
    for room, title in rooms.items():
        out.append(f"{title} (bench/{room}/):")
        for b in BENCHMARKS:
            if b.module.split(".")[1] != room:
                continue
            takes = f" [{b.takes}]" if b.takes else ""
            out.append(textwrap.fill(b.question + takes, width, initial_indent=f"  {b.name:22} ",
                                     subsequent_indent=" " * 25))
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    by_name = {b.name: b for b in BENCHMARKS}
    chosen = by_name.get(argv[0])
    if chosen is None:
        print(f"python -m bench: no benchmark {argv[0]!r}; `python -m bench` lists them",
              file=sys.stderr)
        return 2
    sys.argv = [f"python -m {chosen.module}", *argv[1:]]
    runpy.run_module(chosen.module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
