"""The soak's measure: looks at a `kafkalens proxy` process (support.load's `Figures`)
under a steady load, a least-squares line through its RSS and open files after a
warm-up, and the verdict: flat when the fitted line grows by at most a tolerance over
the span, clean when, the clients gone, nothing is pending and the open files are back
at their idle count. tests/proxy/test_soak.py holds it for a few minutes (and holds that
it catches a leak); `python -m bench.proxy.soak` for half an hour or more.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from support.load import Figures, Load, ProxyProcess


@dataclass(frozen=True)
class Trend:
    """A least-squares line through (seconds, value): its slope, the slope's standard
    error, R², and what the line grows by over the span it was fitted on."""

    slope_per_hour: float
    stderr_per_hour: float
    r2: float
    span_seconds: float
    points: int

    @property
    def growth(self) -> float:
        return self.slope_per_hour * self.span_seconds / 3600

    def describe(self, unit: str) -> str:
        return (
            f"{self.slope_per_hour:+.2f} ± {self.stderr_per_hour:.2f} {unit}/hour"
            f" (least squares over {self.span_seconds / 60:.1f} min, {self.points} points,"
            f" R² {self.r2:.2f}; {self.growth:+.2f} {unit} over the span)"
        )


def trend(points: list[tuple[float, float]]) -> Trend:
    n = len(points)
    if n < 3:
        raise ValueError("a trend needs at least 3 points")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for y in ys)
    slope = sxy / sxx if sxx else 0.0
    residual = sum((y - (my + slope * (x - mx))) ** 2 for x, y in points)
    stderr = (residual / (n - 2) / sxx) ** 0.5 if sxx else 0.0
    r2 = 1 - residual / syy if syy else 0.0
    return Trend(slope * 3600, stderr * 3600, r2, xs[-1] - xs[0], n)


@dataclass(frozen=True)
class Look:
    seconds: float  # since the load started
    figures: Figures


@dataclass
class Verdict:
    """The soak judged: RSS and open files flat after the warm-up, nothing left once
    the clients went."""

    rss: Trend
    files: Trend
    rss_tolerance_mb: float
    files_tolerance: float
    after: Figures
    idle_files: int

    @property
    def rss_flat(self) -> bool:
        return self.rss.growth <= self.rss_tolerance_mb

    @property
    def files_flat(self) -> bool:
        return self.files.growth <= self.files_tolerance

    @property
    def clean_after(self) -> bool:
        return self.after.pending == 0 and self.after.open_files <= self.idle_files

    @property
    def ok(self) -> bool:
        return self.rss_flat and self.files_flat and self.clean_after

    def lines(self) -> list[str]:
        def mark(ok: bool) -> str:
            return "flat" if ok else "GROWING"

        return [
            f"RSS        {self.rss.describe('MB')}: {mark(self.rss_flat)}"
            f" (at most {self.rss_tolerance_mb:g} MB over the span)",
            f"open files {self.files.describe('files')}: {mark(self.files_flat)}"
            f" (at most {self.files_tolerance:g} over the span)",
            f"after      pending {self.after.pending}, open files {self.after.open_files}"
            f" (idle {self.idle_files}): {'clean' if self.clean_after else 'NOT CLEAN'}",
        ]


def judge(
    looks: list[Look],
    warmup: float,
    after: Figures,
    idle_files: int,
    rss_tolerance_mb: float,
    files_tolerance: float,
) -> Verdict:
    """The trend of the looks after `warmup` seconds (the first minutes fill caches, the
    allocator's arenas and bounded tables: growth there is not a leak)."""
    steady = [look for look in looks if look.seconds >= warmup]
    rss = trend([(look.seconds, look.figures.rss_mb) for look in steady])
    files = trend([(look.seconds, float(look.figures.open_files)) for look in steady])
    return Verdict(rss, files, rss_tolerance_mb, files_tolerance, after, idle_files)


# --- holding a load -----------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How long, how often, and what counts as flat."""

    minutes: float
    warmup_minutes: float
    every: float = 15.0  # seconds between printed lines
    sample: float = 5.0  # seconds between looks
    rss_tolerance_mb: float = 3.0  # the fitted line's growth over the span, at most
    files_tolerance: float = 2.0


def hold(
    proxy: ProxyProcess,
    start_load: Callable[[], Load],
    plan: Plan,
    say: Callable[[str], None] = print,
) -> tuple[Verdict, list[Look], dict[str, int]]:
    """Starts the load and holds it through `proxy` for `plan.minutes`, looking every
    `plan.sample` seconds; stops it, waits for the proxy to settle, judges."""
    idle_files = proxy.baseline()
    say(f"idle      {proxy.figures().line()}")
    load = start_load()
    looks: list[Look] = []
    started = time.monotonic()
    end = started + plan.minutes * 60
    printed = -plan.every
    try:
        while True:
            now = time.monotonic()
            looks.append(Look(now - started, proxy.figures()))
            if looks[-1].seconds - printed >= plan.every - 0.01:
                printed = looks[-1].seconds
                say(f"{printed:6.0f} s  {looks[-1].figures.line()}  {load.progress()}")
            if now >= end:
                break
            time.sleep(min(plan.sample, max(0.0, end - time.monotonic())))
    finally:
        load.stop()
    counts = load.counts()
    after = proxy.settle(idle_files)
    verdict = judge(
        looks,
        plan.warmup_minutes * 60,
        after,
        idle_files,
        plan.rss_tolerance_mb,
        plan.files_tolerance,
    )
    return verdict, looks, counts
