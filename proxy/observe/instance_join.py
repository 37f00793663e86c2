"""A client's instance id on its other connections (KIP-714 joins).

A client asks for its telemetry subscription on one connection, but it has several
(bootstrap, each broker, the group coordinator). A connection that learnt an
instance id (from telemetry or a KIP-1313 header) publishes it under the client's
(address, client id, software name, software version); a connection of the same
client that has none of its own takes it from there, at once if it is known, else
when it is published (connections wait under their key, so a publication touches
only the connections of that client). A key two different ids were published under
is ambiguous (two instances of one program on one host with the same client id) and
joins nothing from then on. Per process: with `workers: N` a client's connections on
other workers are not joined.
"""

from __future__ import annotations

from collections import OrderedDict

JoinKey = tuple[str, str, str | None, str | None]
AMBIGUOUS = ""


class InstanceJoins:
    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        self._ids: OrderedDict[JoinKey, str] = OrderedDict()
        # connections without an id, by key: at most one entry per open connection
        self._waiting: dict[JoinKey, set[str]] = {}

    def publish(self, key: JoinKey, instance_id: str) -> set[str]:
        """`instance_id` is `key`'s; the waiting connections that may now take it."""
        known = self._ids.get(key)
        if known in (instance_id, AMBIGUOUS):
            return set()
        self._ids[key] = instance_id if known is None else AMBIGUOUS
        self._ids.move_to_end(key)
        while len(self._ids) > self.max_keys:  # the oldest go first
            self._ids.popitem(last=False)
        return self._waiting.pop(key, set()) if known is None else set()

    def lookup(self, key: JoinKey) -> str | None:
        return self._ids.get(key) or None

    def wait(self, conn_id: str, key: JoinKey) -> str | None:
        """The id known for `key` now; else `conn_id` waits for one."""
        found = self.lookup(key)
        if found is None:
            self._waiting.setdefault(key, set()).add(conn_id)
        return found

    def leave(self, conn_id: str, key: JoinKey) -> None:
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.discard(conn_id)
            if not waiting:
                del self._waiting[key]
