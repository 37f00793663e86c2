"""Where things are, for tests in any room: the repository's root, the tests' folder
and the golden frames captured from real clients (tests/data/golden)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
GOLDEN = TESTS / "data" / "golden"
