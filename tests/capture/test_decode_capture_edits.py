"""`kafkalens decode` of captures edited with dpkt: segments reordered, duplicated
(retransmissions) and dropped. Every exchange whose bytes are all there decodes
as in the untouched capture; what was lost is reported, never a traceback."""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dpkt
import pytest
from support.capture import Line, decode, events, need, tcpdump
from support.clients import run_workload
from support.needs import needs

from proxy.decode_cmd import main as decode_main
from proxy.tansu import TansuBroker, free_port

VOLATILE = frozenset({"ts", "latency_ms"})
Packet = tuple[float, bytes]


@pytest.fixture(scope="module")
@needs("broker")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    need("tcpdump")
    tmp = tmp_path_factory.mktemp("edits")
    port = free_port()
    broker = TansuBroker(port=port, log_path=tmp / "tansu.log").start()
    try:
        with tcpdump(tmp / "original.pcap", port):
            run_workload("kafka-python", f"127.0.0.1:{port}", "edited", count=3, admin=False)
    finally:
        broker.stop()
    yield tmp / "original.pcap", port


def read(path: Path) -> tuple[int, list[Packet]]:
    with path.open("rb") as handle:
        reader = dpkt.pcap.Reader(handle)
        return reader.datalink(), list(reader)


def write(path: Path, link: int, packets: list[Packet]) -> Path:
    with path.open("wb") as handle:
        writer = dpkt.pcap.Writer(handle, linktype=link)
        for ts, buf in packets:
            writer.writepkt(buf, ts)
    return path


def tcp_of(buf: bytes) -> Any:
    return dpkt.ethernet.Ethernet(buf).data.data


def data_packets(packets: list[Packet], to_port: int | None = None, from_port: int | None = None) -> list[int]:
    found = []
    for i, (_, buf) in enumerate(packets):
        tcp = tcp_of(buf)
        if tcp.data and (to_port is None or tcp.dport == to_port) and (from_port is None or tcp.sport == from_port):
            found.append(i)
    return found


def exchanges(lines: list[Line]) -> list[str]:
    keep = [line for line in events(lines, "request")]
    return sorted(json.dumps({k: v for k, v in line.items() if k not in VOLATILE}, sort_keys=True) for line in keep)


def key(line: Line) -> tuple[str, int]:
    """An exchange: its connection and correlation id."""
    return line["conn"], line["correlation_id"]


def split(packet: Packet, rng: random.Random, pieces: int = 3) -> list[Packet]:
    """The packet's TCP payload as `pieces` segments (as a smaller MSS would have cut it)."""
    ts, buf = packet
    eth = dpkt.ethernet.Ethernet(buf)
    ip, tcp = eth.data, eth.data.data
    data = bytes(tcp.data)
    cuts = [0, *sorted(rng.sample(range(1, len(data)), pieces - 1)), len(data)]
    out = []
    for n, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        piece = dpkt.tcp.TCP(bytes(tcp))
        piece.seq, piece.data, piece.sum = (tcp.seq + a) % (1 << 32), data[a:b], 0
        packet_ip = dpkt.ip.IP(bytes(ip))
        packet_ip.data, packet_ip.sum = piece, 0
        packet_ip.len = packet_ip.__hdr_len__ + len(packet_ip.opts) + len(bytes(piece))
        eth.data = packet_ip
        out.append((ts + n * 1e-6, bytes(eth)))
    return out


def first_request_of(packets: list[Packet], port: int, api_keys: tuple[int, ...], after: int) -> int:
    """A data segment to `port` carrying one of `api_keys`, not the connection's first."""
    for i in data_packets(packets, to_port=port):
        data = bytes(tcp_of(packets[i][1]).data)
        if i > after and int.from_bytes(data[4:6], "big") in api_keys and data[8:12] != b"\0\0\0\1":
            return i
    raise AssertionError("no such request in the capture")


def test_reordered_and_retransmitted_segments_change_nothing(capture: tuple[Path, int], tmp_path: Path) -> None:
    path, port = capture
    link, packets = read(path)
    original = decode(path, (port,))
    assert len(events(original, "request")) >= 20
    rng = random.Random(22)
    edited: list[Packet] = []
    for i, packet in enumerate(packets):
        if i not in data_packets(packets) or len(tcp_of(packet[1]).data) < 8:
            edited.append(packet)
            continue
        pieces = split(packet, rng)
        resent = pieces[rng.randrange(3)]
        rng.shuffle(pieces)  # out of order
        edited += [*pieces, resent]  # and one of them retransmitted
    lines = decode(write(tmp_path / "edited.pcap", link, edited), (port,))
    assert exchanges(lines) == exchanges(original)
    summary = events(lines, "capture_summary")[0]
    assert summary["duplicate_bytes"] > 0
    assert summary["lost_bytes"] == summary["resyncs"] == summary["unmatched_responses"] == 0


