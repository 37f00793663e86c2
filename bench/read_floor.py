"""What Spark's JSON source alone costs the report: a fresh driver (built as
`kafkalens report` builds it: pipeline.session) reads every line of LOGS with the
report's schema and parses it (pipeline.read.read_logs), writes them to Spark's
`noop` sink and exits. No table, no aggregation, no report.html.

    PYTHONPATH=. .venv/bin/python -m bench.read_floor LOGS [--master URL]

bench_pipeline runs it as `read-5M` beside the report: the report cannot be faster
than its own input being read, so this is the floor the speed goal is measured against.
"""

from __future__ import annotations

import argparse

from pipeline.read import read_logs
from pipeline.session import build_session


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("logs")
    p.add_argument("--master")
    args = p.parse_args()
    spark = build_session("kafkalens-read-floor", args.master)
    read_logs(spark, [args.logs]).write.format("noop").mode("overwrite").save()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
