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
from proxy.hooks import ConnectionInfo, Pending
from proxy.metrics import Metrics
from proxy.observe.chain import Observer, Shared
from proxy.observe.kip1313.config import Kip1313Config
from proxy.observe.kip1313.link import Kip1313Link
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.feature import lag_link
from proxy.observe.observing_hooks import ObservingHooks
from proxy.observe.request_log import LineSink, RequestLog
from proxy.observe.summary import SummaryOptions, TopicIds
from proxy.observe.telemetry.config import TelemetryConfig
from proxy.observe.telemetry.hooks import TelemetryLink
from proxy.observe.telemetry.pushes import Telemetry

DEFAULTS = LagConfig()
PASSWORD = "s3cr3t-Pa55word!"  # what SASL exchanges send: no output may show it


def header(correlation_id: int, client_id: str | None = "app-1", **extra: Any) -> dict[str, Any]:
    return {"correlation_id": correlation_id, "client_id": client_id, **extra}


class Harness:
    """The hooks `kafkalens proxy` builds, with the links asked for, in the order
    proxy/features.py composes them: KIP-1313's (with `enforcement`), telemetry's (when
    `telemetry` is given), lag's (unless `lag` is None), then `links`; `summary` are
    SummaryOptions."""

    def __init__(
        self,
        tmp_path: Path,
        lag: LagConfig | None = DEFAULTS,
        links: tuple[Observer, ...] = (),
        enforcement: str = "log",
        telemetry: TelemetryConfig | None = None,
        **summary: Any,
    ) -> None:
        self.path = tmp_path / "requests.log"
        self.metrics = Metrics()
        self.log = RequestLog(LineSink(str(self.path)))
        options, topic_ids = SummaryOptions(**summary), TopicIds()
        shared = Shared(self.metrics, topic_ids, options, HeaderPolicy())
        if lag is not None:
            links = (lag_link(lag, self.metrics, topic_ids, options), *links)
        if telemetry is not None:
            links = (TelemetryLink(Telemetry(telemetry, self.metrics, HeaderPolicy())), *links)
        links = (Kip1313Link(Kip1313Config(enforcement=enforcement), shared), *links)
        self.hooks = ObservingHooks(
            self.metrics, self.log, options, HeaderPolicy(), links=links, topic_ids=topic_ids,
        )  # fmt: skip
        self.infos: dict[str, ConnectionInfo] = {}
        self.correlation = 0
        self.conn("c-1")  # open from the start, as a proxy's connection is before it reads

    def conn(self, name: str, host: str = "10.0.0.7") -> ConnectionInfo:
        """Connection `name`, opened on first use (client port 50123, 50124, ...)."""
        info = self.infos.get(name)
        if info is None:
            port = 50123 + len(self.infos)
            info = self.infos[name] = ConnectionInfo(name, "plaintext", host, port, "broker:9092")
            info.metrics = self.metrics.connection_opened("plaintext")
            self.hooks.connection_opened(info)
        return info

    @property
    def info(self) -> ConnectionInfo:
        """The first connection, "c-1"."""
        return self.conn("c-1")

    def exchange(
        self, request_body: tuple[int, int, dict[str, Any]], response_body: dict[str, Any],
        conn: str = "c-1", client_id: str = "app-1", pieces: int = 0,
    ) -> None:
        """One request and its answer, from (api key, version, body) and the answer's body,
        numbered by the harness; `pieces` > 0: the answer streams past in pieces of that
        many bytes (the path of frames above limits.observe_whole_frame_bytes)."""
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

    def send(self, request: Request, response: Response | None) -> Pending:
        """`request` and its answer on "c-1" as they are (None: acks=0, no answer)."""
        frame = encode_request(request)
        pending = Pending(request.correlation_id, request.api_key, request.api_version,
                          time.perf_counter(), len(frame) + 4)
        if response is None:
            self.hooks.request_without_response(self.info, memoryview(frame), pending)
            return pending
        self.hooks.request_forwarded(self.info, memoryview(frame), pending)
        self.hooks.response_forwarded(self.info, memoryview(encode_response(response)), pending)
        return pending

    def admit(self, request: Request) -> bytes | None:
        """What admit_request says of `request` on "c-1" (an answer in the broker's place)."""
        return self.hooks.admit_request(
            self.info, memoryview(encode_request(request)), request.api_key,
            request.api_version, request.correlation_id,
        )  # fmt: skip

    def forward(self, request: Request) -> None:
        """`request` forwarded on "c-1", its answer not yet come."""
        pending = Pending(request.correlation_id, request.api_key, request.api_version, time.perf_counter(), 0)
        self.hooks.request_forwarded(self.info, memoryview(encode_request(request)), pending)

    def close(self) -> None:
        for info in self.infos.values():
            self.hooks.connection_closed(info, "client_closed")
        self.log.close()

    def metric_text(self) -> str:
        return self.metrics.render().decode()

    def lines(self, api: str | None = None) -> list[dict[str, Any]]:
        """The log's lines so far (those of `api`, if given)."""
        self.log.flush()
        lines = [json.loads(line) for line in self.path.read_text().splitlines()]
        return [line for line in lines if api is None or line.get("api") == api]

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
