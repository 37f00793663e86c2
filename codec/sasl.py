"""Who is logging in: the principal name in SASL client tokens, and nothing else.

The input is the ``auth_bytes`` of a SaslAuthenticate request (or a raw SASL token sent
after SaslHandshake v0) and the mechanism the client asked for in SaslHandshake. The
output is a name for logs. Passwords, SCRAM proofs and bearer tokens never leave this
module: they are not returned, not put in exceptions (nothing is raised at all) and not
kept anywhere. Every name is client-controlled, so it is cut to `MAX_PRINCIPAL_CHARS` and
stripped of control and format characters before it is returned.

Formats follow Kafka's server side (PlainSaslServer, ScramMessages.ClientFirstMessage,
OAuthBearerClientInitialResponse), a little more lenient where that only costs a log line.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable

MAX_PRINCIPAL_CHARS = 256
# Far above any real client-first token (a JWT is a few KiB); anything bigger is not worth
# parsing for a log line, and the cap bounds the work of json.loads below.
_MAX_TOKEN_BYTES = 64 * 1024

_SASLNAME_ESCAPE = re.compile(r"=(2C|3D)")
_BAD_SASLNAME_ESCAPE = re.compile(r"=(?!2C|3D)")
# Kafka's AUTH_PATTERN: scheme, spaces, then a token in the base64url/JWS alphabet.
_BEARER = re.compile(r"(\w+) +([-_~+/.a-zA-Z0-9]+=*)")


def sasl_principal(mechanism: str, token: bytes | memoryview) -> str | None:
    """The principal a client claims in `token`, or None if there is none to read.

    PLAIN gives the authcid (Kafka authenticates as the username and rejects an authzid
    that differs from it), a SCRAM client-first message the decoded ``n=`` username, and
    OAUTHBEARER the ``sub`` claim of the JWT payload (unverified: the broker checks it).
    SCRAM client-final messages, GSSAPI, unknown mechanisms and malformed tokens give None.
    """
    extract = _EXTRACTORS.get(mechanism.upper())
    if extract is None or len(token) > _MAX_TOKEN_BYTES:
        return None
    try:
        name = extract(bytes(token))
    except (ValueError, RecursionError):
        # Bad UTF-8, base64 or JSON (all ValueError), or JSON nested too deep. Swallowed
        # whole: the exception text could quote the secret.
        return None
    return None if name is None else _safe(name)


def _plain(token: bytes) -> str | None:
    # [authzid] NUL authcid NUL passwd; like Kafka, any other number of parts is invalid.
    parts = token.split(b"\x00", 3)
    if len(parts) != 3 or not parts[1]:
        return None
    return parts[1].decode("utf-8", "replace")


def _scram(token: bytes) -> str | None:
    # client-first: gs2-cbind-flag "," [a=authzid] "," [m=reserved ","] n=name "," r=nonce ...
    # A client-final message starts "c=" and so falls out here: the proof is never read.
    fields = token.decode("utf-8").split(",")
    if len(fields) < 4 or not _is_gs2_flag(fields[0]):
        return None
    if fields[1] and not fields[1].startswith("a="):
        return None
    i = 3 if fields[2].startswith("m=") else 2
    if i + 1 >= len(fields) or not fields[i].startswith("n=") or not fields[i + 1].startswith("r="):
        return None
    return _unescape_saslname(fields[i][2:])


def _is_gs2_flag(flag: str) -> bool:
    # Kafka itself accepts only "n" (no channel binding); "y" and "p=..." are valid SCRAM
    # and still name the user, which is what a log line wants.
    return flag in ("n", "y") or flag.startswith("p=")


def _unescape_saslname(name: str) -> str | None:
    # RFC 5802: "," and "=" travel as "=2C" and "=3D"; any other "=" is malformed.
    if not name or _BAD_SASLNAME_ESCAPE.search(name):
        return None
    return _SASLNAME_ESCAPE.sub(lambda m: "," if m[1] == "2C" else "=", name)


def _oauthbearer(token: bytes) -> str | None:
    # gs2-header \x01 *(key "=" value \x01) \x01, e.g. "n,,\x01auth=Bearer <jwt>\x01\x01".
    text = token.decode("utf-8")
    header, sep, body = text.partition("\x01")
    if not sep or not _is_oauth_gs2_header(header) or not body.endswith("\x01"):
        return None
    pairs = body[:-1].split("\x01")
    if pairs[-1] != "":
        return None
    auth = _auth_value(pairs[:-1])
    match = _BEARER.fullmatch(auth) if auth is not None else None
    if match is None or match[1].lower() != "bearer":
        return None
    return _jwt_subject(match[2])


def _is_oauth_gs2_header(header: str) -> bool:
    # "n," [a=authzid] ","  -- the header proper ends with the comma before the first \x01.
    parts = header.split(",")
    return (
        len(parts) == 3
        and parts[0] == "n"
        and parts[2] == ""
        and (parts[1] == "" or parts[1].startswith("a="))
    )


def _auth_value(pairs: list[str]) -> str | None:
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            return None
        if key == "auth":
            return value
    return None


def _jwt_subject(jwt: str) -> str | None:
    # JWS compact form: header.payload.signature (the signature is empty when unsecured).
    parts = jwt.split(".")
    if len(parts) != 3:
        return None
    padded = parts[1] + "=" * (-len(parts[1]) % 4)
    claims = json.loads(base64.b64decode(padded, altchars=b"-_", validate=True))
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) and subject else None


def _safe(name: str) -> str:
    """Cut to MAX_PRINCIPAL_CHARS and replace what could forge or garble a log line."""
    if len(name) > MAX_PRINCIPAL_CHARS:
        name = name[: MAX_PRINCIPAL_CHARS - 1] + "\u2026"
    # isprintable() is False for control, format (bidi overrides), separator (line and
    # paragraph breaks) and unassigned characters; the ASCII space is kept.
    return "".join(ch if ch.isprintable() else "?" for ch in name)


_EXTRACTORS: dict[str, Callable[[bytes], str | None]] = {
    "PLAIN": _plain,
    "SCRAM-SHA-256": _scram,
    "SCRAM-SHA-512": _scram,
    "OAUTHBEARER": _oauthbearer,
}
