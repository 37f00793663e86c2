"""Decoded messages as JSON-ready values (for `kafkalens decode` and debugging)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from codec.errors import DecodeError
from codec.records import iter_batches

HEX_PREFIX_BYTES = 16


def render_bytes(value: memoryview | bytes | bytearray) -> dict[str, Any]:
    """Length plus a short hex prefix: never a whole payload."""
    return {"length": len(value), "hex_prefix": bytes(value[:HEX_PREFIX_BYTES]).hex()}


def render_records(value: memoryview | bytes | bytearray, *, partial_tail: bool) -> dict[str, Any]:
    batches = []
    try:
        for header in iter_batches(value, allow_partial_tail=partial_tail):
            batches.append(
                {
                    "base_offset": header.base_offset,
                    "magic": header.magic,
                    "records": header.record_count,
                    "bytes": header.size,
                    "compression": header.compression,
                    "producer_id": header.producer_id,
                    "producer_epoch": header.producer_epoch,
                    "base_sequence": header.base_sequence,
                    "transactional": header.is_transactional,
                    "control": header.is_control,
                    "base_timestamp": header.base_timestamp,
                    "max_timestamp": header.max_timestamp,
                }
            )
    except DecodeError as exc:
        return {"length": len(value), "batches": batches, "error": str(exc)}
    return {"length": len(value), "batches": batches}


def to_jsonable(value: Any, *, partial_tail: bool = False, key: str = "") -> Any:
    if isinstance(value, dict):
        return {
            k: to_jsonable(v, partial_tail=partial_tail, key=k)
            for k, v in value.items()
            if k != "_explicit_tags"
        }
    if isinstance(value, list | tuple):
        return [to_jsonable(v, partial_tail=partial_tail, key=key) for v in value]
    if isinstance(value, memoryview | bytes | bytearray):
        if key == "records":
            return render_records(value, partial_tail=partial_tail)
        return render_bytes(value)
    if isinstance(value, UUID):
        return str(value)
    return value
