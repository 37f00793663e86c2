"""What the observer's parts (streamed.py, telemetry_hooks.py, joining.py) use of the
observer they belong to (observing_hooks.py), which builds them: that module is above
them, so they name it by what they use of it."""

from __future__ import annotations

from typing import Any, Protocol

from codec import HeaderPolicy
from proxy.hooks import ConnectionInfo, Pending
from proxy.metrics import Metrics
from proxy.observe.conn_state import ConnState, Token
from proxy.observe.request_log import RequestLog
from proxy.observe.summary import SummaryOptions, TopicIds


class Observer(Protocol):
    metrics: Metrics
    log: RequestLog | None
    policy: HeaderPolicy
    summary: SummaryOptions
    topic_ids: TopicIds
    states: dict[str, ConnState]

    def clock(self) -> float: ...

    def api_name(self, api_key: int) -> str: ...

    def request_started(self, info: ConnectionInfo, pending: Pending) -> tuple[ConnState | None, Token]: ...

    def request_decoded(self, info: ConnectionInfo, state: ConnState | None, token: Token, request: Any) -> None: ...

    def refresh_identity(self, info: ConnectionInfo, state: ConnState) -> None: ...

    def decode_failed(self, state: ConnState | None, api: str, direction: str) -> None: ...

    def kip1313_violation(
        self, info: ConnectionInfo, state: ConnState, action: str, why: str, api_key: int, api_version: int,
        correlation_id: int,
    ) -> None: ...
