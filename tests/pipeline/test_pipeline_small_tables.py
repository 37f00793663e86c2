"""The report's small tables, written by the driver, are the files Spark's writer makes.

One report over the same logs twice: once with every table under the bound (each
collected once and written by the driver: pipeline/small_tables.py), once with a
bound of two rows, so that every table (the logs fill each with more) is collected,
found too large and written by Spark's writer (the bound crossed); and empty tables
written both ways. Each table is then the same both ways: the same rows in the same order and the same types
read back by Spark, by pyarrow and by DuckDB; the same Parquet schema (physical and
logical types, repetition, the three-level lists and maps) and key-value metadata;
the same directory layout; the same rows on the page and counts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from support.synth import Synth, to_line, write_rotated

from pipeline import report
from pipeline.report import DRIVER, SPARK, run_report, write_small_or_large, write_table
from pipeline.session import session_conf
from pipeline.small_tables import DRIVER_ROWS_KEY, SettingError
from pipeline.summary import ReportResult
from pipeline.tables import FAMILIES, TABLE_ORDER

TINY = 2


@pytest.fixture(scope="module")
def reports(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, ReportResult, Path, ReportResult]:
    root = tmp_path_factory.mktemp("small-tables")
    synth = Synth(seed=23, bad_every=211, other_every=97, follower_every=53,
                  telemetry_every=31)
    write_rotated(root / "logs", map(to_line, synth.events(3000)), 1000, gz=True)
    driver = run_report(spark, [str(root / "logs")], str(root / "driver"))
    with session_conf(spark, {DRIVER_ROWS_KEY: str(TINY)}):
        crossed = run_report(spark, [str(root / "logs")], str(root / "spark"))
    return root / "driver", driver, root / "spark", crossed


def test_small_tables_are_written_by_the_driver_larger_ones_by_spark(
        reports: tuple[Path, ReportResult, Path, ReportResult]) -> None:
    _, driver, _, crossed = reports
    assert driver.written_by == dict.fromkeys(TABLE_ORDER, DRIVER)
    assert crossed.written_by == {name: DRIVER if n <= TINY else SPARK
                                  for name, n in driver.table_rows.items()}
    assert crossed.table_rows == driver.table_rows
    assert crossed.shown == driver.shown  # report.html's rows, timestamps UTC


def test_the_tables_are_one_job_per_family(spark: SparkSession, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every family's tables and the charts that read only them are one query (one
    job), and the chart that reads the rows shown of latency_by_api one more: counted
    by Spark's own status tracker, so a query per table (or per chart) coming back
    fails this."""
    synth = Synth(seed=29, bad_every=211, other_every=97, follower_every=53,
                  telemetry_every=31)
    write_rotated(tmp_path / "logs", map(to_line, synth.events(1000)), 500, gz=True)
    tracker = spark.sparkContext.statusTracker()
    jobs: list[int] = []
    tables = report._tables

    def counting(*args: Any) -> None:
        before = set(tracker.getJobIdsForGroup())
        tables(*args)
        jobs.extend(set(tracker.getJobIdsForGroup()) - before)

    monkeypatch.setattr(report, "_tables", counting)
    result = run_report(spark, [str(tmp_path / "logs")], str(tmp_path / "out"))
    assert result.written_by == dict.fromkeys(TABLE_ORDER, DRIVER)
    reading_shown = [key for key, (_, _, shown) in report.SERIES.items() if shown]
    assert len(jobs) == len(FAMILIES) + len(reading_shown) == 6


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bound_that_is_no_number_of_rows_is_said_before_anything_is_read(
        spark: SparkSession, tmp_path: Path, value: str) -> None:
    """The inputs match nothing: had the report read them first, it would have said
    that (InputError) instead."""
    with session_conf(spark, {DRIVER_ROWS_KEY: value}), pytest.raises(SettingError) as e:
        run_report(spark, [str(tmp_path / "nothing-here-*.log")], str(tmp_path / "out"))
    assert str(e.value).startswith(f"{DRIVER_ROWS_KEY} is {value!r}: ")
    assert not (tmp_path / "out").exists()


def _file(directory: Path) -> Path:
    names = sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))
    parts = [n for n in names if n.startswith("part-")]
    assert names == ["_SUCCESS", *parts] and len(parts) == 1, names
    assert re.fullmatch(r"part-00000-[0-9a-f-]{36}-c000\.\w+\.parquet", parts[0]), parts
    return directory / parts[0]


def _parquet_schema(file: pq.ParquetFile) -> list[str]:
    """The Parquet schema as written (physical and logical types, repetition, nested
    groups), without its root's name (`spark_schema` or `schema`: no reader reads it)."""
    return str(file.schema).splitlines()[2:]


@pytest.mark.parametrize("name", list(TABLE_ORDER))
def test_a_table_is_the_same_file_whoever_wrote_it(
        spark: SparkSession, reports: tuple[Path, ReportResult, Path, ReportResult],
        name: str) -> None:
    driver_out, _, spark_out, crossed = reports
    assert crossed.written_by[name] == SPARK  # every table here has more than TINY rows
    _same_table(spark, driver_out / name, spark_out / name)


@pytest.mark.parametrize("name", ["client_inventory", "topic_access", "client_telemetry_top"])
def test_an_empty_table_is_the_same_file_whoever_wrote_it(
        spark: SparkSession, reports: tuple[Path, ReportResult, Path, ReportResult],
        tmp_path: Path, name: str) -> None:
    """Tables with arrays, maps and timestamps, no row: the schema alone."""
    empty = spark.read.parquet(str(reports[0] / name)).limit(0)
    assert write_small_or_large(empty, str(tmp_path / "driver"), name, 10) == (0, [], DRIVER)
    assert write_table(empty, str(tmp_path / "spark"), name) == (0, [])
    _same_table(spark, tmp_path / "driver" / name, tmp_path / "spark" / name)


def _same_table(spark: SparkSession, by_driver_dir: Path, by_spark_dir: Path) -> None:
    ours, theirs = _file(by_driver_dir), _file(by_spark_dir)
    assert ours.name.rsplit(".", 2)[1:] == theirs.name.rsplit(".", 2)[1:]  # the codec
    mine, spark_file = pq.ParquetFile(ours), pq.ParquetFile(theirs)
    assert _parquet_schema(mine) == _parquet_schema(spark_file)  # Parquet's types
    assert mine.schema_arrow == spark_file.schema_arrow
    assert mine.metadata.metadata == spark_file.metadata.metadata  # Spark's schema, version
    assert pq.read_table(ours).equals(pq.read_table(theirs))  # rows in order, pyarrow

    by_driver = spark.read.parquet(str(by_driver_dir))
    by_spark = spark.read.parquet(str(by_spark_dir))
    assert by_driver.schema == by_spark.schema
    assert by_driver.collect() == by_spark.collect()

    def duck(path: Path) -> tuple[Any, list[Any]]:
        query = duckdb.sql(f"select * from read_parquet('{path}')")
        return query.types, query.fetchall()

    assert duck(ours) == duck(theirs)
