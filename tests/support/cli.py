"""`kafkalens` as a user runs it, in a subprocess, and its HTTP endpoints read as a user
(or Prometheus) would."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.proxy_harness import LOCAL

REPO = Path(__file__).resolve().parent.parent.parent


def kafkalens(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    # the checkout first on the path, whatever the working directory (the demo runs in tmp)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", *args],
        cwd=kwargs.pop("cwd", REPO),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def run(*args: str, cwd: Path = REPO) -> tuple[int, str, str]:
    proc = kafkalens(*args, cwd=cwd)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def workers_config(
    tmp_path: Path, port: int, metrics_port: int, upstream: str, log: Path | str, clients_port: int = 0
) -> Path:
    config = tmp_path / "k.yaml"
    clients = f", clients_listen: '{LOCAL}:{clients_port}'" if clients_port else ""
    config.write_text(
        f"workers: 2\n"
        f"listeners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{upstream}'}}]\n"
        f"metrics: {{listen: '{LOCAL}:{metrics_port}'{clients}}}\n"
        f"request_log: {{path: '{log}'}}\n"
    )
    return config


def children_of(pid: int) -> list[int]:
    """Live (not zombie) child processes of `pid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return sorted(found)


def http_get(port: int, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{LOCAL}:{port}{path}", timeout=5) as response:
        return str(response.read().decode())


def http_status(port: int, path: str) -> int:
    import urllib.error

    try:
        http_get(port, path)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def http_json(
    port: int, path: str, wait_for: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The JSON at `path`, polled until `wait_for(value)` (workers write every second)."""
    deadline = time.monotonic() + 5
    while True:
        value: list[dict[str, Any]] = json.loads(http_get(port, path))
        if wait_for(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)
