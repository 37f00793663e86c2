"""`python -m bench` lists every benchmark with the question it answers, and runs one by
name: every module of bench/'s rooms that has a command line is in its list (or is a
part of one, started by another), every listed module imports, and the list names no
module that is gone."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS, PARTS

REPO = Path(__file__).resolve().parents[2]
ROOMS = ("proxy", "codec", "pipeline")


def _has_command_line(path: Path) -> bool:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
    return False


def test_every_module_with_a_command_line_is_listed_or_a_part() -> None:
    found = {
        f"bench.{room}.{path.stem}"
        for room in ROOMS
        for path in (REPO / "bench" / room).glob("*.py")
        if _has_command_line(path)
    }
    listed = {b.module for b in BENCHMARKS}
    assert found - PARTS == listed, (sorted(found - PARTS - listed), sorted(listed - found))
    assert found >= PARTS
    assert len({b.name for b in BENCHMARKS}) == len(BENCHMARKS)
    assert all(b.question.endswith(("?", ".")) for b in BENCHMARKS)


@pytest.mark.parametrize("module", sorted({b.module for b in BENCHMARKS} | PARTS))
def test_each_listed_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_the_listing_and_a_run_by_name() -> None:
    listed = subprocess.run([sys.executable, "-m", "bench"], cwd=REPO, capture_output=True,
                            text=True, timeout=60, check=True).stdout
    assert all(f"  {b.name} " in listed for b in BENCHMARKS), listed
    helped = subprocess.run([sys.executable, "-m", "bench", "soak", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=True).stdout
    assert "--minutes" in helped and "python -m bench.proxy.soak" in helped
    wrong = subprocess.run([sys.executable, "-m", "bench", "nosuch"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "python -m bench" in wrong.stderr
