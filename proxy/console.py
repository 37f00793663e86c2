"""What the commands share on stderr: one-line errors with exit code 2, diagnostics.

Below both `proxy/cli.py` and the subcommands it starts (`proxy/demo.py`, worker
processes), so none of them imports the command line's entry point.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

import orjson
import structlog

from proxy.config import LogConfig

EXIT_CONFIG = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line instead of usage + message, with
    the nearest flag, subcommand or choice when one is close (as `check-config`
    suggests keys; Python 3.14's argparse does so itself, as `suggest_on_error`)."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(
                f"unrecognized arguments: {' '.join(extras)}"
                + _hint(extras, _long_flags(self._chosen(parsed)))
            )
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The subcommand's parser that read the rest of the line, else this one."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(parsed, action.dest, None)
                if chosen in action.choices:
                    return action.choices[chosen]
        return self

    def error(self, message: str) -> NoReturn:
        invalid = _INVALID_CHOICE.search(message)
        if invalid is not None:
            message += _hint([invalid[1]], _QUOTED.findall(invalid[2]))
        fail(message)


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_QUOTED = re.compile(r"'([^']*)'")


def _long_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


def _hint(given: Sequence[str], known: Sequence[str]) -> str:
    """` (did you mean X?)` for the first of `given` close to one of `known`."""
    for word in given:
        name = word.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        if not close:  # a case slip: --Listen, Produce
            close = [k for k in known if k.lower() == name.lower()]
        if close:
            return f" (did you mean {close[0]}?)"
    return ""


def fail(message: str) -> NoReturn:
    print(f"kafkalens: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_CONFIG)


# The proxy's own lines name their message `msg`, so that no reader takes one for a
# request log line (whose kind is `event`), even where both reach one collector.
MESSAGE_KEY = "msg"
_FIRST = ("ts", "level", MESSAGE_KEY, "worker")


def json_output(fmt: str, stream: TextIO) -> bool:
    """`auto`: JSON unless `stream` is a terminal (structlog's own recipe): a person at
    a terminal reads the console form, a collector (journald, `kubectl logs`, Loki)
    parses JSON."""
    return fmt == "json" or (fmt == "auto" and not stream.isatty())


def configure_logging(
    config: LogConfig | None = None, worker: int | None = None, stream: TextIO | None = None
) -> None:
    """The proxy's own log, on stderr (stdout may carry the request log, "-"): one line
    per event, JSON (`ts`, `level`, `msg`, `worker` with `workers: N`, then the event's
    fields) or the console form; lines below `level` are not made at all. Python's
    `logging` (asyncio's own warnings) goes the same way."""
    config = config or LogConfig()
    out = stream or sys.stderr
    as_json = json_output(config.format, out)
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
    ]
    if worker is not None:
        shared.append(_with_worker(worker))
    renderer: Any
    if as_json:
        renderer = _render_json
        shared.append(structlog.processors.EventRenamer(MESSAGE_KEY))
        shared.append(structlog.processors.format_exc_info)
    else:
        # Plain tracebacks: the default (with `rich` installed) prints local variables,
        # which could put a SASL token from a failing hook on stderr.
        renderer = structlog.dev.ConsoleRenderer(
            colors=out.isatty(),
            exception_formatter=structlog.dev.plain_traceback,
            timestamp_key="ts",
            sort_keys=False,
        )
    numeric = logging.getLevelNamesMapping()[config.level.upper()]
    writer = LineWriter(out)
    structlog.configure(
        logger_factory=lambda *_args: writer,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        processors=[*shared, renderer],
        cache_logger_on_first_use=False,
    )
    handler = _WriterHandler(writer)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.INFO))  # libraries' debug lines are not ours
    logging.captureWarnings(True)  # Python's warnings too, not a plain-text line among JSON


class LineWriter:
    """structlog's logger: each line in one write(2), so that the lines of worker
    processes sharing stderr never interleave (print() writes a line and its newline
    apart: seen, two workers' lines run together); a line shorter than PIPE_BUF (4 KiB)
    is atomic on a pipe, as `kubectl logs` and journald read it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        try:
            self.fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.StringIO and the like
            self.fd = None

    def msg(self, message: str) -> None:
        data = (message + "\n").encode("utf-8", "replace")
        with self.lock:
            if self.fd is None:
                self.stream.write(data.decode("utf-8"))
                self.stream.flush()
                return
            self.stream.flush()  # anything print() left in the stream's buffer first
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.fd, view) :]
                except InterruptedError:
                    continue
                except OSError:  # stderr closed or full: the proxy goes on regardless
                    return

    log = debug = info = warn = warning = error = err = critical = exception = msg


class _WriterHandler(logging.Handler):
    def __init__(self, writer: LineWriter) -> None:
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.msg(self.format(record))
        except Exception:
            self.handleError(record)


def _with_worker(worker: int) -> Any:
    def add(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        event_dict["worker"] = worker
        return event_dict

    return add


def _render_json(_logger: Any, _method: str, event_dict: dict[str, Any]) -> str:
    first = {key: event_dict.pop(key) for key in _FIRST if key in event_dict}
    return orjson.dumps({**first, **event_dict}, default=str).decode()
