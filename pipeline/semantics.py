"""What a request line means for Kafka, as Spark column expressions: the one set of
definitions `report` and `watch` both use (its api's name, whether it failed, whether
it waits by design, its latency's histogram bin).

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

from codec.generated.api_key import ApiKey

EXPECTED_ERRORS_FILE = Path(__file__).with_name("data") / "expected_errors.json"
# Plain ints for Spark literals: pyspark 3.5 (still allowed) hands them to py4j as they are.
FETCH, JOIN_GROUP, SHARE_FETCH = int(ApiKey.FETCH), int(ApiKey.JOIN_GROUP), int(ApiKey.SHARE_FETCH)
LONG_POLLS = (FETCH, SHARE_FETCH)
UNKNOWN_API = "unknown"
# The latency histograms' bins, 1 % wide: bin b holds [1.01^b, 1.01^(b+1)) ms, so a
# percentile read from them (traffic.quantile) is within 1 % of the value at its rank.
LATENCY_BIN = 1.01
MIN_LATENCY_MS = 0.001  # 0 ms and below share the lowest bin


def api_name(api: Column, api_key: Column) -> Column:
    """The line's api, never null (a map or group key): its name, else `ApiKey<n>`
    from its key, else `unknown`."""
    return F.coalesce(api, F.concat(F.lit("ApiKey"), api_key.cast("string")),
                      F.lit(UNKNOWN_API))


def latency_bin(latency_ms: Column) -> Column:
    """The histogram bin of a latency (null for none: a request without a response)."""
    return F.floor(F.log(LATENCY_BIN, F.greatest(latency_ms, F.lit(MIN_LATENCY_MS))))


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


def waits_by_design(api_key: Column, max_wait_ms: Column, api: Column | None = None) -> Column:
    """True for a JoinGroup, and for a long poll allowed to wait (max_wait_ms > 0, or
    not logged: consumers' Fetches wait, and a log from before the field existed must
    not blame the broker for them). Whether it did wait is not asked: a long poll
    answered early was answered when data arrived, which says nothing of the broker's
    service time either. A line without api_key is known by its api name (`api`)."""
    name = F.lit(None).cast("string") if api is None else api
    key = F.coalesce(api_key, F.when(name == "Fetch", F.lit(FETCH))
                     .when(name == "ShareFetch", F.lit(SHARE_FETCH))
                     .when(name == "JoinGroup", F.lit(JOIN_GROUP)))
    long_poll = key.isin(*LONG_POLLS) & (F.coalesce(max_wait_ms, F.lit(1)) > 0)
    return F.coalesce(long_poll | (key == JOIN_GROUP), F.lit(False))
