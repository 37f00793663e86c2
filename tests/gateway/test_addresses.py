"""Gateway mode: every broker address a response can carry is found and rewritten."""

from __future__ import annotations

from collections.abc import Iterator

from codec import Response, decode_response, encode_response
from codec.schema import Field, api_messages
from proxy.gateway.addresses import EXEMPT, address_fields, rewrite_addresses, rewritten_api_keys


def host_port_structs(
    fields: tuple[Field, ...], version: int, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    present = [f for f in fields if f.present_in(version)]
    if any(f.name in ("host", "port") for f in present):
        yield path
    for field in present:
        if field.children:
            yield from host_port_structs(field.children, version, (*path, field.name))


def test_every_host_or_port_field_of_every_response_is_rewritten_or_exempt() -> None:
    unhandled = []
    for _, (_, response) in api_messages().items():
        for version, definition in response.versions.items():
            covered = {f.path for f in address_fields(response.name, version)}
            for path in host_port_structs(definition.fields, version):
                if path not in covered and (response.name, path) not in EXEMPT:
                    unhandled.append(f"{response.name} v{version} {'.'.join(path) or '<top>'}")
    assert unhandled == []


def test_the_client_facing_apis_are_among_those_rewritten() -> None:
    # Metadata, FindCoordinator, DescribeCluster, Produce/Fetch/ShareFetch/ShareAcknowledge.
    assert {3, 10, 60, 0, 1, 78, 79} <= rewritten_api_keys()
    assert 29 not in rewritten_api_keys()  # DescribeAcls: a host pattern, not a broker


def mapper(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "gw.example", 9100 + node_id


def round_trip(api_key: int, version: int, body: dict) -> dict:
    frame = encode_response(Response(api_key, version, {"correlation_id": 1}, body))
    decoded = decode_response(frame, api_key, version)
    fields = address_fields(api_messages()[api_key][1].name, version)
    rewrite_addresses(decoded.body, fields, mapper)
    again = decode_response(encode_response(decoded), api_key, version)
    return again.body


def test_metadata_brokers() -> None:
    body = round_trip(3, 1, {"brokers": [
        {"node_id": 1, "host": "b1.internal", "port": 9092, "rack": None},
        {"node_id": 2, "host": "b2.internal", "port": 9092, "rack": "r"}],
        "controller_id": 1, "topics": []})
    assert [(b["host"], b["port"]) for b in body["brokers"]] == [("gw.example", 9101), ("gw.example", 9102)]


def test_find_coordinator_single_and_batched_forms() -> None:
    single = round_trip(10, 3, {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                                "node_id": 7, "host": "b7", "port": 9092})
    assert (single["host"], single["port"]) == ("gw.example", 9107)
    batched = round_trip(10, 4, {"throttle_time_ms": 0, "coordinators": [
        {"key": "g1", "node_id": 3, "host": "b3", "port": 9092, "error_code": 0, "error_message": None},
        {"key": "g2", "node_id": -1, "host": "", "port": -1, "error_code": 15, "error_message": None}]})
    assert [(c["host"], c["port"]) for c in batched["coordinators"]] == [("gw.example", 9103), ("", -1)]


def test_produce_node_endpoints() -> None:
    body = round_trip(0, 10, {"responses": [], "throttle_time_ms": 0,
                              "node_endpoints": [{"node_id": 4, "host": "b4", "port": 9093, "rack": None}]})
    assert body["node_endpoints"] == [{"node_id": 4, "host": "gw.example", "port": 9104, "rack": None}]


def test_describe_cluster_uses_broker_id() -> None:
    body = round_trip(60, 1, {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                              "endpoint_type": 1, "cluster_id": "c", "controller_id": 1,
                              "brokers": [{"broker_id": 5, "host": "b5", "port": 9092, "rack": None}],
                              "cluster_authorized_operations": 0})
    assert (body["brokers"][0]["host"], body["brokers"][0]["port"]) == ("gw.example", 9105)
