"""The request log's lines: what every line about a request, or a connection, starts with.

A request's line is made one of two ways, to the same bytes:

* as a dict (`request_line`), rendered by the request log (orjson): every line can be
  made so, and every line that is not the usual one is (a first request, an error, a
  link's fields, a decode error, no connection state...);
* from pieces rendered earlier (`compose`), for the usual exchange: a memoised request
  (memo.RequestEntry) and a memoised answer (memo.ResponseEntry, memo.CapEntry). What a
  connection's lines share is rendered when it opens (`connection_head`) and its
  identity when that changes (`identity_fragment`); an entry's fields once, when it is
  made (`fragment`); per line only the correlation id, the sizes, the latency and the
  time are formatted. Rendering a piece is rendering the dict's values with the same
  renderer, so the bytes are the dict's as long as no key comes twice: a dict keeps a
  key where it first came and takes the last value. `key_mask` gives each key a bit, and
  `composable` says when two entries' fields share none (and when fields the identity
  also gives have the identity's values). tests/observe/test_line_pieces.py holds the two ways
  to the same bytes over real clients' captured traffic.
"""

from __future__ import annotations

from typing import Any

from proxy.hooks import ConnectionInfo, Pending
from proxy.observe.chain import ConnState, Token
from proxy.observe.request_log import render, render_object

UNKNOWN = "unknown"  # the api name of an api key the codec does not know

# The identity's fields, in the order every request line has them (Identity.log_fields).
IDENTITY_KEYS = ("client_id", "client_instance_id", "client_software_name", "client_software_version", "principal")
# The keys a request line has of its own, around the request's and response's fields.
LINE_KEYS = frozenset({
    "conn", "listener", "client_address", "api_key", "api", "api_version", "correlation_id",
    "request_bytes", "decode_error", "latency_ms", "response_bytes", "event", "ts",
})  # fmt: skip
# A fields dict with a key of LINE_KEYS is never put together from pieces; past 61
# distinct keys, the rest share one bit (two such dicts then never go together).
CLASH = 1 << 62
_MANY = 1 << 61
_bits: dict[str, int] = {}


def request_line(
    info: ConnectionInfo, pending: Pending, token: Token, state: ConnState | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """A request's line: the connection, the request, who sent it, then `extra` (its
    latency and response size, or why it has none), then the request's own fields."""
    line: dict[str, Any] = {
        "conn": info.conn_id,
        "listener": info.listener,
        "client_address": f"{info.client_host}:{info.client_port}",
        "api_key": pending.api_key,
        "api": token.api,
        "api_version": pending.api_version,
        "correlation_id": pending.correlation_id,
        **(state.log_fields if state else {}),
        "request_bytes": pending.request_size,
    }
    if token.decode_error is not None:
        line["decode_error"] = token.decode_error
    line.update(extra)
    line.update(token.fields)
    return line


def connection_fields(info: ConnectionInfo, state: ConnState) -> dict[str, Any]:
    return {
        "conn": info.conn_id,
        "listener": info.listener,
        "client_address": f"{info.client_host}:{info.client_port}",
        "tls_version": info.tls_version,
        "client_cert_subject": info.client_cert_subject,
        **state.identity.log_fields(),
    }


# -- pieces ----------------------------------------------------------------------------


def fragment(fields: dict[str, Any]) -> bytes:
    """`fields` rendered as a line renders them, without braces, after a comma (empty
    for no fields): pieces go together by concatenation."""
    if not fields:
        return b""
    return b"," + render(fields)[1:-1]


def connection_head(info: ConnectionInfo) -> bytes:
    """What every request line of a connection starts with: `{"conn":...,"client_address":...`."""
    return render({
        "conn": info.conn_id, "listener": info.listener, "client_address": f"{info.client_host}:{info.client_port}",
    })[:-1]  # fmt: skip


def api_head(api_key: int, api: str, api_version: int) -> bytes:
    return fragment({"api_key": api_key, "api": api, "api_version": api_version})


def identity_fragment(log_fields: dict[str, Any]) -> bytes:
    return fragment(log_fields)


def key_mask(keys: Any) -> int:
    """A bit for each key (LINE_KEYS: CLASH). The identity's keys have none: a request's
    fields that the identity also gives are an entry's `overlap`, not its fragment."""
    mask = 0
    for key in keys:
        if key in LINE_KEYS:
            mask |= CLASH
            continue
        bit = _bits.get(key)
        if bit is None:
            bit = _bits[key] = 1 << len(_bits) if len(_bits) < 61 else _MANY
        mask |= bit
    return mask


def request_pieces(fields: dict[str, Any]) -> tuple[bytes, int, tuple[tuple[str, Any], ...]]:
    """A request entry's fragment, mask and overlap (its fields the identity also gives,
    with their values: the line shows the request's value where the identity's goes,
    which is the identity's own once the request was observed)."""
    overlap = tuple((key, fields[key]) for key in IDENTITY_KEYS if key in fields)
    if overlap:
        fields = {key: value for key, value in fields.items() if key not in IDENTITY_KEYS}
    return fragment(fields), key_mask(fields), overlap


def response_pieces(fields: dict[str, Any]) -> tuple[bytes, int]:
    """A response's fields' fragment and mask (the identity's keys clash there)."""
    keys = tuple(fields)
    mask = _response_masks.get(keys)
    if mask is None:
        mask = key_mask(keys)
        if any(key in fields for key in IDENTITY_KEYS):
            mask |= CLASH
        if len(_response_masks) >= 1024:  # the code's sets of keys: a few dozen
            _response_masks.clear()
        _response_masks[keys] = mask
    return fragment(fields), mask


_response_masks: dict[tuple[str, ...], int] = {}


def answer_json(fields: dict[str, Any]) -> tuple[bytes, int]:
    """A response's fields rendered as a JSON object (`{...}`, whose inside is their
    fragment) and their mask: for the C path, which copies the inside into the line.
    The same dict as the last one gives the last rendering: a link's `answered` that
    returns a dict it returned before has not changed it (chain.py; the lag link's
    commits of an idle group)."""
    global _last_answer
    last = _last_answer
    if last is not None and last[0] is fields:
        return last[1]
    keys = tuple(fields)
    mask = _response_masks.get(keys)
    if mask is None:
        mask = response_pieces(fields)[1]
    made = render_object(fields), mask
    _last_answer = (fields, made)  # kept alive: no other dict can have its identity
    return made


_last_answer: tuple[dict[str, Any], tuple[bytes, int]] | None = None


def composable(state: ConnState, request_mask: int, overlap: tuple[tuple[str, Any], ...], response_mask: int) -> bool:
    """Whether a line of these pieces is the dict's, key for key."""
    if request_mask & response_mask or (request_mask | response_mask) & CLASH:
        return False
    if overlap:
        log_fields = state.log_fields
        for key, value in overlap:
            if log_fields.get(key) != value:
                return False
    return True


_LINE = b'%s%s,"correlation_id":%d%s,"request_bytes":%d,"latency_ms":%r,"response_bytes":%d%s%s,"event":"request","ts":"%s"}'


def compose(
    state: ConnState, head: bytes, pending: Pending, request: bytes, latency_ms: float, size: int,
    response: bytes, ts: bytes,
) -> bytes:
    """A request's line from pieces: `head` its api's, `request` and `response` its
    fields' fragments; the rest formatted here."""
    return _LINE % (
        state.line_head, head, pending.correlation_id, state.identity_fragment, pending.request_size,
        latency_ms, size, request, response, ts,
    )  # fmt: skip
