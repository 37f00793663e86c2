"""`kafkalens decode` of hostile captures, written with dpkt: garbage streams, TLS,
records that claim any size, files cut short, and more connections than it follows.
One line per broken stream, the limits counted when hit, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import random
import ssl
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from support.capture import SyntheticCapture, decode, events

from codec import ApiKey, Request, Response, encode_request, encode_response
from proxy.capture.decode import CaptureDecoder, CaptureLimits

BROKER = 9092


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def metadata_exchange(corr: int, topic: str = "orders") -> tuple[bytes, bytes]:
    request = encode_request(Request(ApiKey.METADATA, 1, {"correlation_id": corr, "client_id": "hostile-test"},
                                     {"topics": [{"name": topic}]}))
    response = encode_response(Response(ApiKey.METADATA, 1, {"correlation_id": corr}, {
        "brokers": [], "controller_id": 1,
        "topics": [{"error_code": 3, "name": topic, "is_internal": False, "partitions": []}],
    }))
    return framed(request), framed(response)


def good_connection(cap: SyntheticCapture, port: int, corr: int = 7) -> None:
    request, response = metadata_exchange(corr)
    cap.connect(port, BROKER)
    cap.packet(port, BROKER, request)
    cap.packet(BROKER, port, response)
    cap.close(port, BROKER)


def client_hello() -> bytes:
    """A real TLS ClientHello, as Python's ssl module starts a handshake."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="broker")
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the ServerHello
        tls.do_handshake()
    return outgoing.read()


def test_a_garbage_stream_is_one_line_and_the_others_decode(tmp_path: Path) -> None:
    rng = random.Random(1)
    cap = SyntheticCapture(tmp_path / "garbage.pcap")
    good_connection(cap, 40001)
    cap.connect(40002, BROKER)
    for _ in range(300):
        cap.packet(40002, BROKER, bytes(rng.randrange(256) for _ in range(1000)))
    cap.close(40002, BROKER)
    good_connection(cap, 40003, corr=8)
    lines = decode(cap.done(), (BROKER,))
    exchanges = events(lines, "request")
    assert [(line["client_address"], line["errors"], line["topics"]) for line in exchanges] == [
        ("127.0.0.1:40001", ["UNKNOWN_TOPIC_OR_PARTITION"], ["orders"]),
        ("127.0.0.1:40003", ["UNKNOWN_TOPIC_OR_PARTITION"], ["orders"]),
    ]
    trouble = [line for line in lines if line["event"].startswith("capture_stream")]
    assert len(trouble) == 1 and trouble[0]["client_address"] == "127.0.0.1:40002"


def test_tls_streams_are_said_and_skipped(tmp_path: Path) -> None:
    cap = SyntheticCapture(tmp_path / "tls.pcap")
    cap.connect(40010, 9093)  # no --port: detected
    cap.packet(40010, 9093, client_hello())
    cap.packet(9093, 40010, b"\x16\x03\x03\x00\x7a" + bytes(122))
    cap.close(40010, 9093)
    cap.connect(40011, BROKER)  # a broker port, TLS all the same
    cap.packet(40011, BROKER, client_hello())
    cap.close(40011, BROKER)
    good_connection(cap, 40012)
    lines = decode(cap.done(), (BROKER,))
    tls = events(lines, "capture_tls_stream")
    assert [line["client_address"] for line in tls] == ["127.0.0.1:40010", "127.0.0.1:40011"]
    assert all("TLS" in line["reason"] for line in tls)
    assert [line["client_address"] for line in events(lines, "request")] == ["127.0.0.1:40012"]
    summary = events(lines, "capture_summary")[0]
    assert (summary["tls_streams"], summary["kafka_streams"]) == (2, 1)


