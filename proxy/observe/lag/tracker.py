"""Consumer, committed and follower lag from the Fetch and OffsetCommit exchanges seen.

A consumer's position on a partition is the offset it fetches from, advanced past the
whole batches the response returned (RecordStats.next_offset); its lag is the
partition's high watermark from the same response (the last stable offset for a
read_committed fetch) minus that position. A Fetch with a replica id >= 0 (a
ReplicaState from v15) is a follower replicating: kept apart, by replica. Committed
lag is an OffsetCommit's offset against the high watermark last seen for the partition.

The newest end of a partition known is the high watermark of its last Fetch answer,
raised by what later Produce answers imply (base offset + records appended).
Consumer and committed lag are published against it, so the lag of a
consumer that stopped fetching goes on growing while producers go on, as the broker's
own (ListOffsets minus position) does, instead of staying at its last fetch's value.
For a read_committed consumer that end may count records of open transactions.
A consumer of a group whose partition another member of that group has fetched since
(a rebalance moved it) is left out: the group's lag counts each partition once.

The consumer group of a fetching client is the one its JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit or ConsumerGroupHeartbeat named, on any connection this
process saw: joined by client instance id, else by (client id, client host).

Runs after forwarding. Everything kept is plain numbers and names, bounded by
LagConfig.max_tracked entries per table; what would not fit is counted (`dropped`).
"""

from __future__ import annotations

import time
from typing import Any

from codec import ApiKey
from codec.skim import Picks
from proxy.observe.lag.config import LagConfig
from proxy.observe.summary import TopicIds, clean

# Plain ints named by ApiKey: an int compared with an IntEnum member misses CPython's
# int fast path (proxy/exchange/kafka.py says what it cost).
PRODUCE = int(ApiKey.PRODUCE)
FETCH = int(ApiKey.FETCH)
OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)
HEARTBEAT = int(ApiKey.HEARTBEAT)
LEAVE_GROUP = int(ApiKey.LEAVE_GROUP)
# Requests that say which group their client is a member of
GROUP_APIS = frozenset(map(int, {
    ApiKey.OFFSET_COMMIT, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP,
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
}))
LAG_APIS = GROUP_APIS | {FETCH}
READ_COMMITTED = 1


class Entry:
    """One (consumer or follower, topic, partition) or (group, topic, partition)."""

    __slots__ = ("group", "offset", "lag", "seen", "folded", "labels", "pair", "labelled")

    def __init__(self, group: str, offset: int, lag: int, seen: float) -> None:
        self.group = group
        self.offset = offset  # the position (consumers, followers) or committed offset
        self.lag = lag
        self.seen = seen
        self.folded = False  # counted once as folded into "other"
        # its series' label values once published, for the group they were made for
        self.labels: tuple[str, ...] = ()
        self.pair: tuple[str, str] = ("", "")
        self.labelled: str | None = None


class FetchAsk:
    """What a Fetch request said that its response is read against."""

    __slots__ = ("client", "group", "replica", "isolation", "offsets")
    whole = True  # its response is decoded whole to be read against it (chain.py)

    def __init__(self, client: str, group: str, replica: int, isolation: int) -> None:
        self.client = client
        self.group = group
        self.replica = replica  # >= 0: a follower
        self.isolation = isolation
        self.offsets: dict[tuple[str, int], int] = {}


# What a Produce answer is read for: its partitions' ends, picked in the skim (no dict
# per struct: bench/PROFILE.md, "Produce and Fetch of a few records"). A row per
# partition: (topic name, topic id, partition, error code, base offset); a topic has a
# name until v12, an id from v13.
PRODUCE_ENDS = Picks((
    ("responses", "name"), ("responses", "topic_id"), ("responses", "partition_responses", "index"),
    ("responses", "partition_responses", "error_code"), ("responses", "partition_responses", "base_offset"),
))  # fmt: skip


class ProduceAsk:
    """A Produce request's RecordStats by (topic, partition): how many records it
    appends to each (those whose batches all state their count: not legacy ones)."""

    __slots__ = ("stats",)
    whole = False  # its answer skimmed, its partitions' ends picked (PRODUCE_ENDS)
    picks = PRODUCE_ENDS

    def __init__(self, stats: dict[tuple[str, int], Any]) -> None:
        self.stats = stats


