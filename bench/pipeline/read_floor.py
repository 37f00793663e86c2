"""What reading its input alone costs: a fresh driver (built as `kafkalens report`
builds it: pipeline.session) reads every line and writes it to Spark's `noop` sink,
then exits. No aggregation, no report.html.

    PYTHONPATH=. .venv/bin/python -m bench.pipeline.read_floor LOGS [--master URL]
    PYTHONPATH=. .venv/bin/python -m bench.pipeline.read_floor --table TABLE [--master URL]
    PYTHONPATH=. .venv/bin/python -m bench.pipeline.read_floor --table TABLE --rewrite DIR

LOGS: the JSON request logs, read and parsed with the report's schema
(pipeline.read.read_logs): the floor the report over raw logs and the ingest are
measured against (bench_pipeline's `read-5M`).

--table: the table `kafkalens ingest` wrote, every column read as `report --table`
reads it (pipeline.ingest.read_table): no report over the table can be faster
(`table-read-5M`).

--table with --rewrite DIR: those rows written again to DIR as the ingest writes them
(its compression, partitioned by kind, date and hour, under its settings): less the
table's read, what Spark's Parquet writer costs for the ingest's rows (`rewrite-5M`).
The ingest reads the logs and writes this: the two together are about what it must
cost (one pass does both, so it may come in a little under their sum).
"""

from __future__ import annotations

import argparse

from pipeline import ingest
from pipeline.read import read_logs
from pipeline.session import build_session, session_conf


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("logs", nargs="?")
    p.add_argument("--table", metavar="TABLE")
    p.add_argument("--rewrite", metavar="DIR")
    p.add_argument("--master")
    args = p.parse_args()
    if (args.logs is None) == (args.table is None) or (args.rewrite and not args.table):
        p.error("give LOGS or --table TABLE (--rewrite needs --table)")
    spark = build_session("kafkalens-read-floor", args.master, delta=args.table is not None)
    if args.table is None:
        read_logs(spark, [args.logs]).write.format("noop").mode("overwrite").save()
    elif args.rewrite is None:
        ingest.read_table(spark, args.table).write.format("noop").mode("overwrite").save()
    else:
        # The table's own rows, partition columns included (they are what is written),
        # written as the ingest writes them: a Delta table.
        rows = spark.read.format("delta").load(args.table)
        with session_conf(spark, ingest.WRITE_CONF):
            rows.write.format("delta").mode("overwrite").partitionBy(
                *ingest.PARTITIONS).save(args.rewrite)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
