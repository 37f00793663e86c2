"""What a request log line says about a decoded request and its response.

Pure functions over decoded messages. What is never logged, by construction: the
content of any `bytes` field (SASL tokens, delegation-token HMACs, SCRAM salts and
passwords, telemetry payloads) and any config value; only the names and numbers
picked here reach a log line. Client-controlled strings pass through `clean`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from codec import ApiKey, DecodeError, Request, Response
from codec.entities import ERROR_CODES, GROUPS, TOPICS, TRANSACTIONAL_IDS, collector
from codec.error_codes import error_name
from codec.groups import group_payloads
from codec.records import iter_records, summarize
from codec.schema import api_messages
from codec.stream import StreamedRecords
from proxy.config import MAX_STRING_LENGTH

MAX_LISTED = 100
# Records whose headers one request's line looks at: iterating runs on the event loop at
# a few microseconds a record, and a small compressed Produce can hold millions.
MAX_DETAIL_RECORDS = 10_000  # topics, groups or config names listed in one line; the rest are counted

# Plain ints named by ApiKey: an int compared with an IntEnum member misses CPython's
# int fast path (proxy/exchange/kafka.py says what it cost).
PRODUCE = int(ApiKey.PRODUCE)
FETCH = int(ApiKey.FETCH)
METADATA = int(ApiKey.METADATA)
INIT_PRODUCER_ID = int(ApiKey.INIT_PRODUCER_ID)
ALLOCATE_PRODUCER_IDS = int(ApiKey.ALLOCATE_PRODUCER_IDS)
JOIN_GROUP = int(ApiKey.JOIN_GROUP)
SYNC_GROUP = int(ApiKey.SYNC_GROUP)
API_VERSIONS = int(ApiKey.API_VERSIONS)
SHARE_FETCH = int(ApiKey.SHARE_FETCH)
OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)
OFFSET_FETCH = int(ApiKey.OFFSET_FETCH)
TXN_OFFSET_COMMIT = int(ApiKey.TXN_OFFSET_COMMIT)
CONFIG_APIS = {19: "topics", 33: "resources", 44: "resources"}  # CreateTopics, AlterConfigs...


@dataclass(frozen=True)
class SummaryOptions:
    record_detail: bool = False
    header_value_allowlist: frozenset[str] = frozenset({"traceparent", "tracestate"})
    max_string_length: int = MAX_STRING_LENGTH
    decompression_limit: int = 64 * 1024 * 1024


@dataclass
class TopicIds:
    """Topic id -> name, learnt from Metadata responses (Fetch v13+ names topics by id).
    `names` changes through `learn`, `learn_pairs` and `name` only: `clean_name` keeps
    what it made while `changes` stays."""

    names: dict[Any, str] = field(default_factory=dict)
    limit: int = 100_000
    changes: int = field(default=0, compare=False)  # bumped when an id's name changes
    # id(topic id) -> (the topic id, changes, limit, its clean name): see clean_name
    _cleaned: dict[int, tuple[Any, int, int, str]] = field(default_factory=dict, repr=False, compare=False)

    def learn(self, body: dict[str, Any]) -> None:
        for topic in body.get("topics") or ():
            topic_id, name = topic.get("topic_id"), topic.get("name")
            if topic_id is not None and name:
                self._put(topic_id, name)

    def learn_pairs(self, pairs: list[tuple[Any, str]]) -> None:
        for topic_id, name in pairs:
            if name:
                self._put(topic_id, name)

    def _put(self, topic_id: Any, name: str) -> None:
        # A name replaces an id remembered as its text; new ids stop at the limit.
        known = self.names.get(topic_id)
        if known != name and (known is not None or len(self.names) < self.limit):
            self.names[topic_id] = name
            self.changes += 1

    def name(self, topic: dict[str, Any]) -> str:
        name = topic.get("topic") or topic.get("name")
        if name:
            return str(name)
        topic_id = topic.get("topic_id")
        known = self.names.get(topic_id)
        if known is None:
            # An id no Metadata answer named: shown as its text, remembered as such
            # (a uuid's str() costs more than the rest of a Fetch request's summary).
            known = str(topic_id)
            if len(self.names) < self.limit:
                self.names[topic_id] = known
        return known

    def clean_name(self, topic: dict[str, Any], limit: int) -> str:
        """clean(name(topic), limit), made once per topic id object while no name changes:
        the codec shares a topic id's UUID between frames (codec.wire.uuid_of), and a
        UUID's hash is a Python call (UUID.__hash__), dearer than the rest of a lookup."""
        name = topic.get("topic") or topic.get("name")
        if name:
            return clean(str(name), limit)
        topic_id = topic.get("topic_id")  # clean_id, inlined: every Fetch topic by id comes here
        made = self._cleaned.get(id(topic_id))
        if made is not None and made[0] is topic_id and made[1] == self.changes and made[2] == limit:
            return made[3]
        return self.clean_id(topic_id, limit)

    def clean_id(self, topic_id: Any, limit: int) -> str:
        """clean_name of a topic named by its id (a Produce answer's, v13+)."""
        made = self._cleaned.get(id(topic_id))
        if made is not None and made[0] is topic_id and made[1] == self.changes and made[2] == limit:
            return made[3]
        text: str = clean(self.name({"topic_id": topic_id}), limit)
        if len(self._cleaned) >= 4096:
            self._cleaned.clear()
        # the entry holds the topic id: its id() is not another object's while it is kept
        self._cleaned[id(topic_id)] = (topic_id, self.changes, limit, text)
        return text


