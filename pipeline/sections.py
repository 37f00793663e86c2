"""What report.html says of each table: a title a person reads, a sentence on what the
table shows, what an empty one means, and each column's label and meaning, in the
order they are shown. The Parquet tables keep their names and columns (the data's
contract, pipeline/README.md); this is only how the page presents them.

tests/test_pipeline_report_page.py holds every written table's columns to this
catalogue: a column added to a table without a meaning here fails it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OTHER_APIS = "other apis"  # the charts' series of the apis not drawn on their own


def software_label(name: str | None, version: str | None) -> str:
    """A client library as people name it: "librdkafka 2.3.0"."""
    if not name:
        return "software not named"
    return f"{name} {version}" if version else name


@dataclass(frozen=True)
class Col:
    label: str
    meaning: str
    # How a value is shown: "" as it is, "bytes" (1.2 MB), "ms", "rate" (a share, as a
    # percentage), "time" (UTC), "list", "map".
    kind: str = ""
    hidden: bool = False  # kept in the Parquet table, not shown (an internal key)


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    what: str  # one sentence: what a row is and what the table is for
    empty: str  # what it means when the table has no row
    columns: dict[str, Col] = field(default_factory=dict)
    order: str = ""  # in what order rows are shown
    shown: bool = True  # a table on the page (latency_over_time is drawn, not listed)


_FIRST = Col("First seen", "the first line of it, UTC", "time")
_LAST = Col("Last seen", "the last line of it, UTC", "time")
_REQUESTS = Col("Requests", "requests sent (answered or not)")
_FAILED = Col("Failed", "requests that failed: an error that is not a normal step of the "
                        "protocol")
_STEPS = Col("Protocol steps", "requests whose only errors are normal steps of the protocol "
                               "(a first JoinGroup's MEMBER_ID_REQUIRED, a rebalance in "
                               "progress ...): not failures")
_SOFTWARE = Col("Software", "the client library, as it names itself (KIP-511)")
_VERSION = Col("Version", "the client library's version")
_API = Col("Api", "the Kafka request type")
_API_KEY = Col("Key", "the api's number in the protocol")
_BUCKET = Col("Time", "start of the time bucket, UTC", "time")
_GROUP_KNOWN = Col("Group known", "false: the fetch named no consumer group, so the row is "
                                  "the client's (instance id, else client id)")
_TOPIC = Col("Topic", "the topic")
_PARTITION = Col("Partition", "the partition")

SECTIONS: dict[str, Section] = {s_name: s for s_name, s in (
    ("client_inventory", Section(
        "clients", "Clients",
        "Every client seen, one row each (a KIP-714 client instance, else a client id on "
        "a host with its software), with what it sent.",
        "No client sent a request.",
        {"client_key": Col("Key", "the client's key in the Parquet table", hidden=True),
         "client_id": Col("Client id", "client.id as the client sent it"),
         "client_software_name": _SOFTWARE, "client_software_version": _VERSION,
         "client_instance_id": Col("Instance id", "the KIP-714 client instance id, when "
                                                  "the client has one"),
         "client_hosts": Col("Hosts", "addresses it connected from", "list"),
         "principals": Col("Principals", "authenticated users (SASL, TLS certificate)",
                           "list"),
         "requests": _REQUESTS, "errors": _FAILED, "expected_errors": _STEPS,
         "connections": Col("Connections", "connections it opened"),
         "requests_by_api": Col("Requests by api", "its requests per api, busiest first",
                                "map"),
         "first_seen": _FIRST, "last_seen": _LAST},
        "busiest first")),
    ("kafka4_readiness", Section(
        "kafka4", "Clients Kafka 4.0 would refuse",
        "Clients using an api version that Kafka 4.0 no longer accepts (KIP-896): they "
        "fail once their brokers run Kafka 4.0 or later, until they upgrade.",
        "Every client is ready for Kafka 4.0: none used an api version Kafka 4.0 removed.",
        {"client_key": Col("Key", "the client's key in the Parquet table", hidden=True),
         "client_id": Col("Client id", "client.id as the client sent it"),
         "client_software_name": _SOFTWARE, "client_software_version": _VERSION,
         "client_instance_id": Col("Instance id", "the KIP-714 client instance id"),
         "client_hosts": Col("Hosts", "addresses it connected from", "list"),
         "api": _API, "api_key": _API_KEY,
         "api_version": Col("Version used", "the api version the client sent"),
         "kafka4_min_version": Col("Lowest in Kafka 4.0", "the lowest version of the api "
                                                         "Kafka 4.0 accepts"),
         "requests": _REQUESTS, "first_seen": _FIRST, "last_seen": _LAST},
        "most requests first")),
    ("latency_by_api", Section(
        "latency", "Latency and errors by api",
        "Per api: how many requests, how many failed, and how long the broker took to "
        "answer (service latency; requests that wait by design, such as a Fetch's long "
        "poll or a JoinGroup, are counted apart).",
        "No request was seen.",
        {"api": _API, "api_key": _API_KEY, "requests": _REQUESTS, "errors": _FAILED,
         "error_rate": Col("Failed %", "failed requests of all requests", "rate"),
         "expected_errors": _STEPS,
         "p50_ms": Col("p50", "median service latency, ms", "ms"),
         "p95_ms": Col("p95", "95th percentile service latency, ms", "ms"),
         "p99_ms": Col("p99", "99th percentile service latency, ms", "ms"),
         "avg_ms": Col("Mean", "mean service latency, ms", "ms"),
         "max_ms": Col("Max", "largest service latency, ms", "ms"),
         "waiting_requests": Col("Waiting by design", "long polls and rebalances: their "
                                                      "latency is not the broker's speed"),
         "waiting_p50_ms": Col("Waiting p50", "their median latency, ms", "ms"),
         "waiting_p99_ms": Col("Waiting p99", "their 99th percentile latency, ms", "ms"),
         "waiting_max_ms": Col("Waiting max", "their largest latency, ms", "ms")},
        "busiest first")),
    ("latency_over_time", Section(
        "latency-over-time", "Latency and requests over time",
        "Per time bucket and api: requests, failures and latency percentiles (drawn in "
        "the charts above).",
        "No request was seen.",
        {"bucket": _BUCKET, "api": _API, "requests": _REQUESTS, "errors": _FAILED,
         "expected_errors": _STEPS,
         "p50_ms": Col("p50", "median service latency, ms", "ms"),
         "p95_ms": Col("p95", "95th percentile service latency, ms", "ms"),
         "p99_ms": Col("p99", "99th percentile service latency, ms", "ms"),
         "waiting_p95_ms": Col("Waiting p95", "95th percentile latency of requests that "
                                              "wait by design, ms", "ms")},
        shown=False)),
    ("top_topics", Section(
        "topics", "Topics",
        "Per topic: the record bytes, records and batches produced to it and fetched from "
        "it (Produce requests; Fetch and ShareFetch answers).",
        "No topic carried records: no Produce, Fetch or ShareFetch with record batches.",
        {"rank": Col("Rank", "by bytes in and out"), "topic": _TOPIC,
         "total_bytes": Col("Total", "bytes produced, fetched and share-fetched", "bytes"),
         "produced_bytes": Col("Produced", "record batch bytes produced", "bytes"),
         "produced_records": Col("Records produced", "records produced"),
         "produced_batches": Col("Batches produced", "record batches produced"),
         "fetched_bytes": Col("Fetched", "record batch bytes fetched (consumers and "
                                         "followers)", "bytes"),
         "fetched_records": Col("Records fetched", "records fetched"),
         "fetched_batches": Col("Batches fetched", "record batches fetched"),
         "share_fetched_bytes": Col("Share-fetched", "record batch bytes of ShareFetch "
                                                     "answers (share groups)", "bytes"),
         "share_fetched_records": Col("Records share-fetched", "records of ShareFetch "
                                                               "answers"),
         "share_fetched_batches": Col("Batches share-fetched", "record batches of "
                                                               "ShareFetch answers")},
        "busiest first")),
    ("consumer_groups", Section(
        "groups", "Consumer groups",
        "Every group the clients named: its kind (classic, consumer: KIP-848, streams, "
        "share: KIP-932), members, and the requests of its members.",
        "No consumer group was seen.",
        {"group_id": Col("Group", "the group id"),
         "group_type": Col("Kind", "classic, consumer (KIP-848), streams or share "
                                   "(KIP-932), from the apis its members used"),
         "protocol_type": Col("Protocol", "the group's protocol type (consumer, connect "
                                          "...)"),
         "assignor": Col("Assignor", "the partition assignor last chosen"),
         "member_count": Col("Members", "members at the largest rebalance seen, else "
                                        "the member ids seen"),
         "max_members": Col("Members at rebalance", "the most members a JoinGroup answer "
                                                    "listed"),
         "distinct_member_ids": Col("Member ids seen", "distinct member ids over the whole "
                                                       "log (also those that left)"),
         "generation_id": Col("Generation", "the newest generation seen"),
         "requests": _REQUESTS, "errors": _FAILED, "expected_errors": _STEPS,
         "client_software": Col("Client software", "software/version of its members",
                                "list"),
         "first_seen": _FIRST, "last_seen": _LAST},
        "by group id")),
    ("consumer_topic_lag", Section(
        "lag", "Consumer lag by group and topic",
        "Per time bucket, group and topic: how many records the group's consumers are "
        "behind, summed over the partitions they fetched in that bucket.",
        "No consumer fetched with a lag the proxy could see.",
        {"bucket": _BUCKET, "group_id": Col("Group", "the consumer group (else the "
                                                     "client)"),
         "group_known": _GROUP_KNOWN, "topic": _TOPIC,
         "total_lag": Col("Lag", "records behind: the partitions' latest lags, summed"),
         "max_partition_lag": Col("Largest partition lag", "the most records one partition "
                                                           "was behind"),
         "partitions": Col("Partitions", "partitions fetched in the bucket"),
         "last_seen": _LAST},
        "newest first, largest lag first")),
    ("consumer_lag", Section(
        "lag-partitions", "Consumer lag by partition",
        "Per time bucket, group and partition: the consumer's lag (high watermark, or last "
        "stable offset for read_committed, less its position) at its newest fetch, and the "
        "largest seen.",
        "No consumer fetched with a lag the proxy could see.",
        {"bucket": _BUCKET, "group_id": Col("Group", "the consumer group (else the "
                                                     "client)"),
         "group_known": _GROUP_KNOWN, "topic": _TOPIC, "partition": _PARTITION,
         "latest_lag": Col("Lag", "records behind at the newest fetch in the bucket"),
         "max_lag": Col("Largest lag", "the most records behind in the bucket"),
         "position": Col("Position", "the offset the consumer reached"),
         "high_watermark": Col("High watermark", "the partition's high watermark"),
         "fetches": Col("Fetches", "fetches of the partition in the bucket"),
         "consumers": Col("Consumers", "the clients that fetched it", "list"),
         "last_seen": _LAST},
        "newest first, largest lag first")),
    ("committed_lag", Section(
        "committed", "Committed offsets",
        "Per group and partition: the newest committed offset and how far it is behind "
        "the partition's end, as kafka-consumer-groups --describe shows it.",
        "No group committed offsets.",
        {"group_id": Col("Group", "the consumer group"), "topic": _TOPIC,
         "partition": _PARTITION,
         "committed_offset": Col("Committed", "the newest committed offset"),
         "fleet_lag": Col("Lag", "behind the newest high watermark any proxy saw"),
         "fleet_high_watermark": Col("High watermark", "the newest any proxy saw"),
         "lag": Col("Lag at commit", "behind the high watermark the committing proxy knew "
                                     "(empty: it had not seen one)"),
         "high_watermark": Col("High watermark at commit", "as the committing proxy knew "
                                                           "it"),
         "max_lag": Col("Largest lag at commit", "over all commits"),
         "commits": Col("Commits", "commits of the partition"),
         "first_seen": _FIRST, "last_seen": _LAST},
        "largest lag first")),
    ("replication_lag", Section(
        "replication", "Replication lag",
        "Per time bucket, follower broker and partition: how far the follower's fetches "
        "are behind the leader's high watermark.",
        "No follower broker fetched through these proxies: no replication seen.",
        {"bucket": _BUCKET, "replica_id": Col("Follower", "the follower broker's id"),
         "topic": _TOPIC, "partition": _PARTITION,
         "latest_lag": Col("Lag", "records behind at the newest fetch in the bucket"),
         "max_lag": Col("Largest lag", "the most records behind in the bucket"),
         "position": Col("Position", "the offset the follower reached"),
         "high_watermark": Col("High watermark", "the leader's high watermark"),
         "fetches": Col("Fetches", "fetches of the partition in the bucket"),
         "last_seen": _LAST},
        "newest first, largest lag first")),
    ("topic_access", Section(
        "access", "Who produces to and fetches from each topic",
        "Per topic and direction (produce, fetch; replicate: brokers' replication), the "
        "principals and client software that used it: the ACLs to grant (Write to "
        "produce, Read to fetch).",
        "No topic carried records.",
        {"topic": _TOPIC,
         "direction": Col("Direction", "produce, fetch, or replicate (a follower broker)"),
         "principal": Col("Principal", "the authenticated user (empty: none)"),
         "client_software_name": _SOFTWARE, "client_software_version": _VERSION,
         "clients": Col("Clients", "distinct clients"),
         "client_ids": Col("Client ids", "their client ids", "list"),
         "client_keys": Col("Client keys", "the first 20 clients' keys", "list",
                            hidden=True),
         "requests": _REQUESTS, "records": Col("Records", "records"),
         "bytes": Col("Bytes", "record batch bytes", "bytes"),
         "batches": Col("Batches", "record batches"),
         "first_seen": _FIRST, "last_seen": _LAST},
        "by topic, then direction, most bytes first")),
    ("api_usage", Section(
        "api-versions", "Api versions by client software",
        "Which versions of which apis each client software used: what an upgrade of the "
        "brokers or the clients touches.",
        "No request was seen.",
        {"api": _API, "api_key": _API_KEY, "api_version": Col("Version", "the api version"),
         "client_software_name": _SOFTWARE, "client_software_version": _VERSION,
         "clients": Col("Clients", "distinct clients"),
         "requests": _REQUESTS, "errors": _FAILED, "expected_errors": _STEPS,
         "first_seen": _FIRST, "last_seen": _LAST},
        "by api and version")),
    ("client_telemetry", Section(
        "telemetry", "Client metrics (KIP-714)",
        "The metrics clients pushed (KIP-714 telemetry, from the telemetry log), per "
        "client software and metric, across their instances' latest values.",
        "No client pushed metrics (KIP-714): none subscribed, or the telemetry log was not "
        "among the inputs.",
        {"client_software_name": _SOFTWARE, "client_software_version": _VERSION,
         "metric": Col("Metric", "the metric's name"),
         "metric_type": Col("Type", "gauge, sum or histogram"),
         "instances": Col("Instances", "client instances that pushed it"),
         "series": Col("Series", "an instance's metric with one set of attributes"),
         "min_value": Col("Min", "smallest latest value of a series"),
         "median_value": Col("Median", "median latest value of the series"),
         "max_value": Col("Max", "largest latest value of a series"),
         "points": Col("Points", "data points pushed"), "last_seen": _LAST},
        "by software and metric")),
    ("client_telemetry_top", Section(
        "telemetry-top", "Largest client metrics",
        "Per metric, the five series with the largest latest value: which client "
        "instances stand out.",
        "No client pushed metrics (KIP-714).",
        {"metric": Col("Metric", "the metric's name"), "rank": Col("Rank", "1: largest"),
         "latest_value": Col("Latest value", "the series' newest value"),
         "instance": Col("Instance", "the client instance id (else client id)"),
         "client_id": Col("Client id", "client.id"),
         "client_software_name": _SOFTWARE, "client_software_version": _VERSION,
         "principal": Col("Principal", "the authenticated user"),
         "attributes": Col("Attributes", "the series' attributes"),
         "last_seen": _LAST},
        "by metric, largest first")),
    ("bad_lines", Section(
        "bad-lines", "Lines that could not be read",
        "Per file and reason: lines of the logs that were not valid request log lines, "
        "with two of them as samples; and any file left out.",
        "Every line was read: none was bad.",
        {"file": Col("File", "the log file"), "reason": Col("Reason", "why"),
         "bad_lines": Col("Lines", "how many (empty: a file left out, not read)"),
         "samples": Col("Samples", "two of the lines, their first 200 characters", "list")},
        "most first")),
    ("input_files", Section(
        "files", "Input files",
        "Every file read (or left out), with its lines.",
        "No input file was found.",
        {"file": Col("File", "the log file"), "lines": Col("Lines", "lines read"),
         "bad_lines": Col("Bad lines", "lines that could not be read"),
         "retyped_lines": Col("Retyped lines", "lines read without a field that had "
                              "another type than the log's (counted in Lines)"),
         "status": Col("Status", "read, or left out"),
         "reason": Col("Why left out", "why it could not be read")},
        "by name")),
)}

# The sections in the order of the page (the most read first).
PAGE_ORDER = ["client_inventory", "kafka4_readiness", "latency_by_api", "top_topics",
              "consumer_groups", "consumer_topic_lag", "consumer_lag", "committed_lag",
              "replication_lag", "topic_access", "api_usage", "client_telemetry",
              "client_telemetry_top", "bad_lines", "input_files"]
assert set(PAGE_ORDER) == {n for n, s in SECTIONS.items() if s.shown}


@dataclass(frozen=True)
class Chart:
    anchor: str
    title: str
    what: str  # one sentence under the chart
    empty: str  # what it means when there is nothing to draw


CHARTS: dict[str, Chart] = {c_name: c for c_name, c in (
    ("requests", Chart("chart-requests", "Requests per second by api",
                       "The busiest apis' request rate over time; the other apis summed.",
                       "No request was seen.")),
    ("errors", Chart("chart-errors", "Failed requests by api",
                     "Requests that failed, per time bucket, for the apis with the most "
                     "failures (normal protocol steps are not failures).",
                     "No request failed.")),
    ("percentiles", Chart("chart-percentiles", "Service latency by api",
                          "The median, 95th and 99th percentile of the broker's service "
                          "latency per api, the busiest apis (long polls and rebalances "
                          "apart).",
                          "No request had a service latency.")),
    ("latency", Chart("chart-latency", "Service latency over time",
                      "The 95th percentile service latency over time for the busiest "
                      "apis.",
                      "No request had a service latency.")),
    ("topics", Chart("chart-topics", "Bytes by topic",
                     "Record bytes produced to and fetched from the busiest topics.",
                     "No topic carried records.")),
    ("lag", Chart("chart-lag", "Consumer lag by group over time",
                  "Records behind, summed over each group's partitions, for the groups "
                  "with the largest lag.",
                  "No consumer fetched with a lag the proxy could see.")),
    ("software", Chart("chart-software", "Clients by software version",
                       "How many clients ran each client library and version.",
                       "No client was seen.")),
)}
