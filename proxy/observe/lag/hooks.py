"""Consumer lag, share groups and topic traffic, a link of the observers' chain
(chain.py) that feeds them (tracker.py, share.py, traffic.py): what Produce, Fetch,
ShareFetch, ShareAcknowledge, group heartbeat and OffsetCommit requests ask, and their
answers."""

from __future__ import annotations

from typing import Any

from codec import Response
from proxy.hooks import ConnectionInfo
from proxy.observe.chain import ConnState, Observer, Token
from proxy.observe.lag.share import (
    CONSUMER_GROUP_HEARTBEAT,
    HEARTBEAT_APIS,
    SHARE_APIS,
    HeartbeatAsk,
    ShareAsk,
    ShareTracker,
)
from proxy.observe.lag.tracker import (
    FETCH,
    HEARTBEAT,
    LAG_APIS,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    PRODUCE,
    FetchAsk,
    LagTracker,
    ProduceAsk,
)
from proxy.observe.lag.traffic import TopicTraffic
from proxy.observe.summary import SummaryOptions, TopicIds, response_fields

UNKNOWN = "unknown"
UNKNOWN_SOFTWARE = (UNKNOWN, UNKNOWN)


class LagConnState:
    """The link's own state of a connection (`ConnState.kept[link]`)."""

    __slots__ = ("member", "fetcher", "traffic")

    def __init__(self) -> None:
        # (identity_key, group) under which the tracker noted the client a member of
        # that group: noting it again changes nothing
        self.member: tuple[Any, ...] | None = None
        # (identity_key, LagTracker.learnt, client, group): who its Fetch requests are
        # of, as LagTracker.client_of and group_of said while neither has changed
        self.fetcher: tuple[Any, int, str, str] | None = None
        # (software, principal, their traffic labels): while neither changes
        self.traffic: tuple[Any, Any, str, str] | None = None


