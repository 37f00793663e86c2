"""The proxy as `kafkalens proxy` runs it, for end-to-end tests of what it reports.

`ObservedProxy` starts `proxy.runner.start_proxy` with no hooks given, so it builds
the real ones (decode, identity, request log, metrics, KIP-1313) from its config: the
request log goes to a file, the HTTP endpoint to a free port. Tests then read what an
operator would: the log file, /metrics and /clients over HTTP.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from proxy.features import Config
from proxy.observe.kip1313.config import Kip1313Config
from proxy.observe.observing_hooks import ObservingHooks
from proxy.runner import start_proxy
from proxy.tansu import free_port
from support.proxy_harness import LOCAL, ProxyThread, proxy_config

HTTP_TIMEOUT_S = 15.0


def observed_config(upstream: str, log_path: Path, enforcement: str = "log") -> Config:
    config = proxy_config(upstream)
    return dataclasses.replace(
        config,
        request_log=dataclasses.replace(config.request_log, path=str(log_path)),
        kip1313=Kip1313Config(enforcement=enforcement),
    )


class ObservedProxy(ProxyThread):
    """`start_proxy(config)` as `kafkalens proxy` calls it: the hooks are the observing
    ones (decode, request log, identity, lag, telemetry) built from the config, not the
    harness's no-op `Hooks()`. Given a Config, that one; given an upstream and a log
    path, a sidecar in front of it (`observed_config`)."""

    def __init__(
        self, upstream: str | Config, log_path: Path | None = None, enforcement: str = "log"
    ) -> None:
        if isinstance(upstream, Config):
            config = upstream
        else:
            assert log_path is not None, "an upstream needs a log path"
            config = observed_config(upstream, log_path, enforcement)
        super().__init__(config)
        self.log_path = Path(config.request_log.path) if log_path is None else log_path

    def __enter__(self) -> ObservedProxy:
        return self.start()

    def start(self) -> ObservedProxy:
        self._thread.start()
        self.running = self.run(start_proxy(self.config))  # hooks built from the config
        return self

    @property
    def observing(self) -> ObservingHooks:
        hooks = self.server.hooks
        hooks = getattr(hooks, "inner", hooks)  # a gateway's wrap them
        assert isinstance(hooks, ObservingHooks)
        return hooks

    def http(self, path: str) -> str:
        port = self.clients_port if path.startswith("/clients") else self.http_port
        url = f"http://{LOCAL}:{port}{path}"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
            return str(answer.read().decode())

    def metrics(self) -> Samples:
        return Samples(self.http("/metrics"))

    def http_clients(self) -> list[dict[str, Any]]:
        clients: list[dict[str, Any]] = json.loads(self.http("/clients"))
        return clients

    def wait_all_closed(self, timeout: float = 30.0) -> None:
        """Until the proxy has seen every client connection end (and logged it)."""
        assert self.wait_until(lambda: not self.server.clients(), timeout), self.clients()

    def _flush_log(self) -> None:
        if self.observing.log is not None:
            self.observing.log.flush()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        assert self.running is not None
        text = self.running.metrics.render().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )

    def client(self, sock: socket.socket) -> dict[str, Any] | None:
        """The /clients entry of the proxy's connection with `sock`, if still open."""
        port = f":{sock.getsockname()[1]}"
        return next((c for c in self.clients() if c["client"].endswith(port)), None)

    def closed(self, reason: str) -> float:
        return self.metric("kafkalens_connections_closed_total", reason=reason)

    def decode_errors(self, **labels: str) -> float:
        return self.metric("kafkalens_decode_errors_total", **labels)

    def log_lines(self, event: str, client_port: int | None = None) -> list[dict[str, Any]]:
        """The request log's `event` lines so far (flushed first); only those about the
        client connecting from `client_port` if given (the sentinel's are there too)."""
        self.call(self._flush_log)
        path = Path(self.config.request_log.path)
        lines = [json.loads(line) for line in path.read_text().splitlines() if line]
        port = f":{client_port}" if client_port is not None else ""
        return [
            line
            for line in lines
            if line["event"] == event and line.get("client_address", "").endswith(port)
        ]

    def lines(self) -> list[dict[str, Any]]:
        """Every request log line so far (flushed first; stopping the proxy flushes too)."""
        if self.running is not None:
            self.call(self._flush_log)
        text = self.log_path.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines()]


class Samples:
    """The samples of a /metrics text, looked up by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = [
            (s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample `name` whose labels include `labels`; None if absent."""
        found = [v for n, ls, v in self.samples if n == name and labels.items() <= ls.items()]
        assert len(found) <= 1, (name, labels, found)
        return found[0] if found else None

    def by_labels(self, name: str, *label_names: str) -> dict[tuple[str, ...], float]:
        """The samples `name`, keyed by the values of `label_names`."""
        return {tuple(ls[k] for k in label_names): v for n, ls, v in self.samples if n == name}

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples `name` whose labels include `labels`."""
        return sum(v for n, ls, v in self.samples if n == name and labels.items() <= ls.items())


def eventually(check: Callable[[], Any], timeout: float = 20.0, every: float = 0.2) -> Any:
    """`check()` once it returns something true, polled; the last value on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


@contextmanager
def observed_in_front_of(
    tansu_factory: Callable[..., Any], log_path: Path, enforcement: str = "log"
) -> Iterator[ObservedProxy]:
    """An ObservedProxy forwarding to a tansu broker that advertises the proxy's port."""
    broker_port = free_port()
    with ObservedProxy(f"{LOCAL}:{broker_port}", log_path, enforcement) as px:
        tansu_factory(advertised_port=px.port, port=broker_port)
        yield px
