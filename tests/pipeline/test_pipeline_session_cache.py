"""The report's session lets adaptive execution coalesce a cached aggregation's
partitions: the report caches its one aggregation and every table scans the cache, so
on a cluster (200 shuffle partitions) each table was 200 tiny tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

SHUFFLE_PARTITIONS = 64
CACHED_PLAN = "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning"


@pytest.fixture
def many_shuffle_partitions(spark: Any) -> Iterator[Any]:
    """The session as a cluster sees it: far more shuffle partitions than data."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


def cached_partitions(spark: Any) -> int:
    from pyspark.sql import functions as F

    agg = spark.range(20_000).groupBy((F.col("id") % 7).alias("k")).count().persist()
    try:
        assert agg.count() == 7  # builds the cache
        return int(agg.rdd.getNumPartitions())
    finally:
        agg.unpersist()


def test_the_session_turns_it_on(spark: Any) -> None:
    assert spark.conf.get(CACHED_PLAN) == "true"


def test_a_cached_aggregation_is_coalesced(many_shuffle_partitions: Any) -> None:
    spark = many_shuffle_partitions
    assert cached_partitions(spark) < SHUFFLE_PARTITIONS


def test_without_the_setting_the_cache_keeps_every_shuffle_partition(
    many_shuffle_partitions: Any,
) -> None:
    """The oracle: Spark's default, as the report had it before."""
    spark = many_shuffle_partitions
    spark.conf.set(CACHED_PLAN, "false")
    try:
        assert cached_partitions(spark) == SHUFFLE_PARTITIONS
    finally:
        spark.conf.set(CACHED_PLAN, "true")


def test_a_tiny_cached_aggregation_is_one_partition(many_shuffle_partitions: Any) -> None:
    """The report's small tables (a few kB each, cached): adaptive execution coalesces
    them to one task per stage, whatever spark.sql.shuffle.partitions says."""
    assert cached_partitions(many_shuffle_partitions) == 1


def test_the_reports_aggregation_is_cached_on_disk_not_in_the_heap(
    spark: Any, tmp_path: Any
) -> None:
    """The fine aggregation has a row per distinct bad line: built in the heap, 3M of
    them kept a 1g driver collecting garbage for 12+ minutes (pipeline/README). The
    report keeps it on disk only: none of its blocks in memory, all on disk."""
    from support.synth import Synth, to_line

    from pipeline.progress import Phases
    from pipeline.read import parse_lines, read_logs
    from pipeline.report import _scan

    logs = tmp_path / "requests.log"
    lines = [to_line(e) for e in Synth(seed=7).events(500)]
    logs.write_text("\n".join([*lines, *(f"not json {i}" for i in range(500))]) + "\n")

    def cached() -> dict[int, Any]:  # an earlier test's cache may still be there
        infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()
        return {i.id(): i for i in infos if i.numCachedPartitions() > 0}

    before = cached()
    fine, counts, rows = _scan(spark, parse_lines(read_logs(spark, [str(logs)])), Phases())
    try:
        assert counts.bad == 500 and rows > 500  # a row per distinct bad line, at least
        (info,) = [info for rdd, info in cached().items() if rdd not in before]
        assert info.memSize() == 0 and info.diskSize() > 0
    finally:
        fine.unpersist()
