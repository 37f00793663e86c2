"""Packet captures for `kafkalens decode` tests: tcpdump on loopback, tshark as oracle."""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from proxy.capture.decode import CaptureDecoder, CaptureLimits, FrameCallback
from proxy.observe.summary import SummaryOptions

Line = dict[str, Any]


def need(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (apt-get install -y tcpdump tshark)")


@contextmanager
def tcpdump(path: Path, *ports: int, interface: str = "lo") -> Iterator[Path]:
    """Records loopback TCP traffic to `ports` into `path` while the block runs
    (`interface="any"`: in Linux cooked (SLL2) frames rather than Ethernet)."""
    need("tcpdump")
    expression = " or ".join(f"tcp port {port}" for port in ports)
    # --immediate-mode: without it, packets still in the kernel's ring buffer when
    # tcpdump is interrupted are lost. -B: a 64 MiB ring, so that a loaded machine
    # that keeps tcpdump waiting does not make the kernel drop packets.
    process = subprocess.Popen(
        ["tcpdump", "-i", interface, "-U", "--immediate-mode", "-B", "65536", "-s", "0", "-w", str(path),
         expression],
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    said = [process.stderr.readline() for _ in range(1)]
    while b"listening" not in said[-1] and said[-1] and len(said) < 5:  # e.g. the link type first
        said.append(process.stderr.readline())
    assert b"listening" in said[-1], said
    try:
        yield path
    finally:
        time.sleep(0.3)  # the last ACKs and FINs
        process.send_signal(signal.SIGINT)
        process.wait(timeout=10)
    said_last = process.stderr.read()
    dropped = re.search(rb"(\d+) packets? dropped by kernel", said_last)
    # a capture that missed packets cannot be held to exact expectations: say so
    assert dropped is None or dropped.group(1) == b"0", f"tcpdump lost packets: {said_last!r}"


def decode(
    path: Path, ports: tuple[int, ...] = (), on_frame: FrameCallback | None = None, **limits: Any
) -> list[Line]:
    """`kafkalens decode`'s lines for a capture (in process: fast, and coverage sees it)."""
    out = io.BytesIO()
    decoder = CaptureDecoder(
        out, frozenset(ports), CaptureLimits(**limits), summary=SummaryOptions(), on_frame=on_frame
    )
    with path.open("rb") as handle:
        decoder.run(handle)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def events(lines: list[Line], *names: str) -> list[Line]:
    return [line for line in lines if line["event"] in names]


def tshark_messages(path: Path, port: int) -> list[Line]:
    """Every Kafka message tshark's dissector decodes in the capture, as its JSON."""
    need("tshark")
    result = subprocess.run(
        ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-Y", "kafka", "-T", "json"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    packets = json.loads(result.stdout or b"[]")
    messages: list[Line] = []
    for packet in packets:
        layers = packet["_source"]["layers"]
        tcp = layers["tcp"]
        found = layers.get("kafka")
        # The dissector stops at the versions it knows (4.0: e.g. CreateTopics v0-5) and
        # reads on regardless: what it decodes after that is noise.
        text = json.dumps(layers)
        undecoded = "_ws.malformed" in text or "Unsupported" in text
        for kafka in found if isinstance(found, list) else [found]:
            if kafka is not None:
                messages.append({"tcp": tcp, "kafka": kafka, "undecoded": undecoded})
    return messages


class SyntheticCapture:
    """A pcap written with dpkt: TCP connections on loopback, segment by segment."""

    def __init__(self, path: Path) -> None:
        import dpkt

        self.dpkt = dpkt
        self.path = path
        self.handle = path.open("wb")
        self.writer = dpkt.pcap.Writer(self.handle, linktype=dpkt.pcap.DLT_EN10MB)
        self.ts = 1_700_000_000.0
        self.seqs: dict[tuple[int, int], int] = {}

    def packet(self, sport: int, dport: int, payload: bytes = b"", flags: int = 0x18) -> None:
        dpkt = self.dpkt
        seq = self.seqs.setdefault((sport, dport), 1000)
        ack = self.seqs.get((dport, sport), 0)
        tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, data=payload)
        ip = dpkt.ip.IP(src=b"\x7f\x00\x00\x01", dst=b"\x7f\x00\x00\x01", p=dpkt.ip.IP_PROTO_TCP, data=tcp)
        ip.len = len(ip)
        eth = dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
        self.ts += 0.001
        self.writer.writepkt(bytes(eth), self.ts)
        self.seqs[(sport, dport)] = (seq + len(payload) + (1 if flags & 0x03 else 0)) % (1 << 32)

    def connect(self, sport: int, dport: int) -> None:
        self.packet(sport, dport, flags=0x02)
        self.packet(dport, sport, flags=0x12)
        self.packet(sport, dport, flags=0x10)

    def close(self, sport: int, dport: int) -> None:
        self.packet(sport, dport, flags=0x11)
        self.packet(dport, sport, flags=0x11)

    def done(self) -> Path:
        self.handle.close()
        return self.path
