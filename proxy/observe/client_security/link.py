"""Which TLS version and SASL mechanism each client connection uses, a link of the
observers' chain (observe/chain.py) that reads no request: it follows each connection's
identity (its SaslHandshake's mechanism, its software from ApiVersions) and moves the
connection between the series of kafkalens_client_security_connections as they become
known, until it closes. Every label value is bounded: TLS versions are the proxy's
own (it accepts TLSv1.2 and TLSv1.3), mechanisms Kafka's five (any other is "other"),
software the core's capped pair (kafkalens_connections' labels)."""

from __future__ import annotations

from typing import Any

from proxy.hooks import ConnectionInfo
from proxy.observe.chain import ConnState, Observer, Shared
from proxy.observe.client_security.config import ClientSecurityConfig
from proxy.observe.client_security.metrics import ClientSecurityMetrics

NONE, OTHER, UNKNOWN = "none", "other", "unknown"
# The mechanisms Kafka implements (KIP-43, KIP-84, KIP-255); anything else a client
# names is one label value, "other".
MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"})
TLS_VERSIONS = frozenset({"TLSv1.2", "TLSv1.3"})

Labels = tuple[str, str, str, str]


class Counted:
    """A connection's own state: the series it is counted in (None: not yet)."""

    __slots__ = ("labels",)

    def __init__(self) -> None:
        self.labels: Labels | None = None


class ClientSecurityLink(Observer):
    def __init__(self, config: ClientSecurityConfig, shared: Shared) -> None:
        self.connections = shared.metrics.of(ClientSecurityMetrics).connections

    def new_state(self) -> Counted:
        return Counted()

    def identity_changed(self, info: ConnectionInfo, state: ConnState) -> None:
        counted: Counted = state.kept[self]
        labels = self.labels(info, state)
        if labels == counted.labels:
            return
        if counted.labels is not None:
            self.connections.labels(*counted.labels).dec()
        self.connections.labels(*labels).inc()
        counted.labels = labels

    def connection_closed(self, info: ConnectionInfo, state: ConnState) -> None:
        counted: Counted = state.kept[self]
        if counted.labels is not None:
            self.connections.labels(*counted.labels).dec()
            counted.labels = None

    @staticmethod
    def labels(info: ConnectionInfo, state: ConnState) -> Labels:
        tls = info.tls_version or NONE
        mechanism: Any = state.identity.sasl_mechanism
        software = info.metrics.software if info.metrics is not None else (UNKNOWN, UNKNOWN)
        return (
            tls if tls in TLS_VERSIONS or tls == NONE else OTHER,
            NONE if mechanism is None else mechanism if mechanism in MECHANISMS else OTHER,
            software[0],
            software[1],
        )


def client_security_link(config: ClientSecurityConfig, shared: Shared) -> ClientSecurityLink | None:
    return ClientSecurityLink(config, shared) if config.enabled else None
