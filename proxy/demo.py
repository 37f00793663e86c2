"""`kafkalens demo`: an embedded broker with the proxy in front of it.

The broker is an in-memory tansu (the default: it starts in a second), or with
`--broker apache-kafka` one Apache Kafka node (KRaft) started from its jars, which needs
Java 17 or newer. Either listens on a free internal port and advertises the proxy's
port, so every client connection, including those made after metadata discovery, goes
through the proxy. Ctrl-C or SIGTERM stops both and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy import kafka_jars
from proxy.apache_kafka import KafkaCluster, check_java
from proxy.config import Address, ConfigError, Overrides
from proxy.console import OneLineParser, configure_logging, fail
from proxy.features import Config, load_config
from proxy.preflight import check_request_log_path
from proxy.tansu import BrokerUnavailable, TansuBroker, free_port

if TYPE_CHECKING:
    from proxy.hooks import Hooks

DEFAULT_DIR = Path("kafkalens-demo")
HOST = "127.0.0.1"
DEMO_GRACE_SECONDS = 5.0
# The request log rotates by size (request_log.max_bytes), as the proxy's does, so that
# `tail -f` and `tail -n` on it show the latest lines however long the demo has run.
# `kafkalens watch` reads a log once it is rotated, and the demo's traffic is too light
# for size-based rotation: --rotate-every rotates it by time too, for the watch.
WATCH_ROTATE_SECONDS = 60  # what the banner and the README suggest for the watch
TANSU, APACHE_KAFKA = "tansu", "apache-kafka"
# A source checkout's jars, as `bash tests/peers/install` puts them (newest version first
# in kafka-versions).
_PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kafkalens demo", description=__doc__)
    parser.add_argument(
        "--port", type=int, default=9092, help="proxy port for clients (default %(default)s)"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=9180, help="HTTP metrics port (default %(default)s)"
    )
    parser.add_argument(
        "--log",
        default=str(DEFAULT_DIR / "requests.log"),
        metavar="PATH",
        help="request log (default %(default)s)",
    )
    parser.add_argument(
        "--rotate-every", type=float, default=None, metavar="SECONDS",
        help="also rotate the request log this often, so that `kafkalens watch` beside the"
        " demo has rotated files to read (default: by size only, as the proxy does)",
    )
    parser.add_argument(
        "--broker", choices=(TANSU, APACHE_KAFKA), default=TANSU,
        help="the broker behind the proxy: tansu, in memory, or apache-kafka, one KRaft node"
        " started from Apache Kafka's jars with Java 17+ (default %(default)s)",
    )
    parser.add_argument(
        "--kafka-libs", metavar="DIR",
        help="Apache Kafka's jars for --broker apache-kafka: the libs/ directory of a Kafka"
        " download (default $KAFKA_HOME/libs, else what `kafkalens fetch-kafka` fetched, else"
        " the newest tests/peers/install put in tests/peers/build/ of a source checkout)",
    )
    return parser


def default_kafka_libs() -> Path | None:
    """$KAFKA_HOME/libs, else what `kafkalens fetch-kafka` fetched, else the newest jars a
    source checkout's tests installed."""
    home = os.environ.get("KAFKA_HOME")
    if home:
        return Path(home) / "libs"
    fetched = kafka_jars.default_dir()
    if kafka_jars.has_jars(fetched):
        return fetched
    versions = _PEERS / "kafka-versions"
    if versions.is_file():
        newest = _PEERS / "build" / f"kafka-{versions.read_text().split()[0]}"
        if kafka_jars.has_jars(newest):
            return newest
    return None


class KafkaBroker:
    """One Apache Kafka node whose PROXIED listener advertises the proxy's port; its
    data and log in `work_dir` (formatted afresh at every start, as tansu's memory is)."""

    def __init__(self, libs: Path, work_dir: Path, proxy_port: int) -> None:
        self.cluster = KafkaCluster(
            libs=libs, work_dir=work_dir, nodes=1, advertise_proxied={1: f"{HOST}:{proxy_port}"}
        ).plan()
        self.log_path = self.cluster.node(1).log_path

    @property
    def upstream(self) -> str:
        return self.cluster.node(1).proxied_address

    @property
    def title(self) -> str:
        return f"Apache Kafka {self.cluster.version}"

    def start(self) -> None:
        print(f"kafkalens demo: starting {self.title} (its log: {self.log_path})", flush=True)
        self.cluster.start()

    def stop(self) -> None:
        self.cluster.stop()


def _kafka_broker(libs_arg: str | None, log_path: Path, port: int) -> KafkaBroker:
    libs = Path(libs_arg) if libs_arg else default_kafka_libs()
    if libs is None or not kafka_jars.has_jars(libs):
        where = f"no Apache Kafka jars (kafka_2.13-*.jar) in {libs}" if libs else "no Apache Kafka jars"
        version = kafka_jars.manifest().kafka_version
        fail(
            f"--broker {APACHE_KAFKA}: {where}; fetch Kafka {version}'s with `kafkalens"
            " fetch-kafka` (Maven Central, only Python needed), or give a Kafka download's"
            " libs/ with --kafka-libs DIR (or set KAFKA_HOME)"
        )
    try:
        check_java()
    except BrokerUnavailable as exc:
        fail(f"--broker {APACHE_KAFKA}: {exc}")
    return KafkaBroker(libs, broker_output(log_path, APACHE_KAFKA), port)


def broker_output(log_path: Path, broker: str) -> Path:
    """Where the broker writes (tansu its log, Apache Kafka its data and log): beside the
    request log's directory, not in it, since `kafkalens report`/`watch` on that
    directory read every file there and the broker's own output is no request log."""
    folder = log_path.parent
    return folder.with_name(f"{folder.name}-tansu.log" if broker == TANSU else f"{folder.name}-kafka")


