"""What a request's outcome and latency mean for Kafka, as Spark column expressions.

Some error codes are protocol steps, not failures (`data/expected_errors.json`, which
the alert rules read too), and some requests wait by design: pipeline/README.md, "What
the numbers mean for Kafka".
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import functions as F

EXPECTED_ERRORS_FILE = Path(__file__).with_name("data") / "expected_errors.json"
FETCH, JOIN_GROUP, SHARE_FETCH = 1, 11, 78
LONG_POLLS = (FETCH, SHARE_FETCH)


@cache
def expected_errors() -> dict[str, tuple[str, ...]]:
    """api name -> the error names it returns by design."""
    data = json.loads(EXPECTED_ERRORS_FILE.read_text(encoding="utf-8"))
    return {api: tuple(names) for api, names in data.items() if not api.startswith("_")}


def _expected_for(api: Column) -> Column:
    pairs = [item for api_name, names in sorted(expected_errors().items())
             for item in (F.lit(api_name), F.array(*map(F.lit, names)))]
    empty = F.array().cast("array<string>")
    return F.coalesce(F.element_at(F.create_map(*pairs), api), empty)


def failed(errors: Column, api: Column) -> Column:
    """1 when the request returned an error that is not a protocol step of its api."""
    unexpected = F.array_except(F.coalesce(errors, F.array().cast("array<string>")),
                                _expected_for(F.coalesce(api, F.lit(""))))
    return F.when(F.size(unexpected) > 0, 1).otherwise(0)


def expected_only(errors: Column, failure: Column) -> Column:
    """1 when the request returned errors, all of them protocol steps of its api."""
    return F.when((F.size(F.coalesce(errors, F.array())) > 0) & (failure == 0), 1).otherwise(0)


def waits_by_design(api_key: Column, max_wait_ms: Column) -> Column:
    """True for a JoinGroup, and for a long poll allowed to wait (max_wait_ms > 0, or
    not logged: consumers' Fetches wait, and a log from before the field existed must
    not blame the broker for them)."""
    long_poll = api_key.isin(*LONG_POLLS) & (F.coalesce(max_wait_ms, F.lit(1)) > 0)
    return F.coalesce(long_poll | (api_key == JOIN_GROUP), F.lit(False))
