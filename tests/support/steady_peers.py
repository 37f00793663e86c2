"""A hostile client and broker around the C steady-state path (proxy/_steady.c): between
well-formed exchanges the C path takes, pipelined frames, frames cut across reads,
bytes flipped in headers and bodies, answers to no request, truncated answers and
lengths past any bound. Seeded: a run replays. Used by tests/proxy/test_steady_hostile.py
and bench.proxy.valgrind_soak."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

from support.replay import Exchange, read_frame, renumbered

LENGTH = struct.Struct(">i")


class HostileBroker:
    """Answers each request with its api's scripted answer; one answer in four is
    mangled (a byte flipped, another correlation id, cut short then the connection
    closed, two answers in one write, a length past any bound, an answer nobody asked)."""

    def __init__(self, script: list[Exchange], seed: int) -> None:
        self.answers = {(e.api_key, e.api_version): e.response for e in script if e.response is not None}
        self.seed = seed
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.connections = 0
        self.hostile = True  # False: every answer as scripted
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            rng = random.Random(self.seed * 1000 + self.connections)
            threading.Thread(target=self._serve, args=(sock, rng), daemon=True).start()

    def _serve(self, sock: socket.socket, rng: random.Random) -> None:
        try:
            with sock:
                while (frame := read_frame(sock)) is not None:
                    if len(frame) < 8:
                        continue
                    api_key, version, corr = struct.unpack_from(">hhi", frame, 0)
                    answer = self.answers.get((api_key, version))
                    if answer is None:
                        continue
                    if not self._send(sock, renumbered(answer, 0, corr), rng):
                        return
        except OSError:
            pass

    def _send(self, sock: socket.socket, body: bytes, rng: random.Random) -> bool:
        """False: the connection is to close."""
        kind = rng.randrange(24) if self.hostile else -1
        if kind == 0:  # a byte flipped past the correlation id
            at = rng.randrange(4, len(body)) if len(body) > 4 else 0
            body = body[:at] + bytes([body[at] ^ (1 << rng.randrange(8))]) + body[at + 1 :]
        elif kind == 1:  # another correlation id: it answers no request
            body = renumbered(body, 0, rng.randrange(-(2**31), 2**31))
        elif kind == 2:  # cut short, then gone
            sock.sendall(LENGTH.pack(len(body)) + body[: rng.randrange(len(body))])
            return False
        elif kind == 3:  # the answer twice in one write
            sock.sendall((LENGTH.pack(len(body)) + body) * 2)
            return True
        elif kind == 4:  # a length past any bound
            sock.sendall(LENGTH.pack(rng.choice([-1, 2**31 - 1, 200 * 1024 * 1024])) + body)
            return False
        elif kind == 5:  # split across writes
            data = LENGTH.pack(len(body)) + body
            cut = rng.randrange(1, len(data))
            sock.sendall(data[:cut])
            time.sleep(0.002)
            sock.sendall(data[cut:])
            return True
        sock.sendall(LENGTH.pack(len(body)) + body)
        return True


class HostileClient:
    """Well-formed exchanges (often several requests in one write) among hostile ones."""

    def __init__(self, port: int, script: list[Exchange], seed: int) -> None:
        self.port = port
        self.script = [e for e in script if e.response is not None]
        self.rng = random.Random(seed)
        self.corr = 1
        self.sock: socket.socket | None = None
        self.reconnects = 0

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.sock = sock
        self.reconnects += 1
        for _ in range(3):  # memoised, then quiet: the C path's from here on
            for exchange in self.script:
                self.send([self.frame(exchange)])
                self.drain(1, 0.5)
        return sock

    def frame(self, exchange: Exchange) -> bytes:
        self.corr += 1
        body = renumbered(exchange.request, 4, self.corr)
        return LENGTH.pack(len(body)) + body

    def send(self, frames: list[bytes]) -> None:
        assert self.sock is not None
        self.sock.sendall(b"".join(frames))

    def drain(self, answers: int, timeout: float) -> int:
        """Read up to `answers` answers within `timeout`; how many came."""
        assert self.sock is not None
        self.sock.settimeout(timeout)
        got = 0
        try:
            while got < answers and read_frame(self.sock) is not None:
                got += 1
        except (TimeoutError, OSError):
            pass
        return got

    def step(self) -> None:
        rng = self.rng
        kind = rng.randrange(10)
        try:
            if self.sock is None:
                self.connect()
            if kind < 5:  # pipelined, well-formed
                frames = [self.frame(rng.choice(self.script)) for _ in range(rng.randrange(1, 5))]
                self.send(frames)
                self.drain(len(frames), 0.3)
            elif kind == 5:  # a byte flipped after the length prefix (api key, version, id, body)
                frame = bytearray(self.frame(rng.choice(self.script)))
                frame[rng.randrange(4, len(frame))] ^= 1 << rng.randrange(8)
                self.send([bytes(frame)])
                self.drain(1, 0.05)
            elif kind == 6:  # cut across writes
                frame = self.frame(rng.choice(self.script))
                cut = rng.randrange(1, len(frame))
                self.send([frame[:cut]])
                time.sleep(0.002)
                self.send([frame[cut:]])
                self.drain(1, 0.3)
            elif kind == 7:  # a well-formed frame followed by the start of another
                frames = [self.frame(rng.choice(self.script)), self.frame(rng.choice(self.script))]
                cut = len(frames[0]) + rng.randrange(1, len(frames[1]))
                data = b"".join(frames)
                self.send([data[:cut]])
                time.sleep(0.002)
                self.send([data[cut:]])
                self.drain(2, 0.3)
            elif kind == 8:  # a length past any bound: the proxy closes
                self.send([LENGTH.pack(rng.choice([-5, 2**31 - 1, 150 * 1024 * 1024])) + b"\0" * 8])
                self.drain(1, 0.1)
                self.close()
            else:  # a request header too short to be one, then a good one
                self.send([LENGTH.pack(3) + b"\0\0\0", self.frame(rng.choice(self.script))])
                self.drain(1, 0.3)
        except OSError:
            self.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