def port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.rotate_every is not None and not args.rotate_every > 0:
        fail(f"--rotate-every: must be > 0, got {args.rotate_every}")
    for flag, port in (("--port", args.port), ("--metrics-port", args.metrics_port)):
        if not 1 <= port <= 65535:
            fail(f"{flag}: must be 1..65535, got {port}")
        if port_taken(port):
            fail(f"port {port} is already in use; choose another with {flag}")
    log_path = Path(args.log)
    broker: TansuBroker | KafkaBroker
    if args.broker == APACHE_KAFKA:
        broker = _kafka_broker(args.kafka_libs, log_path, args.port)
        upstream = broker.upstream
    else:
        if args.kafka_libs:
            fail(f"--kafka-libs is for --broker {APACHE_KAFKA}")
        internal = free_port(HOST)
        broker_log = broker_output(log_path, TANSU)
        broker = TansuBroker(host=HOST, port=internal, advertised_port=args.port, log_path=broker_log)
        upstream = f"{HOST}:{internal}"
    try:
        check_request_log_path(str(log_path), "--log")
        config = load_config(
            None,
            Overrides(
                listen=f"{HOST}:{args.port}",
                upstream=upstream,
                metrics=f"{HOST}:{args.metrics_port}",
                request_log=str(log_path),
            ),
        )
    except ConfigError as exc:
        fail(str(exc))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    limits = dataclasses.replace(config.limits, shutdown_grace_seconds=DEMO_GRACE_SECONDS)
    # /clients on a loopback listener of its own (a free port, named in the banner)
    metrics = dataclasses.replace(config.metrics, clients_listen=Address(HOST, 0))
    config = dataclasses.replace(config, limits=limits, metrics=metrics)
    configure_logging()
    import uvloop

    try:
        return uvloop.run(_run(config, broker, log_path, args.rotate_every))
    except ConfigError as exc:
        fail(str(exc))


async def _rotate_every(hooks: Hooks, backups: int, seconds: float) -> None:
    from proxy.observe.observing_hooks import ObservingHooks

    if not isinstance(hooks, ObservingHooks) or hooks.log is None:
        return
    while True:
        await asyncio.sleep(seconds)
        try:
            rotate_log(hooks.log.sink, backups)
        except OSError as exc:  # the demo goes on; the next interval tries again
            print(f"kafkalens demo: cannot rotate the request log: {exc}", file=sys.stderr)


def rotate_log(sink: Any, backups: int) -> None:
    """Rotate as logrotate does: requests.log.N -> .N+1, requests.log -> .1, then the
    sink reopens its path. Nothing written since the last rotation: no rotation."""
    path = sink.path
    try:
        if os.path.getsize(path) == 0:
            return
    except FileNotFoundError:
        return
    for index in range(max(backups, 1) - 1, 0, -1):
        if os.path.exists(f"{path}.{index}"):
            os.replace(f"{path}.{index}", f"{path}.{index + 1}")
    os.replace(path, f"{path}.1")
    sink.reopen()  # the writer thread reopens after the lines queued so far


async def _run(
    config: Config, broker: TansuBroker | KafkaBroker, log_path: Path, rotate_every: float | None
) -> int:
    from proxy.runner import start_proxy
    from proxy.signals import stop_signal

    stop = stop_signal()  # before the listeners open
    running = await start_proxy(config, probe_now=False)
    try:
        await asyncio.to_thread(broker.start)
    except BrokerUnavailable as exc:
        print(f"kafkalens: error: {exc}", file=sys.stderr)
        await running.stop(0)
        return 1
    running.probe.start()
    rotating: asyncio.Task[None] | None = None
    if rotate_every is not None:
        backups = config.request_log.backups
        rotating = asyncio.create_task(_rotate_every(running.server.hooks, backups, rotate_every))
    try:
        title = broker.title if isinstance(broker, KafkaBroker) else "a tansu broker"
        _banner(config, log_path, running.clients_address, rotate_every, title)
        await stop.wait()
        print("stopping...", flush=True)
        if rotating is not None:
            rotating.cancel()
        await running.stop(config.limits.shutdown_grace_seconds)
    finally:
        if rotating is not None:
            rotating.cancel()
        await asyncio.to_thread(broker.stop)
    return 0


def _banner(
    config: Config,
    log_path: Path,
    clients: Address | None,
    rotate_every: float | None,
    title: str,
) -> None:
    listen = config.listeners[0].listen
    if rotate_every is None:
        size = config.request_log.max_bytes
        shown = f"{size // 2**20} MiB" if size % 2**20 == 0 else f"{size} bytes"
        follow = f"tail -f {log_path} | jq ."
        rotation = (
            f"rotated at {shown}; for kafkalens watch {log_path.parent},"
            f" run the demo with --rotate-every {WATCH_ROTATE_SECONDS}"
        )
    else:  # follow the name, not the file: it is renamed at each rotation
        follow = f"tail -F {log_path} | jq ."
        rotation = f"rotated every {rotate_every:g} s (kafkalens watch {log_path.parent})"
    lines = [
        f"kafkalens demo: {title} behind the proxy",
        f"  bootstrap servers: {listen}",
        f"  request log:       {log_path}   ({follow})",
        f"                     {rotation}",
        f"  metrics:           http://{config.metrics.listen}/metrics",
        f"  clients:           http://{clients}/clients",
        "  Ctrl-C to stop",
    ]
    print("\n".join(lines), flush=True)
