"""Cap a broker's ApiVersions answer to what the codec can decode.

A client then never picks a version the proxy cannot read. A range is only ever
narrowed from the top: raising a minimum would break clients that need it.

A client newer than the codec asks ApiVersions itself at a version the codec cannot
read (the Java client 4.4 sends v5 to a codec that knows v4): its answer cannot be
capped, and the client would go on to use versions the proxy cannot read, such as a
Produce whose responses name brokers a gateway must rewrite (KIP-951's leader
endpoints), and so go round the gateway. Such an answer is replaced by the one a broker
gives to an ApiVersions version it does not know (KIP-511): UNSUPPORTED_VERSION with the
ApiVersions versions it reads, at which the client asks again.
"""

from __future__ import annotations

import struct

from codec import DecodeError, HeaderPolicy, Response, decode_response, encode_response
from codec.error_codes import UNSUPPORTED_VERSION
from codec.schema import api_messages

API_VERSIONS = 18
_ERROR_CODE = struct.Struct(">h")


def response_version(frame: memoryview, request_version: int) -> int:
    """KIP-511: to a version it does not know the broker answers with a v0 body and
    UNSUPPORTED_VERSION; the error code sits at a fixed offset in every version."""
    if len(frame) >= 6 and _ERROR_CODE.unpack_from(frame, 4)[0] == UNSUPPORTED_VERSION:
        return 0
    return request_version


def unsupported_version(frame: memoryview) -> bytes:
    """A v0 ApiVersions answer (header v0: the correlation id) of UNSUPPORTED_VERSION,
    listing the ApiVersions versions the codec reads."""
    return bytes(frame[:4]) + _UNSUPPORTED.pack(UNSUPPORTED_VERSION, 1, API_VERSIONS, 0, _NEWEST[API_VERSIONS])


_UNSUPPORTED = struct.Struct(">hihhh")  # error code, one api_keys entry: key, min, max


def capped_ranges(api_keys: list[dict[str, int]], policy: HeaderPolicy) -> list[dict[str, int]]:
    capped = []
    for entry in api_keys:
        key, low, high = entry["api_key"], entry["min_version"], entry["max_version"]
        high = _max_known(policy, key, high)
        if high >= low:
            capped.append({**entry, "max_version": high})
    return capped


def _max_known(policy: HeaderPolicy, api_key: int, high: int) -> int:
    newest = _NEWEST.get(api_key)
    if newest is None:
        return -1
    if high > newest and policy.header_v3:
        for version in range(high, newest, -1):  # versions declared past the schema's newest
            if policy.declares_v3(api_key, version):
                return version
    return min(high, newest)


def _template(entries: list[dict[str, int]]) -> dict[str, int]:
    """An entry's other fields (tagged fields of flexible versions), from the broker's."""
    return dict(entries[0]) if entries else {}


_NEWEST = {key: request.max_version for key, (request, _) in api_messages().items()}


def cap_api_versions(
    frame: memoryview,
    request_version: int,
    policy: HeaderPolicy,
    added: tuple[dict[str, int], ...] = (),
    broker_apis: set[int] | None = None,
) -> tuple[bytes | None, Response | None]:
    """(the rewritten frame or None to forward the original, the decoded response).
    `added`: ranges of apis the proxy answers itself, listed when the broker lacks them;
    `broker_apis`, if given, gets the api keys the broker listed."""
    version = response_version(frame, request_version)
    if not policy.knows(API_VERSIONS, version):
        return unsupported_version(frame), None
    try:
        response = decode_response(frame, API_VERSIONS, version, policy)
    except DecodeError:
        return None, None
    original = response.body.get("api_keys") or []
    if broker_apis is not None:
        broker_apis.update(entry["api_key"] for entry in original)
    capped = capped_ranges(original, policy)
    present = {entry["api_key"] for entry in capped}
    for entry in added:
        if entry["api_key"] not in present and response.body.get("error_code") == 0:
            capped.append({**_template(original), **entry})
    if capped == original:
        return None, response
    response.body["api_keys"] = capped
    return encode_response(response, policy), response
