"""Share groups (KIP-932) as their members' exchanges show them, and the partitions a
group heartbeat assigns.

What a line says and what is counted:

* A ShareFetch or ShareAcknowledge request's acknowledgement batches, per partition:
  how many offsets of each type (accept, release, reject, renew, gap), and the ranges of
  each type (per-offset types folded into runs). Each batch is checked as the broker
  checks it: offsets not negative, first <= last, batches in order and not overlapping,
  a types array of one type or one per offset, known types, and (kafkalens's own
  bound) at most `lag.max_range_offsets` offsets. A partition with a malformed batch is
  logged with the first fault (`invalid`) and none of its acknowledgements is counted.
* The answer: acknowledgements are counted in the metrics only for partitions the broker
  answered without error (ShareFetch's acknowledge_error_code, ShareAcknowledge's
  error_code; `confirmed` in the line). A ShareFetch answer's acquired records are the
  records delivered, per partition answered without error: their offset ranges with
  their delivery counts (checked like acknowledgements), how many, and how many of them
  were delivered before (delivery count above 1). "Records" are offsets acquired: a gap
  in the log (compacted away, transaction markers) is acquired too, and the member
  acknowledges it as `gap`.
* The partitions a ShareFetch puts in its share session (or acknowledges) and those it
  drops; ConsumerGroupHeartbeat and ShareGroupHeartbeat answers' assignment, and the
  partitions a ConsumerGroupHeartbeat says its member owns: as topic names and
  partitions.

Bounded: a line lists at most `lag.max_logged_partitions` partitions in each of
`acquired`, `acknowledgements`, `fetch_partitions`, `forgotten_partitions`,
`assignment` and `owned_partitions`, and at most
`lag.max_logged_ranges` offset ranges over the line; what is left out is counted in the
line (`*_dropped`) and in kafkalens_log_lists_truncated_total{field}. The work is one
pass over the batches, types and ranges the frame holds (no offset range is ever
iterated: its length is arithmetic). The counters are kept per (group, topic), at most
`lag.max_tracked` pairs, and published on metrics flushes with at most `lag.max_topics`
pairs of label values (past it "other", each pair counted once in
kafkalens_lag_series_dropped_total{kind="share"}).
"""

from __future__ import annotations

import enum
from typing import Any

from codec import ApiKey
from codec.error_codes import error_name
from proxy.metrics import OTHER, LabelCapper, Metrics, sanitize_label
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.metrics import LagMetrics
from proxy.observe.summary import TopicIds, clean

# Plain ints named by ApiKey: an int compared with an IntEnum member misses CPython's
# int fast path (proxy/exchange/kafka.py says what it cost).
SHARE_FETCH = int(ApiKey.SHARE_FETCH)
SHARE_ACKNOWLEDGE = int(ApiKey.SHARE_ACKNOWLEDGE)
CONSUMER_GROUP_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)
SHARE_GROUP_HEARTBEAT = int(ApiKey.SHARE_GROUP_HEARTBEAT)
SHARE_APIS = frozenset({SHARE_FETCH, SHARE_ACKNOWLEDGE})
HEARTBEAT_APIS = frozenset({CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT})


