"""Instance-id joins as the request log's hooks apply them: a connection without a
KIP-714 id of its own takes the one another connection of the same client has
(instance_join.py). The connections' states are looked up in `states`, the registry of
open connections the hooks keep; whose identity a join changed is returned, for the
hooks to publish it."""

from __future__ import annotations

from proxy.hooks import ConnectionInfo
from proxy.observe.chain import ConnState
from proxy.observe.instance_join import InstanceJoins


class Joining:
    def __init__(self, joins: InstanceJoins, states: dict[str, ConnState]) -> None:
        self.joins = joins
        self.states = states

    def update(self, info: ConnectionInfo, state: ConnState) -> list[ConnState]:
        """After an identity change: publish this connection's own instance id to the
        client's other connections, or wait for (or take) one. Returns the connections
        that took an id (this one, or the client's others)."""
        identity = state.identity
        taken: list[ConnState] = []
        key = None
        if identity.client_id is not None:
            key = (info.client_host, identity.client_id, identity.client_software_name, identity.client_software_version)
        if identity.client_instance_id is not None:
            if state.joined:
                return taken
            self.stop_waiting(info, state)
            if key is not None:
                for conn_id in self.joins.publish(key, identity.client_instance_id):
                    other = self.states.get(conn_id)
                    if other is not None and other.info is not None and other.identity.client_instance_id is None:
                        self._take(other.info, other, identity.client_instance_id)
                        taken.append(other)
        elif state.joinable and key != state.join_key:
            self.stop_waiting(info, state)
            if key is not None:
                state.join_key = key
                found = self.joins.wait(info.conn_id, key)
                if found is not None:
                    self._take(info, state, found)
                    taken.append(state)
        return taken

    def _take(self, info: ConnectionInfo, state: ConnState, instance_id: str) -> None:
        self.stop_waiting(info, state)
        state.identity.client_instance_id = instance_id
        state.joined = True

    def unjoin(self, info: ConnectionInfo, state: ConnState) -> None:
        """A connection about to learn its own instance id drops one it joined (and joins
        no more)."""
        state.joinable = False
        self.stop_waiting(info, state)
        if state.joined:
            state.joined = False
            state.identity.client_instance_id = None

    def stop_waiting(self, info: ConnectionInfo, state: ConnState) -> None:
        if state.join_key is not None:
            self.joins.leave(info.conn_id, state.join_key)
            state.join_key = None