def test_streams_on_other_ports_are_told_by_their_first_frames(tmp_path: Path) -> None:
    cap = SyntheticCapture(tmp_path / "ports.pcap")
    request, response = metadata_exchange(3)
    cap.connect(40020, 19092)
    cap.packet(40020, 19092, request)
    cap.packet(19092, 40020, response)
    cap.connect(40021, 8080)
    cap.packet(40021, 8080, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    cap.packet(8080, 40021, b"HTTP/1.1 200 OK\r\n\r\n")
    lines = decode(cap.done())
    assert [(line["listener"], line["api"]) for line in events(lines, "request")] == [("127.0.0.1:19092", "Metadata")]
    summary = events(lines, "capture_summary")[0]
    assert (summary["kafka_streams"], summary["other_streams"]) == (1, 1)


def test_a_record_claiming_gigabytes_stops_reading_and_is_counted(tmp_path: Path) -> None:
    cap = SyntheticCapture(tmp_path / "huge.pcap")
    good_connection(cap, 40030)
    path = cap.done()
    with path.open("ab") as handle:  # a record header claiming 2 GiB, then a little
        handle.write(struct.pack("<IIII", 1_700_000_100, 0, 2**31 - 1, 2**31 - 1) + b"x" * 100)
    lines = decode(path, (BROKER,))
    summary = events(lines, "capture_summary")[0]
    assert summary["limits_hit"]["max_record_bytes"] == 1
    assert "over the" in summary["stopped"]
    assert len(events(lines, "request")) == 1


@pytest.mark.slow
def test_not_a_capture_and_cut_short_files_are_said_not_raised(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pcap"
    garbage.write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(range(256)) * 10)
    cap = SyntheticCapture(tmp_path / "cut.pcap")
    good_connection(cap, 40040)
    whole = cap.done().read_bytes()
    cut = tmp_path / "cut2.pcap"
    cut.write_bytes(whole[:-30])
    for path in (garbage, cut):
        result = subprocess.run(
            [sys.executable, "-m", "proxy.decode_cmd", str(path), "--port", str(BROKER)],
            capture_output=True, text=True, timeout=60,
        )
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert '"capture_summary"' in result.stdout.splitlines()[-1]


class Tail:
    """An output that keeps only counts and the last line (the capture_summary)."""

    def __init__(self) -> None:
        self.last = b""
        self.closes = 0

    def write(self, line: bytes) -> int:
        self.last = line
        self.closes += b'"event":"connection_close"' in line
        return len(line)


@pytest.mark.slow
def test_more_connections_than_followed_cost_the_bound_not_their_number(tmp_path: Path) -> None:
    def peak(connections: int) -> tuple[int, Tail]:
        cap = SyntheticCapture(tmp_path / f"many-{connections}.pcap")
        request, _ = metadata_exchange(1)
        for n in range(connections):  # each sends half a request and stays open
            cap.packet(10000 + n, BROKER, request[: len(request) // 2])
        path = cap.done()
        out = Tail()
        decoder = CaptureDecoder(out, frozenset({BROKER}), CaptureLimits(max_streams=200, max_stream_bytes=4096))
        tracemalloc.start()
        with path.open("rb") as handle:
            decoder.run(handle)
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return size, out

    small, _ = peak(1_000)
    large, out = peak(8_000)
    summary = json.loads(out.last)
    assert summary["limits_hit"]["max_streams"] == 8_000 - 200
    assert out.closes == summary["kafka_streams"] == 8_000  # each said, with its half request
    assert large < small * 1.25, (small, large)


def test_requests_past_max_in_flight_are_given_up_and_counted(tmp_path: Path) -> None:
    cap = SyntheticCapture(tmp_path / "inflight.pcap")
    cap.connect(40050, BROKER)
    for corr in range(50):  # never answered
        cap.packet(40050, BROKER, metadata_exchange(corr)[0])
    cap.close(40050, BROKER)
    lines = decode(cap.done(), (BROKER,), max_in_flight=10)
    given_up = [line for line in events(lines, "request_incomplete") if line["reason"] == "max_in_flight"]
    assert [line["correlation_id"] for line in given_up] == list(range(40))
    assert len(events(lines, "request_incomplete")) == 50
    assert events(lines, "capture_summary")[0]["limits_hit"]["max_in_flight"] == 40


def test_out_of_order_bytes_past_the_bound_are_given_up_on_and_counted(tmp_path: Path) -> None:
    cap = SyntheticCapture(tmp_path / "held.pcap")
    cap.connect(40060, BROKER)
    requests = [metadata_exchange(corr)[0] for corr in range(40)]
    cap.packet(40060, BROKER, requests[0])
    cap.seqs[(40060, BROKER)] += len(requests[1])  # the capture missed the second request
    for request in requests[2:]:  # and the broker acknowledged nothing since
        cap.packet(40060, BROKER, request)
    lines = decode(cap.done(), (BROKER,), max_stream_bytes=512)
    summary = events(lines, "capture_summary")[0]
    assert summary["limits_hit"]["max_stream_bytes"] == 1
    assert summary["lost_bytes"] == len(requests[1])
    unanswered = sorted(line["correlation_id"] for line in events(lines, "request_incomplete"))
    assert unanswered == [0, *range(2, 40)]


@pytest.mark.slow
def test_mutated_captures_never_raise(tmp_path: Path) -> None:
    """Random bytes of a capture flipped (headers, lengths, payloads): lines and a
    summary come out whatever they hit."""
    cap = SyntheticCapture(tmp_path / "base.pcap")
    for n in range(4):
        good_connection(cap, 40100 + n, corr=n)
    base = bytearray(cap.done().read_bytes())
    rng = random.Random(99)
    for round_ in range(150):
        mutated = bytearray(base)
        for _ in range(rng.randrange(1, 12)):
            mutated[rng.randrange(24, len(mutated))] = rng.randrange(256)
        path = tmp_path / f"mutated-{round_}.pcap"
        path.write_bytes(bytes(mutated))
        lines = decode(path, (BROKER,) if round_ % 2 else ())
        summary = events(lines, "capture_summary")
        assert len(summary) == 1 and summary[0]["hook_errors"] == 0, round_


def test_pcapng_reads_as_pcap(tmp_path: Path) -> None:
    import dpkt

    cap = SyntheticCapture(tmp_path / "plain.pcap")
    good_connection(cap, 40200)
    plain = cap.done()
    ng = tmp_path / "capture.pcapng"
    with plain.open("rb") as source, ng.open("wb") as target:
        writer = dpkt.pcapng.Writer(target, linktype=dpkt.pcap.DLT_EN10MB)
        for ts, buf in dpkt.pcap.Reader(source):
            writer.writepkt(buf, ts)
    assert decode(ng, (BROKER,)) == decode(plain, (BROKER,))


def sasl_frames(version: int, corr: int, body: dict, response: dict) -> tuple[bytes, bytes]:
    api = ApiKey.SASL_HANDSHAKE if "mechanism" in body else ApiKey.SASL_AUTHENTICATE
    request = encode_request(Request(api, version, {"correlation_id": corr, "client_id": "sasl-c"}, body))
    answer = encode_response(Response(api, version, {"correlation_id": corr}, response))
    return framed(request), framed(answer)


def test_sasl_principals_are_shown_and_secrets_never(tmp_path: Path) -> None:
    """SaslHandshake v1 + SaslAuthenticate, and v0 with its raw token after it."""
    secret = b"s3cr3t-passw0rd"
    cap = SyntheticCapture(tmp_path / "sasl.pcap")
    metadata = metadata_exchange(9)
    # v1: the token inside SaslAuthenticate
    cap.connect(40300, BROKER)
    for request, response in (
        sasl_frames(1, 1, {"mechanism": "PLAIN"}, {"error_code": 0, "mechanisms": ["PLAIN"]}),
        sasl_frames(2, 2, {"auth_bytes": b"\x00alice\x00" + secret},
                    {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}),
        metadata,
    ):
        cap.packet(40300, BROKER, request)
        cap.packet(BROKER, 40300, response)
    # v0: the token as a bare frame, answered by a bare frame
    cap.connect(40301, BROKER)
    for request, response in (
        sasl_frames(0, 1, {"mechanism": "PLAIN"}, {"error_code": 0, "mechanisms": ["PLAIN"]}),
        (framed(b"\x00bob\x00" + secret), framed(b"")),
        metadata,
    ):
        cap.packet(40301, BROKER, request)
        cap.packet(BROKER, 40301, response)
    path = cap.done()
    out = io.BytesIO()
    with path.open("rb") as handle:
        CaptureDecoder(out, frozenset({BROKER})).run(handle)
    text = out.getvalue()
    assert secret not in text and secret.hex().encode() not in text
    lines = [json.loads(line) for line in text.splitlines()]
    principals = {(line["client_address"], line["api"]): line["principal"] for line in events(lines, "request")}
    assert principals[("127.0.0.1:40300", "Metadata")] == "alice"
    assert principals[("127.0.0.1:40301", "Metadata")] == "bob"
    assert [line["api"] for line in events(lines, "request") if line["client_address"].endswith("40301")] == [
        "SaslHandshake", "Metadata",
    ]
    assert not events(lines, "capture_unmatched_response", "capture_stream_resync", "capture_stream_error")


def test_ipv6_connections_are_read(tmp_path: Path) -> None:
    import dpkt

    request, response = metadata_exchange(4)
    path = tmp_path / "v6.pcap"
    with path.open("wb") as handle:
        writer = dpkt.pcap.Writer(handle, linktype=dpkt.pcap.DLT_EN10MB)
        for n, (sport, dport, seq, ack, payload) in enumerate(
            [(40400, BROKER, 1, 1, request), (BROKER, 40400, 1, 1 + len(request), response)]
        ):
            tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=0x18, data=payload)
            ip = dpkt.ip6.IP6(src=b"\x00" * 15 + b"\x01", dst=b"\x00" * 15 + b"\x01", nxt=dpkt.ip.IP_PROTO_TCP,
                              hlim=64, data=tcp, plen=len(tcp))
            eth = dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP6, data=ip)
            writer.writepkt(bytes(eth), 1_700_000_000.0 + n)
    lines = decode(path, (BROKER,))
    [line] = events(lines, "request")
    assert (line["client_address"], line["api"], line["latency_ms"]) == ("::1:40400", "Metadata", 1000.0)


@pytest.mark.slow
def test_a_capture_on_standard_input(tmp_path: Path) -> None:
    """`tcpdump -w - | kafkalens decode -`"""
    cap = SyntheticCapture(tmp_path / "piped.pcap")
    good_connection(cap, 40500)
    result = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "decode", "-", "--port", str(BROKER)],
        input=cap.done().read_bytes(), capture_output=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["api"] for line in events(lines, "request")] == ["Metadata"]


