"""The user's documents: the README and the guide's pages in docs/ (the generated
reference pages, docs/reference/, apart), and the commands their code blocks give an
operator."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = (REPO / "README.md").read_text(encoding="utf-8")
# docs/<name>.md by name ("request-log"), the guide's pages written by hand
PAGES = {path.stem: path.read_text(encoding="utf-8") for path in sorted(DOCS.glob("*.md"))}
# Everything an operator reads, the README first: what the promises are checked in.
USER_DOCS = "\n".join([README, *PAGES.values()])


def page(name: str) -> str:
    """docs/<name>.md's text."""
    return PAGES[name]


def recipe(comment: str) -> str:
    """The command on the line after `# <comment>` in a code block of the user's documents."""
    lines = USER_DOCS.splitlines()
    [index] = [i for i, line in enumerate(lines) if line.startswith(f"# {comment}")]
    return lines[index + 1]
