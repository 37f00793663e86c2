"""What a long command is doing, said on stderr as it goes: each phase as it starts,
and while one lasts, every `every` seconds how far Spark's running stages are (from
Spark's status tracker: tasks done of tasks, which for the scan are the input's
splits). Silent unless given a `say` (the tests and notebooks calling run_report)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

EVERY_SECONDS = 15.0


def to_stderr(command: str) -> Callable[[str], None]:
    """A `say` for a command line: `kafkalens COMMAND: text` on stderr, flushed."""

    def say(text: str) -> None:
        print(f"kafkalens {command}: {text}", file=sys.stderr, flush=True)

    return say


def duration(seconds: float) -> str:
    """1.2 s, 42 s, 3 min 05 s, 1 h 02 min."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 row`, `2 rows`, `1,000 files`."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


class Phases:
    """A command's phases: `phases.say(text)` once, `with phases.running(spark, what)`
    for a long one (its progress said every `every` seconds while it lasts)."""

    def __init__(self, say: Callable[[str], None] | None = None,
                 every: float | None = None) -> None:
        self._say = say
        self.every = EVERY_SECONDS if every is None else every

    def say(self, text: str) -> None:
        if self._say is not None:
            self._say(text)

    @contextlib.contextmanager
    def running(self, spark: Any, what: str) -> Iterator[None]:
        if self._say is None:
            yield
            return
        stop = threading.Event()
        started = time.monotonic()

        def report() -> None:
            while not stop.wait(self.every):
                done = _tasks(spark)
                elapsed = duration(time.monotonic() - started)
                if done is None:
                    self.say(f"{what}: {elapsed} so far")
                else:
                    finished, total = done
                    self.say(f"{what}: {finished:,} of {total:,} tasks done "
                             f"({finished / total:.0%}), {elapsed} so far")

        thread = threading.Thread(target=report, name="kafkalens-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def _tasks(spark: Any) -> tuple[int, int] | None:
    """Tasks done and in all of Spark's active stages, None when none is running."""
    with contextlib.suppress(Exception):  # a stage may end between the two calls
        tracker = spark.sparkContext.statusTracker()
        stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        stages = [s for s in stages if s is not None and s.numTasks > 0]
        if stages:
            return (sum(s.numCompletedTasks for s in stages), sum(s.numTasks for s in stages))
    return None
