"""Command lines of `kafkalens report`, `kafkalens watch` and `kafkalens ingest`: the top
of the package (no module of pipeline/ imports it: tests/project/test_imports.py).

Run as a file, it is what `spark-submit` starts: `spark-submit pipeline/cli.py report
LOGS --out DIR` (or `watch`, `ingest`), as `python -m pipeline.cli report ...`.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # spark-submit pipeline/cli.py: import the package, not its files
    # (run as a file, this directory heads sys.path and pipeline/html.py would hide the
    # standard library's html), so the repository root takes its place.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse  # noqa: E402
import difflib  # noqa: E402
import re  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import TYPE_CHECKING, NoReturn  # noqa: E402

from pipeline import paths  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
SPARK_LOG_LEVELS = ("off", "fatal", "error", "warn", "info", "debug")
# The defaults the watch and ingest parsers show (pipeline.follow's, without importing
# PySpark before the missing-extra check).
DEFAULT_PATTERN = "*.log.[0-9]*"


def missing_extra(root: Path = ROOT) -> str:
    """The one line saying what to install, for where kafkalens runs from: a source
    checkout (an editable install runs from one too) or an installed package."""
    if (root / "pyproject.toml").exists() and (root / "pipeline").is_dir():
        how = f"pip install -e '.[pipeline]' in {root}"
    else:
        how = "pip install 'kafkalens[pipeline]'"
    return f"kafkalens: the pipeline needs PySpark and matplotlib (and Java 17+): {how}"


class OneLineParser(argparse.ArgumentParser):
    """argparse that says a bad flag or value in one line (exit 2) instead of usage and
    message, with the nearest flag or choice when one is close, as the proxy's own
    commands do (`kafkalens report: error: unrecognized arguments: --outt (did you mean
    --out?)`)."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._unknown(extras)
        return parsed

    def _flags(self) -> list[str]:
        return [flag for action in self._actions for flag in action.option_strings]

    def _unknown(self, extras: Sequence[str]) -> NoReturn:
        self.error(f"unrecognized arguments: {' '.join(extras)}{_hint(extras, self._flags())}")

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required"):
            # A mistyped required flag (--outt) reads as the flag missing: name the typo.
            flags = self._flags()
            typos = [a for a in getattr(self, "_given", []) if a.startswith("--")
                     and not any(f.startswith(a.split("=", 1)[0]) for f in flags)
                     and _hint([a], flags)]
            if typos:
                self._unknown(typos)
        invalid = _INVALID_CHOICE.search(message)
        if invalid is not None:
            message += _hint([invalid[1]], re.findall(r"'([^']*)'", invalid[2]))
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def _hint(given: Sequence[str], known: Sequence[str]) -> str:
    """` (did you mean X?)` for the first of `given` close to one of `known`."""
    for word in given:
        name = word.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        if not close:  # a case slip: --OUT
            close = [k for k in known if k.lower() == name.lower()]
        if close:
            return f" (did you mean {close[0]}?)"
    return ""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", metavar="URL",
                   help="Spark master (default local[*], or spark-submit's)")
    p.add_argument("--spark-log", choices=SPARK_LOG_LEVELS, default=None, metavar="LEVEL",
                   help="show Spark's own log from this level on (off, fatal, error, warn, "
                        "info, debug); by default it is off and the command says what "
                        "matters itself")


def _report_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="kafkalens report",
        description="Batch report over kafkalens request logs (or a table `kafkalens "
                    "ingest` wrote): Parquet tables + report.html.",
    )
    p.add_argument("logs", nargs="*", metavar="LOGS",
                   help="log files, directories (recursive) or globs; plain or .gz")
    p.add_argument("--table", metavar="TABLE",
                   help="read the lines `kafkalens ingest` parsed into TABLE instead of LOGS")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (overwritten)")
    p.add_argument("--skip-unreadable", action="store_true",
                   help="report without the files that cannot be read to their end "
                        "(truncated, wrongly compressed, unreadable), naming them in the "
                        "summary and the input_files and bad_lines tables; by default "
                        "such a file stops the report (exit 1) before any table is written")
    _common(p)
    return p


