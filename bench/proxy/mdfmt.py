"""Number and table formatting for results.md."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def pair(a: Any, b: Any, digits: int = 0) -> str:
    return f"{fmt(a, digits)} / {fmt(b, digits)}"


def signed(value: Any, digits: int = 0) -> str:
    return "–" if value is None else f"{value:+,.{digits}f}"


def table(headers: list[str], lines: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return out + [""]
