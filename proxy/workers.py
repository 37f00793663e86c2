"""`workers: N` (N > 1): N proxy processes share the listen ports, so more than one
core forwards.

Every worker binds the same listen addresses with SO_REUSEPORT and the kernel
spreads new connections over them. The parent binds no proxy port: it starts the
workers, waits until each has bound its listeners, serves the HTTP endpoint and
supervises (a worker that dies is started again). Metrics use prometheus_client's
multiprocess mode: workers write their samples to files in a private
PROMETHEUS_MULTIPROC_DIR and the parent's /metrics adds them up. /clients merges
the connection lists the workers write next to them every second, and adds the
client metrics (KIP-714 telemetry) each worker writes there as often.

SIGTERM or SIGINT to the parent is passed to the workers, which drain their
in-flight requests for up to limits.shutdown_grace_seconds as a single process does;
SIGHUP is passed on too, and each worker reopens its own request log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from proxy.config import Address, ConfigError
from proxy.features import Config, check_shareable

log = structlog.get_logger("kafkalens.workers")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_TIMEOUT_SECONDS = 60.0
SUPERVISE_SECONDS = 1.0
CLIENTS_FILE = "clients-{pid}.json"
# A worker's KIP-714 client metrics (proxy/observe/telemetry/export.py), merged by /metrics.
TELEMETRY_FILE = "telemetry-{pid}.json"
CLIENTS_WRITE_SECONDS = 1.0
# A worker is a fresh interpreter (no inherited loop or locks), started as a plain
# child process rather than with multiprocessing's "spawn": that also starts a
# resource-tracker process, a whole interpreter's RSS that does nothing here
# (bench.proxy.choices). Like spawn, the
# child gets the parent's sys.path before it imports the project.
_BOOTSTRAP = (
    "import pickle, sys; path, payload = pickle.load(sys.stdin.buffer); sys.path[:] = path; "
    "from proxy.workers import worker_entry; worker_entry(payload)"
)


def configured_upstreams(config: Config) -> set[Address]:
    """What the parent probes: the sidecar upstreams, or the gateway's bootstrap servers."""
    if config.mode == "gateway" and config.gateway:
        return set(config.gateway.bootstrap_servers)
    return {listener.upstream for listener in config.listeners}


# --- a worker --------------------------------------------------------------------------


def name_process(title: str) -> None:
    """What `ps`, `top` and /proc/PID/cmdline show for this process (setproctitle:
    argv's memory; and the kernel's comm, 15 bytes, for `ps -o comm` and `top`)."""
    import setproctitle

    setproctitle.setproctitle(title)


def worker_log_path(path: str, index: int) -> str:
    """requests.log -> requests-w1.log: one file per worker, so no two processes append
    to or rotate the same file. Standard output stays shared (lines are written whole)."""
    if path == "-":
        return path
    stem, dot, ext = path.rpartition(".")
    if not dot or "/" in ext:
        return f"{path}-w{index}"
    return f"{stem}-w{index}.{ext}"


def worker_config(config: Config, index: int) -> Config:
    log_config = replace(config.request_log, path=worker_log_path(config.request_log.path, index))
    telemetry = config.telemetry
    if telemetry.log.path is not None:
        telemetry_log = replace(telemetry.log, path=worker_log_path(telemetry.log.path, index))
        telemetry = replace(telemetry, log=telemetry_log)
    return replace(config, request_log=log_config, telemetry=telemetry)