def test_segments_the_capture_missed_lose_their_exchanges_only(capture: tuple[Path, int], tmp_path: Path) -> None:
    path, port = capture
    link, packets = read(path)
    original = decode(path, (port,))
    by_key = {key(line): line for line in events(original, "request")}
    # a whole request segment, the middle of another request, and a whole answer
    # (the peers' acknowledgements tell the bytes were delivered: no wait for them)
    whole = first_request_of(packets, port, (3, 10), after=len(packets) // 2)
    cut = first_request_of(packets, port, (2, 3, 8, 9, 10), after=whole + 1)
    cut_conn = {tcp_of(packets[i][1]).sport for i in (whole, cut)}
    answer = next(
        i for i in data_packets(packets, from_port=port) if i > cut and tcp_of(packets[i][1]).dport not in cut_conn
    )
    rng = random.Random(5)
    edited: list[Packet] = []
    lost_bytes = 0
    for i, packet in enumerate(packets):
        if i in (whole, answer):
            lost_bytes += len(tcp_of(packet[1]).data)
        elif i == cut:
            first, middle, last = split(packet, rng)
            edited += [first, last]
            lost_bytes += len(tcp_of(middle[1]).data)
        else:
            edited.append(packet)
    lines = decode(write(tmp_path / "dropped.pcap", link, edited), (port,))

    got = {key(line): line for line in events(lines, "request")}
    lost = set(by_key) - set(got)
    assert len(lost) == 3 and not set(got) - set(by_key)
    for k, line in got.items():
        assert exchanges([line]) == exchanges([by_key[k]])
    # said: the answers without their request, the request without its answer, the
    # frame cut in the middle, and where each stream found its feet again
    unmatched = {(line["conn"], line["correlation_id"]) for line in events(lines, "capture_unmatched_response")}
    unanswered = {key(line) for line in events(lines, "request_incomplete")}
    assert unmatched | unanswered <= lost and unanswered
    assert events(lines, "capture_stream_error")
    assert len(events(lines, "capture_stream_resync")) >= 2
    summary = events(lines, "capture_summary")[0]
    assert summary["lost_bytes"] == lost_bytes


def test_a_capture_cut_short_decodes_up_to_the_cut(capture: tuple[Path, int], tmp_path: Path) -> None:
    path, port = capture
    whole = path.read_bytes()
    original = decode(path, (port,))
    _, packets = read(path)
    boundaries, at = set(), 24  # after the file header, each record: 16 bytes and its packet
    for _, buf in packets:
        boundaries.add(at)
        at += 16 + len(buf)
    record = 16 + len(packets[len(packets) // 2][1])
    cuts = (len(whole) * 2 // 3 + offset for offset in (0, 5, 11, record // 2))
    for cut_at in (c + 1 if c in boundaries else c for c in cuts):  # a cut between records is no cut
        cut = tmp_path / "cut.pcap"
        cut.write_bytes(whole[:cut_at])  # in a record's header or in its packet
        lines = decode(cut, (port,))
        summary = events(lines, "capture_summary")[0]
        assert 0 < len(events(lines, "request")) < len(events(original, "request"))
        assert set(exchanges(lines)) <= set(exchanges(original))
        assert "cut short" in summary["stopped"], (cut_at, summary["stopped"])
    assert events(lines, "connection_close")[-1]["reason"] == "capture_ended"


def test_frames_over_the_whole_frame_bound_decode_as_they_pass(capture: tuple[Path, int]) -> None:
    """Past max_stream_bytes a frame is decoded in pieces (the proxy's streaming
    decoder): the same lines, with at most that much of it held."""
    path, port = capture
    original = decode(path, (port,))
    lines = decode(path, (port,), max_stream_bytes=64)
    assert exchanges(lines) == exchanges(original)
    sizes = [line["request_bytes"] for line in events(original, "request")]
    assert max(sizes) > 64 * 4


def test_a_capture_joining_mid_stream_says_so_and_decodes_what_follows(
    capture: tuple[Path, int], tmp_path: Path
) -> None:
    path, port = capture
    link, packets = read(path)
    original = decode(path, (port,))
    start = len(packets) // 2
    lines = decode(write(tmp_path / "late.pcap", link, packets[start:]), (port,))
    joined = [line for line in events(lines, "capture_stream_resync") if "mid-stream" in line["reason"]]
    assert joined

    def facts(line: Line) -> tuple[Any, ...]:
        topics = tuple(line.get("topics") or ())
        return line["client_address"], line["correlation_id"], line["api"], tuple(line["errors"]), topics

    late = {facts(line) for line in events(lines, "request")}
    assert late and late <= {facts(line) for line in events(original, "request")}
    first_ts = min(ts for ts, _ in packets[start:])
    missed = [
        line for line in events(original, "request")
        if facts(line) not in late and line["ts"] > _iso(first_ts + 0.05)
    ]
    assert not missed  # every exchange that began in the capture (bar the first instants)
    for line in joined:
        assert line["conn"] in {x["conn"] for x in lines if x["event"] == "connection_open"}


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_the_command_line_filters_and_reads_records(
    capture: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    path, port = capture
    assert decode_main([str(path), "--port", str(port), "--filter", "Produce", "--filter", "1",
                        "--record-detail"]) == 0
    printed = capsys.readouterr()
    lines = [json.loads(line) for line in printed.out.splitlines()]
    shown = events(lines, "request")
    assert sorted({line["api"] for line in shown}) == ["Fetch", "Produce"]
    assert all(line["record_stats"]["header_keys"] == ["seq", "trace"] for line in shown)
    # only what was asked on stdout; the capture's summary (what it lacked) on stderr
    assert {line["api"] for line in lines} == {"Fetch", "Produce"}, {line["event"] for line in lines}
    [summary] = [json.loads(line) for line in printed.err.splitlines()]
    assert summary["event"] == "capture_summary" and summary["exchanges"] > len(shown)


def test_help_describes_captures(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        decode_main(["--help"])
    text = capsys.readouterr().out
    for word in ("pcapng", "--port", "--filter", "--max-streams", "--max-stream-bytes", "TLS", "kafkalens report"):
        assert word in text
