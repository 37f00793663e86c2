"""Seeing a client leave while reading from it is paused.

Reading from a client pauses (proxy/forward/connection.py) at
`limits.max_in_flight_requests`, behind a broker that does not read (backpressure), and
while the proxy drains. A paused transport is not polled, so the event loop sees neither
the client's FIN nor its reset until reading resumes: a client that left would keep its
broker connection and its pending requests until a response resumed reading, or until
`limits.request_timeout_seconds` (600 s) behind a stuck broker. (Reading also waits for
the broker connection to be made, at most `limits.connect_timeout_seconds`; that pause is
not watched: whole requests a client sent before leaving are forwarded once connected, as
a broker processes those it read before a FIN.)

`HangupWatch` is one epoll set per event loop holding the paused clients' sockets for
EPOLLRDHUP alone (EPOLLHUP and EPOLLERR are always reported), not EPOLLIN: the requests
waiting in their receive queues do not wake the loop, the end of the stream does, at
once, however much unread data is ahead of it (Linux sets RCV_SHUTDOWN when the FIN
arrives, not when it is read). Its own descriptor is one reader of the loop. Registering
and unregistering cost one epoll_ctl each at a pause and at a resume, never per request:
bench/README.md has what that costs. Where epoll is missing the server's sweeper
polls each paused client once a second instead (`hung_up`).

What no endpoint can see: a client that closes while more of its bytes wait than the
proxy's receive buffer has room for (`limits.socket_buffer_bytes`) has its FIN queued on
its own host behind them; with the proxy's window at zero its kernel only sends window
probes, which carry no FIN. Only reading those bytes brings it, and reading them means
holding them (memory a peer decides, past any bound) or dropping them (a live client's
requests lost, so its connection must go): librdkafka writes requests until its socket
blocks, so a producer with 100 requests in flight behind a slow broker would be
disconnected where it is now held back. Kafka's own broker, which stops reading a
connection while it handles a request, is as blind. Such a connection ends when the
broker answers (the answer, written to the closed socket, draws a reset: seen at once
here) or at `limits.request_timeout_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
from collections.abc import Callable
from typing import Generic, TypeVar

C = TypeVar("C")

# Why a client's socket woke the watch: a FIN (its reading end shut), or a reset.
EOF = "client_eof"
RESET = "client_error"

_EPOLL = getattr(select, "epoll", None)
_RDHUP = getattr(select, "EPOLLRDHUP", 0)
# A reset: EPOLLERR, and EPOLLHUP (the connection is closed both ways) in case a write
# took the error first. A FIN alone sets EPOLLRDHUP (this side still writes).
_RESET = getattr(select, "EPOLLERR", 0) | getattr(select, "EPOLLHUP", 0)
# Events taken per wake-up; more are reported on the next (the set is level-triggered).
_BATCH = 256


class HangupWatch(Generic[C]):
    """Paused clients' sockets; `gone(owner, reason)` once one of them hung up. An
    owner is reported once, and no longer watched after that."""

    def __init__(self, loop: asyncio.AbstractEventLoop, gone: Callable[[C, str], None]) -> None:
        assert _EPOLL is not None
        self._epoll = _EPOLL()
        self._gone = gone
        self._owners: dict[int, C] = {}  # fd -> whose paused socket it is
        self._loop = loop
        loop.add_reader(self._epoll.fileno(), self._ready)

    @staticmethod
    def available() -> bool:
        return _EPOLL is not None and bool(_RDHUP)

    def __len__(self) -> int:
        return len(self._owners)

    def watch(self, fd: int, owner: C) -> bool:
        """Watch `owner`'s socket `fd`; False if it cannot be (closed meanwhile: its
        transport reports that itself)."""
        if fd < 0:
            return False
        try:
            self._epoll.register(fd, _RDHUP)
        except FileExistsError:
            # an earlier owner of this descriptor number never unwatched (it cannot
            # have: see unwatch), or this owner twice: watch it for this one
            self._epoll.modify(fd, _RDHUP)
        except OSError:
            return False
        self._owners[fd] = owner
        return True

    def unwatch(self, fd: int, owner: C) -> None:
        """Stop watching `owner`'s socket `fd`. The number is checked against the owner:
        once its socket closed, it may be another connection's already."""
        if self._owners.get(fd) is not owner:
            return
        del self._owners[fd]
        with contextlib.suppress(OSError):
            self._epoll.unregister(fd)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            self._loop.remove_reader(self._epoll.fileno())
        self._epoll.close()
        self._owners.clear()

    def _ready(self) -> None:
        for fd, events in self._epoll.poll(0, _BATCH):
            owner = self._owners.pop(fd, None)
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)
            if owner is not None:
                self._gone(owner, RESET if events & _RESET else EOF)


_HANG_UP = getattr(select, "POLLRDHUP", 0) | getattr(select, "POLLHUP", 0)


def hung_up(sock: socket.socket | None) -> bool:
    """Whether the peer closed its end, asked now (the sweeper's fallback without epoll)."""
    if sock is None or not _HANG_UP or not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(sock.fileno(), _HANG_UP)
    return bool(poller.poll(0))