@dataclass
class GroupProtocols:
    """(group id, generation) -> protocol type, from the JoinGroups one connection made.

    JoinGroup responses before v7 and SyncGroup messages before v5 do not say which
    protocol their payloads follow, but the JoinGroup request always does and a
    generation's protocol type is fixed: a SyncGroup for a generation joined on the same
    connection (clients join and sync on their coordinator connection) can be decoded.
    """

    known: dict[tuple[Any, Any], str] = field(default_factory=dict)
    limit: int = 16

    def learn(self, request_fields: dict[str, Any], response: Response) -> None:
        """After a JoinGroup response; `request_fields` are its request's line fields."""
        body = response.body
        protocol_type = request_fields.get("protocol_type")
        if response.api_key != JOIN_GROUP or body.get("error_code") or not protocol_type:
            return
        if len(self.known) >= self.limit:
            del self.known[next(iter(self.known))]  # the oldest generation
        self.known[(request_fields.get("group_id"), body.get("generation_id"))] = protocol_type

    def of_request(self, request: Request, limit: int) -> str | None:
        """The protocol type of a SyncGroup request's generation, if joined here."""
        if request.api_key != SYNC_GROUP:
            return None
        body = request.body
        return self.known.get((clean(body.get("group_id"), limit), body.get("generation_id")))


def _with_protocol_type(message: Any, protocol_type: str | None) -> Any:
    """`message` with `protocol_type` filled in where its version carries none."""
    if not protocol_type or message.body.get("protocol_type"):
        return message
    return replace(message, body={**message.body, "protocol_type": protocol_type})


def clean(value: Any, limit: int) -> Any:
    """A client-controlled string made safe for a log line: short and printable."""
    if not isinstance(value, str):
        return value
    if len(value) > limit:
        value = value[:limit] + "…"
    if not value.isprintable():
        value = "".join(ch if ch.isprintable() else "?" for ch in value)
    return value


def _listed(values: list[Any], limit: int) -> list[Any]:
    return [clean(v, limit) for v in values[:MAX_LISTED]]


def request_fields(
    request: Request,
    options: SummaryOptions,
    topic_ids: TopicIds,
    protocol_type: str | None = None,
    partition_stats: dict[tuple[str, int], Any] | None = None,
) -> dict[str, Any]:
    """`protocol_type`: the group's, for a SyncGroup whose version does not carry it;
    `partition_stats`: filled with a Produce request's RecordStats per (topic, partition)."""
    if request.api_key == SYNC_GROUP:
        request = _with_protocol_type(request, protocol_type)
    body, name = request.body, _message_name(request.api_key, "request")
    version, limit = request.api_version, options.max_string_length
    out: dict[str, Any] = {}
    found = collector(name, version)(body)
    topics = found[TOPICS]
    if topics:
        out["topics"] = _listed(topics, limit)
        if len(topics) > MAX_LISTED:
            out["topic_count"] = len(topics)
    groups = found[GROUPS]
    if groups:
        out["group_id"] = clean(groups[0], limit)
        if len(groups) > 1:
            out["group_ids"] = _listed(groups, limit)
    transactional = found[TRANSACTIONAL_IDS]
    if transactional:
        out["transactional_id"] = clean(transactional[0], limit)
    _group_member_fields(body, out, limit)
    if partition_stats is not None and request.api_key == PRODUCE:
        _produce_request(request, out, options, topic_ids, partition_stats)
        return out
    extra = _REQUEST_EXTRAS.get(request.api_key)
    if extra is not None:
        extra(request, out, options, topic_ids)
    return out