def worker_entry(payload: bytes) -> None:
    """Entry point of a worker process: (index, ready fd, config) pickled by the parent;
    the metrics dir is in its environment."""
    import uvloop

    from proxy.console import configure_logging
    from proxy.forward.fdlimit import raise_open_file_limit

    index, ready_fd, config, parent = pickle.loads(payload)
    # Ctrl-C reaches the whole process group: workers stop on the parent's SIGTERM only
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop_with_parent(parent)
    name_process(f"kafkalens: worker {index}")
    configure_logging(config.log, worker=index)
    raise_open_file_limit()
    uvloop.run(_worker(index, config, ReadyPipe(ready_fd)))


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent(parent: int) -> None:
    """A worker whose parent is gone (SIGKILL, the OOM killer) would serve on unsupervised,
    on a port that a proxy started again shares with it (SO_REUSEPORT): the kernel sends it
    SIGTERM when the parent dies (prctl's PR_SET_PDEATHSIG), so it drains and stops as on
    the parent's own SIGTERM. A parent already gone before that took effect: the same."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass(frozen=True)
class ReadyPipe:
    """A worker's one line to the parent: its index, then the error it stopped on or
    nothing. Every worker shares the pipe: a line is far below PIPE_BUF, so lines from
    different workers never interleave."""

    fd: int

    def put(self, index: int, error: str | None) -> None:
        line = json.dumps([index, error]) + "\n"
        os.write(self.fd, line.encode())
        os.close(self.fd)


async def _worker(index: int, config: Config, ready: ReadyPipe) -> None:
    from proxy import announce
    from proxy.features import build_hooks, proxy_metrics
    from proxy.forward.allocator import keep_large_buffers
    from proxy.observe.telemetry.hooks import TelemetryLink
    from proxy.preflight import check_api_names
    from proxy.runner import freeze_startup_objects, open_server
    from proxy.signals import reopen_logs_on_sighup, stop_signal

    stop = stop_signal((signal.SIGTERM,))  # before the listeners open
    config = worker_config(config, index)
    metrics = proxy_metrics(config)
    try:
        check_api_names(config)  # here, not in the parent (see proxy/preflight.py)
        hooks = build_hooks(config, metrics)
        server = await open_server(config, hooks, metrics, reuse_port=True)
    except ConfigError as exc:
        ready.put(index, str(exc))
        return
    freeze_startup_objects()
    keep_large_buffers()
    reopen_logs_on_sighup(server.hooks)
    server.announced = True  # the parent says it started; later listeners are said here
    ready.put(index, None)
    link = hooks.link(TelemetryLink)
    telemetry = None if link is None else link.telemetry
    writer = asyncio.get_running_loop().create_task(_write_clients(server, telemetry))
    await stop.wait()
    writer.cancel()
    grace = config.limits.shutdown_grace_seconds
    stopping = announce.Stopping.now(
        stop.name, connections=len(server.connections), requests=server.pending_total(), grace=grace
    )
    cut = await server.shutdown(grace)
    stopping.done(connections_cut=cut.connections, requests_cut=cut.requests)


async def _write_clients(server: Any, telemetry: Any) -> None:
    directory = Path(os.environ[MULTIPROC_ENV])
    while True:
        _write_atomically(directory / CLIENTS_FILE.format(pid=os.getpid()), server.clients())
        if telemetry is not None:
            _write_atomically(directory / TELEMETRY_FILE.format(pid=os.getpid()), telemetry.snapshot())
        await asyncio.sleep(CLIENTS_WRITE_SECONDS)


def _write_atomically(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, default=str))
    tmp.replace(path)  # atomic: the parent never reads half a file


# --- the parent ------------------------------------------------------------------------


@dataclass
class WorkerPool:
    config: Config
    metrics_dir: Path
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    stopping: bool = False

    def __post_init__(self) -> None:
        self._ready_read, self._ready_write = os.pipe()
        self._ready: asyncio.StreamReader | None = None

    def spawn(self, index: int) -> None:
        payload = pickle.dumps((index, self._ready_write, self.config, os.getpid()))
        process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP], stdin=subprocess.PIPE, pass_fds=(self._ready_write,)
        )
        assert process.stdin is not None
        with process.stdin:
            pickle.dump((sys.path, payload), process.stdin)
        self.processes[index] = process

    async def wait_ready(self, count: int) -> None:
        """Until `count` workers have bound their listeners; ConfigError if one could not."""
        reader = await self._ready_reader()
        for _ in range(count):
            try:
                line = await asyncio.wait_for(reader.readline(), READY_TIMEOUT_SECONDS)
            except TimeoutError:
                raise ConfigError("workers", "a worker did not start in time") from None
            _index, error = json.loads(line)
            if error is not None:
                raise ConfigError(error.split(": ", 1)[0], error.split(": ", 1)[-1])

    async def _ready_reader(self) -> asyncio.StreamReader:
        if self._ready is None:
            reader = asyncio.StreamReader()
            pipe = os.fdopen(self._ready_read, "rb", buffering=0)
            loop = asyncio.get_running_loop()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
            self._ready = reader
        return self._ready

    def pids(self) -> dict[str, int]:
        """This process (`parent`) and each worker alive, by index: for process_*."""
        alive = {str(i): p.pid for i, p in self.processes.items() if p.poll() is None}
        return {"parent": os.getpid(), **alive}

    def alive(self) -> bool:
        return bool(self.processes) and all(p.poll() is None for p in self.processes.values())

    async def supervise(self) -> None:
        """Start again a worker that died (not while stopping)."""
        from prometheus_client import multiprocess

        while not self.stopping:
            await asyncio.sleep(SUPERVISE_SECONDS)
            for index, process in list(self.processes.items()):
                if process.poll() is None or self.stopping:
                    continue
                log.warning("worker died; starting it again", worker=index, code=process.returncode)
                multiprocess.mark_process_dead(process.pid, str(self.metrics_dir))
                _remove(self.metrics_dir / CLIENTS_FILE.format(pid=process.pid))
                _remove(self.metrics_dir / TELEMETRY_FILE.format(pid=process.pid))
                self.spawn(index)
                await self.wait_ready(1)

    async def stop(self, grace: float) -> None:
        self.stopping = True
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        for process in self.processes.values():
            try:
                await loop.run_in_executor(None, process.wait, grace + 5)
            except subprocess.TimeoutExpired:
                process.kill()
                await loop.run_in_executor(None, process.wait)

    def reopen_logs(self) -> None:
        """SIGHUP to the parent: every worker reopens its own request log."""
        log.info("SIGHUP: passed to the workers")
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGHUP)

    def clients(self) -> list[dict[str, Any]]:
        merged: list[dict[str, Any]] = []
        for process in self.processes.values():
            path = self.metrics_dir / CLIENTS_FILE.format(pid=process.pid)
            with contextlib.suppress(OSError, ValueError):
                merged.extend(json.loads(path.read_text()))
        return merged

    def metric_families(self) -> Any:
        """The workers' metrics, summed as /metrics sums them (for /top)."""
        from prometheus_client import multiprocess

        return multiprocess.MultiProcessCollector(None, path=str(self.metrics_dir)).collect()

    def render_metrics(self, *own: Any) -> bytes:
        """The workers' metrics, plus collectors of the parent's `own`."""
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        from proxy.observe.telemetry.export import SnapshotCollector

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(self.metrics_dir))
        registry.register(SnapshotCollector(self.metrics_dir, TELEMETRY_FILE.format(pid="*")))
        for collector in own:
            registry.register(collector)
        return generate_latest(registry)


