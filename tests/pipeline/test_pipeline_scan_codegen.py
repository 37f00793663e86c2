"""The report's scan (the JSON source, the explode of each line into its parts, the
partial hash aggregation: fine.fine_rows) is one whole-stage generated function, and
the JVMs that run it compile its methods whatever their size. An expression without
generated code (array_sort was one) splits the stage, and every row between the two
halves is copied; a method over 8,000 bytes of bytecode is by default never
JIT-compiled and runs interpreted. Both happened and cost the scan a third of its CPU
(bench/PIPELINE.md), the second with one field more: the session turns that
limit off (session.COMPILE_HUGE_METHODS) instead of resting on the code's size. The
test session runs without whole-stage code generation (tiny data), so the fused
code's results are compared here with the interpreted ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession
from support.synth import Synth, to_line, write_rotated

from pipeline.fine import fine_rows
from pipeline.read import parse_lines, read_logs
from pipeline.report import report_lines
from pipeline.schema import LINE_SCHEMA
from pipeline.session import session_conf

HUGE_METHOD_BYTES = 8000  # HotSpot's HugeMethodLimit: larger methods stay interpreted
WRONG_TYPE = {"ts": "2025-03-01T12:00:02Z", "event": "request", "api_key": 1, "api": "Fetch",
              "conn": "zz", "positions": [{"topic": "t", "partition": "zero", "lag": 1}]}


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("scan-codegen")
    synth = Synth(seed=5, rate=50.0, bad_every=97, other_every=89, follower_every=7,
                  telemetry_every=5)
    write_rotated(root, map(to_line, synth.events(3000)), 1000, gz=True)
    with (root / "requests.log").open("a", encoding="utf-8") as f:
        f.write(json.dumps(WRONG_TYPE) + "\n")
    return str(root)


WHOLE_STAGE = {"spark.sql.codegen.wholeStage": "true"}


@pytest.fixture
def whole_stage(spark: SparkSession) -> Iterator[SparkSession]:
    with session_conf(spark, WHOLE_STAGE):
        yield spark


def subtrees(spark: SparkSession, df: Any) -> list[tuple[int, list[str], list[str]]]:
    """Each whole-stage generated subtree of the static plan: its largest method's
    bytecode size, its own operators (marked `*(id)`) and the operators below it that
    feed it rows (a scan, an exchange, an operator without generated code)."""
    with session_conf(spark, {"spark.sql.adaptive.enabled": "false"}):
        text = spark.sparkContext._jvm.PythonSQLUtils.explainString(
            df._jdf.queryExecution(), "codegen")
    found = []
    for size, tree in re.findall(
            r"== Subtree \d+ / \d+ \(maxMethodCodeSize:(\d+);.*?==\n(.*?)\n\n", text, re.S):
        lines = [line.lstrip(" +-:") for line in tree.splitlines()]
        stage = re.match(r"\*\((\d+)\)", lines[0])
        assert stage, tree
        own = [line for line in lines if line.startswith(f"*({stage.group(1)})")]
        # what feeds the stage: the first operator under it not its own (its children
        # are indented deeper and not looked at)
        fed = [line for line in lines if not line.startswith("*(")]
        found.append((int(size), own, fed[:1]))
    return found


@pytest.mark.xfail(
    condition=pyspark.__version__.startswith("4.2."),
    strict=True,
    reason="Spark 4.2 (PySpark pinned to it for delta-spark 4.4) leaves Generate explode and its"
    " Project out of whole-stage code generation: the scan's stage ends at the parsed lines' Project,"
    " the explode runs interpreted before the partial aggregation's stage; from_json (the report's"
    " retype check, read.parse_lines) has no generated code in 4.2 either, and its two projections"
    " end the scan's stage before that (bench/PIPELINE.md, \"The report reading a retyped line as"
    " the ingest does\")",
)
def test_scan_to_partial_aggregation_is_one_compiled_stage(whole_stage: SparkSession,
                                                           logs: str) -> None:
    spark = whole_stage
    stages = subtrees(spark, fine_rows(report_lines(read_logs(spark, [logs]))))
    scan = [own for _, own, fed in stages if fed and fed[0].startswith("FileScan json")]
    assert len(scan) == 1, stages
    assert any(op.startswith("*(1) Generate explode") for op in scan[0]), scan[0]
    assert any(op.startswith("*(1) HashAggregate") for op in scan[0]), scan[0]


def test_the_jvm_compiles_methods_of_any_size(spark: SparkSession) -> None:
    """The session's JVM (locally the executor too) JIT-compiles a generated method of
    more than HUGE_METHOD_BYTES (a cluster's executors get the same option)."""
    from pipeline.session import COMPILE_HUGE_METHODS

    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    assert bean.getVMOption("DontCompileHugeMethods").getValue() == "false"
    assert COMPILE_HUGE_METHODS == "-XX:-DontCompileHugeMethods"


def test_an_interpreted_expression_would_split_it(whole_stage: SparkSession) -> None:
    """The oracle for the test above: array_sort has no generated code, so its
    projection is outside every stage and feeds the aggregation's."""
    from pyspark.sql import functions as F

    df = whole_stage.range(10).select(F.array_sort(F.array(F.col("id"), F.lit(3))).alias("a"))
    stages = subtrees(whole_stage, df.groupBy("a").count())
    assert not any("array_sort" in op for _, own, _ in stages for op in own), stages
    assert any(fed and "array_sort" in fed[0] for _, _, fed in stages), stages


def _rows(spark: SparkSession, logs: str) -> list[tuple[Any, ...]]:
    rows = fine_rows(report_lines(read_logs(spark, [logs]))).collect()
    return sorted((tuple(r) for r in rows), key=repr)


def test_generated_code_folds_as_the_interpreted_one(spark: SparkSession, logs: str) -> None:
    interpreted = _rows(spark, logs)
    with session_conf(spark, WHOLE_STAGE):
        generated = _rows(spark, logs)
    assert generated == interpreted
    parts = {row[0] for row in interpreted}
    assert parts == {"g", "l", "t", "b", "e", "m", "p", "c", "r"}
    # the line with a field of another type: a request (its conn's g row), and an r
    # row naming the field; not a bad line
    assert [row[0] for row in interpreted if "zz" in row] == ["g"]
    assert [(row[0], row[1]) for row in interpreted if "positions" in row] == [("r", None)]
    assert not any(row[0] == "b" and "zero" in str(row) for row in interpreted)


def test_each_line_is_cast_and_judged_once(spark: SparkSession, logs: str) -> None:
    """parse_lines computes a line's timestamp and why it is bad once each: written as
    one projection, the plan cast the timestamp three times a line and evaluated the
    reason twice (for `bad_reason` and for `line`), in the report's scan and the ingest."""
    from pipeline import ingest

    raw = read_logs(spark, [logs])
    plans = {
        "report": fine_rows(report_lines(raw)),
        "ingest": ingest.table_rows(parse_lines(
            raw.select("*", raw["_metadata.file_modification_time"].alias("file_mtime")),
            keep=("file_mtime",), retype=LINE_SCHEMA), []),
    }
    with session_conf(spark, {"spark.sql.debug.maxToStringFields": "100000"}):
        for name, df in plans.items():
            plan = df._jdf.queryExecution().executedPlan().toString()
            assert plan.count("try_cast(ts#") == 1, (name, plan)
            assert plan.count("StartsWith(ltrim(_corrupt_record#") == 1, (name, plan)
