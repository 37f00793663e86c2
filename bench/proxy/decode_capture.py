"""How fast `kafkalens decode` reads a capture, and what many connections cost it.

    python -m bench.proxy.decode_capture                       # 20,000 exchanges on 200 connections
    python -m bench.proxy.decode_capture --exchanges 100000 --connections 1000
    python -m bench.proxy.decode_capture --open 200000         # connections left open, at --max-streams

Writes a synthetic pcap with dpkt (Metadata v1 exchanges over loopback TCP, one
request and one response segment each, or with --open only half a request per
connection, which then stays open), then decodes it in this process with the output
thrown away, and prints packets/s, exchanges/s, the wall time and the peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import struct
import tempfile
import time
from pathlib import Path

import dpkt

from codec import ApiKey, Request, Response, encode_request, encode_response
from proxy.capture.decode import CaptureDecoder, CaptureLimits

BROKER = 9092


class _Null:
    def write(self, data: bytes) -> int:
        return len(data)


def _frames(corr: int) -> tuple[bytes, bytes]:
    request = encode_request(Request(ApiKey.METADATA, 1, {"correlation_id": corr, "client_id": "bench"},
                                     {"topics": [{"name": "orders"}]}))
    response = encode_response(Response(ApiKey.METADATA, 1, {"correlation_id": corr}, {
        "brokers": [{"node_id": 1, "host": "b", "port": 9092, "rack": None}], "controller_id": 1,
        "topics": [{"error_code": 0, "name": "orders", "is_internal": False, "partitions": []}],
    }))
    return struct.pack(">i", len(request)) + request, struct.pack(">i", len(response)) + response


def _packet(sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes) -> bytes:
    tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, data=payload)
    ip = dpkt.ip.IP(src=b"\x7f\x00\x00\x01", dst=b"\x7f\x00\x00\x01", p=dpkt.ip.IP_PROTO_TCP, data=tcp)
    ip.len = len(ip)
    eth = dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
    return bytes(eth)


def write_capture(path: Path, exchanges: int, connections: int, open_only: int) -> int:
    packets = 0
    with path.open("wb") as handle:
        writer = dpkt.pcap.Writer(handle, linktype=dpkt.pcap.DLT_EN10MB)
        ts = 1_700_000_000.0
        if open_only:
            request, _ = _frames(1)
            for n in range(open_only):
                ts += 1e-5
                writer.writepkt(_packet(1024 + n % 60000, BROKER + n // 60000, 1, 1, 0x18,
                                        request[: len(request) // 2]), ts)
            return open_only
        per = max(1, exchanges // connections)
        for conn in range(connections):
            port, cseq, sseq = 1024 + conn, 1, 1
            for corr in range(per):
                request, response = _frames(corr)
                ts += 1e-5
                writer.writepkt(_packet(port, BROKER, cseq, sseq, 0x18, request), ts)
                cseq += len(request)
                ts += 1e-5
                writer.writepkt(_packet(BROKER, port, sseq, cseq, 0x18, response), ts)
                sseq += len(response)
                packets += 2
    return packets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exchanges", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--open", type=int, default=0, help="connections left open instead")
    parser.add_argument("--max-streams", type=int, default=CaptureLimits().max_streams)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.pcap"
        packets = write_capture(path, args.exchanges, args.connections, args.open)
        decoder = CaptureDecoder(_Null(), frozenset({BROKER}), CaptureLimits(max_streams=args.max_streams))  # type: ignore[arg-type]
        started = time.perf_counter()
        with path.open("rb") as handle:
            decoder.run(handle)
        took = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    counts = decoder.counts
    print(f"{packets} packets, {counts['exchanges']} exchanges, {counts['streams']} streams in {took:.2f} s: "
          f"{packets / took:,.0f} packets/s, {counts['exchanges'] / took:,.0f} exchanges/s, "
          f"peak RSS {rss:.0f} MiB, limits hit {decoder.limits_hit}")


if __name__ == "__main__":
    main()
