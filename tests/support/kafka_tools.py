"""Apache Kafka's command-line tools, run as its `kafka-*.sh` scripts run them: `java
-cp <the tools' jars> <main class> ARGS`, from the jars `tests/peers/install` fetched
(tests/peers/tools/pom.xml), with the scripts' own log4j2 setting (warnings to stderr).

`run_tool("kafka-topics", "--bootstrap-server", address, "--list")` returns what the
tool printed and its exit status, as a user running the script would see them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from proxy.apache_kafka import java_binary
from support.kafka import BUILD, NEWEST, _unavailable, ensure_peers

# The script each user runs -> the class it starts (bin/kafka-*.sh of Kafka 4.4).
MAIN_CLASSES = {
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
}
# A tool's JVM: small and C1 only, as the client programs' (support.java).
TOOL_JVM_OPTS = ("-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")
# What bin/kafka-run-class.sh sets for the tools: warnings and worse, to stderr.
_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""


def tools_libs(version: str = NEWEST) -> Path:
    ensure_peers()
    libs = BUILD / f"kafka-tools-{version}"
    if not any(libs.glob("kafka-tools-*.jar")):
        _unavailable(f"no Kafka tools jars in {libs}")
    return libs


@dataclass(frozen=True)
class ToolRun:
    tool: str
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> ToolRun:
        """Itself, if the tool succeeded; else an AssertionError with what it said."""
        assert self.returncode == 0, (
            f"{self.tool} {' '.join(self.args)} exited {self.returncode}:\n"
            f"{self.stdout[-2000:]}\n{self.stderr[-3000:]}"
        )
        return self


def run_tool(tool: str, *args: str, timeout: float = 120.0) -> ToolRun:
    """Runs one tool to its end (a tool that outlives `timeout` is an assertion error)."""
    libs = tools_libs()
    log4j = libs.parent / "kafka-tools-log4j2.properties"
    if not log4j.exists():
        log4j.write_text(_LOG4J2)
    command = [
        java_binary(),
        *TOOL_JVM_OPTS,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        os.pathsep.join([str(libs / "*")]),
        MAIN_CLASSES[tool],
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return ToolRun(tool, args, done.returncode, done.stdout, done.stderr)


# --- what each tool printed, with what differs by design between two runs set aside --------
# Each function returns (what must be equal direct and through a gateway, the node
# addresses the output named: checked apart, against where each run should point).

Addresses = dict[str, str]  # what names the address (e.g. "voter 1") -> host:port

_ENDPOINT = re.compile(r"^[A-Z_]+://(.+)$")


def quorum_status(out: str) -> tuple[dict[str, object], Addresses]:
    """`kafka-metadata-quorum describe --status`: the cluster, the quorum leader and its
    epoch, the voters and observers; not the high watermark and follower lags (they move
    between two runs), and each voter's endpoints apart."""
    fields = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in out.splitlines())
        if value
    )
    voters = json.loads(fields["CurrentVoters"])
    observers = json.loads(fields["CurrentObservers"])
    addresses: Addresses = {}
    for voter in voters:
        for n, endpoint in enumerate(voter.pop("endpoints", [])):
            match = _ENDPOINT.match(endpoint)
            assert match, endpoint
            addresses[f"voter {voter['id']} endpoint {n}"] = match.group(1)
    same: dict[str, object] = {
        "ClusterId": fields["ClusterId"],
        "LeaderId": fields["LeaderId"],
        "LeaderEpoch": fields["LeaderEpoch"],
        "CurrentVoters": sorted(voters, key=lambda v: v["id"]),
        "CurrentObservers": sorted(observers, key=lambda v: v["id"]),
    }
    return same, addresses


def quorum_replication(out: str) -> tuple[object, Addresses]:
    """`describe --replication`: each replica of the metadata log and its status; not its
    offsets and fetch times."""
    lines = [line.split() for line in out.strip().splitlines()]
    header = lines[0]
    rows = [dict(zip(header, row, strict=True)) for row in lines[1:]]
    same = sorted((r["NodeId"], r["DirectoryId"], r["Status"]) for r in rows)
    return same, {}


def features(out: str) -> tuple[object, Addresses]:
    """`kafka-features describe`: every feature's levels; not the epoch (a broker gives
    its metadata image's offset, which moves)."""
    same = [re.sub(r"\s*Epoch: \d+\s*$", "", line) for line in out.strip().splitlines()]
    return [re.sub(r"\s+", " ", line) for line in same], {}


def log_dirs(out: str) -> tuple[object, Addresses]:
    """`kafka-log-dirs --describe`: its JSON, brokers and partitions in order."""
    (document,) = [line for line in out.splitlines() if line.startswith("{")]
    data = json.loads(document)
    for broker in data["brokers"]:
        for log_dir in broker["logDirs"]:
            log_dir["partitions"].sort(key=lambda p: p["partition"])
    data["brokers"].sort(key=lambda b: b["broker"])
    return data, {}


_COORDINATOR = re.compile(r"(\S+:\d+)\s+\((\d+)\)")


def group_state(out: str) -> tuple[object, Addresses]:
    """`kafka-consumer-groups --describe --state`: the group's state; its coordinator's
    node id compared, its address apart."""
    addresses: Addresses = {}

    def node(match: re.Match[str]) -> str:
        addresses[f"coordinator {match.group(2)}"] = match.group(1)
        return f"<node {match.group(2)}>"

    same = [re.sub(r"\s+", " ", _COORDINATOR.sub(node, line)).strip() for line in out.splitlines()]
    return [line for line in same if line], addresses


def as_printed(out: str) -> tuple[object, Addresses]:
    """Output that names no address: compared line for line (column padding aside)."""
    return [re.sub(r"\s+", " ", line).strip() for line in out.strip().splitlines()], {}


def as_set(out: str) -> tuple[object, Addresses]:
    """A list whose order is the tool's hash order (topics, groups)."""
    return sorted(line.strip() for line in out.splitlines() if line.strip()), {}
