"""Kafka record data (the `records` field of Produce and Fetch), sans-I/O.

Headers of v2 batches and legacy (magic 0/1) messages are read without decompressing
(iter_batches, summarize); iter_records goes down to records, decompressing under a byte
limit. Bad input of any shape raises codec.errors.DecodeError and nothing else.
"""

from codec.records.batch import COMPRESSION_NAMES, BatchHeader
from codec.records.common import DEFAULT_MAX_BYTES
from codec.records.compression import decompress
from codec.records.framing import iter_batches
from codec.records.iterate import batch_records, iter_records
from codec.records.record import Record
from codec.records.stats import RecordStats, summarize

__all__ = [
    "COMPRESSION_NAMES",
    "DEFAULT_MAX_BYTES",
    "BatchHeader",
    "Record",
    "RecordStats",
    "batch_records",
    "decompress",
    "iter_batches",
    "iter_records",
    "summarize",
]