class AckType(enum.IntEnum):
    """An acknowledgement type as the wire carries it (AcknowledgeTypes' int8 values)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222, ShareFetch and ShareAcknowledge v2


ACK_NAMES = tuple(t.name.lower() for t in AckType)  # by value
# The types the metrics count (a gap is offsets without a record: in the line only).
COUNTED_TYPES = (AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RENEW)
LINE_ORDER = (*COUNTED_TYPES, AckType.GAP)


class Fault(enum.Enum):
    """Why a partition's ranges (acknowledgement batches, acquired records) were not
    counted: the first fault found."""

    NEGATIVE = "negative_offset"
    REVERSED = "reversed"  # last offset before first
    OVERLAPPING = "overlapping"  # out of order, or sharing offsets with the one before
    TOO_LONG = "too_long"  # more offsets than lag.max_range_offsets
    TYPES = "types_length"  # a types array neither of one type nor of one per offset
    UNKNOWN_TYPE = "unknown_type"
    DELIVERY_COUNT = "delivery_count"  # an acquired range delivered fewer than once


# The lists a line may cut at their caps (kafkalens_log_lists_truncated_total{field}):
# the lag tracker's, then these.
TRUNCATED_FIELDS = (
    "positions", "committed", "acquired", "acknowledgements", "ranges", "fetch_partitions",
    "forgotten_partitions", "assignment", "owned_partitions",
)
FAULTS_OF = {
    "acknowledgement": tuple(f for f in Fault if f is not Fault.DELIVERY_COUNT),
    "acquired": (Fault.NEGATIVE, Fault.REVERSED, Fault.OVERLAPPING, Fault.TOO_LONG, Fault.DELIVERY_COUNT),
}


class Budget:
    """What one line may still list."""

    __slots__ = ("partitions", "ranges", "ranges_dropped")

    def __init__(self, options: LagConfig) -> None:
        self.partitions = options.max_logged_partitions
        self.ranges = options.max_logged_ranges
        self.ranges_dropped = 0


class PartitionAcks:
    """One partition's acknowledgement batches of one request."""

    __slots__ = ("topic", "partition", "counts", "ranges", "fault", "error", "confirmed", "answered")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.counts = [0, 0, 0, 0, 0]  # by AckType
        self.ranges: list[list[list[int]]] = [[], [], [], [], []]  # logged [first, last], by AckType
        self.fault: Fault | None = None
        self.error: str | None = None  # the broker's, for this partition's acknowledgements
        self.confirmed = False  # answered without error
        self.answered = False

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topic": self.topic, "partition": self.partition}
        for ack_type in LINE_ORDER:
            out[ACK_NAMES[ack_type]] = self.counts[ack_type]
        out["ranges"] = {ACK_NAMES[kind]: self.ranges[kind] for kind in LINE_ORDER if self.ranges[kind]}
        if self.fault is not None:
            out["invalid"] = self.fault.value
        out["confirmed"] = self.confirmed
        out["error"] = self.error
        return out


_MAX_TYPE = int(AckType.RENEW)


def read_batches(acks: PartitionAcks, batches: list[dict[str, Any]], max_offsets: int, budget: Budget) -> None:
    """Checks and counts one partition's acknowledgement batches, in one pass. (The Java
    client sends a batch per run of one type, often one per record: this loop runs for
    each, so the well-formed path is one chained comparison, the fault named after.)"""
    previous_last = -1
    counts, ranges = acks.counts, acks.ranges
    room, dropped = budget.ranges, 0
    fault = None
    for batch in batches:
        first, last, types = batch["first_offset"], batch["last_offset"], batch["acknowledge_types"]
        if not (previous_last < first <= last and first >= 0 and last - first < max_offsets):
            fault = _range_fault(first, last, previous_last, max_offsets)
            break
        if len(types) == 1:
            ack_type = types[0]
            if not 0 <= ack_type <= _MAX_TYPE:
                fault = Fault.UNKNOWN_TYPE
                break
            counts[ack_type] += last - first + 1
            if room:
                room -= 1
                ranges[ack_type].append([first, last])
            else:
                dropped += 1
        elif len(types) == last - first + 1:
            runs = _per_offset(first, types, counts)
            if runs is None:
                fault = Fault.UNKNOWN_TYPE
                break
            taken = min(room, len(runs))
            for start, end, ack_type in runs[:taken]:
                ranges[ack_type].append([start, end])
            room -= taken
            dropped += len(runs) - taken
        else:
            fault = Fault.TYPES
            break
        previous_last = last
    if fault is not None:  # none of a malformed partition's acknowledgements stands
        acks.fault = fault
        acks.counts = [0, 0, 0, 0, 0]
        for ranges_of_type in ranges:
            room += len(ranges_of_type)
            ranges_of_type.clear()
    budget.ranges, budget.ranges_dropped = room, budget.ranges_dropped + dropped


def _range_fault(first: int, last: int, previous_last: int, max_offsets: int) -> Fault:
    """What is wrong with a range that failed the well-formed check."""
    if first < 0 or last < 0:
        return Fault.NEGATIVE
    if last < first:
        return Fault.REVERSED
    if first <= previous_last:
        return Fault.OVERLAPPING
    return Fault.TOO_LONG


