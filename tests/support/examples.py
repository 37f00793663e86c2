"""How many examples a property test (Hypothesis) runs, by tier: the number the test
names in the whole suite (CI's run, `python -m pytest`), a quarter of it in the fast
tier (`-m fast`, the developer's loop), so that the loop stays under two minutes while CI
keeps every example.

    @settings(max_examples=examples(400), deadline=None)

tests/conftest.py calls `choose(config)` before any test module is imported (the
decorators above run at import), so the count is fixed for the whole session, in each
pytest-xdist worker alike. CI's run draws from the same strategies at least as many
examples as the fast tier does: the fast tier is the smaller sample, not another test."""

from __future__ import annotations

import pytest

# The fast tier runs a quarter of each property test's examples, never fewer than this
# many (a count a test names below it, it keeps).
FAST_SHARE = 4
FAST_FLOOR = 10

_fast_tier = False


def fast_tier() -> bool:
    """Whether this session is the fast tier (see `choose`)."""
    return _fast_tier


def examples(count: int) -> int:
    """`count` in the whole suite; in the fast tier a quarter of it, at least FAST_FLOOR
    (and never more than `count`)."""
    if not _fast_tier:
        return count
    return min(count, max(FAST_FLOOR, count // FAST_SHARE))


def selects_only_fast(markexpr: str, needs: tuple[str, ...]) -> bool:
    """Whether the `-m` expression `markexpr` runs the fast tier and nothing beyond it: it
    selects a test marked `fast` and none marked with one of `needs` (broker, java, go,
    spark, slow). `fast`, `fast and not codec` do; `not java`, `fast or slow`, none do."""
    if not markexpr:
        return False
    from _pytest.mark.expression import Expression  # pytest's own reading of `-m`

    expression = Expression.compile(markexpr)

    def runs(marker: str) -> bool:
        """Whether the expression selects a test whose one tier marker is `marker`."""

        def has(name: str, /, **_: str | int | bool | None) -> bool:
            return name == marker

        return expression.evaluate(has)

    return runs("fast") and not any(runs(need) for need in needs)


def choose(config: pytest.Config, needs: tuple[str, ...]) -> None:
    """Fixes the tier for this session from `-m` (tests/conftest.py's pytest_configure)."""
    global _fast_tier
    _fast_tier = selects_only_fast(config.getoption("markexpr", "") or "", needs)