# Responses a log line needs whole (record batches, group payloads, identity); the
# others are skimmed (codec/skim.py): parsed fully, materialising only names and errors.
# (ShareFetch and ShareAcknowledge answers are decoded whole when share groups are
# tracked, lag.enabled: proxy/observe/lag/share.py reads them.)
FULL_DECODE_RESPONSES = frozenset({
    FETCH, JOIN_GROUP, SYNC_GROUP, API_VERSIONS, INIT_PRODUCER_ID, ALLOCATE_PRODUCER_IDS,
    68, 71, 76, 88,  # Consumer/Share/StreamsGroupHeartbeat (member ids), telemetry (instance id)
})


def skimmed_response_fields(api_key: int, found: dict[str, Any], topic_ids: TopicIds) -> dict[str, Any]:
    out: dict[str, Any] = {"errors": sorted({error_name(c) for c in found["errors"]})}
    if api_key == METADATA:
        topic_ids.learn_pairs(found["topic_ids"])
        out["broker_count"] = found["counts"].get("brokers", 0)
        out["topic_count"] = found["counts"].get("topics", 0)
    return out


def response_fields(
    response: Response,
    options: SummaryOptions,
    topic_ids: TopicIds,
    protocol_type: str | None = None,
    partition_stats: dict[tuple[str, int], Any] | None = None,
) -> dict[str, Any]:
    """`protocol_type`: the one the request named, for group responses that carry none;
    `partition_stats`: filled with a Fetch response's RecordStats per (topic, partition)."""
    if response.api_key in (JOIN_GROUP, SYNC_GROUP):
        response = _with_protocol_type(response, protocol_type)
    body, name = response.body, _message_name(response.api_key, "response")
    codes = collector(name, response.api_version)(body)[ERROR_CODES]
    out: dict[str, Any] = {"errors": sorted(error_name(c) for c in codes if c)}
    if partition_stats is not None and response.api_key == FETCH:
        _fetch_response(response, out, options, topic_ids, partition_stats)
        return out
    extra = _RESPONSE_EXTRAS.get(response.api_key)
    if extra is not None:
        extra(response, out, options, topic_ids)
    return out


def _message_name(api_key: int, kind: str) -> str:
    return _MESSAGE_NAMES[(api_key, kind)]


_MESSAGE_NAMES = {
    (key, kind): message.name
    for key, pair in api_messages().items()
    for kind, message in zip(("request", "response"), pair, strict=True)
}


def _group_member_fields(body: dict[str, Any], out: dict[str, Any], limit: int) -> None:
    for key in ("member_id", "group_instance_id", "protocol_type", "protocol_name"):
        value = body.get(key)
        if value:
            out[key] = clean(value, limit)
    for key in ("generation_id", "generation_id_or_member_epoch", "member_epoch"):
        if key in body:
            out["generation_id"] = body[key]
            break


