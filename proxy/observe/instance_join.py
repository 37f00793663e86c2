"""A client's instance id on its other connections (KIP-714 joins).

A client asks for its telemetry subscription on one connection, but it has several
(bootstrap, each broker, the group coordinator). A connection that learnt an
instance id (from telemetry or a KIP-1313 header) publishes it under the client's
(address, client id, software name, software version); a connection of the same
client that has none of its own takes it from there. A key two different ids were
published under is ambiguous (two instances of one program on one host with the same
client id) and joins nothing. Per process: with `workers: N` a client's connections
on other workers are not joined.
"""

from __future__ import annotations

from collections import OrderedDict

JoinKey = tuple[str, str, str | None, str | None]
AMBIGUOUS = ""


class InstanceJoins:
    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        self._ids: OrderedDict[JoinKey, str] = OrderedDict()
        self.version = 0  # bumped on every change: connections re-ask only then

    def publish(self, key: JoinKey, instance_id: str) -> None:
        known = self._ids.get(key)
        if known in (instance_id, AMBIGUOUS):
            return
        self._ids[key] = instance_id if known is None else AMBIGUOUS
        self._ids.move_to_end(key)
        while len(self._ids) > self.max_keys:  # the oldest go first
            self._ids.popitem(last=False)
        self.version += 1

    def lookup(self, key: JoinKey) -> str | None:
        return self._ids.get(key) or None