def test_an_api_the_codec_does_not_know_is_logged_as_the_proxy_logs_it(tmp_path: Path) -> None:
    cap = SyntheticCapture(tmp_path / "unknown.pcap")
    unknown = framed(struct.pack(">hhih", 99, 0, 5, 1) + b"c" + bytes(10))
    request, response = metadata_exchange(6)
    cap.connect(40600, BROKER)
    cap.packet(40600, BROKER, request)
    cap.packet(BROKER, 40600, response)
    cap.packet(40600, BROKER, unknown)
    cap.packet(BROKER, 40600, framed(struct.pack(">i", 5) + bytes(6)))
    cap.close(40600, BROKER)
    lines = decode(cap.done(), (BROKER,))
    logged = events(lines, "request")
    assert [(line["api_key"], line["api"]) for line in logged] == [(3, "Metadata"), (99, "unknown")]
    assert logged[1]["decode_error"] == "unknown api key or version"
    assert not events(lines, "capture_stream_resync", "capture_unmatched_response")


@pytest.mark.slow
def test_a_reader_that_stops_early_is_no_error(tmp_path: Path) -> None:
    """`kafkalens decode big.pcap | head -1`"""
    cap = SyntheticCapture(tmp_path / "long.pcap")
    for n in range(300):
        good_connection(cap, 41000 + n, corr=n)
    result = subprocess.run(
        f"{sys.executable} -m proxy.cli decode {cap.done()} --port {BROKER} | head -1",
        shell=True, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1
    assert "Traceback" not in result.stderr and "Broken pipe" not in result.stderr, result.stderr


def test_a_stream_whose_first_frame_does_not_decode_is_not_kafka(tmp_path: Path) -> None:
    """Its header passes for a Metadata v1 request; its body does not (a topic count of
    2**31-1 in 8 bytes): without --port it is let go, not decoded."""
    fake = framed(struct.pack(">hhih", ApiKey.METADATA, 1, 1, 2) + b"ab" + struct.pack(">i", 2**31 - 1) + bytes(4))
    cap = SyntheticCapture(tmp_path / "fake.pcap")
    cap.connect(40700, 7000)
    cap.packet(40700, 7000, fake)
    cap.packet(7000, 40700, b"\x00" * 40)
    cap.close(40700, 7000)
    lines = decode(cap.done())
    summary = events(lines, "capture_summary")[0]
    assert (summary["kafka_streams"], summary["other_streams"]) == (0, 1)
    assert not events(lines, "connection_open")


def test_a_correlation_id_reused_in_flight_is_said(tmp_path: Path) -> None:
    cap = SyntheticCapture(tmp_path / "reused.pcap")
    request, response = metadata_exchange(5)
    cap.connect(40800, BROKER)
    cap.packet(40800, BROKER, request)
    cap.packet(40800, BROKER, request)
    cap.packet(BROKER, 40800, response)
    cap.close(40800, BROKER)
    lines = decode(cap.done(), (BROKER,))
    assert [line["correlation_id"] for line in events(lines, "request")] == [5]
    assert [line["reason"] for line in events(lines, "request_incomplete")] == ["correlation_id_reused"]
