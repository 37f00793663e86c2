"""The memory soak's short form: `python -m bench.proxy.soak`'s mix (bench/README.md,
"Soak") through `kafkalens proxy` in front of Apache Kafka, RSS and open files flat.

Real clients at fixed rates: two librdkafka producers, a consumer group of two reading it
all back (Fetch, Heartbeat and OffsetCommit every second, Metadata every second), a
member joining and leaving every 30 s, and small requests on connections that come and
go. After a warm-up the proxy's RSS and open files are looked at every second and a
least-squares line is fitted through each (support.soak): it may grow by at most
`RSS_GROWTH_MB` and `FILES_GROWTH` over the span. Once the clients leave, nothing is
pending and open files are back at their idle count.

What it holds: a proxy that keeps something per request, per connection or per answer
grows past `RSS_GROWTH_MB` over the span and fails it. The memo of ApiVersions answers
is such a case: Apache Kafka 4.x's answer carries `finalized_features_epoch`, which its
controller's no-op records move twice a second, so each answer is new; a memo of 2,048
of them (~28 KB each) grows +189 MB/hour here, and it is bounded to
`API_VERSIONS_ENTRIES` (64, proxy/observe/memo.py; bench/README.md, "Soak").

That it catches a leak is held too: beside the steady run, at the same time and on the
same broker (its SECOND listener, so each proxy sees all of its own clients' traffic), a
proxy that keeps `LEAK_BYTES` for every request it forwards (a sitecustomize.py written
here and put first on the proxy process's path: the product's code is not touched) must
be judged growing, by at least half of what it kept more than the steady run grew. The
two run at once (threads of one module fixture): a few minutes, not twice that.
"""

from __future__ import annotations

import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.kafka import SharedKafka
from support.load import Figures, GroupLoad, ProxyProcess
from support.soak import Look, Plan, Verdict, hold, judge, trend

RSS_GROWTH_MB = 3.0
FILES_GROWTH = 2.0
PLAN = Plan(
    minutes=2.5,
    warmup_minutes=0.75,
    every=15.0,
    sample=1.0,
    rss_tolerance_mb=RSS_GROWTH_MB,
    files_tolerance=FILES_GROWTH,
)
MIX = ("Produce", "Fetch", "Metadata", "Heartbeat", "OffsetCommit", "JoinGroup", "ApiVersions")
LEAK_BYTES = 256
LEAK = textwrap.dedent(
    f"""\
    # tests/proxy/test_soak.py's leak: every request forwarded keeps {LEAK_BYTES} bytes
    from proxy.observe import observing_hooks

    KEPT = []
    _forwarded = observing_hooks.ObservingHooks.request_forwarded


    def request_forwarded(self, info, frame, pending):
        KEPT.append(bytes({LEAK_BYTES}))
        return _forwarded(self, info, frame, pending)


    observing_hooks.ObservingHooks.request_forwarded = request_forwarded
    """
)


