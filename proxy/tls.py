"""TLS contexts: termination of client connections, origination to the brokers.

TLS 1.2 is the floor on both sides whatever the configuration says; `min_version`
can only raise it. Broker certificates and host names are checked by default.
"""

from __future__ import annotations

import asyncio
import ssl

from proxy.config import ListenerTLS, UpstreamTLS

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# RFC 4514 short names of the usual subject attributes.
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "emailAddress",
}


def server_context(tls: ListenerTLS) -> ssl.SSLContext:
    """Terminates client TLS on a listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[tls.min_version]
    ctx.load_cert_chain(tls.cert, tls.key)
    if tls.client_ca:
        ctx.load_verify_locations(cafile=tls.client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_context(tls: UpstreamTLS) -> ssl.SSLContext:
    """Originates TLS to the brokers."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = _VERSIONS[tls.min_version]
    if tls.ca:
        ctx.load_verify_locations(cafile=tls.ca)
    else:
        ctx.load_default_certs()
    if tls.cert and tls.key:
        ctx.load_cert_chain(tls.cert, tls.key)
    ctx.check_hostname = tls.check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def describe_peer(transport: asyncio.BaseTransport) -> tuple[str | None, str | None]:
    """(TLS version, client certificate subject) of a connection; Nones for plaintext."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None, None
    cert = ssl_object.getpeercert()
    return ssl_object.version(), subject_string(cert) if cert else None


def subject_string(cert: dict[str, object]) -> str | None:
    """A certificate's subject as "CN=client,O=Example" (attributes in their cert order)."""
    subject = cert.get("subject")
    if not isinstance(subject, tuple):
        return None
    parts = [f"{_SHORT_NAMES.get(name, name)}={value}" for rdn in subject for name, value in rdn]
    return ",".join(parts) or None
