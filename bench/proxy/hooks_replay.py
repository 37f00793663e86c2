"""The child of `bench.proxy.hooks_cost --instructions`: replays captured request/response pairs
through the hooks `kafkalens proxy` builds, case by case, while its parent counts the
instructions under callgrind.

Run by path with `-P` and PYTHONPATH set to the checkout to measure: it imports nothing
from bench/, so the same file replays through this tree's proxy/ or a baseline's (any
checkout with `build_hooks`). It reads the pairs from a pickle (a list of
(case, api key, api version, correlation id, request body, response body)) and, for each
case and memo mode, replays WARMUP cycles, says `ready`, waits for `go` on stdin, runs
the counted cycles and says `done`. With KAFKALENS_REPLAY_LAG=0 it replays with lag off. It polls stdin with a short timeout rather than
block in a read: callgrind takes its parent's commands while the program runs.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import select
import sys
import time
from typing import Any

from proxy.config import Overrides
from proxy.features import build_hooks, load_config
from proxy.hooks import ConnectionInfo, Pending
from proxy.metrics import Metrics

WARMUP = 200
MEMO_NAMES = ("request_memo", "response_memo", "api_versions_memo")
LAG_ENV = "KAFKALENS_REPLAY_LAG"  # "0": lag.enabled false (hooks_cost --instructions --lag-off)


class FirstSeen:
    """A memo that never remembers: every frame costs what a new one does."""

    def __init__(self, memo: Any) -> None:
        self.memo = memo

    def key(self, *args: Any) -> Any:
        return self.memo.key(*args)

    def get(self, key: Any) -> None:
        return None

    def put(self, key: Any, value: Any) -> None:
        pass


def make_hooks(memo: bool) -> tuple[Any, ConnectionInfo]:
    """The shipped configuration's hooks (lag and the request log on, the log to
    /dev/null; lag off with LAG_ENV=0), and one open connection."""
    config = load_config(None, Overrides(request_log="/dev/null"))
    config = dataclasses.replace(config, request_log=dataclasses.replace(config.request_log, sample_rate=1.0))
    if os.environ.get(LAG_ENV) == "0":
        config = dataclasses.replace(config, lag=dataclasses.replace(config.lag, enabled=False))
    metrics = Metrics()
    hooks = build_hooks(config, metrics)
    if not memo:
        for name in MEMO_NAMES:
            setattr(hooks, name, FirstSeen(getattr(hooks, name)))
    info = ConnectionInfo("bench-1", "plaintext", "127.0.0.1", 50000, "127.0.0.1:9092")
    info.metrics = metrics.connection_opened("plaintext")
    hooks.connection_opened(info)
    return hooks, info


def cycle(hooks: Any, info: ConnectionInfo, pair: tuple[Any, ...]) -> None:
    """What a connection calls for one request and its response."""
    _, api_key, api_version, correlation_id, request, response = pair
    pending = Pending(correlation_id, api_key, api_version, time.perf_counter(), len(request) + 4)
    hooks.request_forwarded(info, memoryview(request), pending)
    if api_key in hooks.rewrite_api_keys:
        response = hooks.rewrite_response(info, memoryview(response), pending) or response
    hooks.response_forwarded(info, memoryview(response), pending)


def _wait_for(word: str) -> None:
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], 0.005)
        if readable:
            line = sys.stdin.readline()
            if line.strip() == word:
                return
            if not line:
                raise SystemExit("stdin closed")


def main() -> None:
    path, calls = sys.argv[1], int(sys.argv[2])
    with open(path, "rb") as handle:
        pairs = pickle.load(handle)
    for memo in (True, False):
        for pair in pairs:
            hooks, info = make_hooks(memo)
            for _ in range(WARMUP):
                cycle(hooks, info, pair)
            gc.collect()
            gc.freeze()  # as a serving kafkalens process does (proxy/runner.py)
            print("ready", flush=True)
            _wait_for("go")
            for _ in range(calls):
                cycle(hooks, info, pair)
            print("done", flush=True)
            _wait_for("next")
            hooks.close()


if __name__ == "__main__":
    main()
