"""`kafkalens proxy` in a subprocess, its own log (stderr) read line by line as it
comes, as an operator's log collector would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.paths import REPO


class OwnLog:
    """A running `kafkalens proxy`: its stderr lines (parsed when JSON) as they come."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.raw: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.raw.append(line.decode())
                self._cond.notify_all()

    @property
    def lines(self) -> list[dict[str, Any]]:
        """Every line so far as JSON (each must be)."""
        with self._cond:
            return [json.loads(line) for line in self.raw]

    def messages(self, msg: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("msg") == msg]

    def wait_for(self, found: Callable[[list[dict[str, Any]]], bool], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not found([json.loads(line) for line in self.raw]):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(f"not logged in {timeout} s:\n{''.join(self.raw)}")
                self._cond.wait(min(left, 0.2))

    def wait_message(self, msg: str, count: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
        self.wait_for(lambda lines: sum(1 for line in lines if line.get("msg") == msg) >= count, timeout)
        return self.messages(msg)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code


@contextmanager
def own_log(
    config: Path, *flags: str, env: dict[str, str] | None = None, stdout: Any = subprocess.DEVNULL
) -> Iterator[OwnLog]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "proxy", "--config", str(config), *flags],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=stdout,
        stderr=subprocess.PIPE,
    )
    log = OwnLog(proc)
    try:
        yield log
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
