"""A client that sends its last request and closes at once (librdkafka's short-lived
connections do, after GetTelemetrySubscriptions) never gets the answer: the request log
must say so (`request_incomplete`, reason `client_eof`), not log a `request` with its
`response_bytes`, and the metrics must not count a response served.

The race the proxy lost: the client's FIN and the broker's answer handled in one pass
of the event loop, the FIN first. The test makes that happen every time by holding the
proxy's loop while the client closes and then the broker answers.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from support.observed import ObservedProxy
from support.proxy_harness import LOCAL, FakeBroker, read_frame, request_frame, write_frame

from codec import ApiKey

METADATA = ApiKey.METADATA
CORRELATION_ID = 7
# Metadata v0 with no topics asked; the answer: no brokers, no topics.
REQUEST = request_frame(METADATA, 0, CORRELATION_ID, struct.pack(">i", 0))
ANSWER_BODY = struct.pack(">iii", CORRELATION_ID, 0, 0)


class HeldBroker:
    """Answers the one request once told to (`answer`)."""

    def __init__(self) -> None:
        self.got_request = threading.Event()
        self.go = threading.Event()
        self.answered = threading.Event()

    def __call__(self, sock: socket.socket) -> None:
        read_frame(sock)
        self.got_request.set()
        assert self.go.wait(10)
        write_frame(sock, ANSWER_BODY)
        self.answered.set()
        time.sleep(5)  # keep the broker side open: only the client leaves

    def answer(self) -> None:
        self.go.set()
        assert self.answered.wait(5)


@contextmanager
def proxied(tmp_path: Path) -> Iterator[tuple[ObservedProxy, HeldBroker]]:
    broker = HeldBroker()
    with FakeBroker(broker) as fake, ObservedProxy(fake.address, tmp_path / "requests.log") as px:
        yield px, broker


def holding_the_loop(px: ObservedProxy, while_held: Callable[[], None]) -> None:
    """Run `while_held` while the proxy's loop sleeps: what happens meanwhile on the
    sockets, the loop then sees in one pass, in the order it happened."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(10)

    px.loop.call_soon_threadsafe(hold)
    assert held.wait(5)
    try:
        while_held()
        time.sleep(0.1)  # let the kernel deliver both to the proxy's sockets
    finally:
        release.set()


def sent(px: ObservedProxy) -> socket.socket:
    client = socket.create_connection((LOCAL, px.port), timeout=5)
    client.sendall(REQUEST)
    return client


def exchange_lines(px: ObservedProxy) -> list[dict[str, object]]:
    px.wait_all_closed(10)
    return [
        line for line in px.lines() if line["event"] not in ("connection_open", "connection_close")
    ]


def served(px: ObservedProxy) -> float:
    """Responses the metrics count as served for Metadata (the latency histogram)."""
    value = px.metrics().value("kafkalens_request_duration_seconds_count", api="Metadata")
    return value or 0.0


def test_answer_after_the_client_closed_is_logged_as_not_delivered(tmp_path: Path) -> None:
    with proxied(tmp_path) as (px, broker):
        client = sent(px)
        assert broker.got_request.wait(5)

        def client_leaves_then_broker_answers() -> None:
            client.close()
            time.sleep(0.05)
            broker.answer()

        holding_the_loop(px, client_leaves_then_broker_answers)
        lines = exchange_lines(px)
        assert [(line["event"], line["api"], line["correlation_id"]) for line in lines] == [
            ("request_incomplete", "Metadata", CORRELATION_ID)
        ]
        assert lines[0]["reason"] == "client_eof" and lines[0]["response_bytes"] is None
        assert served(px) == 0
        closed = [line for line in px.lines() if line["event"] == "connection_close"]
        assert [line["reason"] for line in closed] == ["client_eof"]


def test_client_that_waits_gets_its_answer_logged_as_a_request(tmp_path: Path) -> None:
    """The control: the same exchange, the loop held the same way, the client reads."""
    with proxied(tmp_path) as (px, broker):
        client = sent(px)
        assert broker.got_request.wait(5)
        holding_the_loop(px, broker.answer)
        assert read_frame(client) == ANSWER_BODY
        client.close()
        lines = exchange_lines(px)
        assert [(line["event"], line["api"], line["correlation_id"]) for line in lines] == [
            ("request", "Metadata", CORRELATION_ID)
        ]
        assert lines[0]["response_bytes"] == len(ANSWER_BODY) + 4
        assert served(px) == 1


def test_answer_after_the_client_reset_is_logged_as_not_delivered(tmp_path: Path) -> None:
    """A client that resets (a close with SO_LINGER 0) instead of a FIN."""
    with proxied(tmp_path) as (px, broker):
        client = sent(px)
        assert broker.got_request.wait(5)

        def client_resets_then_broker_answers() -> None:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            time.sleep(0.05)
            broker.answer()

        holding_the_loop(px, client_resets_then_broker_answers)
        lines = exchange_lines(px)
        assert [(line["event"], line["reason"]) for line in lines] == [
            ("request_incomplete", "client_error")
        ]
        assert served(px) == 0
