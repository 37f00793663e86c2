"""What writing the report's 16 tables costs Spark, whatever is in them: a fresh driver
(built as `kafkalens report` builds it: pipeline.session) writes 16 small aggregations
of a cached 50,000-row frame, each as the report writes a table
(pipeline.report.write_table: one task, sorted, rows counted and the first kept as they
pass, Parquet), from five threads as the report does, in rounds.

    PYTHONPATH=. .venv/bin/python -m bench.pipeline.write_floor [--rounds 3] [--master URL]
        [--writer spark|report]

`--writer spark` (the default) writes every table with Spark's writer
(pipeline.report.write_table); `--writer report` as the report writes them
(pipeline.report.write_small_or_large: these tables are small, so each is collected
once and written by the driver, pipeline/small_tables.py).

The first round is the JVM meeting these operators for the first time, as the report's
tables do after its scan; later rounds are the same writes warm. Beside the report's
"after the scan" figure (bench_pipeline), it says how much of that is Spark's fixed
cost per table (plan, JIT, job and commit, under the report's own settings for its
tables: report.TABLES_CONF) rather than the report's own queries.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import report, small_tables
from pipeline.session import build_session, session_conf
from pipeline.tables import FAMILIES

ROWS = 50_000  # about the fine aggregation's rows at 1M lines of support.synth (51,863)
KEYS = [["a"], ["b"], ["c"], ["a", "b"], ["a", "c"], ["b", "c"], ["a", "b", "c"]]


def tables(base: DataFrame) -> dict[str, DataFrame]:
    """The report's table names, each an aggregation of its own (other keys, filter)."""
    names = [name for family in FAMILIES for name in family]
    return {name: base.where(F.col("v") % len(names) != i).groupBy(*KEYS[i % len(KEYS)]).agg(
        F.sum("v").alias("s"), F.count(F.lit(1)).alias("n"), F.max("v").alias("m"))
        for i, name in enumerate(names)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--master")
    p.add_argument("--writer", choices=("spark", "report"), default="spark")
    args = p.parse_args()
    spark = build_session("kafkalens-write-floor", args.master)
    base = spark.range(ROWS).select(
        (F.col("id") % 97).alias("a"), (F.col("id") % 13).alias("b"),
        (F.col("id") % 7).cast("string").alias("c"), F.col("id").alias("v"),
    ).persist(StorageLevel.DISK_ONLY)
    base.write.format("noop").mode("overwrite").save()
    frames = tables(base)
    # Each frame sorted by its first key (the report's tables have their own orders).
    report.sort_columns = lambda name: [F.asc(frames[name].columns[0])]
    with tempfile.TemporaryDirectory(prefix="kafkalens-write-floor-") as out:
        for rnd in range(args.rounds):
            started = time.monotonic()

            def family(names: tuple[str, ...], rnd: int = rnd) -> None:
                for name in names:
                    if args.writer == "spark":
                        report.write_table(frames[name], f"{out}/{rnd}", name)
                    else:
                        report.write_small_or_large(frames[name], f"{out}/{rnd}", name,
                                                    small_tables.driver_rows(spark))

            conf = {**report.TABLES_CONF, "spark.sql.shuffle.partitions": "1"}
            with session_conf(spark, conf), ThreadPoolExecutor(len(FAMILIES)) as pool:
                list(pool.map(family, FAMILIES))
            print(f"round {rnd + 1}: {len(frames)} tables written ({args.writer}) in "
                  f"{time.monotonic() - started:.1f} s", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