def _record_stats(
    topics: list[dict[str, Any]],
    partitions_key: str,
    options: SummaryOptions,
    topic_ids: TopicIds,
    partial_tail: bool,
    partition_stats: dict[tuple[str, int], Any] | None = None,
) -> dict[str, Any]:
    """`partition_stats`, if given, gets each partition's RecordStats by (topic, index).

    Sums kept in locals and written once: a dict update per field and partition cost
    more than the headers' walk in C (bench/PROFILE.md, "Produce and Fetch of a few
    records")."""
    limit = options.max_string_length
    per_topic: dict[str, dict[str, int]] = {}
    batches = records_total = size = control = 0
    compressions: set[str] = set()
    producer_id = producer_epoch = None
    transactional = False
    detail = options.record_detail
    header_keys: dict[str, None] = {}
    header_values: dict[str, list[str]] = {}
    budget = [MAX_DETAIL_RECORDS]
    for topic in topics:
        name = topic_ids.clean_name(topic, limit)
        per = per_topic.get(name)
        if per is None:
            per = per_topic[name] = {"batches": 0, "records": 0, "bytes": 0}
        for partition in topic.get(partitions_key) or ():
            records = partition.get("records")
            if not records:
                continue
            if records.__class__ is StreamedRecords:  # a frame decoded as it streamed past
                stats, records = records.stats, records.detail
            else:
                stats = summarize(records, allow_partial_tail=partial_tail, max_bytes=options.decompression_limit)
            if partition_stats is not None:  # a Fetch response's partition_index, a Produce's index
                index = partition.get("partition_index")
                partition_stats[(name, partition.get("index") if index is None else index)] = stats
            n_batches, n_records, n_bytes = stats.batches, stats.records, stats.bytes
            batches += n_batches
            records_total += n_records
            size += n_bytes
            per["batches"] += n_batches
            per["records"] += n_records
            per["bytes"] += n_bytes
            if stats.compressions:
                compressions |= stats.compressions
            control += stats.control_batches
            transactional = transactional or stats.transactional
            if producer_id is None and stats.producer_id != -1:
                producer_id, producer_epoch = stats.producer_id, stats.producer_epoch
            if detail and records:
                _collect_headers(records, options, header_keys, header_values, partial_tail, budget)
    if not per_topic:
        return {}
    total: dict[str, Any] = {
        "batches": batches, "records": records_total, "bytes": size, "compression": sorted(compressions),
        "producer_id": producer_id, "producer_epoch": producer_epoch, "transactional": transactional,
        "control_batches": control, "per_topic": per_topic,
    }  # fmt: skip
    if detail:
        total["header_keys"] = [clean(k, limit) for k in header_keys]
        if budget[0] <= 0:
            total["header_keys_from_first_records"] = MAX_DETAIL_RECORDS
        if header_values:
            total["header_values"] = header_values
    return total


def _collect_headers(
    records: Any,
    options: SummaryOptions,
    keys: dict[str, None],
    values: dict[str, list[str]],
    partial_tail: bool,
    budget: list[int],
) -> None:
    try:
        for record in iter_records(records, max_bytes=options.decompression_limit, allow_partial_tail=partial_tail):
            budget[0] -= 1
            if budget[0] < 0:
                return
            for key, value in record.headers:
                keys.setdefault(key, None)
                if key in options.header_value_allowlist and value is not None:
                    seen = values.setdefault(key, [])
                    if len(seen) < 10:
                        seen.append(clean(bytes(value).decode("utf-8", "replace"), options.max_string_length))
    except DecodeError as exc:
        keys.setdefault(f"<undecodable: {exc.reason}>", None)


def _produce_request(
    request: Request,
    out: dict[str, Any],
    options: SummaryOptions,
    ids: TopicIds,
    partition_stats: dict[tuple[str, int], Any] | None = None,
) -> None:
    out["acks"] = request.body.get("acks")
    topics = request.body.get("topic_data") or []
    stats = _record_stats(topics, "partition_data", options, ids, False, partition_stats)
    if stats:
        out["record_stats"] = stats
    _topics_by_id(request, out, options, ids)


def _fetch_request(
    request: Request, out: dict[str, Any], options: SummaryOptions, ids: TopicIds
) -> None:
    # How long the broker may hold the answer when there is nothing to read: a Fetch's
    # latency up to this is the client's long poll, not the broker's slowness.
    out["max_wait_ms"] = request.body.get("max_wait_ms")
    _topics_by_id(request, out, options, ids)


