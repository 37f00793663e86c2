"""Shared fixtures: a tansu broker, one behind a recording relay, librdkafka's mock cluster,
Apache Kafka (one node per session for each version, a 3-node cluster on demand); and the
tiers: each test's markers (what it needs beyond Python: `broker`, `java`, `go`, `spark`,
or `slow`), set here from its room and its fixtures, and `fast` for every test that
needs none of them (`python -m pytest -m fast -n 2` is the developer's loop).

`tests/` is on sys.path (pytest's rootdir-relative insertion for this conftest), so
helpers import as `support.*`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import examples
from support.kafka import NEWEST, OLDEST, SharedKafka, kafka_cluster, shared_kafka
from support.mock_cluster import mock_cluster as _mock_cluster
from support.needs import declared, needs
from support.relay import RecordingRelay

from proxy.apache_kafka import KafkaCluster
from proxy.tansu import TansuBroker, free_port

TansuFactory = Callable[..., TansuBroker]

# What a test needs beyond Python, as markers (registered in pyproject.toml, where each
# says what it means). A test gets them from its room and from the fixtures it uses
# (each fixture that starts a peer says so with support.needs), so a new test is marked
# without thinking; a test that starts a peer itself carries the marker itself, and
# `_undeclared_peers` below fails a test that starts one without its marker.
NEEDS = ("broker", "java", "go", "spark", "slow")
ROOM_MARKS: dict[str, tuple[str, ...]] = {
    # real clients against Apache Kafka (and its Java and Go clients) through the proxy
    "interop": ("broker", "java"),
}
IMPLIED: dict[str, tuple[str, ...]] = {"spark": ("java",)}  # Spark runs in a JVM
TESTS = Path(__file__).resolve().parent


def room_of(path: Path) -> str | None:
    """The room (tests/<room>/) a test file is in; None outside tests/."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def _fixture_functions(item: pytest.Item) -> list[object]:
    """The functions of every fixture `item` uses, directly or through other fixtures."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [d.func for defs in info.name2fixturedefs.values() for d in defs]


def pytest_configure(config: pytest.Config) -> None:
    # Before any test module is imported: the fast tier runs fewer Hypothesis examples
    # (support.examples), the whole suite every one.
    examples.choose(config, NEEDS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        wanted = set(ROOM_MARKS.get(room_of(Path(str(item.path))) or "", ()))
        for fixture in _fixture_functions(item):
            wanted.update(declared(fixture))
        wanted |= {m.name for m in item.iter_markers() if m.name in NEEDS}
        for name in list(wanted):
            wanted.update(IMPLIED.get(name, ()))
        have = {m.name for m in item.iter_markers()}
        for name in sorted(wanted - have):
            item.add_marker(name)
        if not wanted:
            item.add_marker("fast")


def _refusing(folder: Path, name: str, marker: str) -> Path:
    """An executable `folder/name` that fails saying which marker its test lacks."""
    path = folder / name
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        f"echo 'kafkalens tests: this test runs {name} but has no `{marker}` marker "
        "(tests/conftest.py: mark the test, or the fixture that starts it with support.needs)' "
        ">&2\nexit 97\n"
    )
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def _undeclared_peers(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A test without the `broker` marker that starts tansu (itself, or through a
    `kafkalens demo` it runs), or without `java` that starts a JVM (Apache Kafka, a Java
    client, Spark), or without `go` that runs a Go client fails at once, saying which
    marker it lacks: so `-m fast` never starts a peer, and the markers stay true."""
    marks = {m.name for m in request.node.iter_markers()}
    guards = tmp_path_factory.getbasetemp() / "undeclared-peers"
    if "broker" not in marks:
        monkeypatch.setenv("KAFKALENS_TANSU_BIN", str(_refusing(guards, "tansu", "broker")))
    if "java" not in marks:
        _refusing(guards / "jdk" / "bin", "java", "java")
        monkeypatch.setenv("JAVA_HOME", str(guards / "jdk"))
    if "go" not in marks:
        import support.go_clients

        def refuse(name: str) -> Path:
            raise AssertionError(f"this test runs the Go program {name} but has no `go` marker")

        monkeypatch.setattr(support.go_clients, "go_binary", refuse)


# The pipeline's tests start several Spark JVMs (and `kafkalens report` subprocesses):
# none should record a ~160 MB class archive into the home directory on its way out
# (pipeline/session.py); tests/pipeline/test_pipeline_session.py covers the archive itself.
os.environ.setdefault("KAFKALENS_SPARK_CDS", "0")


@pytest.fixture
@needs("broker")
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
@needs("broker")
def tansu(tansu_factory: TansuFactory) -> TansuBroker:
    """A started in-memory tansu broker on a free port, advertising itself."""
    return tansu_factory()


@pytest.fixture
@needs("broker")
def relayed_tansu(tansu_factory: TansuFactory) -> Iterator[tuple[RecordingRelay, TansuBroker]]:
    """A RecordingRelay in front of tansu; tansu advertises the relay's port."""
    upstream = free_port()
    with RecordingRelay("127.0.0.1", upstream) as relay:
        yield relay, tansu_factory(advertised_port=relay.port, port=upstream)


