"""Process plumbing for the arms' fronts: spawn, stop, generated config files."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = """\
global
    maxconn 8000
defaults
    mode tcp
    timeout connect 5s
    timeout client 10m
    timeout server 10m
frontend kafka
    bind {host}:{front}
    default_backend broker
backend broker
    server broker0 {host}:{broker}
"""

# Limits raised so the 1,000-connection workloads fit; everything else as shipped.
KAFKALENS_CONFIG = """\
mode: sidecar
workers: {workers}
limits:
  max_connections: 20000
  max_connections_per_ip: 20000
request_log:
  sample_rate: {sample_rate}
{telemetry}"""
# KIP-714 telemetry for the telemetry arms: off altogether, or collected by the proxy
# (every client pushes its metrics each second, decoded and written to a log).
TELEMETRY_OFF = "telemetry:\n  observe: false\n  collect: false\n"
TELEMETRY_COLLECT = (
    "telemetry:\n  collect: true\n  push_interval_ms: 1000\n  metrics: ['']\n"
    "  log:\n    path: {log}\n"
)


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )


def working_tree_env() -> dict[str, str]:
    """The environment with this checkout first on PYTHONPATH: the console script then
    runs the working tree's code whatever state the installed package is in."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def log_tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def version_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "version unknown"
    return out.splitlines()[0] if out else "version unknown"


def write_haproxy_config(path: Path, host: str, front: int, broker: int) -> Path:
    path.write_text(HAPROXY_CONFIG.format(host=host, front=front, broker=broker))
    return path


def write_kafkalens_config(
    path: Path, workers: int, log: bool, telemetry: str = "", lag: bool = True
) -> Path:
    """`telemetry`: "" (the shipped default: observe), "off" or "collect"."""
    section = {"": "", "off": TELEMETRY_OFF, "collect": TELEMETRY_COLLECT}[telemetry]
    section = section.format(log=path.with_name(path.stem + "-telemetry.log"))
    text = KAFKALENS_CONFIG.format(workers=workers, sample_rate=1.0 if log else 0.0, telemetry=section)
    # only when off: a baseline checkout from before the `lag` section knows no such key
    path.write_text(text if lag else text + "lag:\n  enabled: false\n")
    return path
