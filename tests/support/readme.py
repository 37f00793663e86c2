"""The README's text, and the commands its code blocks give an operator."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def recipe(comment: str) -> str:
    """The command on the line after `# <comment>` in a README code block."""
    lines = README.splitlines()
    [index] = [i for i, line in enumerate(lines) if line.startswith(f"# {comment}")]
    return lines[index + 1]
