"""A feature of kafkalens, as a slice: one package that declares its own config section
(in the config language, proxy/config/language.py), and, as it needs them, its own
metrics, its own per-connection state and its link of the observers' chain (chain.py).
The core (framing, identity, the request line and its metrics) never imports a feature;
a feature registers with the core by one line, its section's field in the whole file's
`Config` (proxy/features.py):

    lag: LagConfig = LAG.declare()

The order of those fields is the order of the sections in kafkalens.yaml and of the
links in the chain. ARCHITECTURE.md ("Add a feature") has the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from proxy.config.language import section
from proxy.metrics import Metrics
from proxy.observe.chain import Observer, Shared

C = TypeVar("C")


def _no_lines(section: Any) -> list[str]:
    return []


@dataclass(frozen=True, eq=False)
class Feature(Generic[C]):
    """What a feature's package registers: its config section (`name:` in the file, the
    keys `section` declares, `doc` above it, `default` when left out; None: absent
    unless given), the lines `kafkalens check-config` says of it (`summary`), its
    metrics: a class defining its families on the proxy's registry, made by
    `Metrics.of(metrics)` (the proxy makes every feature's as it starts, whether the
    feature is on or not, so that /metrics always names the same families), and the
    builder of its link of the observers' chain (`link`)."""

    name: str
    section: type[C]
    doc: str
    default: C | None
    summary: Callable[[C], list[str]] = _no_lines
    metrics: Callable[[Metrics], Any] | None = None
    # its link of the chain, built from its section and what the core shares (None: it
    # has none, or none with this section: off)
    link: Callable[[C, Shared], Observer | None] | None = None

    def declare(self) -> Any:
        """Its section's field in the whole file's Config: the registration line."""
        return section(self.section, default=self.default, doc=self.doc, owner=self)

    def of(self, config: Any) -> C:
        """Its section of a whole config."""
        found: C = getattr(config, self.name)
        return found
