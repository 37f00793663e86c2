"""The sans-I/O Kafka exchange (proxy/exchange/kafka.py) on its own: frames in, events
out, with real request and response frames from the codec; the proxy's forwarding
and `kafkalens decode` drive this same object (their own tests hold them end to end)."""

from __future__ import annotations

import struct

from codec import ApiKey, Request, Response, encode_request, encode_response
from proxy.exchange.kafka import Event, ExchangeOptions, KafkaExchange
from proxy.hooks import ConnectionInfo


def exchange(**options: object) -> KafkaExchange:
    info = ConnectionInfo("c-1", "plaintext", "127.0.0.1", 5000, "b:9092")
    return KafkaExchange(info, ExchangeOptions(**options))  # type: ignore[arg-type]


def metadata(corr: int) -> bytes:
    return encode_request(Request(ApiKey.METADATA, 12, {"correlation_id": corr, "client_id": "app"}, {
        "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))


def produce(corr: int, acks: int) -> bytes:
    return encode_request(Request(ApiKey.PRODUCE, 9, {"correlation_id": corr, "client_id": "app"}, {
        "transactional_id": None, "acks": acks, "timeout_ms": 1000, "topic_data": []}))


def answer(corr: int) -> bytes:
    return struct.pack(">i", corr) + b"\x00" * 8


def handshake(corr: int, mechanism: str) -> tuple[bytes, bytes]:
    request = encode_request(Request(ApiKey.SASL_HANDSHAKE, 0, {"correlation_id": corr, "client_id": "app"}, {"mechanism": mechanism}))
    response = encode_response(Response(ApiKey.SASL_HANDSHAKE, 0, {"correlation_id": corr}, {"error_code": 0, "mechanisms": [mechanism]}))
    return request, response


def test_responses_pair_in_order_and_acks_zero_waits_for_none() -> None:
    ex = exchange()
    assert ex.request(metadata(1), len(metadata(1)), 1.0) is Event.REQUEST
    first = ex.current
    assert ex.request(produce(2, 0), len(produce(2, 0)), 2.0) is Event.REQUEST_WITHOUT_RESPONSE
    assert ex.request(produce(3, -1), len(produce(3, -1)), 3.0) is Event.REQUEST
    assert [p.correlation_id for p in ex.pending] == [1, 3]
    assert ex.response(answer(1), 12) is Event.RESPONSE and ex.current is first
    assert first.started == 1.0 and first.request_size == len(metadata(1)) + 4
    assert ex.response(answer(9), 12) is Event.UNMATCHED
    assert ex.response(answer(3), 12) is Event.RESPONSE and not ex.pending
    info = ex.info
    assert (info.requests, info.responses, info.requests_without_response) == (3, 2, 1)


def test_a_produce_head_too_short_for_its_acks_asks_for_more_up_to_the_drivers_most() -> None:
    frame = produce(4, 0)
    assert exchange().request(frame[:9], len(frame), 0.0) is Event.NEED_MORE
    # a driver that can give no more: taken to expect a response
    assert exchange(max_head=9).request(frame[:9], len(frame), 0.0) is Event.REQUEST


def test_requests_past_the_in_flight_bound_are_not_recorded() -> None:
    ex = exchange(max_in_flight=2)
    for corr in (1, 2):
        assert ex.request(metadata(corr), len(metadata(corr)), 0.0) is Event.REQUEST
    assert ex.request(metadata(3), len(metadata(3)), 0.0) is Event.IN_FLIGHT_FULL
    assert ex.request(produce(4, 0), len(produce(4, 0)), 0.0) is Event.REQUEST_WITHOUT_RESPONSE
    assert len(ex.pending) == 2 and ex.info.requests == 3
    assert ex.give_up_oldest().correlation_id == 1
    assert ex.request(metadata(3), len(metadata(3)), 0.0) is Event.REQUEST


def test_what_a_skipped_request_becomes_depends_on_seeing_every_frame() -> None:
    for sees_every_frame, left in ((True, []), (False, [1])):
        ex = exchange(sees_every_frame=sees_every_frame)
        for corr in (1, 2):
            ex.request(metadata(corr), len(metadata(corr)), 0.0)
        assert ex.response(answer(2), 12) is Event.RESPONSE and ex.current.correlation_id == 2
        assert [p.correlation_id for p in ex.pending] == left


def test_a_capture_gives_up_a_request_whose_correlation_id_is_reused() -> None:
    ex = exchange(sees_every_frame=False)
    ex.request(metadata(5), len(metadata(5)), 1.0)
    first = ex.current
    ex.request(metadata(5), len(metadata(5)), 2.0)
    assert ex.displaced is first and [p.started for p in ex.pending] == [2.0]


def test_the_proxys_own_replies_go_before_the_response_behind_them() -> None:
    ex = exchange()
    for corr in (1, 2):
        ex.request(metadata(corr), len(metadata(corr)), 0.0)
    ex.pending[0].reply = b"mine"
    assert ex.response(answer(2), 12) is Event.RESPONSE
    assert [p.reply for p in ex.replies_ahead] == [b"mine"] and ex.info.responses == 2
    ex.request(metadata(3), len(metadata(3)), 0.0)
    ex.pending[0].reply = b"again"
    assert ex.reply_due() is not None and ex.reply_due() is None


def test_raw_sasl_tokens_after_a_handshake_v0_then_requests_again() -> None:
    """SCRAM: two client tokens, each answered, then a Kafka request."""
    ex = exchange(max_frame_before_auth=1000)
    request, response = handshake(1, "SCRAM-SHA-256")
    assert ex.request(request, len(request), 0.0) is Event.REQUEST and ex.wants_body
    ex.request_body(request)
    assert ex.response(response, len(response)) is Event.RESPONSE
    token = b"n,,n=user,r=abc"
    for _ in range(2):
        assert ex.request(token, len(token), 0.0) is Event.RAW_SASL
    assert ex.response(b"server-first", 12) is Event.RAW_SASL
    assert ex.response(b"server-final", 12) is Event.RAW_SASL
    assert ex.request(metadata(2), len(metadata(2)), 0.0) is Event.REQUEST
    assert ex.response(answer(2), 12) is Event.RESPONSE


def test_a_large_frame_before_authentication_is_refused_a_request_after_it_is_not() -> None:
    ex = exchange(max_frame_before_auth=100)
    big = encode_request(Request(ApiKey.API_VERSIONS, 3, {"correlation_id": 1, "client_id": "x" * 200}, {
        "client_software_name": "a", "client_software_version": "1"}))
    assert ex.request(big, len(big), 0.0) is Event.TOO_LARGE_BEFORE_AUTH
    assert ex.request(metadata(2), len(metadata(2)), 0.0) is Event.REQUEST
    assert ex.request(big, len(big), 0.0) is Event.REQUEST  # authenticated: no bound
    assert exchange().request(b"\x00\x03", 2, 0.0) is Event.NOT_A_REQUEST
