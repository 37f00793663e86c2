"""Real clients' captured sessions (tests/data/golden, bench/capture_golden.py) replayed
through the observing hooks `kafkalens proxy` builds, in process, no sockets: each
request frame handed over as the connection hands it (held for admit_request where the
hooks ask, forwarded, then its answer, rewritten where they ask), with correlation ids
renumbered so that a session can be replayed again on the same connection (its frames
then repeat byte for byte but for the ids, as a client's do) or on another one.

`python tests/support/replay.py OUT` writes the lines a replay makes (with the tree on
PYTHONPATH it is run from): comparing two trees' files shows what a change did to lines.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
# Fields that differ between two replays of the same traffic whatever the code does.
VOLATILE = ("ts", "latency_ms", "duration_s")


@dataclasses.dataclass(frozen=True)
class Exchange:
    api_key: int
    api_version: int
    request: bytes  # a frame body, from the api key on
    response: bytes | None  # None: no answer (acks=0, or the capture has none)


def sessions() -> dict[str, list[Exchange]]:
    """Each captured client's exchanges, in the order it sent its requests (a client's
    connections each number their requests from 1: an answer is its client's latest
    request with its correlation id)."""
    index = json.loads((GOLDEN / "index.json").read_text())
    requests: dict[str, list[dict[str, Any]]] = {}
    answers: dict[tuple[str, int], bytes] = {}
    latest: dict[tuple[str, int], int] = {}
    for frame in index["frames"]:
        client, corr = frame["client"], frame["correlation_id"]
        if frame["direction"] == "req":
            made = requests.setdefault(client, [])
            latest[(client, corr)] = len(made)
            made.append(frame)
        elif (client, corr) in latest:
            answers[(client, latest.pop((client, corr)))] = (GOLDEN / frame["file"]).read_bytes()
    return {
        client: [
            Exchange(f["api_key"], f["api_version"], (GOLDEN / f["file"]).read_bytes(), answers.get((client, n)))
            for n, f in enumerate(frames)
        ]
        for client, frames in requests.items()
    }


def exchange(request: Any, response: Any) -> Exchange:
    from codec import encode_request, encode_response

    return Exchange(request.api_key, request.api_version, encode_request(request), encode_response(response))


def small_requests() -> list[Exchange]:
    """ApiVersions, Metadata, and a group member's OffsetCommit and Heartbeat (whose
    requests the lag link reads)."""
    from codec import ApiKey, Request, Response

    header = {"correlation_id": 0, "client_id": "steady"}
    versions = exchange(
        Request(ApiKey.API_VERSIONS, 3, header, {"client_software_name": "steady-test", "client_software_version": "1"}),
        Response(ApiKey.API_VERSIONS, 3, {"correlation_id": 0}, {
            "error_code": 0, "throttle_time_ms": 0, "supported_features": [], "finalized_features_epoch": -1,
            "finalized_features": [], "zk_migration_ready": False,
            "api_keys": [{"api_key": k, "min_version": 0, "max_version": 99} for k in (0, 1, 3, 8, 12, 18)]}),
    )  # fmt: skip
    metadata = exchange(
        Request(ApiKey.METADATA, 12, header, {"topics": [{"topic_id": uuid.UUID(int=0), "name": "orders"}],
                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}),
        Response(ApiKey.METADATA, 12, {"correlation_id": 0}, {
            "throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "b", "port": 9092, "rack": None}],
            "cluster_id": "c", "controller_id": 1, "topics": [{
                "error_code": 0, "name": "orders", "topic_id": uuid.UUID(int=7), "is_internal": False,
                "partitions": [], "topic_authorized_operations": -1}]}),
    )  # fmt: skip
    commit = exchange(
        Request(ApiKey.OFFSET_COMMIT, 8, header, {
            "group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m", "group_instance_id": None,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 42,
                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}),
        Response(ApiKey.OFFSET_COMMIT, 8, {"correlation_id": 0}, {
            "throttle_time_ms": 0, "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "error_code": 0}]}]}),
    )  # fmt: skip
    heartbeat = exchange(
        Request(ApiKey.HEARTBEAT, 4, header, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                               "group_instance_id": None}),
        Response(ApiKey.HEARTBEAT, 4, {"correlation_id": 0}, {"throttle_time_ms": 0, "error_code": 0}),
    )  # fmt: skip
    return [versions, metadata, commit, heartbeat]


def renumbered(frame: bytes, at: int, correlation_id: int) -> bytes:
    return frame[:at] + struct.pack(">i", correlation_id) + frame[at + 4 :]


def replay(hooks: Any, info: Any, exchanges: list[Exchange], first_id: int) -> int:
    """`exchanges` through `hooks` on the connection `info`; returns the next id."""
    from proxy.hooks import Pending

    corr = first_id
    for exchange in exchanges:
        request = renumbered(exchange.request, 4, corr)
        pending = Pending(corr, exchange.api_key, exchange.api_version, time.perf_counter(), len(request) + 4)
        view = memoryview(request)
        held = hooks.inspects_requests or exchange.api_key in hooks.admit_api_keys
        if held and hooks.admit_request(info, view, exchange.api_key, exchange.api_version, corr) is not None:
            corr += 1
            continue  # answered in the broker's place
        if exchange.response is None:
            hooks.request_without_response(info, view, pending)
        else:
            hooks.request_forwarded(info, view, pending)
            response = renumbered(exchange.response, 0, corr)
            if exchange.api_key in hooks.rewrite_api_keys:
                response = hooks.rewrite_response(info, memoryview(response), pending) or response
            hooks.response_forwarded(info, memoryview(response), pending)
        corr += 1
    return corr


def shipped_hooks(log_path: Path) -> tuple[Any, Any]:
    """The hooks of `kafkalens proxy` as shipped (lag on), the request log at `log_path`."""
    from proxy.config import Overrides
    from proxy.features import build_hooks, load_config
    from proxy.metrics import Metrics

    config = load_config(None, Overrides(request_log=str(log_path)))
    metrics = Metrics()
    return build_hooks(config, metrics), metrics


def connection(hooks: Any, metrics: Any, name: str, port: int) -> Any:
    from proxy.hooks import ConnectionInfo

    info = ConnectionInfo(name, "plaintext", "10.0.0.7", port, "broker:9092")
    info.metrics = metrics.connection_opened("plaintext")
    hooks.connection_opened(info)
    return info


def replayed_lines(log_path: Path, configure: Any = None, rounds: int = 3) -> list[bytes]:
    """Every session replayed `rounds` times on one connection, then once on a second
    one, through the shipped hooks (`configure(hooks)` first, if given); the request
    log's lines as written, the fields that differ from run to run blanked (`blank`)."""
    hooks, metrics = shipped_hooks(log_path)
    if configure is not None:
        configure(hooks)
    for n, (client, exchanges) in enumerate(sorted(sessions().items())):
        info = connection(hooks, metrics, f"{client}-a", 40000 + 2 * n)
        corr = 1
        for _ in range(rounds):
            corr = replay(hooks, info, exchanges, corr)
        again = connection(hooks, metrics, f"{client}-b", 40001 + 2 * n)
        replay(hooks, again, exchanges, 1)
        for done in (info, again):
            hooks.connection_closed(done, "client_eof")
    hooks.close()
    return [blank(line) for line in log_path.read_bytes().splitlines()]


