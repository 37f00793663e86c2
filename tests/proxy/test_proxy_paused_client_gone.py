"""A client that closes or resets while reading from it is paused is seen at once.

Reading from a client pauses at `limits.max_in_flight_requests`, behind a broker that
does not read (backpressure) and while the proxy drains; a paused socket is not read, so
the client's FIN or reset waits behind its unread requests. proxy/forward/hangups.py
watches the paused sockets for the hang-up itself: the connection closes on that event,
its broker connection with it, and the requests it was still awaiting are logged as
`request_incomplete` and counted (`kafkalens_requests_incomplete_total`,
`kafkalens_paused_clients_gone_total`). The server's once-a-second sweeper is stopped in
these tests, so nothing else can be what noticed.

The limit (docs/operations.md, "Known limits"): a FIN still queued on the client's own host behind more
bytes than the proxy's receive buffer takes never arrives while reading is paused; the
connection then ends when the broker answers (the answer draws a reset from the closed
socket) or at `limits.request_timeout_seconds`.
"""

from __future__ import annotations

import contextlib
import fcntl
import select
import socket
import struct
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.hostile import connect, eventually, sidecar_config
from support.observed import ObservedProxy
from support.proxy_harness import FakeBroker, request_frame, write_frame

from codec import ApiKey
from proxy.forward.connection import Connection, Paused

METADATA = ApiKey.METADATA
BOUND = 16


def metadata_v0(corr: int) -> bytes:
    return request_frame(METADATA, 0, corr, struct.pack(">i", 0), client_id="gone")


def big_request(corr: int, size: int) -> bytes:
    """A Metadata v0 whose topic array is junk: forwarded (and a decode error), `size` bytes."""
    return request_frame(METADATA, 0, corr, b"\x00" * size, client_id="gone")


def unsent(sock: socket.socket) -> int:
    """Bytes still in this socket's send queue (not yet taken by the peer's kernel)."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0])


class StuckBroker:
    """Answers nothing until told to (`answer`). Reads what it is sent (or, with
    `reading=False`, nothing at all: the proxy's writes back up and it pauses the
    client); counts the frames; notes when the proxy hangs up."""

    def __init__(self, reading: bool) -> None:
        self.reading = reading
        self.hung_up = threading.Event()
        self.answer = threading.Event()  # set: answer every request read, from then on
        self.frames = 0
        self.unanswered: list[bytes] = []

    def __call__(self, sock: socket.socket) -> None:
        if not self.reading:
            poller = select.poll()
            poller.register(sock, select.POLLRDHUP)
            while not poller.poll(100):
                pass
            self.hung_up.set()
            return
        sock.settimeout(0.05)
        buffered = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                buffered += chunk
            except TimeoutError:
                pass
            while len(buffered) >= 4 and len(buffered) >= 4 + struct.unpack_from(">i", buffered)[0]:
                size = struct.unpack_from(">i", buffered)[0]
                frame, buffered = buffered[4 : 4 + size], buffered[4 + size :]
                self.frames += 1
                self.unanswered.append(frame[4:8])
            if self.answer.is_set():
                for corr in self.unanswered:
                    write_frame(sock, corr + b"ok")
                self.unanswered = []
        self.hung_up.set()


@contextmanager
def proxy_before(broker: StuckBroker, tmp_path: Path, **limits: object) -> Iterator[ObservedProxy]:
    with FakeBroker(broker) as fake:
        config = sidecar_config(fake.address, tmp_path / "requests.log", **limits)
        with ObservedProxy(config) as px:
            yield px


def stop_sweeper(px: ObservedProxy) -> None:
    """The server's periodic check of every connection, cancelled: what closes a
    connection now is an event of its own sockets."""
    sweeper = px.server._sweeper
    assert sweeper is not None
    px.call(sweeper.cancel)


def the_connection(px: ObservedProxy) -> Connection:
    conns = px.call(lambda: list(px.server.connections.values()))
    assert len(conns) == 1, conns
    return conns[0]


def paused(px: ObservedProxy, reason: int) -> bool:
    conns = px.call(lambda: list(px.server.connections.values()))
    return len(conns) == 1 and bool(px.call(lambda: conns[0]._client_paused & reason))


def leave(sock: socket.socket, reset: bool) -> None:
    if reset:  # SO_LINGER 0: close sends a reset
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def send_all(sock: socket.socket, data: bytes) -> None:
    """All of `data` into the proxy's kernel: sent, and none of it left in this socket's
    queue, so a FIN (or reset) sent now reaches the proxy's host."""
    thread = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the proxy's side took less than the test sends"
    assert eventually(lambda: unsent(sock) == 0, 10), unsent(sock)


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "reset"])
@pytest.mark.parametrize("pause", ["in_flight", "backlogged", "draining"])
def test_a_paused_client_that_leaves_is_released_at_once(
    tmp_path: Path, pause: str, reset: bool
) -> None:
    broker = StuckBroker(reading=pause != "backlogged")
    with proxy_before(broker, tmp_path, max_in_flight_requests=BOUND) as px:
        stop_sweeper(px)
        sock = connect(px.port)
        port = sock.getsockname()[1]
        if pause == "in_flight":
            # 1.4 MB: the bound goes on, more than one read (256 KiB) waits parked and in
            # the proxy's socket buffer behind it
            send_all(sock, b"".join(metadata_v0(corr) for corr in range(60_000)))
            assert eventually(lambda: paused(px, Paused.IN_FLIGHT))
            assert px.pending_total() == BOUND
        elif pause == "backlogged":
            # 4 MB at a broker that reads nothing: the proxy's write buffer passes its
            # high-water mark and reading from the client pauses (fewer requests than the bound)
            send_all(sock, b"".join(big_request(corr, 500_000) for corr in range(8)))
            assert eventually(lambda: paused(px, Paused.BACKLOGGED))
        else:
            sock.sendall(metadata_v0(0))
            assert eventually(lambda: px.pending_total() == 1)
            conn = the_connection(px)
            px.call(conn.begin_drain)  # as Server.shutdown does, for this connection
            assert paused(px, Paused.DRAINING)
            send_all(sock, b"".join(metadata_v0(corr) for corr in range(1, 1000)))
        held = px.pending_total()
        assert held >= 1
        leave(sock, reset)
        reason = "client_error" if reset else "client_eof"
        assert eventually(lambda: px.closed(reason) == 1, 10), (reason, px.clients())
        assert broker.hung_up.wait(10)  # its broker connection went with it
        assert px.pending_total() == 0
        # The requests forwarded and unanswered, then those received and not forwarded
        # (parked behind the bound, or unread), limits.max_in_flight_requests of them
        # logged (a 500 KB request is never whole in what is read at the close)
        incomplete = px.log_lines("request_incomplete", port)
        unforwarded = 0 if pause == "backlogged" else BOUND
        assert len(incomplete) == held + unforwarded
        assert [line["correlation_id"] for line in incomplete] == list(range(len(incomplete)))
        assert {line["reason"] for line in incomplete} == {reason}
        assert px.metric("kafkalens_paused_clients_gone_total", paused=pause) == 1
        assert px.metric("kafkalens_paused_clients_gone_total") == 1
        counted = px.metric("kafkalens_requests_incomplete_total", reason=reason)
        unlogged = px.metric("kafkalens_incomplete_requests_unlogged_total")
        assert counted == px.metric("kafkalens_requests_incomplete_total")
        assert counted == len(incomplete) + unlogged
        assert (unlogged > 0) == (pause != "backlogged"), unlogged
        assert px.metric("kafkalens_request_timeouts_total") == 0


