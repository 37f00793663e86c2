"""Broker addresses inside responses, found from the schemas, and their rewriting.

Gateway mode must put its own address wherever a response names a broker, or clients
would bypass it. Rather than list the messages by hand (and miss the next one Kafka
adds), we walk every response schema for structs holding a `host` and a `port`; the
broker they belong to is the nearest node/broker/leader id in the struct or above it.
Structs with a host and port that are not broker addresses are exempted by name, with
the reason, and a test fails on any host or port field that is neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from codec.schema import Field, api_messages

ID_FIELDS = ("node_id", "broker_id", "leader_id")

# (response message, path of the struct) -> why its host/port is not a broker address.
EXEMPT: dict[tuple[str, tuple[str, ...]], str] = {
    ("DescribeAclsResponse", ("resources", "acls")): "an ACL's host pattern, not an address",
    ("DeleteAclsResponse", ("filter_results", "matching_acls")): "an ACL's host pattern",
    ("StreamsGroupHeartbeatResponse", ("partitions_by_user_endpoint", "user_endpoint")):
        "a Kafka Streams application's own endpoint, not a broker",
    ("StreamsGroupDescribeResponse", ("groups", "members", "user_endpoint")):
        "a Kafka Streams application's own endpoint, not a broker",
}


@dataclass(frozen=True)
class AddressField:
    """A struct (reached by `path`) whose host/port belong to the broker `id_path` names."""

    path: tuple[str, ...]  # from the body to the struct holding host and port
    id_level: int  # how many path steps down the id field sits (0: in the body itself)
    id_field: str


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
    """Every broker address struct of a response message at one version."""
    from codec.schema import message

    definition = message(message_name).definition(version)
    if definition is None:
        return ()
    found = []
    for path, ids, names in _walk(definition.fields, version, (), ()):
        if "host" not in names or "port" not in names or (message_name, path) in EXEMPT:
            continue
        if not ids:
            raise LookupError(f"{message_name} v{version} {'.'.join(path)}: host/port without an id")
        level, id_field = ids[-1]
        found.append(AddressField(path, level, id_field))
    return tuple(found)


@cache
def rewritten_api_keys() -> frozenset[int]:
    """Api keys whose responses carry a broker address at some version."""
    keys = set()
    for api_key, (_, response) in api_messages().items():
        if any(address_fields(response.name, v) for v in response.versions):
            keys.add(api_key)
    return frozenset(keys)


Mapper = Callable[[int, str, int], tuple[str, int] | None]


def rewrite_addresses(body: dict[str, Any], fields: tuple[AddressField, ...], mapper: Mapper) -> int:
    """Replace every broker host/port in `body` with mapper(node_id, host, port).

    The mapper returns None to leave an address as it is (e.g. node -1, "no
    coordinator"). Returns how many addresses changed.
    """
    changed = 0
    for field in fields:
        for struct, node_id in _structs(body, field.path, field.id_level, field.id_field, None):
            if node_id is None or node_id < 0:
                continue
            target = mapper(node_id, struct["host"], struct["port"])
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
