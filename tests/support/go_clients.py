"""The Go client programs of tests/peers/go (franz-go, sarama), run and compared.

Each program prints one JSON line per step: `{"step", "error", "result"}` (see the
programs' own doc comments). `run` returns those steps by name; `same_steps` compares a
run straight to the broker with one through kafkalens, step by step.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

from support.kafka import PEERS, go_binary

GO_MOD = PEERS / "go" / "go.mod"
FRANZ_GO, SARAMA = "github.com/twmb/franz-go", "github.com/IBM/sarama"


def module_version(module: str) -> str:
    """The version of `module` that tests/peers/go/go.mod requires (what is built)."""
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", GO_MOD.read_text(), re.MULTILINE)
    assert found, f"{module} is not required in {GO_MOD}"
    return found.group(1)


class Run:
    """One run of a Go program: its steps by name, in the order they came."""

    def __init__(self, stdout: str, stderr: str, returncode: int) -> None:
        self.steps: dict[str, dict[str, Any]] = {}
        for line in stdout.splitlines():
            step = json.loads(line)
            self.steps[step["step"]] = step
        self.stderr = stderr
        self.returncode = returncode

    def __getitem__(self, name: str) -> dict[str, Any]:
        assert name in self.steps, f"no step {name!r}: {list(self.steps)}; stderr {self.stderr[-2000:]}"
        return self.steps[name]

    def result(self, name: str) -> Any:
        return self[name]["result"]

    def errors(self) -> dict[str, str]:
        """The steps that failed, with what the client said."""
        return {name: step["error"] for name, step in self.steps.items() if step["error"]}


def run(program: str, *args: str, timeout: float = 120.0, stdin: str | None = None) -> Run:
    """Runs tests/peers/go/cmd/<program> with `args` and waits for it to end."""
    done = subprocess.run(
        [str(go_binary(program)), *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(done.stdout, done.stderr, done.returncode)


def start(program: str, *args: str) -> subprocess.Popen[str]:
    """Starts a program whose steps wait for a line on stdin (sarama -legacy's fetch)."""
    return subprocess.Popen(
        [str(go_binary(program)), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60.0) -> Run:
    """Tells a started program to go on (a line on stdin) and waits for its end."""
    stdout, stderr = proc.communicate("go on\n", timeout=timeout)
    return Run(stdout, stderr, proc.returncode)


def same_steps(direct: Run, proxied: Run) -> list[str]:
    """The steps whose error or result differ between the two runs (empty: the same)."""
    names = list(direct.steps) + [n for n in proxied.steps if n not in direct.steps]
    return [
        f"{name}: direct {direct.steps.get(name)} proxied {proxied.steps.get(name)}"
        for name in names
        if direct.steps.get(name) != proxied.steps.get(name)
    ]


def client_args(bootstrap: str, topic: str, group: str, *extra: str) -> list[str]:
    return ["-brokers", bootstrap, "-topic", topic, "-group", group, *extra]


def software_lines(lines: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(software name, version) of the request-log lines that carry them."""
    return {
        (line["client_software_name"], line["client_software_version"])
        for line in lines
        if line.get("client_software_name")
    }


