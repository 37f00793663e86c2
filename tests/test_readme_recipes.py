"""What the README tells an operator to run or open exists and does what it says."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from support.readme import README, REPO, recipe


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_slowest_requests_are_sorted_as_numbers(tmp_path: Path) -> None:
    latencies = [9.5, 100.0, 0.00002, 10.25, 1234.5]
    lines = [
        orjson.dumps({"event": "request", "latency_ms": ms, "api": "Produce", "client_id": f"c{i}"})
        for i, ms in enumerate(latencies)
    ]
    lines.append(orjson.dumps({"event": "connection_open", "latency_ms": None}))
    (tmp_path / "requests.log").write_bytes(b"\n".join(lines) + b"\n")
    out = subprocess.run(
        ["bash", "-c", recipe("slowest requests")],
        cwd=tmp_path, capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    shown = [float(line.split()[0]) for line in out.splitlines()]
    assert shown == sorted(latencies, reverse=True)


def test_the_deploy_paths_named_exist() -> None:
    paths = set(re.findall(r"`(deploy/[^`\s]*)`", README))
    assert {"deploy/prometheus/alerts.yml", "deploy/grafana/"} <= paths
    assert [p for p in sorted(paths) if not (REPO / p).exists()] == []


# `section.key` (N) or `section.key`, N: a default the README states beside its key.
STATED_DEFAULT = re.compile(r"`([a-z0-9_]+(?:\.[a-z0-9_]+)+)`,?\s+\(?([0-9][0-9,.]*)(?:\s?(KiB|MiB|s)\b)?")
UNITS = {"KiB": 1024, "MiB": 1024 * 1024, "s": 1, None: 1}
NOT_DEFAULTS = {"metrics.allowed_hosts"}  # followed by the HTTP status it answers, 421


def test_the_defaults_the_readme_states_are_the_configs() -> None:
    """Every `section.key` (N) in the README is the built-in default, which
    config/kafkalens.yaml documents (tests/test_config.py holds the two equal)."""
    from proxy.config import Config

    stated = [m for m in STATED_DEFAULT.finditer(README) if m[1] not in NOT_DEFAULTS]
    assert len({m[1] for m in stated}) >= 15, [m[0] for m in stated]
    for match in stated:
        value: object = Config()
        for part in match[1].split("."):
            value = getattr(value, part)
        number = float(match[2].rstrip(".,").replace(",", "")) * UNITS[match[3]]
        assert value == number, f"README: {match[0]!r}; the default is {value}"
