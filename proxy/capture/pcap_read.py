"""TCP segments out of a pcap or pcapng capture file, read with dpkt.

A capture is untrusted input: a record whose stated size is over `max_record_bytes`
ends the reading (dpkt would allocate whatever a record header claims), as does a
file cut short; `CaptureReader.stopped` then says why, and the segments before it
were given. Packets that are not TCP over IPv4/IPv6, or that the capture's snap
length cut short, are counted and skipped (a cut segment is a gap to the reader).
"""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import dpkt

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
SYN, FIN, RST, ACK = 0x02, 0x01, 0x04, 0x10


class RecordTooLarge(Exception):
    pass


@dataclass(slots=True)
class Segment:
    ts: float
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes


@dataclass
class ReadCounts:
    packets: int = 0
    segments: int = 0
    not_tcp: int = 0
    cut_short: int = 0  # by the snap length: the segment's payload is incomplete
    undecodable: int = 0
    linktypes: dict[int, int] = field(default_factory=dict)


class _Bounded:
    """The capture file, refusing reads larger than a record may be."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self._raw = raw
        self._limit = limit
        self.cut_short = False  # a read came back short, not at a record's start: the file ends mid-record

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self._limit:
            raise RecordTooLarge(f"a record claims {size} bytes, over the {self._limit}-byte bound")
        got = self._raw.read(size)
        if 0 < len(got) < size:
            self.cut_short = True
        return got

    def fileno(self) -> int:
        return self._raw.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class CaptureReader:
    def __init__(self, handle: IO[bytes], max_record_bytes: int) -> None:
        self.handle = handle
        self.max_record_bytes = max_record_bytes
        self.counts = ReadCounts()
        self.stopped: str | None = None  # why reading ended before the file did
        self._bounded: _Bounded | None = None

    def segments(self) -> Iterator[Segment]:
        try:
            reader = self._open()
        except (ValueError, dpkt.Error, struct.error, RecordTooLarge, EOFError) as exc:
            self.stopped = f"not a pcap or pcapng capture: {exc or type(exc).__name__}"
            return
        link = reader.datalink()
        packets = iter(reader)
        while True:
            try:
                item = next(packets)
            except StopIteration:
                if self._bounded is not None and self._bounded.cut_short:
                    self.stopped = f"the capture file ends inside packet {self.counts.packets} (cut short)"
                return
            except dpkt.NeedData:  # a record header cut
                self.stopped = f"the capture file ends inside packet {self.counts.packets + 1} (cut short)"
                return
            except (ValueError, dpkt.Error, struct.error, RecordTooLarge, EOFError) as exc:
                self.stopped = f"capture unreadable after packet {self.counts.packets}: {exc or type(exc).__name__}"
                return
            self.counts.packets += 1
            segment = self._segment(link, *item)
            if segment is not None:
                self.counts.segments += 1
                yield segment

    def _open(self) -> Any:
        handle: Any = self.handle
        if not hasattr(handle, "peek"):
            handle = io.BufferedReader(handle)
        bounded = self._bounded = _Bounded(handle, self.max_record_bytes)
        if handle.peek(4)[:4] == PCAPNG_MAGIC:
            return dpkt.pcapng.Reader(bounded)
        return dpkt.pcap.Reader(bounded)

    def _segment(self, link: int, ts: float, buf: bytes) -> Segment | None:
        try:
            ip = _network_layer(link, buf)
        except (dpkt.Error, struct.error, ValueError, IndexError):
            self.counts.undecodable += 1
            return None
        if ip is None or not isinstance(ip.data, dpkt.tcp.TCP):
            self.counts.not_tcp += 1
            return None
        tcp = ip.data
        payload = bytes(tcp.data)
        if len(payload) < _stated_payload(ip, tcp):
            self.counts.cut_short += 1
            return None
        family = socket.AF_INET6 if isinstance(ip, dpkt.ip6.IP6) else socket.AF_INET
        return Segment(
            float(ts),
            socket.inet_ntop(family, ip.src),
            tcp.sport,
            socket.inet_ntop(family, ip.dst),
            tcp.dport,
            tcp.seq,
            tcp.ack,
            tcp.flags,
            payload,
        )


def _stated_payload(ip: Any, tcp: Any) -> int:
    """The TCP payload length the IP header states (what the wire carried)."""
    header = tcp.off * 4
    if isinstance(ip, dpkt.ip6.IP6):
        return int(ip.plen) - header - _ip6_extension_bytes(ip)
    return int(ip.len) - ip.hl * 4 - header


def _ip6_extension_bytes(ip: Any) -> int:
    return sum(len(bytes(h)) for h in getattr(ip, "extension_hdrs", {}).values() if h is not None)


def _network_layer(link: int, buf: bytes) -> Any:
    """The IP packet in a link-layer frame, or None for anything else."""
    if link == dpkt.pcap.DLT_EN10MB:
        frame: Any = dpkt.ethernet.Ethernet(buf)
        data = frame.data
    elif link in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
        data = dpkt.loopback.Loopback(buf).data
    elif link == dpkt.pcap.DLT_LINUX_SLL:
        data = dpkt.sll.SLL(buf).data
    elif link == dpkt.pcap.DLT_LINUX_SLL2:
        data = dpkt.sll2.SLL2(buf).data
    elif link in (dpkt.pcap.DLT_RAW, dpkt.pcap.DLT_IPV4, dpkt.pcap.DLT_IPV6, 12, 14):
        data = _raw_ip(buf)
    else:
        raise ValueError(f"link type {link} is not read")
    return data if isinstance(data, dpkt.ip.IP | dpkt.ip6.IP6) else None


def _raw_ip(buf: bytes) -> Any:
    if buf and buf[0] >> 4 == 6:
        return dpkt.ip6.IP6(buf)
    return dpkt.ip.IP(buf)
