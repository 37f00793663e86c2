"""Share groups (KIP-932) for the tests: the Java share consumer's driver
(tests/peers/java/share/ShareDriver.java) and what its answers and the request log
say, in comparable shapes.

The driver's own account (what the application received and what it did with it) and
the broker's (Admin describeShareGroups, listShareGroupOffsets) are the oracles the
request log and the metrics are checked against.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import uuid
from collections import Counter
from typing import Any

from codec import Request, decode_response, encode_request
from support.java import start_java
from support.proxy_harness import read_frame, write_frame

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


# --- a share-group member speaking the protocol itself ---------------------------------


class RawShareMember:
    """A share-group member written with the codec over one socket, to send what Kafka's
    clients never would (malformed acknowledgement batches) to a real broker."""

    def __init__(self, address: str, group: str, client_id: str = "raw-share") -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.group, self.client_id = group, client_id
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")  # KIP-1082
        self.epoch = 0
        self.correlation = 0

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation += 1
        header = {"correlation_id": self.correlation, "client_id": self.client_id}
        write_frame(self.sock, encode_request(Request(api_key, version, header, body)))
        answer: dict[str, Any] = decode_response(read_frame(self.sock), api_key, version).body
        return answer

    def topic_id(self, topic: str) -> uuid.UUID:
        body = {"topics": [{"topic_id": uuid.UUID(int=0), "name": topic}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}  # fmt: skip
        found: uuid.UUID = self.call(3, 12, body)["topics"][0]["topic_id"]
        return found

    def join(self, topic: str, timeout: float = 60.0) -> list[int]:
        """FindCoordinator (which also makes the broker load the group's coordinator),
        then heartbeats until the broker assigns partitions of `topic`."""
        self.call(10, 6, {"key": "", "key_type": 0, "coordinator_keys": [self.group]})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.call(76, 1, {
                "group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
                "rack_id": None, "subscribed_topic_names": [topic] if self.epoch == 0 else None,
            })  # fmt: skip
            if not answer["error_code"]:
                self.epoch = answer["member_epoch"]
                assigned = (answer["assignment"] or {}).get("topic_partitions") or []
                partitions = [p for entry in assigned for p in entry["partitions"]]
                if partitions:
                    return partitions
            time.sleep(0.2)  # the coordinator loading, or the assignment not made yet
        raise AssertionError(f"no assignment of {topic} within {timeout} s")

    def share_fetch(
        self, session_epoch: int, topic_id: uuid.UUID, partition: int, batches: list[tuple[int, int, list[int]]],
        max_wait_ms: int = 5000,
    ) -> dict[str, Any]:
        """`max_wait_ms`: how long the broker may wait for records to hand out (a fetch
        that only acknowledges, with nothing left to fetch, waits that long)."""
        return self.call(78, 1, {
            "group_id": self.group, "member_id": self.member_id, "share_session_epoch": session_epoch,
            "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": partition, "acknowledgement_batches": [
                {"first_offset": first, "last_offset": last, "acknowledge_types": types}
                for first, last, types in batches]}]}],
            "forgotten_topics_data": [],
        })  # fmt: skip

    def close(self) -> None:
        self.sock.close()
