"""Shared fixtures: a tansu broker, one behind a recording relay, librdkafka's mock cluster,
Apache Kafka (one node per session for each version, a 3-node cluster on demand).

`tests/` is on sys.path (pytest's rootdir-relative insertion for this conftest), so
helpers import as `support.*`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.kafka import NEWEST, OLDEST, SharedKafka, kafka_cluster, shared_kafka
from support.mock_cluster import mock_cluster as _mock_cluster
from support.relay import RecordingRelay

from proxy.apache_kafka import KafkaCluster
from proxy.tansu import TansuBroker, free_port

TansuFactory = Callable[..., TansuBroker]

# The pipeline's tests start several Spark JVMs (and `kafkalens report` subprocesses):
# none should record a ~160 MB class archive into the home directory on its way out
# (pipeline/session.py); tests/test_pipeline_session.py covers the archive itself.
os.environ.setdefault("KAFKALENS_SPARK_CDS", "0")


@pytest.fixture
def tansu_factory(tmp_path: Path) -> Iterator[TansuFactory]:
    """Starts tansu brokers on demand; all are stopped after the test.

    `tansu_factory(advertised_port=P)` starts one that tells clients to come back
    through port P (a proxy or relay in front); any other TansuBroker field may be
    given too (`port=`, `extra_args=`). Logs go to tmp_path/tansu-N.log.
    """
    started: list[TansuBroker] = []

    def start(advertised_port: int | None = None, **fields: object) -> TansuBroker:
        fields.setdefault("log_path", tmp_path / f"tansu-{len(started)}.log")
        broker = TansuBroker(advertised_port=advertised_port, **fields)  # type: ignore[arg-type]
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def tansu(tansu_factory: TansuFactory) -> TansuBroker:
    """A started in-memory tansu broker on a free port, advertising itself."""
    return tansu_factory()


@pytest.fixture
def relayed_tansu(tansu_factory: TansuFactory) -> Iterator[tuple[RecordingRelay, TansuBroker]]:
    """A RecordingRelay in front of tansu; tansu advertises the relay's port."""
    upstream = free_port()
    with RecordingRelay("127.0.0.1", upstream) as relay:
        yield relay, tansu_factory(advertised_port=relay.port, port=upstream)


@pytest.fixture
def mock_cluster() -> Iterator[str]:
    """Bootstrap string of a 3-broker librdkafka mock cluster (see support.mock_cluster)."""
    with _mock_cluster(3) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for every pipeline test (a SparkSession is per process
    anyway: build_session's getOrCreate would hand each module the same one)."""
    from pipeline.session import build_session  # pyspark only where a test asks for it

    session = build_session("kafkalens-tests", "local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    session.conf.set("spark.sql.codegen.wholeStage", "false")  # tiny data: compiling costs more
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedKafka]:
    """One Apache Kafka node (the newest version of tests/peers/kafka-versions) for the
    whole session, started when a test first asks for it. Tests share it: each uses
    topics and groups of its own names. See support.kafka.SharedKafka for the sidecar's
    address it advertises."""
    with shared_kafka(tmp_path_factory.mktemp("kafka-newest"), NEWEST) as kafka:
        yield kafka


@pytest.fixture(scope="session")
def apache_kafka_oldest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedKafka]:
    """As apache_kafka, at the oldest version of tests/peers/kafka-versions."""
    with shared_kafka(tmp_path_factory.mktemp("kafka-oldest"), OLDEST) as kafka:
        yield kafka


@pytest.fixture(params=[NEWEST, OLDEST], ids=lambda v: f"kafka-{v}")
def apache_kafka_each(request: pytest.FixtureRequest) -> SharedKafka:
    """The session's Apache Kafka node at each version in turn."""
    name = "apache_kafka" if request.param == NEWEST else "apache_kafka_oldest"
    kafka: SharedKafka = request.getfixturevalue(name)
    return kafka


@pytest.fixture(scope="session")
def apache_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A 3-node KRaft cluster (replication factor 3, min.insync.replicas=2), newest
    version, for the gateway and fault tests. A test that stops or kills a node starts
    it again before it ends (KafkaCluster.start_node)."""
    with kafka_cluster(tmp_path_factory.mktemp("kafka-cluster"), nodes=3) as cluster:
        yield cluster


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The compatibility rows the run recorded (support.compat), for the README's table."""
    from support import compat
    from support.kafka import BUILD

    compat.write(BUILD / "compat.json")