def _following(p: argparse.ArgumentParser, interval: float, files_per_trigger: int) -> None:
    """The options of a command that follows a log directory (pipeline.follow)."""
    p.add_argument("--spool", metavar="DIR",
                   help="where rotated files are staged (default: OUT/_spool)")
    p.add_argument("--no-spool", dest="use_spool", action="store_false",
                   help="read LOGDIR directly: only for rotation to unique, never reused names")
    p.add_argument("--pattern", default=DEFAULT_PATTERN,
                   help="glob of the rotated files in LOGDIR (default %(default)s)")
    p.add_argument("--once", "--available-now", dest="once", action="store_true",
                   help="process what is there now, then stop (trigger availableNow)")
    p.add_argument("--interval", type=float, default=interval, metavar="SECONDS",
                   help="trigger interval (default %(default)s)")
    p.add_argument("--max-files-per-trigger", type=int, default=files_per_trigger,
                   metavar="N", help="rotated files a micro-batch reads at most "
                                     "(default %(default)s)")
    p.add_argument("--notice-every", type=float, default=30.0, metavar="SECONDS",
                   help="while no lines arrive, say what is awaited this often "
                        "(default %(default)s)")
    p.add_argument("--skip-unreadable", action="store_true",
                   help="go on without a rotated file that cannot be read (truncated, "
                        "wrongly compressed, unreadable), naming it; by default it stops "
                        "the command (exit 1)")


def _watch_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="kafkalens watch",
        description="Streaming one-minute windows over a directory the proxy logs into "
                    "(or a table `kafkalens ingest` writes).",
    )
    p.add_argument("logdir", nargs="?", metavar="LOGDIR",
                   help="the directory request_log.path writes into")
    p.add_argument("--table", metavar="TABLE",
                   help="follow the table `kafkalens ingest` writes instead of LOGDIR")
    p.add_argument("--out", default="kafkalens-watch", metavar="DIR",
                   help="Parquet output: DIR/by_api, DIR/by_software, DIR/input_files, "
                        "DIR/bad_lines (default %(default)s)")
    p.add_argument("--checkpoint", metavar="DIR", help="default: OUT/_checkpoint")
    p.add_argument("--watermark", default="2 minutes",
                   help="how long after a window's end its lines may still arrive, "
                        "behind each source's newest line (default %(default)s)")
    p.add_argument("--max-skew", default="1 minute", metavar="DURATION",
                   help="how far past its arrival a line's time may be; later times are "
                        "clamped to it and counted (default %(default)s)")
    p.add_argument("--idle-source", default="10 minutes", metavar="DURATION",
                   help="a source (a directory of logs) whose newest lines arrived this "
                        "long before another's stops holding windows open "
                        "(default %(default)s)")
    _following(p, 10.0, 2)
    _common(p)
    return p


def _ingest_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="kafkalens ingest",
        description="Parse the request and telemetry logs once, into a Delta Lake table "
                    "partitioned by time that `report --table` and `watch --table` read.",
    )
    p.add_argument("logdir", nargs="?", metavar="LOGDIR",
                   help="the directory request_log.path (and the telemetry log) write into")
    p.add_argument("--table", required=True, metavar="TABLE", help="the table's directory")
    p.add_argument("--checkpoint", metavar="DIR", help="default: TABLE/_checkpoint")
    p.add_argument("--compact", action="store_true",
                   help="compact the table's small files (OPTIMIZE) and delete the files "
                        "it no longer needs (VACUUM), then stop; no LOGDIR")
    p.add_argument("--retention", metavar="DURATION",
                   help="with --compact: keep replaced files this long for readers of "
                        "older versions (Spark's form: '7d', '12h'; default 7d)")
    p.add_argument("--convert", action="store_true",
                   help="make a table an older kafkalens ingested (Parquet files and "
                        "_spark_metadata) a Delta table, in place, then stop; no LOGDIR")
    _following(p, 60.0, 8)
    _common(p)
    return p


def _run(app: str, args: argparse.Namespace, job: Callable[[SparkSession], int],
         delta: bool = False) -> int:
    from pyspark.sql import SparkSession

    from pipeline.session import DeltaMissing, build_session

    # Stop the session only if this call made it (tests and notebooks share one).
    owned = SparkSession.getActiveSession() is None
    try:
        spark = build_session(app, args.master, spark_log=args.spark_log, delta=delta)
    except DeltaMissing as e:
        print(f"{app.replace('-', ' ')}: {e}", file=sys.stderr)
        return 2
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
        print(missing_extra(), file=sys.stderr)
        return True
    return False


def paths_checked(command: str, check: Callable[[], object]) -> bool:
    """Runs a command's path checks (pipeline.paths) before Spark starts: False, having
    said why in one line, when a path cannot be used."""
    try:
        check()
    except paths.PathError as e:
        print(f"kafkalens {command}: {e}", file=sys.stderr)
        return False
    return True


def _report_paths(args: argparse.Namespace) -> None:
    if args.table:
        paths.check_directory_input(args.table, "the table")
        local = paths.local_path(args.table)
        read = [local] if local is not None else []
    else:
        read = paths.check_inputs(args.logs)
    paths.check_output(args.out, "--out", read)


