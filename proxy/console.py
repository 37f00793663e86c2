"""What the commands share on stderr: one-line errors with exit code 2, diagnostics.

Below both `proxy/cli.py` and the subcommands it starts (`proxy/demo.py`, worker
processes), so none of them imports the command line's entry point.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn

import structlog

EXIT_CONFIG = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        fail(message)


def fail(message: str) -> NoReturn:
    print(f"kafkalens: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_CONFIG)


def configure_logging(level: int = logging.INFO) -> None:
    """Diagnostics go to stderr: stdout may carry the request log ("-")."""
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=True),
            # Plain tracebacks: the default (with `rich` installed) prints local
            # variables, which could put a SASL token from a failing hook on stderr.
            structlog.dev.ConsoleRenderer(
                colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
            ),
        ],
    )
