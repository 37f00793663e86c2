"""Kafka's Java client, driven from the tests: `JavaClients` runs
tests/peers/java/clients/Driver.java (one JVM per Kafka version, for every step of a
test module) and exchanges one JSON line per step with it.

Each step's answer is what the client itself reported: record metadata, consumed records,
Admin results, or the exception it raised (`{"class": ..., "message": ...}`). Answers of
steps that closed a client carry `client_counts`, the client's own request and connection
totals (its `request-total` and `connection-creation-total` metrics), for comparing with
what the proxy logged.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from support.java import java_command
from support.kafka import NEWEST

# Enough for the slowest step (a share consumer waits out the broker's 5 s share
# heartbeat interval for its assignment, twice at most) with the machine loaded.
STEP_TIMEOUT_S = 120.0

# The client's own logs go to stderr at WARN (the driver's stdout is its protocol).
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


class JavaStepError(AssertionError):
    """The driver could not run a step at all (as opposed to a client error it reports)."""


class JavaClients:
    """One driver JVM of a Kafka version's client; `step(op, ...)` runs one step."""

    def __init__(self, work_dir: Path, version: str = NEWEST) -> None:
        self.version = version
        work_dir.mkdir(parents=True, exist_ok=True)
        log4j = work_dir / "client-log4j2.properties"
        log4j.write_text(_LOG4J2)
        self.stderr_path = work_dir / f"java-clients-{version}.stderr"
        command = java_command("clients.Driver", version=version)
        # -D options before the class name: java_command ends with the class and its args.
        command[1:1] = [f"-Dlog4j2.configurationFile={log4j}"]
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )
        self._answers: queue.Queue[str | None] = queue.Queue()
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()
        self.client_version: str = self.step("ping")["client_version"]

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self._answers.put(line)
        self._answers.put(None)

    def call(self, op: str, timeout: float = STEP_TIMEOUT_S, **args: Any) -> dict[str, Any]:
        """The driver's whole answer: {"ok": true, "result": ...} or {"ok": false, "error": ...}."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise JavaStepError(f"no answer to {op} within {timeout:.0f} s{self._tail()}") from None
        if line is None:
            raise JavaStepError(f"the driver exited during {op}{self._tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def step(self, op: str, timeout: float = STEP_TIMEOUT_S, **args: Any) -> dict[str, Any]:
        """A step's result; a step the client failed as a whole raises JavaStepError."""
        answer = self.call(op, timeout, **args)
        if not answer["ok"]:
            raise JavaStepError(f"{op} failed: {answer['error']}{self._tail()}")
        result: dict[str, Any] = answer["result"]
        return result

    def _tail(self) -> str:
        self._stderr.flush()
        tail = self.stderr_path.read_bytes()[-3000:].decode(errors="replace")
        return f"; the client's stderr ends:\n{tail}" if tail else ""

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stderr.close()

    def __enter__(self) -> JavaClients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