def _per_offset(first: int, types: list[int], counts: list[int]) -> list[tuple[int, int, int]] | None:
    """A batch with a type per offset: counted, folded into runs of one type; None for
    an unknown type."""
    runs: list[tuple[int, int, int]] = []
    run_start, run_type = first, types[0]
    offset = first
    for ack_type in types:
        if ack_type != run_type:
            runs.append((run_start, offset - 1, run_type))
            run_start, run_type = offset, ack_type
        offset += 1
    runs.append((run_start, offset - 1, run_type))
    if not all(0 <= run[2] <= _MAX_TYPE for run in runs):
        return None
    for start, end, ack_type in runs:
        counts[ack_type] += end - start + 1
    return runs


class HeartbeatAsk:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat request: the partitions its
    member says it owns (line fields), for its answer's line."""

    __slots__ = ("fields",)
    whole = True  # its answer is decoded whole to be read against it (chain.py)

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields


class ShareAsk:
    """What a ShareFetch or ShareAcknowledge request said that its answer is read against."""

    __slots__ = ("group", "acks", "fields", "budget")
    whole = True

    def __init__(self, group: str, budget: Budget) -> None:
        self.group = group
        self.acks: dict[tuple[str, int], PartitionAcks] = {}
        self.fields: dict[str, Any] = {}  # the line's fields from the request
        self.budget = budget  # what the line may still list


