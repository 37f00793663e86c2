"""Hostile peers against the C steady-state path (proxy/_steady.c): a client and a
broker that, between well-formed exchanges the C path takes, send pipelined frames,
frames cut across reads, bytes flipped in headers and bodies (an api key, a correlation
id, a length), answers to no request, truncated answers and lengths past any bound.
The C path must hand everything it does not take to the Python path untouched, which
forwards, counts a decode error or closes the offending connection; nothing raises on
the proxy's loop, and a well-behaved client is served at the end. Fixed seeds: a
failure replays. tests/proxy/test_steady_sanitized.py runs this under AddressSanitizer and
UBSan."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.proxy_harness import ProxyThread, proxy_config
from support.replay import Exchange, sessions, small_requests
from support.steady_peers import HostileBroker, HostileClient

from proxy import steady
from proxy.config import Overrides
from proxy.features import build_hooks, load_config
from proxy.metrics import Metrics

pytestmark = pytest.mark.skipif(not steady.AVAILABLE, reason="proxy._steady was not built (no C compiler)")

STEPS = 400

def _with_produce_and_fetch() -> list[Exchange]:
    """The small requests and librdkafka's Produces and Fetches (never memoised: the C
    path frames them and hands each to the hooks)."""
    session = [e for e in sessions()["confluent-kafka"] if e.response is not None and e.api_key in (0, 1)]
    return [*small_requests(), *session[:4]]


@pytest.mark.parametrize("make", [small_requests, _with_produce_and_fetch], ids=["memoised", "produce-fetch"])
def test_hostile_peers_around_the_c_path_break_nothing(tmp_path: Path, make: Callable[[], list[Exchange]]) -> None:
    script = make()
    broker = HostileBroker(script, seed=7)
    config = load_config(None, Overrides(request_log=str(tmp_path / "requests.log")))
    metrics = Metrics()
    hooks = build_hooks(config, metrics)
    taken: list[Any] = []
    made = steady.core

    def core(*args: Any) -> Any:
        taken.append(made(*args))
        return taken[-1]

    proxied = dataclasses.replace(proxy_config(f"127.0.0.1:{broker.port}"), request_log=config.request_log)
    failures: list[dict[str, Any]] = []
    try:
        steady.core = core
        with ProxyThread(proxied, hooks) as px:
            px.loop.call_soon_threadsafe(px.loop.set_exception_handler, lambda _, context: failures.append(context))
            client = HostileClient(px.port, script, seed=11)
            for _ in range(STEPS):
                client.step()
            client.close()
            # a well-behaved client is served
            broker.hostile = False
            good = HostileClient(px.port, [e for e in script if e.api_key != 8], seed=0)
            good.connect()
            frames = [good.frame(e) for e in good.script]
            good.send(frames)
            assert good.drain(len(frames), 5.0) == len(frames)
            good.close()
            text = metrics.render().decode()
    finally:
        steady.core = made
        broker.close()
        hooks.close()
    assert not failures, failures[:3]
    assert sum(sum(core.taken) for core in taken) > STEPS  # the C path took its share
    if make is _with_produce_and_fetch:  # and handed Produces and Fetches to the hooks
        assert sum(core.observed[0] for core in taken) > STEPS // 10, [core.observed for core in taken]
    assert 'kafkalens_decode_errors_total{api="' in text
    assert client.reconnects > 3
