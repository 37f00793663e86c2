"""`kafkalens`: proxy, check-config, demo, fetch-kafka, decode, top, report, watch, ingest.

Bad configuration or flags end with exit code 2 and one line on stderr:
``kafkalens: error: <key>: <what is wrong>``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from proxy.config import (
    DEFAULT_LISTENER,
    ConfigError,
    LogConfig,
    MetricsConfig,
    Overrides,
    RequestLogConfig,
)
from proxy.config.core import LOG_FORMATS, LOG_LEVELS
from proxy.console import EXIT_CONFIG, OneLineParser, configure_logging, fail
from proxy.features import load_config, summary
from proxy.preflight import (
    check_request_log_path,
    check_startup,
    connections_line,
    folders_created_at_start,
)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kafkalens", description="A Kafka-protocol L7 proxy.")
    parser.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        help="the version (as /metrics' kafkalens_build_info has it), and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    proxy = sub.add_parser(
        "proxy",
        help="run the proxy",
        description="Run the proxy. Each flag replaces its key of the --config file (in gateway"
        " mode --listen and --upstream replace gateway.bootstrap_listen and bootstrap_servers).",
    )
    proxy.add_argument(
        "--config", metavar="FILE", help="kafkalens.yaml (default: the built-in defaults)"
    )
    proxy.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"client-facing address (built-in default {DEFAULT_LISTENER.listen})",
    )
    proxy.add_argument(
        "--upstream",
        metavar="HOST:PORT",
        help=f"the broker to forward to (built-in default {DEFAULT_LISTENER.upstream})",
    )
    proxy.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help=f"/metrics, /livez, /readyz address (built-in default {MetricsConfig().listen})",
    )
    proxy.add_argument(
        "--request-log",
        metavar="PATH",
        help=f'request log file, or "-" for stdout (built-in default "{RequestLogConfig().path}")',
    )
    proxy.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="the proxy's own log on stderr: json, console, or auto (console on a terminal,"
        f" else json) (built-in default {LogConfig().format})",
    )
    proxy.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help=f"the least severe lines of that log (built-in default {LogConfig().level})",
    )
    check = sub.add_parser(
        "check-config",
        help="validate a config file and exit",
        description="Validate FILE and what `kafkalens proxy` needs to start with it; exit 0"
        " with a summary, or 2 with one line naming the key.",
    )
    check.add_argument("file", metavar="FILE", help="the kafkalens.yaml to check")
    check.add_argument(
        "--check-ports", action="store_true", help="also bind the listen addresses (then free them)"
    )
    sub.add_parser("demo", help="an embedded broker behind the proxy", add_help=False)
    sub.add_parser(
        "fetch-kafka", help="fetch Apache Kafka's jars for demo --broker apache-kafka", add_help=False
    )
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, tcsh)",
        description="Print the completion script of SHELL for kafkalens, its subcommands,"
        " their flags and choices: `eval \"$(kafkalens completion bash)\"` in ~/.bashrc, or"
        " `kafkalens completion bash > /etc/bash_completion.d/kafkalens`; zsh:"
        " `kafkalens completion zsh > \"${fpath[1]}/_kafkalens\"`.",
    )
    completion.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or tcsh")
    for name, what in (
        ("decode", "decode a packet capture (or bare Kafka frames) to request log lines"),
        ("top", "a live view of a running proxy: busiest clients, apis, lag"),
        ("report", "report on a request log"),
        ("watch", "watch a request log"),
        ("ingest", "parse the request logs once into a table"),
    ):
        sub.add_parser(name, help=what, add_help=False)
    return parser


SHELLS = ("bash", "zsh", "tcsh")


def completion_script(shell: str) -> str:
    """shtab's script for the whole command line: every subcommand's own parser (those
    that parse their own arguments at run time included) under the top one, paths
    completed where a flag takes a file or a directory."""
    import shtab

    from pipeline import cli as pipeline_cli
    from proxy import decode_cmd, demo, kafka_jars, top_cmd

    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, own in (
        ("demo", demo._parser()),
        ("fetch-kafka", kafka_jars._parser()),
        ("decode", decode_cmd._parser()),
        ("top", top_cmd.parser()),
        ("report", pipeline_cli._report_parser()),
        ("watch", pipeline_cli._watch_parser()),
        ("ingest", pipeline_cli._ingest_parser()),
    ):
        commands.choices[name] = own
    for command in commands.choices.values():
        for action in command._actions:
            shown = str(action.metavar or action.dest).upper()
            if shown in ("FILE", "PATH", "LOGS", "CAPTURE", "TABLE") or action.dest == "file":
                action.complete = shtab.FILE
            elif shown in ("DIR", "LOGDIR", "OUT"):
                action.complete = shtab.DIRECTORY
    return str(shtab.complete(parser, shell=shell))


class _Version(argparse.Action):
    """argparse's "version", worked out only when asked (the codec's import is not free)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        print(version_line())
        parser.exit()