def requests_by_api(metrics: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("kafkalens_requests_total{"):
            api = line.split('api="', 1)[1].split('"', 1)[0]
            counts[api] = counts.get(api, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


@dataclass
class Soaked:
    verdict: Verdict
    looks: list[Look]
    counts: dict[str, int]
    seen: dict[str, float]  # the proxy's own kafkalens_requests_total, by api
    report: str

    def kept_mb(self, per_request: int) -> float:
        """What `per_request` bytes kept for each request over the fitted span come to."""
        fraction = self.verdict.rss.span_seconds / self.looks[-1].seconds
        return sum(self.seen.values()) * fraction * per_request / 1e6


def soak(
    label: str, upstream: str, port: int, work: Path, python_path: tuple[Path, ...] = ()
) -> Soaked:
    """PLAN's load held through a `kafkalens proxy` listening on `port` (the sidecar
    address a listener of the broker advertises) in front of `upstream`."""
    work.mkdir()
    proxy = ProxyProcess(work, upstream, port=port, python_path=python_path)
    proxy.start()
    name = f"soak-{label}-{uuid.uuid4().hex[:8]}"
    try:
        verdict, looks, counts = hold(
            proxy,
            lambda: GroupLoad(proxy.bootstrap, topic=name, group=name).start(churn=30.0),
            PLAN,
            say=lambda line: print(f"{label:8} {line}"),
        )
        seen = requests_by_api(proxy.http("/metrics")[1])
    finally:
        proxy.kill()
    report = "\n".join(verdict.lines()) + f"\n{counts}\n{seen}\n" + proxy.log_tail()
    return Soaked(verdict, looks, counts, seen, report)


@dataclass
class Soaks:
    steady: Soaked
    leaking: Soaked


@pytest.fixture(scope="module")
def soaks(apache_kafka: SharedKafka, tmp_path_factory: pytest.TempPathFactory) -> Soaks:
    """The steady soak (the PROXIED listener's sidecar) and the leaking one (the SECOND
    listener's), at the same time, each its own proxy process, topic and group."""
    work = tmp_path_factory.mktemp("soak")
    inject = work / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(LEAK)
    kafka = apache_kafka
    with ThreadPoolExecutor(2) as pool:
        steady = pool.submit(soak, "steady", kafka.upstream, kafka.sidecar_port, work / "steady")
        leaking = pool.submit(
            soak, "leaking", kafka.second_upstream, kafka.second_sidecar_port,
            work / "leaking", (inject,),
        )  # fmt: skip
        return Soaks(steady.result(), leaking.result())


def test_rss_and_open_files_flat_under_a_steady_mix(soaks: Soaks) -> None:
    steady = soaks.steady
    counts, seen, report = steady.counts, steady.seen, steady.report
    print(report)  # the margins, shown by pytest -rP
    assert counts["acked"] > 30_000 and counts["consumed"] > 30_000, report
    assert counts["small requests"] > 20_000 and counts["joins"] >= 4, report
    assert counts["produce errors"] == counts["small errors"] == 0, report
    assert all(seen.get(api, 0) > 0 for api in MIX), seen
    assert seen["Heartbeat"] >= 100 and seen["OffsetCommit"] >= 100, seen
    assert steady.verdict.rss.points >= 90, report
    assert steady.verdict.rss_flat, report
    assert steady.verdict.files_flat, report
    assert steady.verdict.clean_after, report


def test_the_soak_judges_a_leaking_proxy_growing(soaks: Soaks) -> None:
    """The leak's growth is judged against the steady run's, taken at the same time on
    the same broker, so that the proof holds whatever the steady run itself does."""
    steady, leaking = soaks.steady, soaks.leaking
    kept = leaking.kept_mb(LEAK_BYTES)
    report = f"{kept:.1f} MB kept\n{leaking.report}\nsteady:\n{steady.report}"
    print(report)  # what the leak did, shown by pytest -rP
    assert kept > 2 * RSS_GROWTH_MB, f"the leak is too small to prove anything: {report}"
    assert leaking.verdict.rss.points >= 90, report
    assert not leaking.verdict.rss_flat, report
    assert leaking.verdict.rss.growth - steady.verdict.rss.growth >= 0.5 * kept, report
    assert leaking.verdict.files_flat and leaking.verdict.clean_after, report


def test_the_trend_is_the_least_squares_line_after_the_warm_up() -> None:
    """The arithmetic the soak's verdict rests on, against lines known in advance."""
    line = trend([(t, 100.0 + 0.01 * t) for t in range(0, 601, 5)])
    assert abs(line.slope_per_hour - 36.0) < 1e-9 and line.stderr_per_hour < 1e-9
    assert abs(line.growth - 6.0) < 1e-9 and line.r2 > 0.999999 and line.points == 121
    wobble = trend([(t, 100.0 + (1.0 if t % 10 else -1.0)) for t in range(0, 601, 5)])
    assert abs(wobble.growth) < 0.1 and wobble.r2 < 0.05 and wobble.stderr_per_hour > 0

    def look(t: float, rss: float, files: int) -> Look:
        return Look(t, Figures(rss_mb=rss, open_files=files, pending=0, connections=3))

    # fast growth in the warm-up, then flat: flat; growth after it: growing
    warm = [look(t, 50.0 + min(t, 60.0), 20) for t in range(0, 301, 5)]
    after = Figures(rss_mb=110.0, open_files=12, pending=0, connections=0)
    verdict = judge(warm, 60.0, after, 12, rss_tolerance_mb=3.0, files_tolerance=2.0)
    assert verdict.rss_flat and verdict.files_flat and verdict.clean_after and verdict.ok
    creeping = [look(t, 100.0 + t / 60, 20 + t // 60) for t in range(0, 301, 5)]
    verdict = judge(creeping, 60.0, after, 12, rss_tolerance_mb=3.0, files_tolerance=2.0)
    assert not verdict.rss_flat and not verdict.files_flat  # +4 MB, +4 files over 4 min
    left = Figures(rss_mb=110.0, open_files=14, pending=1, connections=0)
    assert not judge(warm, 60.0, left, 12, 3.0, 2.0).clean_after