class ShareTracker:
    """Share-group line fields and counters; `metrics` gets the counters on flushes."""

    def __init__(self, options: LagConfig, metrics: Metrics, topic_ids: TopicIds, max_string_length: int) -> None:
        self.options = options
        self.metrics = metrics
        self.topic_ids = topic_ids
        self.limit = max_string_length
        # (group, topic) -> running totals: [delivered, then by AckType accept, release,
        # reject, renew, then redelivered]; never reset (publish takes deltas, so the
        # loop's increments and the flushing thread's reads need no lock)
        self.totals: dict[tuple[str, str], list[int]] = {}
        self.published: dict[tuple[str, str], list[int]] = {}
        self.labels: dict[tuple[str, str], tuple[str, str]] = {}
        self.pairs = LabelCapper(options.max_topics)
        self.counts = counts = metrics.of(LagMetrics)
        self.folded = counts.lag_series_dropped.labels(kind="share")
        self.tracked_dropped = counts.lag_series_dropped.labels(kind="tracked")
        self.truncated = counts.log_lists_truncated
        self.invalid = counts.share_ranges_invalid
        # at 0 from the start, as the counters alerts take rates of (a series that first
        # appears at 1 hides its first increase from rate())
        for field in TRUNCATED_FIELDS:
            self.truncated.labels(field=field)
        for what, faults in FAULTS_OF.items():
            for fault in faults:
                self.invalid.labels(what=what, reason=fault.value)

    # -- requests ------------------------------------------------------------------

    def request(self, request: Any, fields: dict[str, Any]) -> ShareAsk:
        """A decoded ShareFetch or ShareAcknowledge request (`fields`: its line's, which
        may be memoised and are not changed)."""
        body = request.body
        budget = Budget(self.options)
        ask = ShareAsk(fields.get("group_id") or "", budget)
        ask.fields["share_session_epoch"] = body.get("share_session_epoch")
        max_offsets = self.options.max_range_offsets
        faults: dict[Fault, int] = {}
        fetch = request.api_key == SHARE_FETCH
        named: list[dict[str, Any]] = []  # a ShareFetch's partitions, as heartbeats list theirs
        for topic in body.get("topics") or ():
            name = clean(self.topic_ids.name(topic), self.limit)
            partitions = topic.get("partitions") or ()
            if fetch:
                named.append({"topic": name, "partitions": [p.get("partition_index", -1) for p in partitions]})
            for partition in partitions:
                batches = partition.get("acknowledgement_batches")
                if not batches:
                    continue
                acks = PartitionAcks(name, partition.get("partition_index", -1))
                read_batches(acks, batches, max_offsets, budget)
                if acks.fault is not None:
                    faults[acks.fault] = faults.get(acks.fault, 0) + 1
                ask.acks[(name, acks.partition)] = acks
        for fault, count in faults.items():
            self.invalid.labels(what="acknowledgement", reason=fault.value).inc(count)
        if fetch:
            # The partitions the request adds to its share session or acknowledges (a
            # session's later requests leave out those it holds), and those it drops.
            if named:
                self.assignment(named, "fetch_partitions", ask.fields)
            if body.get("forgotten_topics_data"):
                self.assignment(body["forgotten_topics_data"], "forgotten_partitions", ask.fields)
        return ask

    def heartbeat(self, request: Any) -> HeartbeatAsk:
        fields: dict[str, Any] = {}
        if request.api_key == CONSUMER_GROUP_HEARTBEAT:
            self.assignment(request.body.get("topic_partitions"), "owned_partitions", fields)
        return HeartbeatAsk(fields)

    def heartbeat_answered(self, ask: HeartbeatAsk, response: Any, out: dict[str, Any]) -> None:
        out.update(ask.fields)
        assignment = response.body.get("assignment")
        if assignment is not None:
            self.assignment(assignment.get("topic_partitions"), "assignment", out)

    def assignment(self, topic_partitions: list[dict[str, Any]] | None, field: str, out: dict[str, Any]) -> None:
        assignment_fields(
            topic_partitions, field, out, self.topic_ids, self.options.max_logged_partitions, self.limit,
            self.truncated,
        )

    # -- answers -------------------------------------------------------------------

    def answered(self, ask: ShareAsk, response: Any, out: dict[str, Any]) -> None:
        """A ShareFetch or ShareAcknowledge answer: the line's share fields into `out`,
        the counters moved."""
        body = response.body
        budget = ask.budget
        out.update(ask.fields)
        fetch = response.api_key == SHARE_FETCH
        answered = not body.get("error_code")
        acquired: list[dict[str, Any]] = []
        acquired_dropped = 0
        faults: dict[str, int] = {}
        delivered = redelivered = 0
        for topic in body.get("responses") or ():
            name = clean(self.topic_ids.name(topic), self.limit)
            totals = None
            for partition in topic.get("partitions") or ():
                index = partition.get("partition_index", -1)
                acks = ask.acks.get((name, index))
                if acks is not None and not acks.answered:
                    acks.answered = True
                    code = partition.get("acknowledge_error_code" if fetch else "error_code", 0)
                    acks.error = error_name(code) if code else None
                    acks.confirmed = answered and not code
                    if acks.confirmed and acks.fault is None:
                        totals = totals or self._totals(ask.group, name)
                        for ack_type in COUNTED_TYPES:
                            totals[ack_type] += acks.counts[ack_type]
                if not fetch or partition.get("error_code") or not partition.get("acquired_records"):
                    continue
                point = self._acquired(name, index, partition["acquired_records"], budget)
                fault = point.get("invalid")
                if fault is not None:
                    faults[fault] = faults.get(fault, 0) + 1
                else:
                    totals = totals or self._totals(ask.group, name)
                    totals[0] += point["records"]
                    totals[5] += point["redelivered"]
                    delivered += point["records"]
                    redelivered += point["redelivered"]
                if budget.partitions > 0:
                    budget.partitions -= 1
                    acquired.append(point)
                else:
                    acquired_dropped += 1
        for reason, count in faults.items():
            self.invalid.labels(what="acquired", reason=reason).inc(count)
        if fetch:
            out["delivered_records"] = delivered
            out["redelivered_records"] = redelivered
            if acquired:
                out["acquired"] = acquired
            if acquired_dropped:
                out["acquired_dropped"] = acquired_dropped
                self.truncated.labels(field="acquired").inc()
        self._acknowledgements(ask, out)
        if budget.ranges_dropped:
            out["ranges_dropped"] = budget.ranges_dropped
            self.truncated.labels(field="ranges").inc()

    def _acknowledgements(self, ask: ShareAsk, out: dict[str, Any]) -> None:
        if not ask.acks:
            return
        cap = self.options.max_logged_partitions
        listed = [acks.fields() for _, acks in zip(range(cap), ask.acks.values(), strict=False)]
        if listed:
            out["acknowledgements"] = listed
        if len(ask.acks) > len(listed):
            out["acknowledgements_dropped"] = len(ask.acks) - len(listed)
            self.truncated.labels(field="acknowledgements").inc()

    def _acquired(self, name: str, index: int, ranges: list[dict[str, Any]], budget: Budget) -> dict[str, Any]:
        """One partition's acquired records: checked and counted like acknowledgements."""
        records = redelivered = 0
        logged: list[list[int]] = []
        fault = None
        previous_last = -1
        max_offsets = self.options.max_range_offsets
        room, dropped = budget.ranges, 0
        for acquired in ranges:
            first, last, delivery = acquired["first_offset"], acquired["last_offset"], acquired["delivery_count"]
            if not (previous_last < first <= last and first >= 0 and last - first < max_offsets):
                fault = _range_fault(first, last, previous_last, max_offsets)
                break
            if delivery < 1:
                fault = Fault.DELIVERY_COUNT
                break
            length = last - first + 1
            records += length
            if delivery > 1:
                redelivered += length
            if room:
                room -= 1
                logged.append([first, last, delivery])
            else:
                dropped += 1
            previous_last = last
        budget.ranges, budget.ranges_dropped = room, budget.ranges_dropped + dropped
        point: dict[str, Any] = {"topic": name, "partition": index}
        if fault is not None:
            point["invalid"] = fault.value
            records = redelivered = 0
        point.update(records=records, redelivered=redelivered, ranges=logged)
        return point

    def _totals(self, group: str, topic: str) -> list[int]:
        key = (group, topic)
        totals = self.totals.get(key)
        if totals is None:
            if len(self.totals) >= self.options.max_tracked:
                self.tracked_dropped.inc()
                key = (OTHER, OTHER)
                totals = self.totals.get(key)
            if totals is None:
                totals = self.totals[key] = [0] * 6
        return totals

    def publish(self) -> None:
        """Adds what was counted since the last publication to the counters. Runs in the
        thread that flushes the metrics: reads totals the loop only ever increments."""
        counts = self.counts
        for key in list(self.totals):
            totals = self.totals.get(key)
            if totals is None:
                continue
            now = list(totals)
            before = self.published.get(key) or [0] * 6
            if now == before:
                continue
            self.published[key] = now
            group, topic = self._labels(key)
            if now[0] > before[0]:
                counts.share_delivered.labels(group, topic).inc(now[0] - before[0])
            if now[5] > before[5]:
                counts.share_redelivered.labels(group, topic).inc(now[5] - before[5])
            for ack_type in COUNTED_TYPES:
                delta = now[ack_type] - before[ack_type]
                if delta > 0:
                    counts.share_acknowledged.labels(group, topic, ACK_NAMES[ack_type]).inc(delta)

    def _labels(self, key: tuple[str, str]) -> tuple[str, str]:
        labels = self.labels.get(key)
        if labels is None:
            labels = self.pairs.pair(*key) if key != (OTHER, OTHER) else key
            if labels != (sanitize_label(key[0]), sanitize_label(key[1])):
                self.folded.inc()
            self.labels[key] = labels
        return labels


# -- group heartbeats ---------------------------------------------------------------


def assignment_fields(
    topic_partitions: list[dict[str, Any]] | None,
    field: str,
    out: dict[str, Any],
    topic_ids: TopicIds,
    cap: int,
    limit: int,
    truncated: Any,
) -> None:
    """A heartbeat's topic partitions (by topic id, or named) as `field`: [{topic,
    partitions}], at most `cap` partitions listed; `<field>_partitions` counts them all.
    Nothing for None (a heartbeat answer without an assignment: unchanged)."""
    if topic_partitions is None:
        return
    listed: list[dict[str, Any]] = []
    total = 0
    left = cap
    for entry in topic_partitions:
        partitions = entry.get("partitions") or []
        total += len(partitions)
        if left > 0:
            shown = partitions[:left]
            left -= len(shown)
            listed.append({"topic": clean(topic_ids.name(entry), limit), "partitions": shown})
    out[field] = listed
    out[f"{field}_partitions"] = total
    if total > cap:
        out[f"{field}_dropped"] = total - cap
        truncated.labels(field=field).inc()
