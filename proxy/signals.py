"""Waiting for the signals that stop a proxy, and handling SIGHUP; light on imports, so
that the parent of worker processes, which forwards nothing, does not load the codec
just for this."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Protocol

import structlog

log = structlog.get_logger("kafkalens.proxy")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# logrotate's usual `postrotate kill -HUP`: reopen the log files, never stop.
REOPEN_SIGNAL = signal.SIGHUP


class StopSignal(asyncio.Event):
    """Set by the first stop signal; `received` says which (for the line that says so)."""

    received: signal.Signals | None = None

    @property
    def name(self) -> str:
        return self.received.name if self.received is not None else "none"


def stop_signal(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> StopSignal:
    """Set by the first of `signals` from now on. Taken before the listeners open: from
    the moment a port answers, a SIGTERM (an orchestrator stopping a pod it just saw
    ready) is a graceful stop, not the default action killing the process with the
    connections it accepted meanwhile (it did, every time, for SIGTERM sent as soon as
    the port answered: start-up's garbage collection comes in between). A second signal
    during the shutdown that follows is ignored rather than killing the process halfway
    through draining."""
    loop = asyncio.get_running_loop()
    stop = StopSignal()

    def received(sig: signal.Signals) -> None:
        if stop.received is None:
            stop.received = sig
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, received, sig)
    return stop


async def wait_for_stop_signal(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
    """Until one of `signals` (from now on: see stop_signal)."""
    await stop_signal(signals).wait()


def ignore_reopen_signal() -> None:
    """From the start of `kafkalens proxy` until `on_reopen_signal`: SIGHUP's default
    action ends the process. Worker processes inherit the setting (it survives exec)."""
    signal.signal(REOPEN_SIGNAL, signal.SIG_IGN)


def on_reopen_signal(callback: Callable[[], None]) -> None:
    """SIGHUP calls `callback` on the running loop from now on."""
    asyncio.get_running_loop().add_signal_handler(REOPEN_SIGNAL, callback)


class _ReopensLogs(Protocol):
    def reopen_logs(self) -> None: ...


def reopen_logs_on_sighup(hooks: _ReopensLogs) -> None:
    """SIGHUP (logrotate) reopens the request log at its path; the process goes on."""

    def reopen() -> None:
        log.info("SIGHUP: reopening the request log")
        try:
            hooks.reopen_logs()
        except Exception:
            log.exception("reopening the request log failed")

    on_reopen_signal(reopen)
