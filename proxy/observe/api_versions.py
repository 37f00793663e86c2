"""Cap a broker's ApiVersions answer to what the codec can decode.

A client then never picks a version the proxy cannot read. A range is only ever
narrowed from the top: raising a minimum would break clients that need it.
"""

from __future__ import annotations

import struct

from codec import ApiKey, DecodeError, HeaderPolicy, Response, decode_response, encode_response
from codec.error_codes import UNSUPPORTED_VERSION
from codec.schema import api_messages

# Plain ints named by ApiKey: an int compared with an IntEnum member misses CPython's
# int fast path (proxy/exchange/kafka.py says what it cost).
PRODUCE = int(ApiKey.PRODUCE)
FETCH = int(ApiKey.FETCH)
API_VERSIONS = int(ApiKey.API_VERSIONS)
# Kafka 4 brokers list Produce v0-2 in their ApiVersions answer but refuse them: Kafka's
# own ProduceRequest.json says so (KAFKA-18659, for old librdkafka that will not talk to
# a broker whose Produce starts above v0). Such a broker is known by its Fetch range,
# which starts at v4 since KIP-896 (Kafka 4.0) removed v0-3.
_LISTED_BUT_REFUSED: dict[int, int] = {PRODUCE: 3}
_KIP896_FETCH_MIN = 4
_ERROR_CODE = struct.Struct(">h")


def response_version(frame: memoryview, request_version: int) -> int:
    """KIP-511: to a version it does not know the broker answers with a v0 body and
    UNSUPPORTED_VERSION; the error code sits at a fixed offset in every version."""
    if len(frame) >= 6 and _ERROR_CODE.unpack_from(frame, 4)[0] == UNSUPPORTED_VERSION:
        return 0
    return request_version


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
    broker_ranges: dict[int, tuple[int, int]] | None = None,
) -> tuple[bytes | None, Response | None]:
    """(the rewritten frame or None to forward the original, the decoded response).
    `added`: ranges of apis the proxy answers itself, listed when the broker lacks them;
    `broker_ranges`, if given, gets the broker's own (min, max) version of each api it
    listed (not capped)."""
    version = response_version(frame, request_version)
    if not policy.knows(API_VERSIONS, version):
        return None, None
    try:
        response = decode_response(frame, API_VERSIONS, version, policy)
    except DecodeError:
        return None, None
    original = response.body.get("api_keys") or []
    if broker_ranges is not None and response.body.get("error_code") == 0:
        broker_ranges.update((e["api_key"], (e["min_version"], e["max_version"])) for e in original)
    capped = capped_ranges(original, policy)
    present = {entry["api_key"] for entry in capped}
    for entry in added:
        if entry["api_key"] not in present and response.body.get("error_code") == 0:
            capped.append({**_template(original), **entry})
    if capped == original:
        return None, response
    response.body["api_keys"] = capped
    return encode_response(response, policy), response


def unreadable_version_body() -> dict[str, object]:
    """The v0 body of KIP-511's answer to an ApiVersions version one cannot read:
    UNSUPPORTED_VERSION and the ApiVersions range one reads (the codec's)."""
    request, _ = api_messages()[API_VERSIONS]
    newest = request.max_version
    return {
        "error_code": UNSUPPORTED_VERSION,
        "api_keys": [{"api_key": API_VERSIONS, "min_version": min(request.versions), "max_version": newest}],
    }


def refused_version(ranges: dict[int, tuple[int, int]] | None, api_key: int, version: int) -> bool:
    """Whether a broker with these ApiVersions `ranges` refuses `version` of `api_key`:
    outside the range it listed (or not listed at all), or listed but refused by Kafka 4
    (Produce v0-2). A broker refuses such a request by closing the connection, with
    no answer (Apache Kafka 4.x logs an UnsupportedVersionException)."""
    if not ranges:
        return False
    listed = ranges.get(api_key)
    if listed is None or not listed[0] <= version <= listed[1]:
        return True
    floor = _LISTED_BUT_REFUSED.get(api_key)
    fetch = ranges.get(FETCH)
    return floor is not None and version < floor and fetch is not None and fetch[0] >= _KIP896_FETCH_MIN