def _following_paths(logdir: str | None, table: str | None,
                     outputs: list[tuple[str | None, str]]) -> None:
    """What `watch` and `ingest` read (LOGDIR, a glob with --no-spool, or an ingested
    `table`) and the directories they write (path, its option)."""
    if logdir and paths.has_glob(logdir):
        paths.check_inputs([logdir], "LOGDIR")
    elif logdir:
        paths.check_directory_input(logdir, "LOGDIR")
    if table:
        paths.check_directory_input(table, "the table")
    for path, what in outputs:
        if path:
            paths.check_output(path, what)


def report_main(argv: list[str]) -> int:
    parser = _report_parser()
    args = parser.parse_args(argv)
    if bool(args.logs) == bool(args.table):
        parser.error("give LOGS or --table TABLE (one of them)")
    if pipeline_missing() or not paths_checked("report", lambda: _report_paths(args)):
        return 2
    from pipeline.progress import Phases, to_stderr
    from pipeline.read import InputError, UnreadableFiles
    from pipeline.report import preload_imports, run_report
    from pipeline.small_tables import SettingError
    from pipeline.summary import summary_lines

    preload_imports()

    def job(spark: SparkSession) -> int:
        try:
            result = run_report(spark, args.logs, args.out, args.skip_unreadable,
                                table=args.table, phases=Phases(to_stderr("report")))
        except (paths.PathError, SettingError) as e:
            print(f"kafkalens report: {e}", file=sys.stderr)
            return 2
        except UnreadableFiles as e:
            print(f"kafkalens report: {e}; nothing written (--skip-unreadable reports "
                  "without them)", file=sys.stderr)
            return 1
        except InputError as e:
            print(f"kafkalens report: {e}", file=sys.stderr)
            return 1
        print("kafkalens report")
        for line in summary_lines(result):
            print("  " + line)
        print(f"the report: {args.out.rstrip('/')}/report.html (and a Parquet table per "
              f"section in {args.out})")
        return 0

    return _run("kafkalens-report", args, job, delta=bool(args.table))


def watch_main(argv: list[str]) -> int:
    if pipeline_missing():
        return 2
    parser = _watch_parser()
    args = parser.parse_args(argv)
    if bool(args.logdir) == bool(args.table):
        parser.error("give LOGDIR or --table TABLE (one of them)")
    outputs = [(args.out, "--out"), (args.checkpoint, "--checkpoint"),
               (args.spool if args.use_spool else None, "--spool")]
    if not paths_checked("watch", lambda: _following_paths(args.logdir, args.table, outputs)):
        return 2
    from pipeline.watch import WatchOptions, run_watch

    options = WatchOptions(**{k: v for k, v in vars(args).items()
                              if k not in ("master", "spark_log")})
    try:
        return _run("kafkalens-watch", args, lambda spark: run_watch(spark, options),
                    delta=bool(args.table))
    except KeyboardInterrupt:  # before the watch's own handler (Spark starting) or after
        print("kafkalens watch: interrupted", file=sys.stderr)
        return 130


def ingest_main(argv: list[str]) -> int:
    if pipeline_missing():
        return 2
    parser = _ingest_parser()
    args = parser.parse_args(argv)
    if args.compact and args.convert:
        parser.error("--compact or --convert, not both")
    if bool(args.logdir) == (args.compact or args.convert):
        parser.error("give LOGDIR to ingest, or --compact or --convert (without LOGDIR)")
    outputs = [(args.table, "--table"), (args.checkpoint, "--checkpoint"),
               (args.spool if args.use_spool else None, "--spool")]
    if args.logdir and not paths_checked(
            "ingest", lambda: _following_paths(args.logdir, None, outputs)):
        return 2
    from pipeline.ingest import IngestOptions, run_ingest

    options = IngestOptions(**{k: v for k, v in vars(args).items()
                               if k not in ("master", "spark_log")})
    try:
        if options.convert:
            from pipeline.convert import run_convert

            return _run("kafkalens-ingest", args, lambda spark: run_convert(spark, options),
                        delta=True)
        return _run("kafkalens-ingest", args, lambda spark: run_ingest(spark, options),
                    delta=True)
    except KeyboardInterrupt:
        print("kafkalens ingest: interrupted", file=sys.stderr)
        return 130


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "report": report_main, "watch": watch_main, "ingest": ingest_main}


def main(argv: list[str]) -> int:
    """`python -m pipeline.cli COMMAND ...` and `spark-submit pipeline/cli.py COMMAND ...`."""
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: pipeline/cli.py {{{','.join(COMMANDS)}}} ... (e.g. report LOGS --out "
              "DIR; COMMAND --help says more)", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
