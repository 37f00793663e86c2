"""Log files as the tests lay them out: their lines, and their times as the proxy's."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
from pathlib import Path


def file_lines(path: Path) -> list[str]:
    """The lines of a log file, plain or gzip."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def age_like_proxy(logdir: Path, pattern: str = "requests.log*") -> None:
    """Give each file the mtime of its last line, as if written in real time."""
    for path in logdir.glob(pattern):
        last = json.loads(file_lines(path)[-1])["ts"]
        t = dt.datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp()
        os.utime(path, (t, t))
