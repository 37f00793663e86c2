"""A raw-socket stand-in for a broker, for benchmarks that need one it can script:
a listener on a free local port, a thread per connection, and framed reads."""

from __future__ import annotations

import socket
import struct
import threading

HOST = "127.0.0.1"
_LENGTH = struct.Struct(">i")


def read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = _LENGTH.unpack(read_exactly(sock, 4))
    return read_exactly(sock, size)


class RawBroker:
    """Accepts connections until its listener closes; `serve` runs each in a thread."""

    def __init__(self) -> None:
        self.listener = socket.create_server((HOST, 0))
        self.address = f"{HOST}:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(sock,), daemon=True).start()

    def serve(self, sock: socket.socket) -> None:
        raise NotImplementedError
