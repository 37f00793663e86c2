"""The KIP-1313 slice's own metric: violations of the client instance id rule, by what
was done (logged or rejected); defined on the proxy's registry by
`Metrics.of(Kip1313Metrics)`."""

from __future__ import annotations

from proxy.metrics import Metrics

ACTIONS = ("logged", "rejected")


class Kip1313Metrics:
    def __init__(self, metrics: Metrics) -> None:
        self.violations = metrics.counter(
            "kafkalens_kip1313_violations_total",
            "KIP-1313 client instance id violations.",
            ("action",),
        )
        for action in ACTIONS:  # at 0 from the start: the first ones show in rate() too
            self.violations.labels(action=action)
