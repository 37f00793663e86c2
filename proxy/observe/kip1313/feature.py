"""KIP-1313, registered as a feature (`kip1313:` in kafkalens.yaml)."""

from __future__ import annotations

from proxy.observe.feature import Feature
from proxy.observe.kip1313.config import Kip1313Config
from proxy.observe.kip1313.link import Kip1313Link
from proxy.observe.kip1313.metrics import Kip1313Metrics


def _summary(kip1313: Kip1313Config) -> list[str]:
    return [f"kip1313 enforcement: {kip1313.enforcement}"]


KIP1313 = Feature(
    name="kip1313",
    section=Kip1313Config,
    default=Kip1313Config(),
    doc="KIP-1313: a connection whose first request used request header v3 must carry the"
    " same non-zero client instance id on every later request (SaslHandshake excepted).",
    summary=_summary,
    metrics=Kip1313Metrics,
    link=Kip1313Link,
)
