"""Waiting for the signals that stop a proxy; light on imports, so that the parent of
worker processes, which forwards nothing, does not load the codec just for this."""

from __future__ import annotations

import asyncio
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def wait_for_stop_signal(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
    """Until one of `signals`. A second one during the shutdown that follows is ignored
    rather than killing the process halfway through draining."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