@pytest.mark.slow
def test_without_epoll_the_sweeper_sees_a_paused_client_leave(tmp_path: Path) -> None:
    """Where epoll is missing the sweeper polls paused clients about once a second."""
    broker = StuckBroker(reading=True)
    with proxy_before(broker, tmp_path, max_in_flight_requests=BOUND) as px:
        px.call(px.server.ctx.close_hangups)
        sock = connect(px.port)
        send_all(sock, b"".join(metadata_v0(corr) for corr in range(2000)))
        assert eventually(lambda: paused(px, Paused.IN_FLIGHT))
        leave(sock, reset=False)
        assert eventually(lambda: px.closed("client_eof") == 1, 10)
        assert broker.hung_up.wait(10)
        assert px.metric("kafkalens_paused_clients_gone_total", paused="in_flight") == 1
        # all 2,000 (46 KB: one read) were received: BOUND forwarded, BOUND more logged
        assert px.metric("kafkalens_requests_incomplete_total", reason="client_eof") == 2000
        assert px.metric("kafkalens_incomplete_requests_unlogged_total") == 2000 - 2 * BOUND


@pytest.mark.slow
def test_a_fin_left_on_the_clients_host_ends_the_connection_at_the_brokers_answer(
    tmp_path: Path,
) -> None:
    """4.6 MB pipelined past the bound, then close: the proxy's receive buffer fills, the
    rest and the FIN stay queued on the client's side (checked: its send queue is not
    empty). The first answer the broker sends, written to the closed socket, draws a
    reset: the connection ends then, without forwarding the gone client's backlog."""
    broker = StuckBroker(reading=True)
    with proxy_before(broker, tmp_path, max_in_flight_requests=BOUND) as px:
        sock = connect(px.port)
        port = sock.getsockname()[1]
        data = b"".join(metadata_v0(corr) for corr in range(200_000))
        sock.setblocking(False)
        sent = 0
        with contextlib.suppress(BlockingIOError):  # until the socket blocks
            while sent < len(data):
                sent += sock.send(data[sent : sent + 65536])
        assert eventually(lambda: paused(px, Paused.IN_FLIGHT))
        assert unsent(sock) > 0  # so the FIN cannot leave this host
        leave(sock, reset=False)
        assert eventually(lambda: broker.frames == BOUND)
        time.sleep(0.5)  # (what is asserted is what happens at the answer, not before)
        assert px.clients() != [] and px.closed("client_eof") == 0
        broker.answer.set()
        assert eventually(lambda: px.closed("client_error") == 1, 10)
        assert broker.hung_up.wait(10)
        assert px.pending_total() == 0
        # Each answer frees a place of the bound, which the gone client's backlog may
        # take until the reset is seen, on loopback within the first writes: a few of its
        # 200,000 requests at most go on.
        assert BOUND <= broker.frames <= 4 * BOUND, broker.frames
        incomplete = px.log_lines("request_incomplete", port)
        assert {line["reason"] for line in incomplete} == {"client_error"}
        assert px.metric("kafkalens_paused_clients_gone_total", paused="in_flight") == 1
