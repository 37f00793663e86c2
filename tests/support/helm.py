"""Helm, built from source by tests/peers/install, and the chart in deploy/helm rendered.

A missing helm is installed once per test session (`bash tests/peers/install`, its
Java part left out); without Go to build it, the tests that need it skip, or fail under
`KAFKALENS_REQUIRE_PEERS=1` (CI).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
PEERS = ROOT / "tests" / "peers"
HELM = PEERS / "build" / "helm" / "helm"
CHART = ROOT / "deploy" / "helm" / "kafkalens"
# A source-built helm has no Kubernetes version stamped in (its release builds take
# client-go's): `helm template` would assume 1.20, below the chart's kubeVersion.
KUBE_VERSION = "1.31.0"


def _unavailable(reason: str) -> None:
    if os.environ.get("KAFKALENS_REQUIRE_PEERS") == "1":
        pytest.fail(f"KAFKALENS_REQUIRE_PEERS=1 but helm is missing: {reason}")
    pytest.skip(reason)


@functools.cache
def _install() -> str | None:
    if HELM.exists():
        return None
    if shutil.which("go") is None:
        return "no go on PATH to build helm (tests/peers/install)"
    env = {**os.environ, "KAFKALENS_PEERS_SKIP_JAVA": "1"}
    done = subprocess.run(["bash", str(PEERS / "install")], capture_output=True, text=True, env=env)
    if done.returncode != 0 or not HELM.exists():
        return f"tests/peers/install did not build helm: {done.stderr[-2000:]}"
    return None


def helm_binary() -> Path:
    reason = _install()
    if reason is not None:
        _unavailable(reason)
    return HELM


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, check=check)


def set_flags(values: dict[str, Any]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


@functools.cache
def _rendered(chart: str, flags: tuple[str, ...]) -> str:
    done = helm("template", "kafkalens", chart, "--namespace", "kafka", "--kube-version", KUBE_VERSION, *flags, check=False)
    if done.returncode != 0:
        raise AssertionError(f"helm template {' '.join(flags)} failed:\n{done.stderr}")
    return done.stdout


def render(values: dict[str, Any] | None = None, chart: Path = CHART) -> list[dict[str, Any]]:
    """The manifests `helm template` makes of the chart with `values` (--set)."""
    text = _rendered(str(chart), tuple(set_flags(values or {})))
    return [doc for doc in yaml.safe_load_all(text) if doc]
