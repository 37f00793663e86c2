"""What operators see of kafkalens stays what it was while the code is rearranged:
the metrics (every family's name, type, help and label names, the series at 0 from the
start, the counts real clients' sessions make), the request log's lines for those
sessions and for scripted share-group, telemetry and KIP-1313 exchanges (KIP-1313
logged and rejected), and the documented configuration with every bound, each byte for
byte as tests/data/surface/ holds them (written by `python tests/support/surface.py`
from the code before the observing features became slices). A change meant to change
what operators see writes them again and says why in its commit."""

from __future__ import annotations

import pytest
from support import surface
from support.paths import REPO

NAMES = (
    "metrics-fresh.txt", "golden-lines.jsonl", "golden-metrics.txt",
    "scripted-log-lines.jsonl", "scripted-log-metrics.txt",
    "scripted-reject-lines.jsonl", "scripted-reject-metrics.txt",
    "config-documented.yaml", "config-views.txt",
)  # fmt: skip


@pytest.fixture(scope="module")
def now(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return dict(surface.surfaces(tmp_path_factory.mktemp("surface")))


def test_every_snapshot_is_compared() -> None:
    assert sorted(NAMES) == sorted(path.name for path in surface.SNAPSHOTS.iterdir())


@pytest.mark.parametrize("name", NAMES)
def test_what_operators_see_is_the_snapshot(now: dict[str, str], name: str) -> None:
    expected = (surface.SNAPSHOTS / name).read_text(encoding="utf-8")
    if now[name] != expected:
        diff = _first_difference(expected, now[name])
        raise AssertionError(f"{name} differs from tests/data/surface/{name}: {diff}")


def test_the_snapshots_see_every_feature(now: dict[str, str]) -> None:
    """The scripted exchanges reach each feature: a test that compared empty texts
    would hold nothing."""
    lines = now["scripted-log-lines.jsonl"]
    for field in ('"acknowledgements"', '"acquired"', '"kip1313_violation"', '"telemetry_metrics"'):
        assert field in lines, field
    assert '"action": "rejected"' in now["scripted-reject-lines.jsonl"]
    golden = now["golden-lines.jsonl"]
    assert '"positions"' in golden and '"record_stats"' in golden
    metrics = now["scripted-log-metrics.txt"]
    assert 'kafkalens_share_records_delivered_total{group="billing",topic="orders"}' in metrics
    assert "kafkalens_client_org_apache_kafka_producer_record_queue_time_avg{" in metrics
    assert 'kafkalens_kip1313_violations_total{action="logged"} 5.0' in metrics
    assert "kafkalens_consumer_lag_records{" in now["golden-metrics.txt"]


def _first_difference(expected: str, got: str) -> str:
    for number, (want, have) in enumerate(
        zip(expected.splitlines(), got.splitlines(), strict=False), 1
    ):
        if want != have:
            return f"line {number}:\n  snapshot: {want}\n  now:      {have}"
    return f"{len(expected.splitlines())} lines in the snapshot, {len(got.splitlines())} now"


def test_the_snapshot_folder_is_where_the_writer_writes() -> None:
    assert surface.SNAPSHOTS == REPO / "tests" / "data" / "surface"
