"""`kafkalens`: proxy, check-config, demo, decode, top, report, watch, ingest.

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
    MetricsConfig,
    Overrides,
    RequestLogConfig,
    load_config,
    summary,
)
from proxy.console import EXIT_CONFIG, OneLineParser, configure_logging, fail
from proxy.preflight import check_request_log_path, check_startup, folders_created_at_start


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kafkalens", description="A Kafka-protocol L7 proxy.")
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
        help=f"/metrics, /healthz, /readyz address (built-in default {MetricsConfig().listen})",
    )
    proxy.add_argument(
        "--request-log",
        metavar="PATH",
        help=f'request log file, or "-" for stdout (built-in default "{RequestLogConfig().path}")',
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
    for name, what in (
        ("decode", "decode a packet capture (or bare Kafka frames) to request log lines"),
        ("top", "a live view of a running proxy: busiest clients, apis, lag"),
        ("report", "report on a request log"),
        ("watch", "watch a request log"),
        ("ingest", "parse the request logs once into a table"),
    ):
        sub.add_parser(name, help=what, add_help=False)
    return parser


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


# Subcommands whose own modules parse the rest of the command line.
PASSTHROUGH: dict[str, Callable[[list[str]], int]] = {
    "decode": _decode,
    "top": _top,
    "report": _report,
    "watch": _watch,
    "ingest": _ingest,
    "demo": _demo,
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
    )
    try:
        config = load_config(args.config, overrides)
        if args.request_log is not None:  # name the flag, not the key it replaced
            check_request_log_path(args.request_log, "--request-log")
        check_startup(config, api_names=config.workers == 1)  # workers check their own
    except ConfigError as exc:
        fail(str(exc))
    configure_logging()
    raise_open_file_limit()  # inherited by the workers
    from proxy.signals import ignore_reopen_signal

    ignore_reopen_signal()  # until the proxy handles it: a SIGHUP while starting must not kill
    try:
        if config.workers > 1:
            from proxy.workers import serve_workers

            serve_workers(config)
        else:
            from proxy.runner import serve

            uvloop.run(serve(config))
    except ConfigError as exc:  # e.g. a listen address already in use
        fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
