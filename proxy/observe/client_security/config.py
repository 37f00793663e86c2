"""The client_security slice's config section, `client_security:` in kafkalens.yaml."""

from __future__ import annotations

from proxy.config.language import config_section, flag


@config_section
class ClientSecurityConfig:
    enabled: bool = flag(
        default=True,
        doc="count open client connections by TLS version and SASL mechanism"
        " (kafkalens_client_security_connections); off: the family has no series",
    )