class LagLink(Observer):
    request_apis = LAG_APIS | SHARE_APIS | HEARTBEAT_APIS | {PRODUCE}
    partition_stats_apis = frozenset({PRODUCE})  # the records a Produce appends, by partition
    # a group member's requests: read for its group, an OffsetCommit's answer skimmed
    steady_apis = frozenset({OFFSET_COMMIT, HEARTBEAT, LEAVE_GROUP})
    # a group member's requests (GROUP_APIS), tested first: they are what the C path
    # hands the link most
    member_apis = request_apis - SHARE_APIS - HEARTBEAT_APIS - {PRODUCE, FETCH}

    def __init__(
        self, lag: LagTracker, traffic: TopicTraffic, summary: SummaryOptions, topic_ids: TopicIds, share: ShareTracker
    ) -> None:
        self.lag = lag
        self.traffic = traffic
        self.summary = summary
        self.topic_ids = topic_ids
        self.share = share

    def new_state(self) -> LagConnState:
        return LagConnState()

    def request(
        self, info: ConnectionInfo, state: ConnState, token: Token, request: Any,
        partition_stats: dict[tuple[str, int], Any] | None,
    ) -> None:
        """`partition_stats`: a Produce request's RecordStats by (topic, partition), when
        its fields were made with them (see request_fields)."""
        api_key = request.api_key
        if api_key in self.member_apis:
            # A group member's request (GROUP_APIS), what the C path hands the link most:
            # its client noted as a member of the group it names (once per connection
            # while its identity and the group stay: `LagConnState.member`), and an
            # OffsetCommit's offsets asked about.
            group = token.fields.get("group_id")
            if group:
                noted = (state.identity_key, group)
                kept: LagConnState = state.kept[self]
                if kept.member != noted and self.lag.member(state.identity, info.client_host, group):
                    kept.member = noted
                if api_key == OFFSET_COMMIT:
                    token.ask = self.lag.commit_ask(request.body, group)
                    token.asked_by = self
            return
        ask: Any = None
        if api_key == FETCH:
            kept = state.kept[self]
            who = kept.fetcher
            lag = self.lag
            if who is None or who[0] is not state.identity_key or who[1] != lag.learnt:
                identity, host = state.identity, info.client_host
                who = kept.fetcher = (
                    state.identity_key, lag.learnt, lag.client_of(identity, host), lag.group_of(identity, host)
                )
            ask = lag.fetch_ask(request.body, token.fields, who[2], who[3])
        elif api_key == PRODUCE:
            stats = token.fields.get("record_stats")
            if stats:
                self._traffic(info, state, stats, "produce")
            if partition_stats and request.body.get("acks"):  # acks=0: no answer to read
                ask = self.lag.produce_request(partition_stats)
        elif api_key in SHARE_APIS:
            ask = self.share.request(request, token.fields)
        elif api_key in HEARTBEAT_APIS:
            if api_key == CONSUMER_GROUP_HEARTBEAT:  # its member's group, for lag
                self.lag.request(request, token.fields, state.identity, info.client_host)
            ask = self.share.heartbeat(request)
        if ask is not None:
            token.ask = ask
            token.asked_by = self

    def answered(
        self, info: ConnectionInfo, state: ConnState | None, token: Token, response: Response | None,
        fields: dict[str, Any] | None,
    ) -> dict[str, Any]:
        ask = token.ask
        # What the link reads most, Fetch answers (decoded whole) and Produce answers
        # (skimmed, their partitions' ends picked: token.picked), first
        if ask.__class__ is FetchAsk:
            return self.fetch_fields(info, state, response, ask)  # type: ignore[arg-type]
        if ask.__class__ is ProduceAsk:
            assert fields is not None
            if token.picked is not None:  # else the answer could not be read
                self.lag.produce_done(ask, token.picked)
            return fields
        if response is None:  # an OffsetCommit's, read from its skimmed answer
            assert fields is not None
            fields = self.lag.commit_answer(ask, fields)
            if "committed_dropped" in fields:
                self.share.truncated.labels(field="committed").inc()
            return fields
        return self.answer_fields(info, state, response, ask, token.fields.get("protocol_type"))

    def identity_changed(self, info: ConnectionInfo, state: ConnState) -> None:
        """Consumers are found by client id and host: their instance id, once known."""
        identity = state.identity
        if identity.client_instance_id and identity.client_id:
            self.lag.learn_instance(identity.client_id, info.client_host, identity.client_instance_id)

    def _traffic(self, info: ConnectionInfo, state: ConnState, stats: dict[str, Any], direction: str) -> None:
        software = info.metrics.software if info.metrics is not None else UNKNOWN_SOFTWARE
        principal = state.identity.principal
        kept: LagConnState = state.kept[self]
        labels = kept.traffic
        if labels is None or labels[0] is not software or labels[1] is not principal:
            labels = kept.traffic = (software, principal, f"{software[0]}/{software[1]}", principal or UNKNOWN)
        self.traffic.add(stats["per_topic"], direction, labels[2], labels[3])

    def answer_fields(
        self, info: ConnectionInfo, state: ConnState | None, response: Response, ask: Any, protocol_type: str | None
    ) -> dict[str, Any]:
        """The line fields of an answer decoded whole whose request left an ask (an
        OffsetCommit's and a Produce's are skimmed: `answered` reads those)."""
        if ask.__class__ is FetchAsk:
            return self.fetch_fields(info, state, response, ask)
        fields = response_fields(response, self.summary, self.topic_ids, protocol_type)
        if ask.__class__ is ShareAsk:
            self.share.answered(ask, response, fields)
            stats = fields.get("record_stats")
            if stats and state is not None:
                self._traffic(info, state, stats, "fetch")
        elif ask.__class__ is HeartbeatAsk:
            self.share.heartbeat_answered(ask, response, fields)
        return fields

    def fetch_fields(
        self, info: ConnectionInfo, state: ConnState | None, response: Response, ask: FetchAsk
    ) -> dict[str, Any]:
        """A Fetch response's line fields, and its positions for the lag tracker."""
        partition_stats: dict[tuple[str, int], Any] = {}
        fields = response_fields(response, self.summary, self.topic_ids, None, partition_stats)
        self.lag.fetch_done(ask, response.body, partition_stats, fields)
        if "positions_dropped" in fields:
            self.share.truncated.labels(field="positions").inc()
        stats = fields.get("record_stats")
        if stats and ask.replica < 0 and state is not None:
            self._traffic(info, state, stats, "fetch")
        return fields