def _topics_by_id(request: Request, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    """The `topics` of a request that names them by id (Fetch v13+, Produce v13+,
    OffsetCommit and OffsetFetch v10+, TxnOffsetCommit v6+, ShareFetch): names from the
    Metadata answers seen."""
    if "topics" in out:
        return
    body = request.body
    topics = [*(body.get("topics") or ()), *(body.get("topic_data") or ())]
    for group in body.get("groups") or ():  # OffsetFetch v8+: per group
        topics.extend(group.get("topics") or ())
    names = list(dict.fromkeys(ids.name(topic) for topic in topics))
    if names:
        out["topics"] = _listed(names, options.max_string_length)


def _fetch_response(
    response: Response,
    out: dict[str, Any],
    options: SummaryOptions,
    ids: TopicIds,
    partition_stats: dict[tuple[str, int], Any] | None = None,
) -> None:
    topics = response.body.get("responses") or []
    stats = _record_stats(topics, "partitions", options, ids, True, partition_stats)
    if stats:
        out["record_stats"] = stats


def _metadata_response(response: Response, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    ids.learn(response.body)
    out["broker_count"] = len(response.body.get("brokers") or ())
    out["topic_count"] = len(response.body.get("topics") or ())


def _config_request(request: Request, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    # Names only: values may be passwords or sasl.jaas.config and are never logged.
    outer, _, name = _CONFIG_NAME_PATHS[request.api_key]
    names = [c[name] for r in request.body.get(outer) or () for c in r.get("configs") or ()]
    names = list(dict.fromkeys(names))
    if names:
        out["config_names"] = _listed(names, options.max_string_length)


_CONFIG_NAME_PATHS = {19: ("topics", "configs", "name"), 33: ("resources", "configs", "name"),
                      44: ("resources", "configs", "name")}


def _join_group_request(request: Request, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    # A JoinGroup is answered when the rebalance completes, up to the rebalance timeout
    # (v0 has none: the session timeout bounds it).
    body = request.body
    out["session_timeout_ms"] = body.get("session_timeout_ms")
    rebalance = body.get("rebalance_timeout_ms") if request.api_version >= 1 else None
    out["rebalance_timeout_ms"] = body.get("session_timeout_ms") if rebalance is None else rebalance
    payloads = group_payloads(JOIN_GROUP, "request", request.body)
    if payloads:
        out["group_protocols"] = payloads["protocols"]
        out["subscriptions"] = payloads["subscriptions"]


def _join_group_response(response: Response, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    body = response.body
    _group_member_fields(body, out, options.max_string_length)
    out["leader"] = body.get("leader")
    members = body.get("members") or []
    if members:
        out["members"] = len(members)
        payloads = group_payloads(JOIN_GROUP, "response", body)
        if payloads:
            # Keyed by member, unlike the request's (by protocol), which the line also has.
            out["member_subscriptions"] = payloads["subscriptions"]


def _sync_group_request(request: Request, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    payloads = group_payloads(SYNC_GROUP, "request", request.body)
    if payloads and payloads["assignments"]:
        out["assignments"] = payloads["assignments"]


def _sync_group_response(response: Response, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    payloads = group_payloads(SYNC_GROUP, "response", response.body)
    if payloads:
        _group_member_fields(response.body, out, options.max_string_length)
        out["assignment"] = payloads["assignment"]


def _init_producer_id_response(response: Response, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    out["producer_id"] = response.body.get("producer_id")
    out["producer_epoch"] = response.body.get("producer_epoch")


def _allocate_producer_ids_response(response: Response, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    # KIP-730: the block of producer ids the controller handed to a broker.
    start, length = response.body.get("producer_id_start"), response.body.get("producer_id_len")
    out["producer_id_block"] = {"start": start, "length": length}


def _api_versions_request(request: Request, out: dict[str, Any], options: SummaryOptions, ids: TopicIds) -> None:
    for key in ("client_software_name", "client_software_version"):
        if request.body.get(key):
            out[key] = clean(request.body[key], options.max_string_length)


_REQUEST_EXTRAS: dict[int, Any] = {
    PRODUCE: _produce_request,
    FETCH: _fetch_request,
    SHARE_FETCH: _fetch_request,  # the same long poll, topics by id
    OFFSET_COMMIT: _topics_by_id,
    OFFSET_FETCH: _topics_by_id,
    TXN_OFFSET_COMMIT: _topics_by_id,
    JOIN_GROUP: _join_group_request,
    SYNC_GROUP: _sync_group_request,
    API_VERSIONS: _api_versions_request,
    **{key: _config_request for key in _CONFIG_NAME_PATHS},
}
_RESPONSE_EXTRAS: dict[int, Any] = {
    FETCH: _fetch_response,
    SHARE_FETCH: _fetch_response,  # the same record batches, topics by id
    METADATA: _metadata_response,
    JOIN_GROUP: _join_group_response,
    SYNC_GROUP: _sync_group_response,
    INIT_PRODUCER_ID: _init_producer_id_response,
    ALLOCATE_PRODUCER_IDS: _allocate_producer_ids_response,
}
