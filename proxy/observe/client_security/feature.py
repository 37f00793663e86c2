"""Client security, registered as a feature (`client_security:` in kafkalens.yaml)."""

from __future__ import annotations

from proxy.observe.client_security.config import ClientSecurityConfig
from proxy.observe.client_security.link import client_security_link
from proxy.observe.client_security.metrics import ClientSecurityMetrics
from proxy.observe.feature import Feature


def _summary(section: ClientSecurityConfig) -> list[str]:
    return [f"client TLS versions and SASL mechanisms: {'counted' if section.enabled else 'off'}"]


CLIENT_SECURITY = Feature(
    name="client_security",
    section=ClientSecurityConfig,
    default=ClientSecurityConfig(),
    doc="What clients secure their connections with: open connections by TLS version and"
    " SASL mechanism, and client software (kafkalens_client_security_connections), to"
    " find who still uses SASL PLAIN without TLS, or TLS 1.2, before turning it off.",
    summary=_summary,
    metrics=ClientSecurityMetrics,
    link=client_security_link,
)
