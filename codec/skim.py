"""Skim a response: parse every byte, keep only what a log line needs.

A full decode builds a dict per struct and a list per array; for a Metadata response
with 1,000 partitions that is most of the cost, and a request log needs none of it:
only topic names, group and transactional ids, non-zero error codes, topic ids with
their names, and how many elements the message's own arrays have. Skimming walks the
same layout description with the same checks as decoding (codec/interpreter.py's
`skim`, in C where it was built), so it refuses what decoding refuses, except a string
it does not keep, which it does not decode (bad UTF-8 in a host name passes).

Result: {"topics": [...], "groups": [...], "transactional_ids": [...], "errors": [...],
"topic_ids": [(uuid, name), ...], "counts": {top-level array name: length}}, in the
order the frame holds them.

`Picks.read` skims an answer and also picks a few fields of it (codec.layout.picked):
rows of their values, one per element of the innermost array the paths name, in the
same walk (the C one where built); `rows_of` gives the same rows from a body decoded
whole (a frame decoded as it streamed past, and the reference the tests hold the
picking to).
"""

from __future__ import annotations

from typing import Any

from codec import accel
from codec.errors import DecodeError
from codec.interpreter import COUNTS, ERRORS, GROUPS, ROWS, TOPIC_IDS, TOPICS, TRANSACTIONAL_IDS
from codec.layout import picked
from codec.messages import DEFAULT_POLICY, HeaderPolicy, messages_for
from codec.wire import DEFAULT_ELEMENT_BUDGET

CATEGORIES = (TOPICS, GROUPS, TRANSACTIONAL_IDS, ERRORS, TOPIC_IDS)


def skim_response(
    frame: bytes | memoryview,
    api_key: int,
    api_version: int,
    policy: HeaderPolicy = DEFAULT_POLICY,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response header, what the body says that a log line needs)."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    found: dict[str, Any] = {TOPICS: [], GROUPS: [], TRANSACTIONAL_IDS: [], ERRORS: [], TOPIC_IDS: [], COUNTS: {}}
    try:
        _, header_decoder, body_decoder = policy.plan(api_key, api_version, True)
        header, pos = header_decoder(buf, 0, len(buf), [1])
        body_decoder.skim(buf, pos, len(buf), [DEFAULT_ELEMENT_BUDGET], found)
    except DecodeError as exc:
        raise exc.with_context(api_key=api_key, api_version=api_version, direction="response") from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in a string: {exc.reason}", api_key=api_key,
                          api_version=api_version, direction="response") from None
    return header, found


# Paths of fields to pick: names of nested arrays or structs, then a field's.
Paths = tuple[tuple[str, ...], ...]


class Picks:
    """The fields at `paths` picked from answers (codec.layout.picked): `read` skims an
    answer and picks them, `rows_of` gives the same rows from a body decoded whole. Made
    once, kept (it keeps each api version's decoders)."""

    __slots__ = ("paths", "_plans")

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        # (api key, version) -> (the policy, its header decoder, the picked body's decoder)
        self._plans: dict[tuple[int, int], tuple[HeaderPolicy, accel.Decoder, accel.Decoder]] = {}

    def read(
        self, frame: bytes | memoryview, api_key: int, api_version: int, policy: HeaderPolicy = DEFAULT_POLICY
    ) -> tuple[dict[str, Any], dict[str, Any], list[tuple[Any, ...]]]:
        """(response header, what skim_response finds, the rows of the fields at the
        paths): a tuple per element of the innermost array the paths name, its columns
        in the paths' order (None for a path this version lacks). Refuses what
        skim_response refuses, the same way."""
        buf = frame if isinstance(frame, memoryview) else memoryview(frame)
        found: dict[str, Any] = {
            TOPICS: [], GROUPS: [], TRANSACTIONAL_IDS: [], ERRORS: [], TOPIC_IDS: [], COUNTS: {}, ROWS: [],
        }  # fmt: skip
        try:
            plan = self._plans.get((api_key, api_version))
            if plan is None or plan[0] is not policy:
                plan = self._plan(api_key, api_version, policy)
            header, pos = plan[1](buf, 0, len(buf), [1])
            plan[2].skim(buf, pos, len(buf), [DEFAULT_ELEMENT_BUDGET], found)
        except DecodeError as exc:
            raise exc.with_context(api_key=api_key, api_version=api_version, direction="response") from None
        except UnicodeDecodeError as exc:
            raise DecodeError(f"invalid UTF-8 in a string: {exc.reason}", api_key=api_key,
                              api_version=api_version, direction="response") from None
        return header, found, found.pop(ROWS)

    def _plan(
        self, api_key: int, api_version: int, policy: HeaderPolicy
    ) -> tuple[HeaderPolicy, accel.Decoder, accel.Decoder]:
        """An answer's decoders (UnknownApiError as policy.plan raises it)."""
        _, header_decoder, _ = policy.plan(api_key, api_version, True)
        name = messages_for(api_key, api_version)[1].name
        body = picked(name, policy.body_version(api_key, api_version), self.paths)
        plan = self._plans[(api_key, api_version)] = (policy, header_decoder, accel.decoder(body, policy.pure))
        return plan

    def rows_of(self, body: dict[str, Any]) -> list[tuple[Any, ...]]:
        """read's rows, from a body decoded whole."""
        return rows_of(body, self.paths)


def rows_of(body: dict[str, Any], paths: Paths) -> list[tuple[Any, ...]]:
    """Picks.read's rows, from a body decoded whole."""
    chain = max((path[:-1] for path in paths), key=len)
    rows: list[tuple[Any, ...]] = []
    _rows(body, 0, chain, paths, [None] * len(paths), rows)
    return rows


def _rows(
    struct: dict[str, Any], depth: int, chain: tuple[str, ...], paths: Paths, row: list[Any],
    rows: list[tuple[Any, ...]],
) -> None:
    for index, path in enumerate(paths):
        if len(path) == depth + 1 and path[-1] in struct:
            row[index] = struct[path[-1]]
    if depth == len(chain):
        rows.append(tuple(row))
        return
    inner = struct.get(chain[depth])
    for element in inner if isinstance(inner, list) else () if inner is None else (inner,):
        _rows(element, depth + 1, chain, paths, row, rows)