def _bound(server: asyncio.Server) -> Address:
    host, port = server.sockets[0].getsockname()[:2]
    return Address(str(host), int(port))


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def serve_workers(config: Config, config_path: str | None = None) -> None:
    """Run the parent: N workers, the HTTP endpoint, until SIGTERM/SIGINT."""
    import uvloop

    check_shareable(config)
    metrics_dir = Path(tempfile.mkdtemp(prefix="kafkalens-metrics-"))
    os.environ[MULTIPROC_ENV] = str(metrics_dir)  # inherited by the spawned workers
    try:
        uvloop.run(_parent(config, metrics_dir, config_path))
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def _parent(config: Config, metrics_dir: Path, config_path: str | None) -> None:
    # Not proxy.runner: the parent forwards nothing; it only supervises, probes and
    # merges metrics. (It holds the codec's schema tables all the same: proxy.metrics
    # reads the api versions its labels allow from them; bench.proxy.choices.)
    from prometheus_client import PlatformCollector

    from proxy import announce
    from proxy.admin.http import Endpoints, start_admin
    from proxy.admin.readiness import UpstreamProbe
    from proxy.admin.top import TopSource
    from proxy.forward import fdlimit
    from proxy.metrics import AdminRefusals, ProcessesCollector, UpstreamReachability
    from proxy.signals import on_reopen_signal, stop_signal

    stop = stop_signal()  # before the workers open the listeners
    pool = WorkerPool(config, metrics_dir)
    for index in range(config.workers):
        pool.spawn(index)
    starting = asyncio.ensure_future(pool.wait_ready(config.workers))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((starting, stopped), return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # stopped while the workers start: they drain and stop
            starting.cancel()
            from proxy import announce

            stopping = announce.Stopping.now(
                stop.name,
                connections=0,
                requests=0,
                grace=config.limits.shutdown_grace_seconds,
                workers=len(pool.processes),
                while_starting=True,
            )
            await pool.stop(config.limits.shutdown_grace_seconds)
            stopping.done()
            return
        starting.result()
    except BaseException:
        starting.cancel()
        await pool.stop(0)
        raise
    finally:
        stopped.cancel()
    reachability = UpstreamReachability()
    probe = UpstreamProbe.of(config, lambda: configured_upstreams(config), reachability)

    def ready() -> tuple[bool, str]:
        if not pool.alive():
            return False, "a worker is not running"
        return probe.verdict(need_all=config.mode != "gateway")

    refusals = AdminRefusals()
    processes = ProcessesCollector(pool.pids)
    platform = PlatformCollector(registry=None)
    endpoints = Endpoints(
        metrics=lambda: pool.render_metrics(refusals, reachability, processes, platform),
        ready=ready,
        clients=pool.clients,
        refusals=refusals,
        top=TopSource(pool.metric_families, pool.clients).answer,
    )
    try:
        http = await start_admin(config.metrics, endpoints)
    except ConfigError:
        await pool.stop(0)
        raise
    supervisor = asyncio.get_running_loop().create_task(pool.supervise())
    announce.started(
        config,
        config_path,
        metrics=_bound(http.main),
        clients=_bound(http.local) if http.local is not None else None,
        # each worker's, as each sizes its own (the same limit, inherited)
        max_connections=fdlimit.size_max_connections(config.limits.max_connections, quiet=True),
        open_file_limit=fdlimit.soft_limit(),
    )
    probe.start()  # its first verdict after the start line, which says what it probes
    on_reopen_signal(pool.reopen_logs)
    await stop.wait()
    supervisor.cancel()
    http.close()
    await probe.stop()
    # as the workers last wrote their connections (each second); each worker then says
    # what it had in flight and what its drain cut
    open_now = pool.clients()
    stopping = announce.Stopping.now(
        stop.name,
        connections=len(open_now),
        requests=sum(int(conn.get("in_flight") or 0) for conn in open_now),
        grace=config.limits.shutdown_grace_seconds,
        workers=len(pool.processes),
    )
    await pool.stop(config.limits.shutdown_grace_seconds)
    stopping.done()
