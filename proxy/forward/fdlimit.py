"""File descriptors: the open-file limit raised at start, connections sized to it,
running out of them survived.

At start the soft RLIMIT_NOFILE is raised to the hard one (as haproxy and nginx do:
the soft limit is a default for interactive shells, often 1,024, the hard one what the
administrator allows), and `limits.max_connections: auto` (the default) becomes what
that limit holds, at most AUTO_MAX_CONNECTIONS. Only a number given in the config that
the limit cannot hold is warned of: a warning every normal start shows teaches people
to ignore warnings.

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

from proxy.config import AUTO_MAX_CONNECTIONS

log = structlog.get_logger("kafkalens.proxy")

FDS_PER_CONNECTION = 2
FD_RESERVE = 32
OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})
LOG_EVERY_SECONDS = 10.0
_FALLBACK_MAX = 1 << 20  # Linux's default fs.nr_open, for an unlimited hard limit
_NR_OPEN = "/proc/sys/fs/nr_open"  # Linux's ceiling of any RLIMIT_NOFILE

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


def hard_limit() -> int | None:
    """The hard RLIMIT_NOFILE; None when unlimited or unknown."""
    if resource is None:
        return None
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if hard == resource.RLIM_INFINITY else int(hard)


def raise_open_file_limit() -> int | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (what an unprivileged process may;
    an unlimited hard limit: to Linux's fs.nr_open, which no limit may pass); returns
    the soft limit now in force. Silent when it cannot: what matters is whether the
    limit holds limits.max_connections, which `size_max_connections` says."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft_limit()
    for attempt in (target, 10240):  # macOS refuses more than OPEN_MAX (10240)
        if attempt <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (attempt, hard))
            break
        except (ValueError, OSError) as exc:
            log.debug("cannot raise the open-file limit", soft=soft, to=attempt, error=str(exc))
    return soft_limit()


def _nr_open() -> int:
    try:
        with open(_NR_OPEN) as f:
            return int(f.read())
    except (OSError, ValueError):
        return _FALLBACK_MAX


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


def connections_possible() -> int | None:
    """How many connections the soft open-file limit holds beside the descriptors open
    now and FD_RESERVE (None: no limit)."""
    limit = soft_limit()
    if limit is None:
        return None
    return max((limit - open_descriptors() - FD_RESERVE) // FDS_PER_CONNECTION, 0)


def size_max_connections(configured: int | None, *, quiet: bool = False) -> int:
    """limits.max_connections as this process runs it: `auto` (None) is what the
    open-file limit holds, at most AUTO_MAX_CONNECTIONS (and at least 1); a configured
    number is kept, with a warning (unless `quiet`) when the limit cannot hold it."""
    room = connections_possible()
    if configured is None:
        return AUTO_MAX_CONNECTIONS if room is None else max(1, min(AUTO_MAX_CONNECTIONS, room))
    if room is not None and configured > room and not quiet:
        log.warning(
            "the open-file limit cannot hold limits.max_connections: connections past it"
            " are refused as fd_limit; raise the hard limit (ulimit -Hn, LimitNOFILE=)"
            " or leave limits.max_connections to auto",
            max_connections=configured,
            connections_possible=room,
            open_file_limit=soft_limit(),
        )
    return configured


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
