"""Node addresses inside responses: where they are (from the schemas), what kind of
endpoint each names (declared here, once), and their rewriting.

Gateway mode must put its own address wherever a response names a node, or clients would
bypass it. Rather than list the messages by hand (and miss the next one Kafka adds), we
walk every response schema for structs holding a `host` and a `port`; the node they
belong to is the nearest node/broker/leader id in the struct or above it. Structs with a
host and port that are not node addresses are exempted by name, with the reason.

A KRaft node may be a broker, a controller or both (combined mode), each role on a
listener of its own under one node id, so an address is not enough: the gateway must
know which *kind* of endpoint it names, or a controller's endpoint would move the route
of the broker with the same id (DescribeQuorum's voters, in combined mode, are the
brokers' own node ids on their CONTROLLER listeners). `KINDS` says it for every address
struct of every response, from what the message is for:

- a fixed kind: Metadata, FindCoordinator and the leaders of Produce, Fetch, ShareFetch
  and ShareAcknowledge (KIP-951) name brokers; DescribeQuorum's nodes and the KRaft
  quorum apis (Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot, UpdateRaftVoter)
  name controllers;
- the kind a field of the answer states: DescribeCluster's `endpoint_type` (KIP-919,
  1 brokers, 2 controllers; the broker echoes the request's, so no request state is
  kept);
- the kind of the route the answer came back on: a Fetch sent to a broker is a client's
  (its leaders are brokers); a Fetch sent to a controller is KRaft's own (KIP-853: its
  endpoints are the quorum leader's).

Each declaration also says whether the message is the cluster's word on where nodes
are (`moves`: Metadata and DescribeCluster for brokers, DescribeCluster and DescribeQuorum
for controllers): only those may move a route the gateway already has (proxy/gateway/
gateway.py); the others are rewritten to the route's port and move nothing.

tests/gateway/test_addresses.py fails on a host or port field of any response that is neither an
address here nor exempt, and on an address struct without a declared kind.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from codec.schema import Field, api_messages

ID_FIELDS = ("node_id", "broker_id", "leader_id")


class EndpointKind(enum.Enum):
    """Which listener of a node an address names; each kind has its own gateway routes."""

    BROKER = "broker"
    CONTROLLER = "controller"


BROKER, CONTROLLER = EndpointKind.BROKER, EndpointKind.CONTROLLER
# DescribeCluster's EndpointType values (KIP-919).
ENDPOINT_TYPES = {1: BROKER, 2: CONTROLLER}


class KindFrom(enum.Enum):
    """Where the kind of an address struct comes from when the message alone does not say."""

    ENDPOINT_TYPE = "the answer's endpoint_type field (DescribeCluster, KIP-919)"
    ROUTE = "the kind of the route the answer came back on"


@dataclass(frozen=True)
class Endpoints:
    """What the addresses of one struct name: `kind`, or where to read it (`kind_from`);
    `moves`: the message is the cluster's word on where its nodes are (it may move a
    route the gateway has); `why`: what the message is for."""

    kind: EndpointKind | KindFrom
    moves: bool
    why: str


# (response message, path of the struct) -> what its host/port name.
KINDS: dict[tuple[str, tuple[str, ...]], Endpoints] = {
    ("MetadataResponse", ("brokers",)): Endpoints(BROKER, True, "the cluster's brokers"),
    ("DescribeClusterResponse", ("brokers",)): Endpoints(
        KindFrom.ENDPOINT_TYPE, True, "brokers or controllers, as the request asked (KIP-919)"
    ),
    ("FindCoordinatorResponse", ()): Endpoints(BROKER, False, "a group's coordinator"),
    ("FindCoordinatorResponse", ("coordinators",)): Endpoints(
        BROKER, False, "the coordinators of a batch of groups"
    ),
    ("ProduceResponse", ("node_endpoints",)): Endpoints(
        BROKER, False, "new partition leaders (KIP-951)"
    ),
    ("FetchResponse", ("node_endpoints",)): Endpoints(
        KindFrom.ROUTE,
        False,
        "new partition leaders (KIP-951); KRaft's own Fetch, to a controller: the quorum"
        " leader (KIP-853)",
    ),
    ("ShareFetchResponse", ("node_endpoints",)): Endpoints(
        BROKER, False, "new partition leaders (KIP-932)"
    ),
    ("ShareAcknowledgeResponse", ("node_endpoints",)): Endpoints(
        BROKER, False, "new partition leaders (KIP-932)"
    ),
    ("DescribeQuorumResponse", ("nodes", "listeners")): Endpoints(
        CONTROLLER, True, "the quorum's voters, each CONTROLLER listener (KIP-853)"
    ),
    ("VoteResponse", ("node_endpoints",)): Endpoints(
        CONTROLLER, False, "the quorum leader (KIP-853)"
    ),
    ("BeginQuorumEpochResponse", ("node_endpoints",)): Endpoints(
        CONTROLLER, False, "the quorum leader (KIP-853)"
    ),
    ("EndQuorumEpochResponse", ("node_endpoints",)): Endpoints(
        CONTROLLER, False, "the quorum leader (KIP-853)"
    ),
    ("FetchSnapshotResponse", ("node_endpoints",)): Endpoints(
        CONTROLLER, False, "the quorum leader (KIP-853)"
    ),
    ("UpdateRaftVoterResponse", ("current_leader",)): Endpoints(
        CONTROLLER, False, "the quorum leader (KIP-853)"
    ),
}

# (response message, path of the struct) -> why its host/port is not a node's address.
EXEMPT: dict[tuple[str, tuple[str, ...]], str] = {
    ("DescribeAclsResponse", ("resources", "acls")): "an ACL's host pattern, not an address",
    ("DeleteAclsResponse", ("filter_results", "matching_acls")): "an ACL's host pattern",
    ("StreamsGroupHeartbeatResponse", ("partitions_by_user_endpoint", "user_endpoint")):
        "a Kafka Streams application's own endpoint, not a broker",
    ("StreamsGroupDescribeResponse", ("groups", "members", "user_endpoint")):
        "a Kafka Streams application's own endpoint, not a broker",
}  # fmt: skip


@dataclass(frozen=True)
class AddressField:
    """A struct (reached by `path`) whose host/port belong to the node `id_field` names,
    and what kind of endpoint they are."""

    path: tuple[str, ...]  # from the body to the struct holding host and port
    id_level: int  # how many path steps down the id field sits (0: in the body itself)
    id_field: str
    endpoints: Endpoints


def _walk(
    fields: tuple[Field, ...], version: int, path: tuple[str, ...], ids: tuple[tuple[int, str], ...]
) -> Iterator[tuple[tuple[str, ...], tuple[tuple[int, str], ...], set[str]]]:
    present = [f for f in fields if f.present_in(version)]
    names = {f.name for f in present}
    here = tuple((len(path), n) for n in ID_FIELDS if n in names)
    ids = ids + here
    yield path, ids, names
    for field in present:
        if field.children:
            yield from _walk(field.children, version, (*path, field.name), ids)


@cache
def address_fields(message_name: str, version: int) -> tuple[AddressField, ...]:
    """Every node address struct of a response message at one version.

    LookupError for one without an id or without a declared kind (a Kafka release that
    added one: tests/gateway/test_addresses.py names it before it ships)."""
    from codec.schema import message

    definition = message(message_name).definition(version)
    if definition is None:
        return ()
    found = []
    for path, ids, names in _walk(definition.fields, version, (), ()):
        if "host" not in names or "port" not in names or (message_name, path) in EXEMPT:
            continue
        where = f"{message_name} v{version} {'.'.join(path) or '<top>'}"
        if not ids:
            raise LookupError(f"{where}: host/port without an id")
        endpoints = KINDS.get((message_name, path))
        if endpoints is None:
            raise LookupError(f"{where}: an address of no declared kind (broker or controller)")
        level, id_field = ids[-1]
        found.append(AddressField(path, level, id_field, endpoints))
    return tuple(found)


@cache
def rewritten_api_keys() -> frozenset[int]:
    """Api keys whose responses carry a node address at some version."""
    keys = set()
    for api_key, (_, response) in api_messages().items():
        if any(address_fields(response.name, v) for v in response.versions):
            keys.add(api_key)
    return frozenset(keys)


@dataclass(frozen=True)
class Named:
    """One address a response gives: node `node_id` of `kind` is at `host`:`port`, in
    `source` (a message name); `moves`: the message may move the node's route (the first
    address a response gives a node only: a controller lists one per CONTROLLER
    listener, and the first is the one KRaft uses)."""

    kind: EndpointKind
    node_id: int
    host: str
    port: int
    moves: bool
    source: str


# The address clients must be given instead, or None to leave it as it is.
Mapper = Callable[[Named], tuple[str, int] | None]


def endpoint_kind(
    endpoints: Endpoints, body: dict[str, Any], route: EndpointKind
) -> EndpointKind | None:
    """The kind of endpoint a struct's addresses name, in this answer on this route;
    None for an endpoint_type no release defines (left as it is)."""
    kind = endpoints.kind
    if isinstance(kind, EndpointKind):
        return kind
    if kind is KindFrom.ROUTE:
        return route
    return ENDPOINT_TYPES.get(body.get("endpoint_type", 1))


def rewrite_addresses(
    body: dict[str, Any],
    fields: tuple[AddressField, ...],
    mapper: Mapper,
    source: str = "",
    route: EndpointKind = BROKER,
) -> int:
    """Replace every node host/port in `body` with the mapper's answer for it.

    `route` is the kind of the route the answer came back on. The mapper returns None to
    leave an address as it is. Nodes with a negative id (-1, "no coordinator") are left.
    Returns how many addresses changed; LookupError for an endpoint kind no release
    defines (nothing is changed then)."""
    kinds = []
    for field in fields:
        kind = endpoint_kind(field.endpoints, body, route)
        if kind is None:
            raise LookupError(f"{source}: endpoint_type {body.get('endpoint_type')!r}")
        kinds.append(kind)
    changed = 0
    named: set[tuple[EndpointKind, int]] = set()
    for field, kind in zip(fields, kinds, strict=True):
        for struct, node_id in _structs(body, field.path, field.id_level, field.id_field, None):
            if node_id is None or node_id < 0:
                continue
            first = (kind, node_id) not in named
            named.add((kind, node_id))
            given = Named(
                kind,
                node_id,
                struct["host"],
                struct["port"],
                field.endpoints.moves and first,
                source,
            )
            target = mapper(given)
            if target is not None and (struct["host"], struct["port"]) != target:
                struct["host"], struct["port"] = target
                changed += 1
    return changed


def _structs(
    value: Any, path: tuple[str, ...], id_level: int, id_field: str, node_id: int | None
) -> Iterator[tuple[dict[str, Any], int | None]]:
    if isinstance(value, list):
        for item in value:
            yield from _structs(item, path, id_level, id_field, node_id)
        return
    if not isinstance(value, dict):
        return
    if id_level == 0:
        node_id = value.get(id_field)
    if not path:
        yield value, node_id
        return
    child = value.get(path[0])
    if child is not None:
        yield from _structs(child, path[1:], id_level - 1, id_field, node_id)


# --- docs/gateway.md's table of what is rewritten, from the declarations above ----------------

_PORTS = {
    BROKER: "broker port",
    CONTROLLER: "controller port",
    KindFrom.ENDPOINT_TYPE: "broker port or controller port, as `endpoint_type` says",
    KindFrom.ROUTE: "broker port on a broker route, controller port on a controller route",
}
TABLE_MARK = "<!-- gateway endpoints: generated by `python -m proxy.gateway.addresses` -->"


def endpoint_table() -> str:
    """docs/gateway.md's table: every response field that names a node, at which versions,
    the port it is rewritten to, and whether it may move a route (from `KINDS` and the
    schemas, as the gateway reads them)."""
    versions: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for _, (_, response) in sorted(api_messages().items()):
        for version in response.versions:
            for found in address_fields(response.name, version):
                versions.setdefault((response.name, found.path), []).append(version)
    lines = [
        TABLE_MARK,
        "| Response | Field | Versions | Rewritten to | Moves a route | What it names |",
        "|---|---|---|---|---|---|",
    ]
    for (name, path), seen in versions.items():
        endpoints = KINDS[(name, path)]
        low, high = min(seen), max(seen)
        span = f"{low}+" if high == max(message_versions(name)) else f"{low}-{high}"
        field = ".".join(path) or "(top level)"
        lines.append(
            f"| {name.removesuffix('Response')} | `{field}` | {span} | {_PORTS[endpoints.kind]}"
            f" | {'yes' if endpoints.moves else 'no'} | {endpoints.why} |"
        )
    return "\n".join(lines) + "\n"


def message_versions(name: str) -> list[int]:
    from codec.schema import message

    return list(message(name).versions)


if __name__ == "__main__":
    print(endpoint_table(), end="")
