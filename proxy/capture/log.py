"""The request log of `kafkalens decode CAPTURE`: the proxy's observer and request
log, their clocks set to the capture's, the lines written straight to a file."""

from __future__ import annotations

import time
from typing import IO, Any, cast

from proxy.observe.observing_hooks import ObservingHooks
from proxy.observe.request_log import LineSink, RequestLog, Timestamp


class CaptureHooks(ObservingHooks):
    """The proxy's observer, its clocks set to the capture's time."""

    now = 0.0

    def clock(self) -> float:
        return self.now

    def wall_clock(self) -> float:
        return self.now


class Output:
    """A LineSink's one method, writing straight to a file (no thread, no dropping)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.lines = 0

    def msg(self, line: bytes) -> None:
        self.out.write(line + b"\n")
        self.lines += 1


class _CaptureTime(Timestamp):
    """The request log's `ts`: the capture's time of the packet being decoded."""

    def __init__(self, hooks: CaptureHooks) -> None:
        super().__init__()
        self.hooks = hooks

    def __call__(self) -> str:
        now = self.hooks.now
        second = int(now)
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{prefix}.{int((now - second) * 1_000_000):06d}Z"


class CaptureLog(RequestLog):
    """With `apis` (`kafkalens decode --filter`), only the lines of those apis: not the
    connections' lines either, which name no api."""

    def __init__(self, output: Output, apis: tuple[str, ...], hooks: CaptureHooks) -> None:
        super().__init__(cast(LineSink, output), apis=apis)
        self._timestamp = self.capture_time = _CaptureTime(hooks)

    def write(self, event: str, fields: dict[str, Any]) -> None:
        if self.apis and not (
            fields.get("api") in self.apis or str(fields.get("api_key")) in self.apis
        ):
            return
        super().write(event, fields)
