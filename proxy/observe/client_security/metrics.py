"""The client_security slice's metric, defined on the proxy's registry by
`Metrics.of(ClientSecurityMetrics)`."""

from __future__ import annotations

from proxy.metrics import Metrics

LABELS = ("tls_version", "sasl_mechanism", "client_software_name", "client_software_version")


class ClientSecurityMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.connections = metrics.gauge(
            "kafkalens_client_security_connections",
            "Open client connections by the TLS version the client negotiated with the proxy"
            ' ("none": plaintext) and the SASL mechanism it asked for ("none": no SASL yet or'
            ' at all; "other": one Kafka does not name), and its software (KIP-511, capped as'
            " kafkalens_connections'). SASL PLAIN without TLS sends passwords in clear.",
            LABELS,
        )