class CommitAsk:
    """The offsets an OffsetCommit request commits, accepted if its answer has no error.
    Read only once made: a memoised request's is made once (LagTracker.commit_ask)."""

    __slots__ = ("group", "offsets", "targets", "answer")
    whole = False  # its answer's skimmed fields (error codes) are enough
    picks = None

    def __init__(self, group: str, offsets: list[tuple[str, int, int]]) -> None:
        self.group = group
        self.offsets = offsets
        # each offset with its watermark's key and its committed entry's, made once
        self.targets = [((topic, partition), (group, topic, partition), offset) for topic, partition, offset in offsets]
        # its last answer (LagTracker.commit_answer): the skimmed fields read, the
        # watermarks' LagTracker.marks_moved then, the line's fields made, and the
        # committed entries it put (key, offset, lag)
        self.answer: tuple[dict[str, Any], int, dict[str, Any], list[tuple[Any, int, int]]] | None = None


class LagTracker:
    def __init__(self, options: LagConfig, topic_ids: TopicIds, max_string_length: int) -> None:
        self.options = options
        self.topic_ids = topic_ids
        self.limit = max_string_length
        self.consumers: dict[tuple[str, str, int], Entry] = {}  # (client, topic, partition)
        self.followers: dict[tuple[int, str, int], Entry] = {}  # (replica, topic, partition)
        self.committed: dict[tuple[str, str, int], Entry] = {}  # (group, topic, partition)
        self.watermarks: dict[tuple[str, int], Entry] = {}  # (topic, partition): offset = hwm
        # bumped after any watermark is put or expired (CommitAsk.answer is made against it)
        self.marks_moved = 0
        self.groups: dict[tuple[str, ...], str] = {}  # membership key -> group
        # (client id, host) -> client instance id, from any connection that knew both: a
        # KIP-714 id is assigned on one connection only (GetTelemetrySubscriptions)
        self.instances: dict[tuple[str, str], str] = {}
        # bumped when `groups` or `instances` change: what client_of and group_of answer
        # for a connection is kept while neither it nor its identity changes (LagLink)
        self.learnt = 0
        self.dropped = 0  # entries not tracked: a table was full
        # The CommitAsk of an OffsetCommit body met before (a memoised request's body is
        # the same object each time): id(body) -> (body, group, ask)
        self._asks: dict[int, tuple[dict[str, Any], str, CommitAsk]] = {}

    # -- requests ------------------------------------------------------------

    def request(
        self, request: Any, fields: dict[str, Any], identity: Any, host: str
    ) -> FetchAsk | CommitAsk | None:
        """A decoded request of an api in LAG_APIS; what its response needs, if anything."""
        if request.api_key == FETCH:
            return self._fetch_request(request.body, fields, identity, host)
        group = fields.get("group_id")
        if group:
            self._member(identity, host, group)
        if request.api_key == OFFSET_COMMIT and group:
            return self._commit_request(request.body, group)
        return None

    def _member(self, identity: Any, host: str, group: str) -> bool:
        """The client a member of `group`; False if a key of it found no room."""
        kept = True
        groups = self.groups
        for key in _membership_keys(identity, host):
            known = groups.get(key)
            if known == group:
                continue
            if known is not None or self._room(groups):
                groups[key] = group
                self.learnt += 1
            else:
                kept = False
        return kept

    def member(self, identity: Any, host: str, group: str) -> bool:
        """A group member's request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
        OffsetCommit) named `group`: True if its client is now known as a member of it
        under every key (nothing was dropped), so that noting it again changes nothing
        while its identity stays."""
        return self._member(identity, host, group)

    def commit_ask(self, body: dict[str, Any], group: str) -> CommitAsk:
        """What an OffsetCommit's answer is read against; made once for a body met again
        (names, not topic ids: those are named from what Metadata answers taught since)."""
        known = self._asks.get(id(body))
        if known is not None and known[0] is body and known[1] == group:
            return known[2]
        ask = self._commit_request(body, group)
        if all(topic.get("name") for topic in body.get("topics") or ()):
            if len(self._asks) >= 256:
                self._asks.clear()
            self._asks[id(body)] = (body, group, ask)
        return ask

    def learn_instance(self, client_id: str, host: str, instance_id: str) -> None:
        key = (client_id, host)
        known = self.instances.get(key)
        if known != instance_id and (known is not None or self._room(self.instances)):
            self.instances[key] = instance_id
            self.learnt += 1

    def client_of(self, identity: Any, host: str) -> str:
        """The client instance id, also one another connection of the client learnt;
        else the client id."""
        if identity.client_instance_id:
            return str(identity.client_instance_id)
        client_id = identity.client_id or ""
        return self.instances.get((client_id, host)) or client_id

    def group_of(self, identity: Any, host: str) -> str:
        for key in _membership_keys(identity, host):
            group = self.groups.get(key)
            if group is not None:
                return group
        return ""

    def _fetch_request(self, body: dict[str, Any], fields: dict[str, Any], identity: Any, host: str) -> FetchAsk:
        return self.fetch_ask(body, fields, self.client_of(identity, host), self.group_of(identity, host))

    def fetch_ask(self, body: dict[str, Any], fields: dict[str, Any], client: str, group: str) -> FetchAsk:
        """What a Fetch request's response is read against, its client (client_of) and
        group (group_of) known; its isolation level, replica or group go into `fields`."""
        state = body.get("replica_state")
        replica = state.get("replica_id", -1) if state else body.get("replica_id", -1)
        isolation = body.get("isolation_level", 0)
        fields["isolation_level"] = isolation
        ask = FetchAsk(client, "", replica, isolation)
        if replica >= 0:
            fields["replica_id"] = replica
        elif group:
            ask.group = group
            fields["consumer_group"] = group
        offsets = ask.offsets
        for topic in body.get("topics") or ():
            name = self.topic_ids.clean_name(topic, self.limit)
            for partition in topic.get("partitions") or ():
                offsets[(name, partition.get("partition"))] = partition.get("fetch_offset", -1)
        return ask

    def produce_request(self, partition_stats: dict[tuple[str, int], Any]) -> ProduceAsk | None:
        """What a Produce request's answer is read against: its record counts (batches
        whose headers do not state theirs, legacy ones, leave their partition out: see
        produce_done). The stats as they are: a dict made per request cost more than
        reading them at the answer (bench/PROFILE.md)."""
        for stats in partition_stats.values():
            if stats.records > 0 and not stats.unknown_count_batches:
                return ProduceAsk(partition_stats)
        return None  # nothing its answer could tell: the answer skimmed

    def _commit_request(self, body: dict[str, Any], group: str) -> CommitAsk:
        offsets = [  # v10+ names topics by id (KIP-848): named from the Metadata answers seen
            (clean(self.topic_ids.name(topic), self.limit), p.get("partition_index"), p.get("committed_offset", -1))
            for topic in body.get("topics") or ()
            for p in topic.get("partitions") or ()
        ]
        return CommitAsk(group, offsets)

    # -- responses -----------------------------------------------------------

    def fetch_done(
        self, ask: FetchAsk, body: dict[str, Any], partition_stats: dict[tuple[str, int], Any], out: dict[str, Any]
    ) -> None:
        """Positions and lag from a Fetch response; its log fields go into `out`. One loop,
        the tables' entries updated in place (a call per partition and table, and a
        watermark counted as moved when it did not, cost more than the rest of it:
        bench/PROFILE.md, "Produce and Fetch of a few records")."""
        now = time.monotonic()
        logged: list[dict[str, Any]] = []
        left = self.options.max_logged_partitions
        dropped = 0
        follower = ask.replica >= 0
        table: dict[Any, Entry] = self.followers if follower else self.consumers
        who = ask.replica if follower else ask.client
        group, offsets, marks = ask.group, ask.offsets, self.watermarks
        read_committed = ask.isolation == READ_COMMITTED
        for topic in body.get("responses") or ():
            name = self.topic_ids.clean_name(topic, self.limit)
            for partition in topic.get("partitions") or ():
                high = partition.get("high_watermark", -1)
                if partition.get("error_code") or high < 0:
                    continue
                index = partition.get("partition_index", -1)
                where = (name, index)
                key = (who, name, index)
                entry = table.get(key)
                start = offsets.get(where)
                if start is None:  # an incremental fetch session (KIP-227) left it out: unchanged
                    if entry is None:
                        continue
                    start = entry.offset
                position = start
                returned = partition_stats.get(where)
                if returned is not None and returned.next_offset > start:
                    position = returned.next_offset
                stable = partition.get("last_stable_offset", -1)
                end = stable if read_committed and stable >= 0 else high
                lag = end - position if end > position else 0
                if entry is not None:
                    entry.group, entry.offset, entry.lag, entry.seen = group, position, lag, now
                elif self._room(table):
                    table[key] = Entry(group, position, lag, now)
                # the broker's word as of now: it may be lower than before (a topic recreated)
                mark = marks.get(where)
                if mark is None:
                    self._mark(None, where, high, now)
                else:  # _mark, inlined: every partition of every Fetch answer comes here
                    mark.seen = now
                    if mark.offset != high:
                        mark.offset = high
                        self.marks_moved += 1
                if left > 0:
                    left -= 1
                    start_offset = partition.get("log_start_offset", -1)
                    logged.append({
                        "topic": name, "partition": index, "fetch_offset": start, "next_offset": position,
                        "high_watermark": high, "last_stable_offset": stable if stable >= 0 else None,
                        "log_start_offset": start_offset if start_offset >= 0 else None, "lag": lag,
                    })  # fmt: skip
                else:
                    dropped += 1
        if logged:
            out["positions"] = logged
        if dropped:
            out["positions_dropped"] = dropped

    def produce_done(self, ask: ProduceAsk, ends: list[tuple[Any, ...]]) -> None:
        """A Produce answer's partitions' ends (rows of PRODUCE_ENDS): each partition
        appended without error now ends at least at its base offset plus the records
        appended. One loop, `clean` and `_mark` inlined for the usual row (a printable
        name within the limit; a watermark there): a call each cost more than the rest
        of it (bench/PROFILE.md, "Produce and Fetch of a few records")."""
        now = time.monotonic()
        appended, marks, limit = ask.stats, self.watermarks, self.limit
        for name, topic_id, index, error, base in ends:
            if error or base < 0:
                continue
            if not name:  # v13+: by topic id
                name = self.topic_ids.clean_id(topic_id, limit)
            elif len(name) > limit or not name.isprintable():
                name = clean(name, limit)
            where = (name, index)
            stats = appended.get(where)
            if stats is None or stats.records <= 0 or stats.unknown_count_batches:
                continue
            end = base + stats.records
            mark = marks.get(where)
            if mark is None:
                self._mark(None, where, end, now)
            elif end >= mark.offset:
                mark.seen = now
                if mark.offset != end:
                    mark.offset = end
                    self.marks_moved += 1

    def _mark(self, mark: Entry | None, where: tuple[str, int], offset: int, now: float) -> None:
        """The watermark of `where` (`mark`, if it has one) put at `offset`, seen now;
        counted as moved (marks_moved) only if it was not there already."""
        if mark is not None:
            mark.seen = now
            if mark.offset != offset:
                mark.offset = offset
                self.marks_moved += 1
        elif self._room(self.watermarks):
            self.watermarks[where] = Entry("", offset, 0, now)
            self.marks_moved += 1

    def consumer_lag(self, key: tuple[str, str, int], entry: Entry) -> int:
        """A consumer's lag against the newest end known of its partition: its last
        fetch's, or a later one (records produced since)."""
        mark = self.watermarks.get((key[1], key[2]))
        if mark is None:
            return entry.lag
        return max(entry.lag, mark.offset - entry.offset)

    def commit_answer(self, ask: CommitAsk, fields: dict[str, Any]) -> dict[str, Any]:
        """An OffsetCommit's answer, read from its skimmed `fields` (memoised ones: never
        changed): its offsets committed if accepted, and the line's fields. These are the
        same dict as the ask's last answer's when that read the same fields and no
        watermark moved since (a member committing the same offsets while nothing is
        fetched or produced: an idle group's commits), kept unchanged like the fields."""
        last = ask.answer
        if last is not None and last[0] is fields and last[1] == self.marks_moved:
            now = time.monotonic()
            committed = self.committed
            for key, offset, lag in last[3]:  # each offset committed again, now
                entry = committed.get(key)
                if entry is not None:
                    entry.offset, entry.lag, entry.seen = offset, lag, now
                    entry.group = ask.group
                else:
                    self._put(committed, key, ask.group, offset, lag, now)
            return last[2]
        moved = self.marks_moved
        accepted = not fields["errors"] and "response_decode_error" not in fields
        out = dict(fields)
        self.commit_done(ask, accepted, out)
        puts: list[tuple[tuple[str, str, int], int, int]] = []
        if accepted:
            for where, key, offset in ask.targets:
                mark = self.watermarks.get(where)
                if offset >= 0:
                    puts.append((key, offset, max(0, mark.offset - offset) if mark is not None else 0))
        ask.answer = (fields, moved, out, puts)
        return out

    def commit_done(self, ask: CommitAsk, accepted: bool, out: dict[str, Any]) -> None:
        """An OffsetCommit's answer: each offset against the last high watermark seen."""
        now = time.monotonic()
        logged: list[dict[str, Any]] = []
        cap = self.options.max_logged_partitions
        marks, committed, group = self.watermarks, self.committed, ask.group
        for where, key, offset in ask.targets:
            mark = marks.get(where)
            high = mark.offset if mark is not None else None
            lag = max(0, high - offset) if high is not None and offset >= 0 else None
            if len(logged) < cap:
                logged.append({"topic": where[0], "partition": where[1], "offset": offset, "high_watermark": high, "lag": lag})
            if accepted and offset >= 0:
                self._put(committed, key, group, offset, lag or 0, now)
        if logged:
            out["committed"] = logged
        if len(ask.offsets) > len(logged):
            out["committed_dropped"] = len(ask.offsets) - len(logged)

    # -- state ---------------------------------------------------------------

    def _put(self, table: dict[Any, Entry], key: Any, group: str, offset: int, lag: int, now: float) -> None:
        entry = table.get(key)
        if entry is not None:
            entry.group, entry.offset, entry.lag, entry.seen = group, offset, lag, now
        elif self._room(table):
            table[key] = Entry(group, offset, lag, now)

    def _room(self, table: dict[Any, Any]) -> bool:
        if len(table) < self.options.max_tracked:
            return True
        self.dropped += 1
        return False

    def committed_lag(self, key: tuple[str, str, int], entry: Entry) -> int | None:
        """The committed offset against the newest high watermark seen (it moves on);
        None while no Fetch of the partition was seen."""
        mark = self.watermarks.get((key[1], key[2]))
        return max(0, mark.offset - entry.offset) if mark is not None else None

    def expire(self, now: float) -> None:
        """Forget what was not updated for idle_expiry_seconds: consumers that left.
        Safe from another thread than the loop's: it walks a copy of each table's keys
        (made without releasing the GIL) and deletes one key at a time."""
        cutoff = now - self.options.idle_expiry_seconds
        tables: tuple[dict[Any, Entry], ...] = (self.consumers, self.followers, self.committed, self.watermarks)
        for table in tables:
            # list(table): the keys as they are, no new objects (list(items()) makes a
            # tuple per entry, and the collector runs meanwhile, holding the GIL)
            for key in list(table):
                entry = table.get(key)
                if entry is not None and entry.seen < cutoff:
                    table.pop(key, None)
                    if table is self.watermarks:
                        self.marks_moved += 1  # after the pop: a commit answered since saw it
        self._drop_superseded()

    def _drop_superseded(self) -> None:
        """Forget a group member's partition that another member of its group fetched
        later (a rebalance moved it): its position no longer moves, and the group's lag
        must count the partition once. Safe from another thread, as expire."""
        table = self.consumers
        newest: dict[tuple[str, str, int], tuple[float, tuple[str, str, int]]] = {}
        superseded = []
        for key in list(table):
            entry = table.get(key)
            if entry is None or not entry.group:
                continue
            where = (entry.group, key[1], key[2])
            known = newest.get(where)
            if known is None or entry.seen > known[0]:
                newest[where] = (entry.seen, key)
                if known is not None:
                    superseded.append(known[1])
            else:
                superseded.append(key)
        for key in superseded:
            table.pop(key, None)


def _membership_keys(identity: Any, host: str) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = []
    if identity.client_instance_id:
        keys.append(("instance", str(identity.client_instance_id)))
    if identity.client_id:
        keys.append(("client", str(identity.client_id), host))
    return keys
