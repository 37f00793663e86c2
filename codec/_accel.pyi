# The layout description run in C (codec/_accel.c); see codec/accel.py.
from collections.abc import Callable
from typing import Any

NUMBERS: dict[str, dict[str, int]]
DIRECT_DICT: int

class Decoder:
    def __init__(self, layout: Any, decode_fallback: Callable[..., Any], skim_fallback: Callable[..., Any]) -> None: ...
    def __call__(self, buf: memoryview, pos: int, end: int, budget: list[int]) -> tuple[dict[str, Any], int]: ...
    def skim(self, buf: memoryview, pos: int, end: int, budget: list[int], found: dict[str, Any]) -> int: ...

def configure(short: Callable[..., Any], invalid: Callable[..., Any], uuid_of: Callable[..., Any], max_unknown_tags: int) -> None: ...

# codec/records/stats.py's summarize in C (no CRC checks); see codec/accel.py's records_summarizer.
RECORD_LAYOUT: dict[str, tuple[int, str] | int]
RECORD_STATS_FIELDS: tuple[str, ...]

def configure_records(record_stats: Callable[..., Any], error: Callable[..., Any], compression_names: tuple[str, ...]) -> None: ...
def summarize_records(buf: Any, allow_partial_tail: bool, max_bytes: int) -> Any: ...
