"""The compatibility matrix as the test run finds it: which client, at which version,
worked through which kind of kafkalens (sidecar, gateway) in front of which broker.

A test that drives a client through the proxy calls `record(...)` with what it saw;
at the end of the session the rows are written to tests/peers/build/compat.json
(conftest.py's pytest_sessionfinish), from which the README's table is made.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    broker: str  # "Apache Kafka 4.4.0", "tansu", "librdkafka mock"
    client: str  # "Java (kafka-clients)", "franz-go", ...
    client_version: str
    mode: str  # "sidecar" or "gateway"
    feature: str  # what was exercised: "produce/consume", "KIP-848 consumer", ...
    passed: bool


ROWS: list[Row] = []


def record(
    broker: str, client: str, client_version: str, mode: str, feature: str, passed: bool
) -> None:
    ROWS.append(Row(broker, client, client_version, mode, feature, passed))


def write(path: Path) -> None:
    if not ROWS:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(row) for row in ROWS], indent=1) + "\n")
