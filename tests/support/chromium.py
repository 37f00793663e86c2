"""A real browser for the tests: Debian's headless `chromium`, driven over the Chrome
DevTools Protocol through a pipe (`--remote-debugging-pipe`: commands on fd 3, answers
on fd 4, JSON messages ended by a NUL byte), so nothing but the standard library is
needed and no port is opened.

`Browser` starts one with a fresh profile directory, opens a page (`open`), evaluates
JavaScript in it (`evaluate`), takes screenshots (`screenshot`) and records what the
page says on its console and the exceptions it throws (`Page.console_errors`). It is
killed when the `with` block ends (and dies with the test process if that dies
first).

When `chromium` is missing a test is skipped with the reason, unless
`KAFKALENS_REQUIRE_PEERS=1` (CI, whose .ci/run installs it) makes it fail.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# The flags Debian's chromium needs headless as root in a container, and none of the
# background traffic a first run makes (no network here but the package registries).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio",
         "--remote-debugging-pipe"]
TIMEOUT = 60.0

_prctl: Callable[..., int] | None
try:
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except OSError:  # not glibc
    _prctl = None


def require() -> str:
    """The chromium binary; skip (or fail under KAFKALENS_REQUIRE_PEERS=1) without it."""
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    reason = "chromium not installed (Debian's `chromium` package; .ci/run installs it)"
    if os.environ.get("KAFKALENS_REQUIRE_PEERS") == "1":
        pytest.fail(f"KAFKALENS_REQUIRE_PEERS=1 but {reason}")
    pytest.skip(reason)


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        self.binary = require()
        self.profile = profile
        self.width, self.height = width, height
        self._next = 0
        self._buffer = b""
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        self.profile.mkdir(parents=True, exist_ok=True)
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def in_child() -> None:
            # Out of the way first: either pipe end may itself be fd 3 or 4.
            read_end = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)
            if _prctl is not None:
                _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no browser outlives a dead run

        self.proc = subprocess.Popen(
            [self.binary, *FLAGS, f"--user-data-dir={self.profile}",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.profile / "chromium.log", "wb"),  # noqa: SIM115 - the child's
            # Python's descriptors are not inherited (PEP 446) but for the two dup2 made
            # inheritable at 3 and 4; close_fds would close those.
            close_fds=False, preexec_fn=in_child)
        os.close(to_child_r)
        os.close(from_child_w)
        return self

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(OSError):
            os.close(self._to_child)
        with contextlib.suppress(OSError):
            os.close(self._from_child)
        self.proc.kill()
        self.proc.wait(timeout=30)

    # --- the protocol ------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    log = (self.profile / "chromium.log").read_text(errors="replace")[-2000:]
                    raise BrowserError(f"chromium exited: {log}")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        decoded: dict[str, Any] = json.loads(message)
        return decoded

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = TIMEOUT) -> dict[str, Any]:
        """A command's result; the events that arrive meanwhile are kept in `events`."""
        self._next += 1
        command: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = session
        os.write(self._to_child, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self._next:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, method: str, session: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read_message(deadline))

    def open(self, url: str) -> Page:
        """A new page at `url`, once it has loaded (its load event)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1,
                   "mobile": False}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        return Page(self, session)


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (JSON-able), or BrowserError if it threw."""
        got = self.browser.send("Runtime.evaluate", {"expression": expression,
                                                     "returnByValue": True,
                                                     "awaitPromise": True}, self.session)
        if "exceptionDetails" in got:
            raise BrowserError(f"{expression[:80]}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def console_errors(self) -> list[str]:
        """What the page logged as an error or warning, and the exceptions it threw."""
        self.evaluate("0")  # events sent before this answer are in now
        said = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                said.append(f"exception: {params['exceptionDetails']}")
            elif (event["method"] == "Runtime.consoleAPICalled"
                  and params.get("type") in ("error", "warning", "assert")):
                said.append(f"console.{params['type']}: {params.get('args')}")
            elif (event["method"] == "Log.entryAdded"
                  and params["entry"].get("level") in ("error", "warning")):
                said.append(f"log {params['entry']['level']}: {params['entry'].get('text')} "
                            f"({params['entry'].get('url', '')})")
        return said

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.evaluate("[document.documentElement.scrollWidth,"
                                 "document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        data = self.browser.send("Page.captureScreenshot", params, self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
