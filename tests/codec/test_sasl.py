"""Principal extraction from SASL tokens, and that secrets never come out."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support.examples import examples

from codec.sasl import MAX_PRINCIPAL_CHARS, sasl_principal

PASSWORD = "Pa55-w0rd-Sekrit!"
PROOF = b"\x8a\x11proof-bytes-\xfe\x00\x7f"
SIGNATURE = "c2lnbmF0dXJlLXNlY3JldC12YWx1ZQ"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", "X"]


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _jwt(claims: object, signature: str = SIGNATURE) -> str:
    header = _b64url(b'{"alg":"RS256","typ":"JWT"}')
    return f"{header}.{_b64url(json.dumps(claims).encode())}.{signature}"


def _oauth(jwt: str, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01host=broker\x01auth=Bearer {jwt}\x01\x01".encode()


def _scram_final(proof: bytes = PROOF) -> bytes:
    return b"c=biws,r=clientnonceservernonce,p=" + base64.b64encode(proof)


def _forms(secret: bytes) -> list[str]:
    """The secret as text, hex and base64 (standard and url-safe, padded or not)."""
    forms = [
        secret.hex(),
        secret.hex().upper(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
    ]
    return forms + [secret.decode("utf-8", "replace")]


def _assert_no_secret(result: str | None, secret: bytes) -> None:
    if result is None:
        return
    for form in _forms(secret):
        if len(form) >= 8:  # a short fragment could match a name by chance
            assert form not in result


# --- PLAIN -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (b"\x00alice\x00" + PASSWORD.encode(), "alice"),
        (b"alice\x00alice\x00pw", "alice"),
        (b"admin\x00alice\x00pw", "alice"),  # Kafka refuses this, but alice is who tried
        ("\x00j\u00f6rg\x00pw".encode(), "j\u00f6rg"),
        (b"\x00bad\xffutf8\x00pw", "bad\ufffdutf8"),
    ],
)
def test_plain_gives_the_authcid(token: bytes, expected: str) -> None:
    assert sasl_principal("PLAIN", token) == expected


@pytest.mark.parametrize(
    "token",
    [b"", b"alice", b"\x00alice", b"\x00\x00pw", b"\x00alice\x00pw\x00", b"a\x00b\x00c\x00d"],
)
def test_plain_malformed_gives_none(token: bytes) -> None:
    assert sasl_principal("PLAIN", token) is None


def test_plain_accepts_memoryview_and_any_mechanism_case() -> None:
    assert sasl_principal("plain", memoryview(b"\x00bob\x00pw")) == "bob"


# --- SCRAM -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL", "alice"),
        (b"n,,n=al=2Cice=3D,r=nonce", "al,ice="),
        (b"n,,n==3D2C,r=nonce", "=2C"),  # decoded once, left to right
        (b"n,a=alice,n=alice,r=nonce", "alice"),
        (b"n,,m=ext,n=alice,r=nonce", "alice"),
        (b"n,,n=token-id,r=nonce,tokenauth=true", "token-id"),
        (b"y,,n=alice,r=nonce", "alice"),
    ],
)
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_first_gives_the_user(mechanism: str, token: bytes, expected: str) -> None:
    assert sasl_principal(mechanism, token) == expected


@pytest.mark.parametrize(
    "token",
    [
        _scram_final(),
        b"n,,n=alice",  # no nonce
        b"n,,n=,r=nonce",  # empty name
        b"n,,n=al=41ice,r=nonce",  # "=" not followed by 2C or 3D
        b"x,,n=alice,r=nonce",  # not a gs2 header
        b"n,b=alice,n=alice,r=nonce",
        b"n,,r=nonce,n=alice",
        b"n,,n=\xff,r=nonce",
    ],
)
def test_scram_without_a_readable_user_gives_none(token: bytes) -> None:
    assert sasl_principal("SCRAM-SHA-256", token) is None


# --- OAUTHBEARER -------------------------------------------------------------------------


def test_oauthbearer_gives_the_sub_claim() -> None:
    assert sasl_principal("OAUTHBEARER", _oauth(_jwt({"sub": "svc-orders", "exp": 1}))) == (
        "svc-orders"
    )


def test_oauthbearer_unsecured_jws_and_authzid() -> None:
    token = _oauth(_jwt({"sub": "alice"}, signature=""), authzid="alice")
    assert sasl_principal("OAUTHBEARER", token) == "alice"


@pytest.mark.parametrize(
    "token",
    [
        _oauth(_jwt({"sub": 42})),
        _oauth(_jwt({"sub": ""})),
        _oauth(_jwt(["sub", "alice"])),
        _oauth(_jwt({"name": "alice"})),
        _oauth("a.b"),
        _oauth("not-base64!.x.y"),
        _oauth("e30.%%%.x"),
        _oauth("a.b.c.d"),
        _oauth("h." + _b64url(b"[" * 100_000) + ".s"),  # too big to parse at all
        _oauth("h." + _b64url(b"[" * 20_000 + b"]" * 20_000) + ".s"),  # too deep
        b"n,,\x01auth=Basic abc\x01\x01",
        b"n,,\x01host=x\x01\x01",
        b"n,,\x01auth=Bearer a.e30.c\x01",  # missing the final separator
        b"y,,\x01auth=Bearer a.e30.c\x01\x01",
        b"",
    ],
)
def test_oauthbearer_without_a_readable_sub_gives_none(token: bytes) -> None:
    assert sasl_principal("OAUTHBEARER", token) is None


# --- other mechanisms, output safety -----------------------------------------------------


@pytest.mark.parametrize("mechanism", ["GSSAPI", "UNKNOWN", ""])
def test_mechanisms_without_a_name_in_the_token(mechanism: str) -> None:
    assert sasl_principal(mechanism, b"\x00alice\x00pw") is None


def test_control_and_format_characters_are_replaced() -> None:
    name = "ali\x1b[31mce\u202e\u2028x y"
    result = sasl_principal("PLAIN", b"\x00" + name.encode() + b"\x00pw")
    assert result == "ali?[31mce??x y"


def test_long_names_are_cut() -> None:
    result = sasl_principal("PLAIN", b"\x00" + b"a" * 5000 + b"\x00pw")
    assert result is not None
    assert len(result) == MAX_PRINCIPAL_CHARS
    assert result.endswith("\u2026")


# --- fuzz: nothing raises, no secret comes out -------------------------------------------

_names = st.text(
    st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1, max_size=40
)


@settings(max_examples=examples(300), deadline=None)
@given(mechanism=st.sampled_from(MECHANISMS), token=st.binary(max_size=300))
def test_any_bytes_give_a_safe_name_or_none(mechanism: str, token: bytes) -> None:
    result = sasl_principal(mechanism, token)
    assert result is None or (len(result) <= MAX_PRINCIPAL_CHARS and result.isprintable())


@settings(max_examples=examples(200), deadline=None)
@given(authzid=st.one_of(st.just(""), _names), authcid=_names)
def test_plain_never_returns_the_password(authzid: str, authcid: str) -> None:
    assume(not any(form in authcid for form in _forms(PASSWORD.encode())))
    token = f"{authzid}\x00{authcid}\x00{PASSWORD}".encode()
    result = sasl_principal("PLAIN", token)
    assert result is not None
    _assert_no_secret(result, PASSWORD.encode())


def _mutate(token: bytes, data: st.DataObject) -> bytes:
    """One byte replaced, inserted or deleted."""
    pos = data.draw(st.integers(0, len(token)))
    byte = bytes([data.draw(st.integers(0, 255))])
    kind = data.draw(st.sampled_from(["replace", "insert", "delete"]))
    if kind == "insert":
        return token[:pos] + byte + token[pos:]
    cut = token[:pos] + (byte if kind == "replace" else b"") + token[pos + 1 :]
    return cut


@pytest.mark.slow
@settings(max_examples=examples(400), deadline=None)
@given(data=st.data())
def test_mutated_secret_bearing_tokens_never_leak(data: st.DataObject) -> None:
    cases = [
        ("PLAIN", b"\x00alice\x00" + PASSWORD.encode(), PASSWORD.encode()),
        ("SCRAM-SHA-256", _scram_final(), PROOF),
        ("OAUTHBEARER", _oauth(_jwt({"sub": "alice"})), SIGNATURE.encode()),
    ]
    mechanism, token, secret = data.draw(st.sampled_from(cases))
    mutated = _mutate(token, data)
    _assert_no_secret(sasl_principal(mechanism, mutated), secret)
    if mechanism == "OAUTHBEARER":
        _assert_no_secret(sasl_principal(mechanism, mutated), _jwt({"sub": "alice"}).encode())


def test_the_whole_bearer_token_never_comes_out() -> None:
    jwt = _jwt({"sub": "alice"})
    result = sasl_principal("OAUTHBEARER", _oauth(jwt))
    assert result == "alice"
    assert jwt not in result and SIGNATURE not in result
