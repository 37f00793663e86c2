"""Share groups (KIP-932) for the tests: the Java share consumer's driver
(tests/peers/java/share/ShareDriver.java) and what its answers and the request log
say, in comparable shapes.

The driver's own account (what the application received and what it did with it) and
the broker's (Admin describeShareGroups, listShareGroupOffsets) are the oracles the
request log and the metrics are checked against.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from typing import Any

from support.java import start_java

# Acknowledgement types the metrics count, as the line and the driver name them.
COUNTED = ("accept", "release", "reject", "renew")


class ShareDriver:
    """One JVM running share.ShareDriver; `ask(...)` sends one command, returns its answer."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.process: subprocess.Popen[str] = start_java("share.ShareDriver", version=version)

    def ask(self, *words: object) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(" ".join(str(w) for w in words) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            stderr = self.process.stderr.read() if self.process.stderr else ""
            raise AssertionError(f"the share driver ended: {stderr[-3000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def must(self, *words: object) -> dict[str, Any]:
        answer = self.ask(*words)
        assert "error" not in answer, (words, answer)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> ShareDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the driver's account ------------------------------------------------------------


def broker_deliveries(deliveries: list[dict[str, Any]]) -> Counter[tuple[int, int, int]]:
    """(partition, offset, delivery count) of every record the broker delivered (a
    renewed record the client handed over again is not a delivery)."""
    return Counter(
        (d["partition"], d["offset"], d["delivery_count"]) for d in deliveries if not d["replay"]
    )


def actions(deliveries: list[dict[str, Any]]) -> Counter[tuple[int, int, str]]:
    """(partition, offset, acknowledgement type) of every acknowledgement made."""
    return Counter((d["partition"], d["offset"], d["action"]) for d in deliveries)


# --- the request log's account --------------------------------------------------------


def share_lines(lines: list[dict[str, Any]], group: str) -> list[dict[str, Any]]:
    return [
        line
        for line in lines
        if line.get("event") == "request"
        and line.get("api") in ("ShareFetch", "ShareAcknowledge")
        and line.get("group_id") == group
    ]


def logged_deliveries(lines: list[dict[str, Any]], topic: str) -> Counter[tuple[int, int, int]]:
    """(partition, offset, delivery count) of every acquired offset the lines list."""
    found: Counter[tuple[int, int, int]] = Counter()
    for line in lines:
        for part in line.get("acquired") or ():
            if part["topic"] != topic:
                continue
            for first, last, delivery in part["ranges"]:
                for offset in range(first, last + 1):
                    found[(part["partition"], offset, delivery)] += 1
    return found


def logged_actions(lines: list[dict[str, Any]], topic: str) -> Counter[tuple[int, int, str]]:
    """(partition, offset, type) of every acknowledgement the broker confirmed."""
    found: Counter[tuple[int, int, str]] = Counter()
    for line in lines:
        for part in line.get("acknowledgements") or ():
            if part["topic"] != topic or not part["confirmed"]:
                continue
            for kind, ranges in part["ranges"].items():
                for first, last in ranges:
                    for offset in range(first, last + 1):
                        found[(part["partition"], offset, kind)] += 1
    return found
