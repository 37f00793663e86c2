"""The error-code table: spot checks against Kafka's Errors.java and internal consistency."""

from __future__ import annotations

import pytest

from codec import error_codes
from codec.error_codes import ERROR_CODES, INVALID_REQUEST, UNSUPPORTED_VERSION, error_name


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (-1, "UNKNOWN_SERVER_ERROR"),
        (0, "NONE"),
        (1, "OFFSET_OUT_OF_RANGE"),
        (3, "UNKNOWN_TOPIC_OR_PARTITION"),
        (6, "NOT_LEADER_OR_FOLLOWER"),
        (35, "UNSUPPORTED_VERSION"),
        (42, "INVALID_REQUEST"),
        (58, "SASL_AUTHENTICATION_FAILED"),
        (100, "UNKNOWN_TOPIC_ID"),
        (110, "FENCED_MEMBER_EPOCH"),
        (119, "INVALID_REGISTRATION"),
        (120, "TRANSACTION_ABORTABLE"),
        (129, "REBOOTSTRAP_REQUIRED"),
        (130, "STREAMS_INVALID_TOPOLOGY"),
        (133, "SHARE_SESSION_LIMIT_REACHED"),
    ],
)
def test_known_codes(code: int, name: str) -> None:
    assert error_name(code) == name
    assert ERROR_CODES[code] == name


def test_constants_match_the_table() -> None:
    assert ERROR_CODES[INVALID_REQUEST] == "INVALID_REQUEST"
    assert ERROR_CODES[UNSUPPORTED_VERSION] == "UNSUPPORTED_VERSION"
    assert ERROR_CODES[error_codes.NONE] == "NONE"


@pytest.mark.parametrize("code", [-2, 134, 999, 32767, -32768])
def test_unknown_codes_get_a_stable_name(code: int) -> None:
    assert error_name(code) == f"UNKNOWN_ERROR_{code}"


def test_codes_are_unique_and_contiguous() -> None:
    # A code listed twice would be silently overwritten when the dict is built.
    assert len(error_codes._TABLE) == len(ERROR_CODES)
    assert sorted(ERROR_CODES) == list(range(-1, 134))


def test_names_are_unique_upper_snake_case() -> None:
    names = list(ERROR_CODES.values())
    assert len(set(names)) == len(names)
    assert all(name.isupper() and " " not in name for name in names)
