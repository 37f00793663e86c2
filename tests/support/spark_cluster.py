"""A real Spark standalone cluster on loopback, started from the pyspark package's own
scripts: one master and N workers, each worker with its own work directory, torn down
(process groups killed) on exit.

Executors run a bare Python: a venv made `--without-pip` from the base interpreter of
the driver's (same version, so PySpark's worker can start), with nothing installed -
no pyspark (Spark ships its own zip to the Python workers), pyarrow, pandas or msgspec.
A job that needs the project's Python environment on the executors fails there, as it
would on a stock Databricks, EMR or Dataproc cluster. Stdlib only: the benchmark
(bench/pipeline/speed.py) uses it too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT_S = 180.0  # JVM starts are slow on a shared 2-core machine
DAEMON_MEMORY = "256m"  # the master's and workers' own heaps (not the executors')
EXECUTOR_MEMORY = "512m"
PROJECT_PACKAGES = ("pyspark", "pyarrow", "pandas", "numpy", "msgspec")


def spark_home() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is not installed"
    return Path(spec.origin).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def bare_python(directory: Path) -> Path:
    """A venv without pip or packages, of the driver's Python version."""
    base = getattr(sys, "_base_executable", sys.executable)
    if not (directory / "bin" / "python").exists():
        subprocess.run([base, "-m", "venv", "--without-pip", str(directory)], check=True)
    return directory / "bin" / "python"


def importable(python: Path, module: str) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([str(python), "-c", f"import {module}"], env=env,
                          capture_output=True, check=False)
    return done.returncode == 0


@dataclass
class SparkCluster:
    master_url: str
    webui: str
    python: Path  # the executors' interpreter
    workers: int
    cores_per_worker: int
    processes: list[subprocess.Popen] = field(default_factory=list)

    def driver_env(self, base: dict[str, str] | None = None, **conf: str) -> dict[str, str]:
        """Environment for a driver process (`kafkalens report --master ...`) on this
        cluster: executors get the bare Python, small heaps and every core."""
        env = dict(os.environ if base is None else base)
        settings = {
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": str(self.cores_per_worker),
            "spark.cores.max": str(self.workers * self.cores_per_worker),
            "spark.pyspark.python": str(self.python),
            **conf,
        }
        args = " ".join(f"--conf {k}={v}" for k, v in settings.items())
        env.update(PYSPARK_PYTHON=str(self.python), SPARK_LOCAL_IP=HOST,
                   PYSPARK_SUBMIT_ARGS=f"{args} pyspark-shell")
        return env

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as r:
            return int(json.load(r).get("aliveworkers", 0))

    def applications(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as r:
            data = json.load(r)
        return list(data.get("activeapps", [])) + list(data.get("completedapps", []))

    def stop(self) -> None:
        for proc in reversed(self.processes):
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.processes:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for proc in self.processes:  # executors live in their worker's process group
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        deadline = time.monotonic() + 15  # spark-class's orphaned shells are reaped by init
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)

    def leftovers(self) -> list[int]:
        """Process groups of this cluster that still exist."""
        alive = []
        for proc in self.processes:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                continue
            alive.append(proc.pid)
        return alive


def _daemon(cls: str, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    spark_class = spark_home() / "bin" / "spark-class"
    with log.open("wb") as out:
        return subprocess.Popen([str(spark_class), cls, *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


@contextmanager
def standalone_cluster(directory: Path, workers: int = 2, cores: int = 1,
                       worker_memory: str = "1g") -> Iterator[SparkCluster]:
    directory.mkdir(parents=True, exist_ok=True)
    python = bare_python(directory / "bare-python")
    home = spark_home()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"}
    env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP=HOST, SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
               PYSPARK_PYTHON=str(python), SPARK_LOG_DIR=str(directory / "logs"),
               SPARK_NO_DAEMONIZE="1")
    port, webui = free_port(), free_port()
    cluster = SparkCluster(f"spark://{HOST}:{port}", f"http://{HOST}:{webui}", python,
                           workers, cores)
    try:
        cluster.processes.append(_daemon(
            "org.apache.spark.deploy.master.Master",
            ["--host", HOST, "--port", str(port), "--webui-port", str(webui)],
            directory / "master.log", env))
        for n in range(workers):
            work = directory / f"worker-{n}"
            work.mkdir(exist_ok=True)
            cluster.processes.append(_daemon(
                "org.apache.spark.deploy.worker.Worker",
                [cluster.master_url, "--host", HOST, "--cores", str(cores), "--memory",
                 worker_memory, "--work-dir", str(work), "--webui-port", str(free_port())],
                directory / f"worker-{n}.log", env))
        _wait_until_up(cluster, directory)
        yield cluster
    finally:
        cluster.stop()


def _wait_until_up(cluster: SparkCluster, directory: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        dead = [p.args for p in cluster.processes if p.poll() is not None]
        if dead:
            break
        with suppress(OSError, ValueError):
            if cluster.alive_workers() == cluster.workers:
                return
        time.sleep(1)
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                     for p in sorted(directory.glob("*.log")))
    raise RuntimeError(f"the standalone cluster did not come up\n{logs}")

