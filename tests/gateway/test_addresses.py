"""Gateway mode: every node address a response can carry is found, its kind of endpoint
(broker or controller) declared, and rewritten to that kind's routes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codec import ApiKey, Response, decode_response, encode_response
from codec.schema import Field, api_messages
from proxy.gateway.addresses import (
    BROKER,
    CONTROLLER,
    EXEMPT,
    KINDS,
    EndpointKind,
    Named,
    address_fields,
    rewrite_addresses,
    rewritten_api_keys,
)


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


def test_every_address_has_a_declared_kind_and_every_declaration_is_used() -> None:
    """An address struct a Kafka release adds fails here (address_fields raises for it),
    before a gateway could take a controller's endpoint for a broker's or the reverse."""
    unclassified, used = [], set()
    for _, (_, response) in api_messages().items():
        for version in response.versions:
            try:
                found = address_fields(response.name, version)
            except LookupError as exc:
                unclassified.append(str(exc))
                continue
            used |= {(response.name, f.path) for f in found}
    assert unclassified == []
    assert set(KINDS) == used, "declared for no address of any response"


def test_what_the_declarations_say() -> None:
    def kind(message: str, *path: str) -> object:
        return KINDS[(message, path)].kind

    for broker_facing in ("ProduceResponse", "ShareFetchResponse", "ShareAcknowledgeResponse"):
        assert kind(broker_facing, "node_endpoints") is BROKER
    assert kind("MetadataResponse", "brokers") is BROKER
    assert kind("FindCoordinatorResponse") is BROKER
    assert kind("DescribeQuorumResponse", "nodes", "listeners") is CONTROLLER
    for quorum in ("VoteResponse", "BeginQuorumEpochResponse", "EndQuorumEpochResponse",
                   "FetchSnapshotResponse"):  # fmt: skip
        assert kind(quorum, "node_endpoints") is CONTROLLER
    # only the cluster's word on where its nodes are moves a route
    movers = {message for (message, _), e in KINDS.items() if e.moves}
    assert movers == {"MetadataResponse", "DescribeClusterResponse", "DescribeQuorumResponse"}


def test_the_client_facing_apis_are_among_those_rewritten() -> None:
    # Metadata, FindCoordinator, DescribeCluster, Produce/Fetch/ShareFetch/ShareAcknowledge.
    assert {3, 10, 60, 0, 1, 78, 79} <= rewritten_api_keys()
    assert 29 not in rewritten_api_keys()  # DescribeAcls: a host pattern, not a broker


SEEN: list[Named] = []


def mapper(named: Named) -> tuple[str, int]:
    SEEN.append(named)
    base = 9100 if named.kind is BROKER else 9300
    return "gw.example", base + named.node_id


def round_trip(
    api_key: int, version: int, body: dict, route: EndpointKind = BROKER
) -> dict:
    SEEN.clear()
    frame = encode_response(Response(api_key, version, {"correlation_id": 1}, body))
    decoded = decode_response(frame, api_key, version)
    name = api_messages()[api_key][1].name
    rewrite_addresses(decoded.body, address_fields(name, version), mapper, name, route)
    again = decode_response(encode_response(decoded), api_key, version)
    return again.body


def test_metadata_brokers() -> None:
    body = round_trip(3, 1, {"brokers": [
        {"node_id": 1, "host": "b1.internal", "port": 9092, "rack": None},
        {"node_id": 2, "host": "b2.internal", "port": 9092, "rack": "r"}],
        "controller_id": 1, "topics": []})
    assert [(b["host"], b["port"]) for b in body["brokers"]] == [("gw.example", 9101), ("gw.example", 9102)]
    assert [(n.kind, n.moves, n.source) for n in SEEN] == [(BROKER, True, "MetadataResponse")] * 2


def test_find_coordinator_single_and_batched_forms() -> None:
    single = round_trip(10, 3, {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                                "node_id": 7, "host": "b7", "port": 9092})
    assert (single["host"], single["port"]) == ("gw.example", 9107)
    batched = round_trip(10, 4, {"throttle_time_ms": 0, "coordinators": [
        {"key": "g1", "node_id": 3, "host": "b3", "port": 9092, "error_code": 0, "error_message": None},
        {"key": "g2", "node_id": -1, "host": "", "port": -1, "error_code": 15, "error_message": None}]})
    assert [(c["host"], c["port"]) for c in batched["coordinators"]] == [("gw.example", 9103), ("", -1)]
    assert [(n.kind, n.moves) for n in SEEN] == [(BROKER, False)]  # a coordinator moves nothing


def test_produce_node_endpoints() -> None:
    body = round_trip(0, 10, {"responses": [], "throttle_time_ms": 0,
                              "node_endpoints": [{"node_id": 4, "host": "b4", "port": 9093, "rack": None}]})
    assert body["node_endpoints"] == [{"node_id": 4, "host": "gw.example", "port": 9104, "rack": None}]


def describe_cluster(endpoint_type: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "endpoint_type": endpoint_type, "cluster_id": "c", "controller_id": 1,
            "brokers": [{"broker_id": 5, "host": "n5", "port": 9092, "rack": None}],
            "cluster_authorized_operations": 0}  # fmt: skip


def test_describe_cluster_by_the_endpoint_type_asked_for() -> None:
    body = round_trip(60, 1, describe_cluster(1))
    assert (body["brokers"][0]["host"], body["brokers"][0]["port"]) == ("gw.example", 9105)
    assert [(n.kind, n.moves) for n in SEEN] == [(BROKER, True)]
    body = round_trip(60, 2, describe_cluster(2))  # KIP-919: the controllers
    assert (body["brokers"][0]["host"], body["brokers"][0]["port"]) == ("gw.example", 9305)
    assert [(n.kind, n.moves) for n in SEEN] == [(CONTROLLER, True)]
    v0 = describe_cluster(1)
    del v0["endpoint_type"]
    body = round_trip(60, 0, v0)  # before KIP-919: brokers
    assert body["brokers"][0]["port"] == 9105


def test_an_endpoint_type_no_release_defines_is_left_alone() -> None:
    frame = encode_response(Response(60, 1, {"correlation_id": 1}, describe_cluster(7)))
    decoded = decode_response(frame, 60, 1)
    with pytest.raises(LookupError, match="endpoint_type 7"):
        rewrite_addresses(decoded.body, address_fields("DescribeClusterResponse", 1), mapper,
                          "DescribeClusterResponse")  # fmt: skip
    assert decoded.body["brokers"][0]["port"] == 9092


def quorum_nodes() -> dict:
    listener = {"name": "CONTROLLER", "host": "c1", "port": 9093}
    second = {"name": "CONTROLLER_TLS", "host": "c1", "port": 9094}
    return {"error_code": 0, "error_message": None, "topics": [],
            "nodes": [{"node_id": 1, "listeners": [listener, second]}]}  # fmt: skip


def test_describe_quorum_names_controllers_and_only_a_nodes_first_listener_moves() -> None:
    body = round_trip(ApiKey.DESCRIBE_QUORUM, 2, quorum_nodes())
    assert [(x["host"], x["port"]) for x in body["nodes"][0]["listeners"]] == [("gw.example", 9301)] * 2
    assert [(n.kind, n.node_id, n.port, n.moves) for n in SEEN] == [
        (CONTROLLER, 1, 9093, True), (CONTROLLER, 1, 9094, False)]  # fmt: skip


def test_a_fetch_names_brokers_or_the_quorum_leader_by_the_route_it_came_on() -> None:
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [],
            "node_endpoints": [{"node_id": 2, "host": "n2", "port": 9092, "rack": None}]}  # fmt: skip
    assert round_trip(1, 17, body)["node_endpoints"][0]["port"] == 9102
    assert round_trip(1, 17, body, CONTROLLER)["node_endpoints"][0]["port"] == 9302


def test_the_gateway_pages_table_is_what_the_declarations_say() -> None:
    """docs/gateway.md lists every rewritten field and its port from the same
    declarations the gateway reads (regenerate: python -m proxy.gateway.addresses)."""
    from support.paths import REPO

    from proxy.gateway.addresses import TABLE_MARK, endpoint_table

    page = (REPO / "docs" / "gateway.md").read_text()
    start = page.index(TABLE_MARK)
    end = page.index("\n\n", start) + 1
    assert page[start:end] == endpoint_table()
