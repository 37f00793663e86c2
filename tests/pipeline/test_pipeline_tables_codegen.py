"""The report's tables are computed with little generated code (report.TABLES_CONF):
their queries are many and their rows few, and compiling each query's code, then having
the JVM JIT-compile the new classes, cost more than interpreting them. The scan, one
query over every line, still compiles its code. Counted here with Spark's own counter
of compilations (CodegenMetrics), its code cache emptied first (a cached class is not
compiled again, so a table whose code an earlier test compiled would count nothing),
against the same report with Spark's default code generation for the tables. What is
left (49 of 426 classes when written) Spark generates whatever the setting: readers of
the cached aggregations (23), projections (16), row joiners of the aggregations (6) and
orderings (4), found from the keys of that cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.synth import Synth, to_line, write_rotated

from pipeline import report
from pipeline.session import session_conf


def jvm(spark: SparkSession) -> Any:
    gateway = spark.sparkContext._jvm
    assert gateway is not None
    return gateway


def compilations(spark: SparkSession) -> int:
    metrics = jvm(spark).org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def forget_compiled_code(spark: SparkSession) -> None:
    """Empties the driver's cache of compiled classes (CodeGenerator.cache, private):
    local mode, so the executors' too."""
    generator = jvm(spark).java.lang.Class.forName(
        "org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator$")
    cache = generator.getDeclaredField("cache")
    cache.setAccessible(True)
    cache.get(generator.getDeclaredField("MODULE$").get(None)).invalidateAll()


def tables_compilations(spark: SparkSession, logs: Path, out: Path,
                        monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """A report over `logs` as the report's own session runs it (whole-stage code on;
    the test session turns it off), its compiled code forgotten first: the classes the
    scan compiled, and the tables."""
    counted: dict[str, int] = {}
    tables = report._tables

    def counting_tables(*args: Any) -> None:
        counted["scan"] = compilations(spark) - counted["start"]
        before = compilations(spark)
        tables(*args)
        counted["tables"] = compilations(spark) - before

    with monkeypatch.context() as patch:
        patch.setattr(report, "_tables", counting_tables)
        with session_conf(spark, {"spark.sql.codegen.wholeStage": "true"}):
            forget_compiled_code(spark)
            counted["start"] = compilations(spark)
            result = report.run_report(spark, [str(logs)], str(out))
    assert all(result.table_rows[name] > 0 for name in ("latency_by_api", "client_inventory",
                                                         "consumer_lag", "bad_lines"))
    return counted["scan"], counted["tables"]


def test_the_tables_compile_little_code_and_the_scan_compiles_its_own(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synth = Synth(seed=11, rate=50.0, bad_every=97, other_every=89, follower_every=7,
                  telemetry_every=5)
    logs = tmp_path / "logs"
    write_rotated(logs, map(to_line, synth.events(2000)), 1000, gz=True)
    scan, tables = tables_compilations(spark, logs, tmp_path / "out", monkeypatch)
    compiled = {key: value for key, value in report.TABLES_CONF.items()
                if not key.startswith("spark.sql.codegen.")}
    monkeypatch.setattr(report, "TABLES_CONF", compiled)
    scan_compiled, tables_compiled = tables_compilations(spark, logs, tmp_path / "out2",
                                                         monkeypatch)
    assert scan > 0 and scan == scan_compiled, (scan, scan_compiled)
    # 49 and 426 when written: what is left Spark generates whatever the setting
    assert tables * 4 < tables_compiled, (tables, tables_compiled)
