"""What the README and the guide's pages (docs/) tell an operator to run or open exists
and does what it says, and leaves a checkout as clean as it was."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.readme import README, REPO, USER_DOCS, page, recipe


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_slowest_requests_are_sorted_as_numbers(tmp_path: Path) -> None:
    latencies = [9.5, 100.0, 0.00002, 10.25, 1234.5]
    lines = [
        orjson.dumps({"event": "request", "latency_ms": ms, "api": "Produce", "client_id": f"c{i}"})
        for i, ms in enumerate(latencies)
    ]
    lines.append(orjson.dumps({"event": "connection_open", "latency_ms": None}))
    (tmp_path / "requests.log").write_bytes(b"\n".join(lines) + b"\n")
    out = subprocess.run(
        ["bash", "-c", recipe("slowest requests")],
        cwd=tmp_path, capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    shown = [float(line.split()[0]) for line in out.splitlines()]
    assert shown == sorted(latencies, reverse=True)


def test_the_deploy_paths_named_exist() -> None:
    paths = set(re.findall(r"`(deploy/[^`\s]*)`", USER_DOCS))
    assert {"deploy/prometheus/alerts.yml", "deploy/grafana/"} <= paths
    assert [p for p in sorted(paths) if not (REPO / p).exists()] == []


# `section.key` (N) or `section.key`, N: a default the documents state beside its key.
STATED_DEFAULT = re.compile(r"`([a-z0-9_]+(?:\.[a-z0-9_]+)+)`,?\s+\(?([0-9][0-9,.]*)(?:\s?(KiB|MiB|s)\b)?")
UNITS = {"KiB": 1024, "MiB": 1024 * 1024, "s": 1, None: 1}
NOT_DEFAULTS = {"metrics.allowed_hosts"}  # followed by the HTTP status it answers, 421


def test_the_defaults_the_readme_states_are_the_configs() -> None:
    """Every `section.key` (N) in the README and the guide's pages is the built-in
    default, which config/kafkalens.yaml documents (tests/proxy/test_config.py holds the
    two equal); the reference page is written from the declarations themselves."""
    import dataclasses

    from proxy.features import SECTION_SCHEMAS

    stated = [m for m in STATED_DEFAULT.finditer(USER_DOCS) if m[1] not in NOT_DEFAULTS]
    assert len({m[1] for m in stated}) >= 15, [m[0] for m in stated]
    for match in stated:
        # the declaration's default (sections that are off by default, gateway, too)
        section, _, key = match[1].rpartition(".")
        declared = {f.name: f for f in dataclasses.fields(SECTION_SCHEMAS[section])}
        value: object = declared[key].default
        number = float(match[2].rstrip(".,").replace(",", "")) * UNITS[match[3]]
        assert value == number, f"documents: {match[0]!r}; the default is {value}"


def test_without_go_the_peers_install_leaves_the_go_programs_out(tmp_path: Path) -> None:
    """The README's test command on a machine without Go: with `KAFKALENS_PEERS_SKIP_GO=1`
    tests/peers/install succeeds and leaves the Go client programs out (their tests then
    skip, tests/support/kafka.py's go_binary), where without it the install fails for
    want of `go`. Run on a copy of the script beside the Go module's files, its Java part
    left out too (KAFKALENS_PEERS_SKIP_JAVA=1), so that nothing is fetched or built."""
    assert "`KAFKALENS_PEERS_SKIP_GO=1`" in page("testing")
    peers = tmp_path / "peers"
    (peers / "go").mkdir(parents=True)
    for name in ("install", "kafka-versions", "go/go.mod", "go/go.sum"):
        shutil.copy(REPO / "tests" / "peers" / name, peers / name)
    no_go = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "go").exists()]
    env = {**os.environ, "PATH": os.pathsep.join(no_go), "KAFKALENS_PEERS_SKIP_JAVA": "1"}
    env.pop("KAFKALENS_PEERS_SKIP_GO", None)

    def install(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(peers / "install")], env={**env, **extra},
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    skipped = install(KAFKALENS_PEERS_SKIP_GO="1")
    assert skipped.returncode == 0, skipped.stderr
    assert not (peers / "build" / "bin").exists()
    without = install()
    assert without.returncode != 0 and "go" in without.stderr, without.stderr


def git_checkout(tmp_path: Path) -> Path:
    """An empty git work tree with the repository's .gitignore."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True, timeout=30)
    shutil.copy(REPO / ".gitignore", checkout / ".gitignore")
    subprocess.run(["git", "-C", str(checkout), "add", ".gitignore"], check=True, timeout=30)
    return checkout


def untracked(checkout: Path) -> list[str]:
    status = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return [line for line in status.splitlines() if not line.endswith(".gitignore")]


def test_what_the_demo_and_watch_write_by_default_is_ignored_by_git(tmp_path: Path) -> None:
    """`kafkalens demo` (either broker) and `kafkalens watch kafkalens-demo` run from the
    checkout, as the README has them (the tansu demo is also run, below)."""
    from pipeline.cli import _watch_parser
    from pipeline.watch import WatchOptions
    from proxy import demo

    log = Path(demo._parser().parse_args([]).log)
    args: Any = _watch_parser().parse_args([str(log.parent)])
    options = WatchOptions(logdir=args.logdir, out=args.out)
    checkout = git_checkout(tmp_path)
    for written in (
        f"{log}",
        f"{log}.1",
        f"{demo.broker_output(log, demo.TANSU)}",
        f"{demo.broker_output(log, demo.APACHE_KAFKA)}/node-1/kafka.log",
        f"{options.checkpoint_dir}/offsets/0",
        f"{options.checkpoint_dir}/sources/0/.0.crc",
        f"{options.spool_dir}/167e4d48017dd7115396e0ace4396eb7.log",
        f"{options.spool_dir}/_ledger.txt",
        f"{options.out}/by_api/part-00000.snappy.parquet",
    ):
        (checkout / written).parent.mkdir(parents=True, exist_ok=True)
        (checkout / written).write_text("x")
    assert untracked(checkout) == []


def demo_recipe(port: int, metrics_port: int) -> str:
    """The README's commands to try the demo with ("Try it from another terminal"), for a
    demo on these ports and this test's Python."""
    block = README.split("Try it from another terminal:", 1)[1].split("```sh\n", 1)[1]
    block = block.split("```", 1)[0]
    for readme, here in (
        (".venv/bin/python", sys.executable),
        ("127.0.0.1:9092", f"127.0.0.1:{port}"),
        ("127.0.0.1:9180", f"127.0.0.1:{metrics_port}"),
    ):
        assert readme in block, readme
        block = block.replace(readme, here)
    return block


def read_banner(demo: subprocess.Popen[str]) -> str:
    assert demo.stdout is not None
    banner = ""
    while "Ctrl-C" not in banner:
        line = demo.stdout.readline()
        assert line, demo.stderr.read() if demo.stderr else ""
        banner += line
    return banner


def run_demo_recipe(checkout: Path, port: int, metrics_port: int) -> None:
    """The README's "Try it" commands against a demo on these ports: what it consumed is
    what it produced, the tail of the request log is the client's requests, and the
    metrics count them."""
    recipe = subprocess.run(
        ["bash", "-c", "set -eo pipefail\n" + demo_recipe(port, metrics_port)],
        cwd=checkout, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert recipe.returncode == 0, recipe.stderr
    printed = recipe.stdout.splitlines()
    consumed = ast.literal_eval(printed[0])  # in order per partition, of several
    assert sorted(consumed) == [b"hello %d" % i for i in range(5)], printed[0]
    tail = [json.loads(line) for line in printed[1:6]]
    assert all(set(line) == {"event", "api", "api_version", "client_software_name",
                             "topics", "latency_ms"} for line in tail), tail  # fmt: skip
    assert any(line["client_software_name"] == "kafka-python" for line in tail), tail
    assert any(line.startswith("kafkalens_requests_total{") for line in printed[6:]), printed


NEEDS_JQ_CURL = pytest.mark.skipif(
    shutil.which("jq") is None or shutil.which("curl") is None, reason="needs jq and curl"
)


@pytest.mark.broker
@NEEDS_JQ_CURL
def test_the_demo_recipe_shows_its_requests_and_leaves_the_checkout_clean(tmp_path: Path) -> None:
    """The README's first commands, as a new user runs them from a checkout: `kafkalens
    demo` with its defaults, then the recipe. `tail -n 5` on the request log shows the
    recipe's requests however long the demo has run: the log rotates by size (a timer
    would leave it empty a minute later, the lines in requests.log.1)."""
    from support.cli import kafkalens

    from proxy.demo import WATCH_ROTATE_SECONDS
    from proxy.tansu import free_port

    checkout = git_checkout(tmp_path)
    port, metrics_port = free_port(), free_port()
    demo = kafkalens("demo", "--port", str(port), "--metrics-port", str(metrics_port), cwd=checkout)
    try:
        banner = read_banner(demo)
        assert "(tail -f kafkalens-demo/requests.log | jq .)" in banner
        assert (
            "rotated at 100 MiB; for kafkalens watch kafkalens-demo,"
            f" run the demo with --rotate-every {WATCH_ROTATE_SECONDS}" in banner
        ), banner
        assert f"`kafkalens demo --rotate-every {WATCH_ROTATE_SECONDS}`" in README
        run_demo_recipe(checkout, port, metrics_port)
        demo.send_signal(signal.SIGINT)
        assert demo.wait(30) == 0
        # the request log and the broker's log, and nothing else, are where git ignores them
        assert (checkout / "kafkalens-demo" / "requests.log").stat().st_size > 0
        assert (checkout / "kafkalens-demo-tansu.log").exists()
        assert untracked(checkout) == []
    finally:
        demo.kill()
        demo.communicate()


def apache_kafka_commands() -> list[list[str]]:
    """The README's command for the demo in front of Apache Kafka, split at `&&`."""
    block = README.split("the demo runs in front of Apache Kafka itself", 1)[1]
    block = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [part.split() for part in block.strip().split(" && ")]


@pytest.mark.broker
@pytest.mark.java
@NEEDS_JQ_CURL
@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java 17+")
def test_the_apache_kafka_demo_is_two_commands_and_the_recipe_works_on_it(tmp_path: Path) -> None:
    """`kafkalens fetch-kafka && kafkalens demo --broker apache-kafka` as the README
    has them, from a checkout, for a user with nothing fetched yet (an empty cache, no
    KAFKA_HOME): the jars come from Maven Central, the demo finds them where they went,
    and the same recipe as on tansu works (Kafka refuses session timeouts under 6 s)."""
    from support.cli import children_of

    from proxy.kafka_jars import manifest
    from proxy.tansu import free_port

    wanted = manifest()
    assert f"Apache Kafka {wanted.kafka_version}'s jars ({len(wanted.jars)} jars," in README
    assert f"{wanted.size / 2**20:.0f} MiB, from Maven Central" in README
    assert f"`~/.cache/kafkalens/kafka-{wanted.kafka_version}/`" in README
    fetch, demo_command = apache_kafka_commands()
    assert fetch == [".venv/bin/kafkalens", "fetch-kafka"], fetch
    assert demo_command == [".venv/bin/kafkalens", "demo", "--broker", "apache-kafka"]
    checkout = git_checkout(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_HOME"}
    env |= {"PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "proxy.cli"]
    fetched = subprocess.run([*command, *fetch[1:]], cwd=checkout, env=env, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
    if fetched.returncode != 0 and os.environ.get("KAFKALENS_REQUIRE_PEERS") != "1":
        pytest.skip(f"Maven Central unreachable: {fetched.stderr}")
    assert fetched.returncode == 0, fetched.stderr
    libs = tmp_path / "cache" / "kafkalens" / f"kafka-{wanted.kafka_version}"
    assert fetched.stdout == f"{libs}\n"
    assert sorted(p.name for p in libs.iterdir()) == sorted(j.file_name for j in wanted.jars)
    port, metrics_port = free_port(), free_port()
    demo = subprocess.Popen(
        [*command, *demo_command[1:], "--port", str(port), "--metrics-port", str(metrics_port)],
        cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        banner = read_banner(demo)
        assert f"Apache Kafka {wanted.kafka_version} behind the proxy" in banner, banner
        arguments = [
            arg for pid in children_of(demo.pid)
            for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ]  # fmt: skip
        assert str(libs / "*").encode() in arguments, arguments  # the broker runs the fetched jars
        run_demo_recipe(checkout, port, metrics_port)
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0
        assert (checkout / "kafkalens-demo" / "requests.log").stat().st_size > 0
        assert untracked(checkout) == []
    finally:
        demo.kill()
        demo.communicate()