_VOLATILE = re.compile(rb'"(ts|latency_ms|duration_s)":("[^"]*"|[-+0-9.eE]+)')


def blank(line: bytes) -> bytes:
    """`line` with the values of VOLATILE's keys replaced by 0, where they stand (a key
    inside a string value is escaped, \\"ts\\", and not matched)."""
    return _VOLATILE.sub(rb'"\1":0', line)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.write_bytes(b"".join(line + b"\n" for line in replayed_lines(out.with_suffix(".log"))))


# -- through a proxy, over sockets ------------------------------------------------------------


class ScriptedBroker:
    """A TCP peer answering each request with the captured answer of the exchange it is
    (the client sends a session's exchanges in order, one at a time; `script` is that
    order, per connection, repeated)."""

    def __init__(self, script: list[Exchange]) -> None:
        import socket
        import threading

        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: Any) -> None:
        step = 0
        try:
            with sock:
                while True:
                    frame = read_frame(sock)
                    if frame is None:
                        return
                    exchange = self.script[step % len(self.script)]
                    step += 1
                    while exchange.response is None:  # the client expects no answer
                        exchange = self.script[step % len(self.script)]
                        step += 1
                        frame = read_frame(sock)
                        if frame is None:
                            return
                    corr = struct.unpack_from(">i", frame, 4)[0]
                    answer = renumbered(exchange.response, 0, corr)
                    sock.sendall(struct.pack(">i", len(answer)) + answer)
        except OSError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(exc)


def read_frame(sock: Any) -> bytes | None:
    """One frame body, or None at the end of the stream."""
    head = _read(sock, 4)
    if head is None:
        return None
    return _read(sock, struct.unpack(">i", head)[0])


def _read(sock: Any, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def send_session(port: int, exchanges: list[Exchange], rounds: int) -> None:
    """`exchanges` sent `rounds` times on one connection, each answer awaited."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        corr = 1
        for _ in range(rounds):
            for exchange in exchanges:
                request = renumbered(exchange.request, 4, corr)
                sock.sendall(struct.pack(">i", len(request)) + request)
                corr += 1
                if exchange.response is not None:
                    answer = read_frame(sock)
                    assert answer is not None and struct.unpack_from(">i", answer, 0)[0] == corr - 1


_PEER = re.compile(rb'"(conn|client_address)":"[^"]*"')


def blank_peer(line: bytes) -> bytes:
    """`line` blanked (`blank`), its connection id and client address too (a proxied
    connection's differ from run to run)."""
    return _PEER.sub(rb'"\1":""', blank(line))