def version_line() -> str:
    """`kafkalens 0.1.0 (Python 3.11.7, codec C)`: the version first, for scripts."""
    import platform

    from proxy.announce import package_version

    return f"kafkalens {package_version()} (Python {platform.python_version()}, codec {codec_name()})"


def codec_name() -> str:
    from codec import accel

    return "C" if accel.ACTIVE else "Python"


def _decode(argv: list[str]) -> int:
    from proxy import decode_cmd

    return int(decode_cmd.main(argv) or 0)


def _top(argv: list[str]) -> int:
    from proxy import top_cmd

    return top_cmd.main(argv)


def _report(argv: list[str]) -> int:
    from pipeline import cli as pipeline_cli

    return int(pipeline_cli.report_main(argv) or 0)


def _watch(argv: list[str]) -> int:
    from pipeline import cli as pipeline_cli

    return int(pipeline_cli.watch_main(argv) or 0)


def _ingest(argv: list[str]) -> int:
    from pipeline import cli as pipeline_cli

    return int(pipeline_cli.ingest_main(argv) or 0)


def _demo(argv: list[str]) -> int:
    from proxy import demo

    return demo.main(argv)


def _fetch_kafka(argv: list[str]) -> int:
    from proxy import kafka_jars

    return kafka_jars.main(argv)


# Subcommands whose own modules parse the rest of the command line.
PASSTHROUGH: dict[str, Callable[[list[str]], int]] = {
    "decode": _decode,
    "top": _top,
    "report": _report,
    "watch": _watch,
    "ingest": _ingest,
    "demo": _demo,
    "fetch-kafka": _fetch_kafka,
}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in PASSTHROUGH:
        return PASSTHROUGH[args_list[0]](args_list[1:])
    args = _parser().parse_args(args_list)
    if args.command == "check-config":
        return check_config(args.file, check_ports=args.check_ports)
    if args.command == "proxy":
        return run_proxy(args)
    if args.command == "completion":
        print(completion_script(args.shell), end="")
        return 0
    _parser().print_help(sys.stderr)
    return EXIT_CONFIG


def check_config(path: str, *, check_ports: bool = False) -> int:
    """The file, then everything `kafkalens proxy` would need to start with it."""
    try:
        config = load_config(path)
        check_startup(config, ports=check_ports)
    except ConfigError as exc:
        fail(str(exc))
    print(f"{path}: OK")
    for line in summary(config):
        print(f"  {line}")
    print(f"  {connections_line(config)}")
    for key, folder in folders_created_at_start(config):
        print(f"  {key}: {folder} does not exist yet; kafkalens proxy creates it as it starts")
    return 0


def run_proxy(args: argparse.Namespace) -> int:
    import uvloop

    from proxy.forward.fdlimit import raise_open_file_limit

    overrides = Overrides(
        listen=args.listen,
        upstream=args.upstream,
        metrics=args.metrics,
        request_log=args.request_log,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    try:
        config = load_config(args.config, overrides)
        if args.request_log is not None:  # name the flag, not the key it replaced
            check_request_log_path(args.request_log, "--request-log")
        check_startup(config, api_names=config.workers == 1)  # workers check their own
    except ConfigError as exc:
        fail(str(exc))
    configure_logging(config.log)
    raise_open_file_limit()  # inherited by the workers
    from proxy.signals import ignore_reopen_signal

    ignore_reopen_signal()  # until the proxy handles it: a SIGHUP while starting must not kill
    try:
        if config.workers > 1:
            from proxy.workers import serve_workers

            serve_workers(config, args.config)
        else:
            from proxy.runner import serve

            uvloop.run(serve(config, config_path=args.config))
    except ConfigError as exc:  # e.g. a listen address already in use
        fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
