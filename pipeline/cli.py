"""Command lines of `kafkalens report` and `kafkalens watch`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MISSING_PYSPARK = ("kafkalens: the pipeline needs PySpark and matplotlib: "
                   "pip install 'kafkalens[pipeline]'")


def _report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kafkalens report",
        description="Batch report over kafkalens request logs: Parquet tables + report.html.",
    )
    p.add_argument("logs", nargs="+", metavar="LOGS",
                   help="log files, directories (recursive) or globs; plain or .gz")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (overwritten)")
    p.add_argument("--master", metavar="URL",
                   help="Spark master (default local[*], or spark-submit's)")
    return p


def _watch_parser() -> argparse.ArgumentParser:
    from pipeline import watch

    p = argparse.ArgumentParser(
        prog="kafkalens watch",
        description="Streaming one-minute aggregates over a directory the proxy logs into.",
    )
    p.add_argument("logdir", metavar="LOGDIR", help="the directory request_log.path writes into")
    p.add_argument("--out", default="kafkalens-watch", metavar="DIR",
                   help="Parquet output: DIR/by_api, DIR/by_software (default %(default)s)")
    p.add_argument("--checkpoint", metavar="DIR", help="default: OUT/_checkpoint")
    p.add_argument("--spool", metavar="DIR",
                   help="where rotated files are staged (default: OUT/_spool)")
    p.add_argument("--no-spool", dest="use_spool", action="store_false",
                   help="read LOGDIR directly: only for rotation to unique, never reused names")
    p.add_argument("--pattern", default=watch.DEFAULT_PATTERN,
                   help="glob of the rotated files in LOGDIR (default %(default)s)")
    p.add_argument("--once", "--available-now", dest="once", action="store_true",
                   help="process what is there now, then stop (trigger availableNow)")
    p.add_argument("--interval", type=float, default=10.0, metavar="SECONDS",
                   help="trigger interval (default %(default)s)")
    p.add_argument("--watermark", default=watch.DEFAULT_WATERMARK,
                   help="how late a line may arrive (default %(default)s)")
    p.add_argument("--max-files-per-trigger", type=int, default=watch.MAX_FILES_PER_TRIGGER)
    p.add_argument("--notice-every", type=float, default=watch.NOTICE_SECONDS, metavar="SECONDS",
                   help="while no lines arrive, say what is awaited this often "
                        "(default %(default)s)")
    p.add_argument("--master", metavar="URL",
                   help="Spark master (default local[*], or spark-submit's)")
    return p


def _run(app: str, master: str | None, job: Callable[[SparkSession], int]) -> int:
    from pyspark.sql import SparkSession

    from pipeline.session import build_session

    # Stop the session only if this call made it (tests and notebooks share one).
    owned = SparkSession.getActiveSession() is None
    spark = build_session(app, master)
    try:
        return job(spark)
    finally:
        if owned:
            spark.stop()


def pipeline_missing() -> bool:
    """Whether the `pipeline` extra is not installed (then says so in one line)."""
    try:
        import matplotlib  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        print(MISSING_PYSPARK, file=sys.stderr)
        return True
    return False


def report_main(argv: list[str]) -> int:
    args = _report_parser().parse_args(argv)
    if pipeline_missing():
        return 2
    from pipeline.read import InputError
    from pipeline.report import preload_charts, run_report
    from pipeline.summary import summary_lines

    preload_charts()

    def job(spark: SparkSession) -> int:
        try:
            result = run_report(spark, args.logs, args.out)
        except InputError as e:
            print(f"kafkalens report: {e}", file=sys.stderr)
            return 1
        print("kafkalens report")
        for line in summary_lines(result):
            print("  " + line)
        print(f"  tables and report.html in {args.out}")
        return 0

    return _run("kafkalens-report", args.master, job)


def watch_main(argv: list[str]) -> int:
    if pipeline_missing():  # before the parser: it takes defaults from the watch
        return 2
    args = _watch_parser().parse_args(argv)
    from pipeline.watch import WatchOptions, run_watch

    options = WatchOptions(**{k: v for k, v in vars(args).items() if k != "master"})
    try:
        return _run("kafkalens-watch", args.master, lambda spark: run_watch(spark, options))
    except KeyboardInterrupt:  # before the watch's own handler (Spark starting) or after
        print("kafkalens watch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(report_main(sys.argv[1:]))
