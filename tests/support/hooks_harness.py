"""The observing hooks driven in-process with real frames, no sockets: each exchange is
a request frame and its answer handed to the hooks as the proxy hands them over (whole,
or streamed past in pieces), the request log written to a file and the metrics read
from the registry's rendering."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from codec import HeaderPolicy, Request, Response, encode_request, encode_response
from proxy.config import LagConfig
from proxy.hooks import ConnectionInfo, Pending
from proxy.metrics import Metrics
from proxy.observe.chain import Observer
from proxy.observe.observer import ObservingHooks, lag_link
from proxy.observe.request_log import LineSink, RequestLog
from proxy.observe.summary import SummaryOptions, TopicIds

DEFAULTS = LagConfig()


class Harness:
    def __init__(
        self, tmp_path: Path, lag: LagConfig | None = DEFAULTS, links: tuple[Observer, ...] = ()
    ) -> None:
        """`links`: more links for the observers' chain, after lag's."""
        self.path = tmp_path / "requests.log"
        self.metrics = Metrics()
        self.log = RequestLog(LineSink(str(self.path)))
        summary, topic_ids = SummaryOptions(), TopicIds()
        if lag is not None:
            links = (lag_link(lag, self.metrics, topic_ids, summary), *links)
        self.hooks = ObservingHooks(
            self.metrics, self.log, summary, HeaderPolicy(), links=links, topic_ids=topic_ids
        )
        self.infos: dict[str, ConnectionInfo] = {}
        self.correlation = 0

    def conn(self, name: str, host: str = "10.0.0.7") -> ConnectionInfo:
        info = self.infos.get(name)
        if info is None:
            info = self.infos[name] = ConnectionInfo(name, "plaintext", host, 5000 + len(self.infos), "b:9092")
            info.metrics = self.metrics.connection_opened("plaintext")
            self.hooks.connection_opened(info)
        return info

    def exchange(
        self, request_body: tuple[int, int, dict[str, Any]], response_body: dict[str, Any],
        conn: str = "c-1", client_id: str = "app-1", pieces: int = 0,
    ) -> None:
        """One request and its answer; `pieces` > 0: the answer streams past in pieces
        of that many bytes (the path of frames above limits.observe_whole_frame_bytes)."""
        api_key, version, body = request_body
        self.correlation += 1
        info = self.conn(conn)
        frame = encode_request(Request(api_key, version, {"correlation_id": self.correlation, "client_id": client_id}, body))
        pending = Pending(self.correlation, api_key, version, time.perf_counter(), len(frame) + 4)
        self.hooks.request_forwarded(info, memoryview(frame), pending)
        answer = encode_response(Response(api_key, version, {"correlation_id": self.correlation}, response_body))
        if not pieces:
            self.hooks.response_forwarded(info, memoryview(answer), pending)
            return
        streamed = self.hooks.response_stream(info, pending, len(answer))
        for start in range(0, len(answer), pieces):
            streamed.piece(info, memoryview(answer)[start : start + pieces], pending)
        streamed.done(info, memoryview(b""), pending)

    def lines(self, api: str) -> list[dict[str, Any]]:
        self.log.flush()
        lines = [json.loads(line) for line in self.path.read_text().splitlines()]
        return [line for line in lines if line.get("api") == api]

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        text = self.metrics.render().decode()
        return {
            tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
        }


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))
