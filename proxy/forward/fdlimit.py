"""File descriptors: the open-file limit raised at start, running out of them survived.

Every proxied connection holds two descriptors (client and broker). Linux hands out
the lowest free descriptor, so the number of a socket just accepted says how many are
in use below it: a connection accepted at or past `ceiling()` is refused (counted as
`kafkalens_connections_rejected_total{reason="fd_limit"}`) while `FD_RESERVE` are
still free for its broker socket, /metrics scrapes, log rotation and DNS. Should the
descriptors run out anyway (other users, bursts), the broker connect fails with EMFILE
and is counted the same way; a connection arriving when not one descriptor is left is
closed by libuv at once (it keeps one spare descriptor for that) without reaching
Python, and the listener goes on accepting.
"""

from __future__ import annotations

import errno
import os
import time

import structlog

log = structlog.get_logger("kafkalens.proxy")

FDS_PER_CONNECTION = 2
FD_RESERVE = 32
OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})
LOG_EVERY_SECONDS = 10.0
_FALLBACK_MAX = 1 << 20  # Linux's default fs.nr_open, for an unlimited hard limit

try:
    import resource
except ImportError:  # not POSIX
    resource = None  # type: ignore[assignment]


def soft_limit() -> int | None:
    """The soft RLIMIT_NOFILE; None when unlimited or unknown."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_open_file_limit() -> int | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (what an unprivileged process may);
    returns the soft limit now in force."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _FALLBACK_MAX
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft_limit()
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # e.g. macOS refuses more than OPEN_MAX
        log.warning("cannot raise the open-file limit", soft=soft, hard=hard, error=str(exc))
    return soft_limit()


def open_descriptors() -> int:
    """Descriptors open in this process now (0 where it cannot be seen)."""
    for path in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(path))
        except OSError:
            continue
    return 0


def ceiling() -> int:
    """Accepted descriptors numbered at or past this are refused (huge: no limit)."""
    limit = soft_limit()
    return 2**62 if limit is None else max(0, limit - FD_RESERVE)


def check_max_connections(max_connections: int) -> int | None:
    """Warn when the open-file limit cannot hold `max_connections`; returns how many
    connections it can hold (None: no limit)."""
    limit = soft_limit()
    if limit is None:
        return None
    room = (limit - open_descriptors() - FD_RESERVE) // FDS_PER_CONNECTION
    if max_connections > room:
        log.warning(
            "the open-file limit cannot hold limits.max_connections: connections past it"
            " are refused as fd_limit; raise the limit (ulimit -n, LimitNOFILE=)",
            max_connections=max_connections,
            connections_possible=max(room, 0),
            open_file_limit=limit,
        )
    return max(room, 0)


class RateLimitedLog:
    """One warning per `every` seconds at most, with how many were folded into it."""

    def __init__(self, event: str, every: float = LOG_EVERY_SECONDS) -> None:
        self.event = event
        self.every = every
        self._last = -float("inf")
        self._folded = 0

    def __call__(self, **fields: object) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            self._folded += 1
            return
        log.warning(self.event, since_last_line=self._folded, **fields)
        self._last = now
        self._folded = 0


out_of_fds_log = RateLimitedLog("out of file descriptors: connection refused")
