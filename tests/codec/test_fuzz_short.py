"""A short run of bench/codec/fuzz.py: 20,000 mutated real frames (about ten seconds on
two busy cores), no findings.

In a child process: the fuzzer sets a SIGALRM handler and traces allocations, neither
of which belongs in pytest's process. Seed and count are fixed, so this run is the same
on every machine and a failure replays with the same command; the long run
(`--seconds 600`) picks a fresh seed each time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

RUNS = 20_000
TARGETS = {"request", "response", "records", "compressed", "group", "sasl"}


@pytest.mark.slow
def test_a_short_fuzzing_run_finds_nothing(tmp_path: Path) -> None:
    findings = tmp_path / "findings"
    command = [
        sys.executable, "-m", "bench.codec.fuzz", "--seed", "0", "--runs", str(RUNS),
        "--seconds", "90", "--json", "--findings", str(findings), "--progress", "1000",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["findings"] == 0, summary["finding_kinds"]
    assert not findings.exists()
    assert summary["seeds"] >= 400  # every golden frame and what is inside them
    assert set(summary["per_target"]) == TARGETS
    assert summary["executions"] == RUNS, summary  # not cut short by the 90 s cap
    assert set(summary["exception_types"]) <= {"DecodeError", "UnknownApiError"}
    assert summary["distinct_outcomes"] > 100  # mutations reach many different failures
