"""The raw SASL token phase that follows a SaslHandshake v0.

After a successful SaslHandshake v0 the client sends SASL tokens as bare
length-prefixed frames (no Kafka request header) and the broker answers each with a
bare length-prefixed token. SaslHandshake v1 and later use SaslAuthenticate
requests instead, which are ordinary requests. The proxy must not read request
headers or match responses during the raw phase, so it has to know when it ends:

* PLAIN and OAUTHBEARER: after one client token.
* SCRAM-SHA-256 / SCRAM-SHA-512: after two client tokens (client-first, client-final).
* GSSAPI and anything else: the number of rounds is not fixed, so the phase ends at
  the first client frame that reads as a plausible request header: api key 0..100,
  version 0..20, and a client id length of -1 or one that fits in the frame. GSSAPI
  tokens start 0x60 (the initial token's ASN.1 tag), 0x0404 or 0x0504 (RFC 4121
  wrap/MIC tokens), i.e. api keys 24576, 1028 and 1284, so they never pass.

The broker's tokens are told apart from responses by the phase alone: while it is
active every broker frame is a token; when a counted phase ends, the broker still
owes a token for each client token it has not answered (`replies_due`).
"""

from __future__ import annotations

import struct

from codec import ApiKey

# Plain ints named by ApiKey: an int compared with an IntEnum member misses CPython's
# int fast path (proxy/exchange/kafka.py says what it cost).
SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)
API_VERSIONS = int(ApiKey.API_VERSIONS)
# Requests a client may send before it has authenticated.
AUTH_APIS = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))

_INT16 = struct.Struct(">h")
_REQUEST_PREFIX = struct.Struct(">hhih")  # api key, version, correlation id, client id length
MIN_PLAUSIBLE_HEAD = _REQUEST_PREFIX.size
_MAX_API_KEY = 100
_MAX_API_VERSION = 20


def client_token_count(mechanism: str | None) -> int | None:
    """Client tokens in a successful exchange, or None when not fixed (heuristic end)."""
    if mechanism in ("PLAIN", "OAUTHBEARER"):
        return 1
    if mechanism is not None and mechanism.startswith("SCRAM-"):
        return 2
    return None


class RawSaslPhase:
    """Counts the client's raw tokens until the phase ends."""

    __slots__ = ("mechanism", "tokens_left")

    def __init__(self, mechanism: str | None) -> None:
        self.mechanism = mechanism
        self.tokens_left = client_token_count(mechanism)

    def next_frame(self, head: bytes | memoryview, size: int) -> bool | None:
        """The client's next frame (first bytes `head`, `size` long): None if it is a
        request again (the phase is over), else whether it is a counted token, one the
        broker answers."""
        if self.tokens_left is None:
            return None if looks_like_request(head, size) else False
        self.tokens_left -= 1
        return True

    @property
    def over(self) -> bool:
        """Every counted token went: the next frame is a request."""
        return self.tokens_left is not None and self.tokens_left <= 0


def looks_like_request(head: bytes | memoryview, size: int) -> bool:
    """Whether a client frame (first bytes `head`, `size` long) is a request header."""
    if size < MIN_PLAUSIBLE_HEAD or len(head) < MIN_PLAUSIBLE_HEAD:
        return False
    api_key, version, _corr, client_id_len = _REQUEST_PREFIX.unpack_from(head, 0)
    return (
        0 <= api_key <= _MAX_API_KEY
        and 0 <= version <= _MAX_API_VERSION
        and -1 <= client_id_len <= size - MIN_PLAUSIBLE_HEAD
    )


def handshake_mechanism(frame: bytes | memoryview) -> str | None:
    """The mechanism a SaslHandshake request (header v1, body v0/v1) asks for."""
    try:
        (client_id_len,) = _INT16.unpack_from(frame, 8)
        pos = 10 + max(client_id_len, 0)
        (mech_len,) = _INT16.unpack_from(frame, pos)
    except struct.error:
        return None
    if mech_len < 0 or pos + 2 + mech_len > len(frame):
        return None
    return bytes(frame[pos + 2 : pos + 2 + mech_len]).decode("utf-8", "replace")


def handshake_succeeded(response_head: bytes | memoryview) -> bool:
    """A SaslHandshake response (header v0) whose error code is NONE."""
    if len(response_head) < 6:
        return False
    return bool(_INT16.unpack_from(response_head, 4)[0] == 0)