@pytest.fixture
@needs("broker")
def mock_cluster() -> Iterator[str]:
    """Bootstrap string of a 3-broker librdkafka mock cluster (see support.mock_cluster)."""
    with _mock_cluster(3) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
@needs("spark", "java")
def spark() -> Iterator[Any]:
    """One local Spark session for every pipeline test (a SparkSession is per process
    anyway: build_session's getOrCreate would hand each module the same one)."""
    from pipeline.session import build_session  # pyspark only where a test asks for it

    session = build_session("kafkalens-tests", "local[2]", delta=True)  # the ingest's table
    session.conf.set("spark.sql.shuffle.partitions", "2")
    session.conf.set("spark.sql.codegen.wholeStage", "false")  # tiny data: compiling costs more
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
@needs("broker", "java")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedKafka]:
    """One Apache Kafka node (the newest version of tests/peers/kafka-versions) for the
    whole session, started when a test first asks for it. Tests share it: each uses
    topics and groups of its own names. See support.kafka.SharedKafka for the sidecar's
    address it advertises."""
    with shared_kafka(tmp_path_factory.mktemp("kafka-newest"), NEWEST) as kafka:
        yield kafka


@pytest.fixture(scope="session")
@needs("broker", "java")
def apache_kafka_oldest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedKafka]:
    """As apache_kafka, at the oldest version of tests/peers/kafka-versions."""
    with shared_kafka(tmp_path_factory.mktemp("kafka-oldest"), OLDEST) as kafka:
        yield kafka


@pytest.fixture(params=[NEWEST, OLDEST], ids=lambda v: f"kafka-{v}")
@needs("broker", "java")
def apache_kafka_each(request: pytest.FixtureRequest) -> SharedKafka:
    """The session's Apache Kafka node at each version in turn."""
    name = "apache_kafka" if request.param == NEWEST else "apache_kafka_oldest"
    kafka: SharedKafka = request.getfixturevalue(name)
    return kafka


@pytest.fixture(scope="session")
@needs("broker", "java")
def apache_kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A 3-node KRaft cluster (replication factor 3, min.insync.replicas=2), newest
    version, for the gateway and fault tests. A test that stops or kills a node starts
    it again before it ends (KafkaCluster.start_node)."""
    with kafka_cluster(tmp_path_factory.mktemp("kafka-cluster"), nodes=3) as cluster:
        yield cluster


class _WholeSuite:
    """Whether this session ran the whole suite, for the compatibility table's check: a
    complete run also finds the table's rows that no test recorded any more."""

    collected_all = False
    deselected = 0


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    testpaths = [str(Path(config.rootpath, p).resolve()) for p in config.getini("testpaths")]
    given = [str(Path(config.invocation_params.dir, a).resolve()) for a in config.args]
    _WholeSuite.collected_all = sorted(given) == sorted(testpaths) and not getattr(
        config.option, "lf", False
    )


_COMPAT_PROBLEMS = pytest.StashKey[list[str]]()


def pytest_deselected(items: list[pytest.Item]) -> None:
    _WholeSuite.deselected += len(items)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The compatibility rows the run recorded (support.compat) go to
    tests/peers/build/compat.json; a table in docs/compatibility.md that differs from them
    fails the run."""
    from support import compat
    from support.kafka import SKIPPED_FOR

    complete = (
        _WholeSuite.collected_all
        and not _WholeSuite.deselected
        and not SKIPPED_FOR
        and session.testsfailed == 0
        and not session.shouldstop
        and exitstatus == pytest.ExitCode.OK
    )
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        # a pytest-xdist worker ran part of the tests: it hands its rows to the
        # controller (pytest_testnodedown), which writes and judges them all at once
        workeroutput[_WORKER_ROWS] = {"rows": compat.dump(), "complete": complete}
        return
    if _Workers.reports:
        complete = all(_Workers.reports) and exitstatus == pytest.ExitCode.OK
    compat.write(compat.ROWS_PATH, complete)
    problems = compat.check_page(complete)
    session.config.stash[_COMPAT_PROBLEMS] = problems
    if problems and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_WORKER_ROWS = "kafkalens_compat_rows"


class _Workers:
    """Under pytest-xdist (`-n 2`), whether each worker's share of the run was complete."""

    reports: list[bool] = []


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: only its controller calls it
def pytest_testnodedown(node: Any, error: object) -> None:
    from support import compat

    output = getattr(node, "workeroutput", {}).get(_WORKER_ROWS)
    if output is None:  # a worker that crashed before its session ended
        _Workers.reports.append(False)
        return
    compat.load(output["rows"])
    _Workers.reports.append(bool(output["complete"]))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    problems = config.stash.get(_COMPAT_PROBLEMS, [])
    if problems:
        terminalreporter.section("docs/compatibility.md's table is stale", sep="=", red=True)
        for problem in problems:
            terminalreporter.line(f"  {problem}")
        terminalreporter.line(
            "Regenerate it from this run's rows: .venv/bin/python tests/support/compat.py"
        )
