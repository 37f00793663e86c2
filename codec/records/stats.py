"""A cheap summary of a records field for logs and metrics: headers only."""

from __future__ import annotations

from dataclasses import dataclass, field

from codec import accel
from codec.records.batch import COMPRESSION_NAMES, BatchHeader
from codec.records.batch import layout as batch_layout
from codec.records.common import DEFAULT_MAX_BYTES, Buffer, as_view, error
from codec.records.framing import iter_batches
from codec.records.legacy import layout as legacy_layout


@dataclass(slots=True)
class RecordStats:
    """What the batch headers of a records field say, without decompressing.

    records counts what headers state; legacy compressed wrappers do not state it and
    are counted in unknown_count_batches instead. Timestamps are -1 when no batch has
    one; min_timestamp is the smallest first-record timestamp (a record inside may be
    older: v2 deltas can be negative). producer_id/epoch are the first batch's that is
    not -1. bytes excludes a tolerated partial tail, which truncated_bytes counts.
    next_offset is one past the last offset any whole batch holds (-1: no batch): where
    a consumer that read these records goes on from.
    """

    batches: int = 0
    records: int = 0
    unknown_count_batches: int = 0
    bytes: int = 0
    truncated_bytes: int = 0
    compressions: set[str] = field(default_factory=set)
    producer_id: int = -1
    producer_epoch: int = -1
    transactional: bool = False
    control_batches: int = 0
    min_timestamp: int = -1
    max_timestamp: int = -1
    next_offset: int = -1


# The same walk in C (codec/_accel.c), reading the layouts batch.py and legacy.py describe:
# None where the extension is not built. summarize runs it when the codec runs C
# (accel.ACTIVE): the biggest saving on a Produce or Fetch of a few records
# (bench/PROFILE.md, "Produce and Fetch of a few records").
C_SUMMARIZE = accel.records_summarizer(
    RecordStats, error, COMPRESSION_NAMES, {**batch_layout(), **legacy_layout()}
)
_ACTIVE_C = C_SUMMARIZE if accel.ACTIVE else None


def summarize(
    buf: Buffer,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> RecordStats:
    """Totals over the headers of a records field (flags as for iter_batches)."""
    if _ACTIVE_C is not None and not verify_crc:  # the C walk checks no CRC
        stats = _ACTIVE_C(buf, allow_partial_tail, max_bytes)
        if stats is not NotImplemented:
            return stats
    return summarize_python(buf, verify_crc=verify_crc, allow_partial_tail=allow_partial_tail, max_bytes=max_bytes)


def summarize_python(
    buf: Buffer,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> RecordStats:
    """summarize's Python walk: the reference the C one is held to."""
    view = as_view(buf)
    stats = RecordStats()
    batches = iter_batches(
        view, verify_crc=verify_crc, allow_partial_tail=allow_partial_tail, max_bytes=max_bytes
    )
    for header in batches:
        add_batch(stats, header)
    stats.truncated_bytes = len(view) - stats.bytes
    return stats


def add_batch(stats: RecordStats, header: BatchHeader) -> None:
    """Count one batch header in `stats` (summarize's step; codec/stream.py's too)."""
    stats.batches += 1
    stats.bytes += header.size
    stats.compressions.add(header.compression)
    if header.record_count < 0:
        stats.unknown_count_batches += 1
    else:
        stats.records += header.record_count
    if header.is_control:
        stats.control_batches += 1
    if header.is_transactional:
        stats.transactional = True
    if stats.producer_id == -1 and header.producer_id != -1:
        stats.producer_id = header.producer_id
        stats.producer_epoch = header.producer_epoch
    _add_timestamps(stats, header)
    # A compressed legacy wrapper states no last delta (-1): its own offset is its last record's.
    end = header.base_offset + max(header.last_offset_delta, 0) + 1
    if end > stats.next_offset:
        stats.next_offset = end


def _add_timestamps(stats: RecordStats, header: BatchHeader) -> None:
    last = header.max_timestamp
    # Under LogAppendTime every record bears max_timestamp; with a delete horizon (KIP-534)
    # base_timestamp is that horizon, not a record's time.
    use_max = header.timestamp_type == 1 or header.has_delete_horizon
    first = last if use_max else header.base_timestamp
    # Negative means "no timestamp" (-1): magic 0, or a producer that set none.
    if first >= 0 and (stats.min_timestamp < 0 or first < stats.min_timestamp):
        stats.min_timestamp = first
    if last >= 0 and last > stats.max_timestamp:
        stats.max_timestamp = last
