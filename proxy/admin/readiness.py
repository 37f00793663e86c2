"""Whether the upstream brokers accept connections, checked in the background.

/readyz must answer instantly and must not open a broker connection per request
(a Kubernetes probe every few seconds per pod would otherwise do just that), so a
task probes every upstream every `interval` seconds and /readyz reads the result, as
does kafkalens_upstream_reachable{upstream} (proxy.metrics.UpstreamReachability).
With `upstream_tls` a probe is a TLS handshake, so a certificate the proxy refuses
shows here too.

The probe runs from the start, whether or not clients come, and logs each upstream's
changes once: its first verdict (reachable, or unreachable with the reason: `dns`,
`connect_refused`, `unreachable`, `timeout`, `tls`, and the error in words), each time
it goes down, and each time it comes back, with how long it was down (as Envoy's
health checker logs its transitions, not every probe).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

import structlog

from proxy.config import Address, CoreConfig
from proxy.metrics import UpstreamReachability, connect_failure
from proxy.tls import client_context

log = structlog.get_logger("kafkalens.upstream")

PROBE_INTERVAL_SECONDS = 2.0
PROBE_TIMEOUT_SECONDS = 1.0


@dataclass(frozen=True)
class Verdict:
    """One upstream's last probe: reachable, or why not."""

    reachable: bool
    reason: str = ""  # proxy.metrics.connect_failure's
    error: str = ""
    since: float = 0.0  # monotonic: when it last changed


class UpstreamProbe:
    def __init__(
        self,
        upstreams: Callable[[], Iterable[Address]],
        interval: float = PROBE_INTERVAL_SECONDS,
        timeout: float = PROBE_TIMEOUT_SECONDS,
        reachability: UpstreamReachability | None = None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self._upstreams = upstreams
        self.reachability = reachability
        self.interval = interval
        self.timeout = timeout
        self.tls = tls
        self.server_hostname = server_hostname
        self.unreachable: list[Address] | None = None  # None: not probed yet
        self.probed: list[Address] = []
        self.verdicts: dict[Address, Verdict] = {}
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(
        cls,
        config: CoreConfig,
        upstreams: Callable[[], Iterable[Address]],
        reachability: UpstreamReachability,
    ) -> UpstreamProbe:
        """The probe of a proxy of `config`: a TLS handshake with `upstream_tls`."""
        upstream_tls = config.upstream_tls
        return cls(
            upstreams,
            reachability=reachability,
            tls=client_context(upstream_tls) if upstream_tls else None,
            server_hostname=upstream_tls.server_hostname if upstream_tls else None,
        )

    @property
    def ok(self) -> bool:
        return self.unreachable == []

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def probe_once(self) -> None:
        addresses = sorted(set(self._upstreams()), key=str)
        results = await asyncio.gather(*(self._probe(a) for a in addresses))
        self.probed = addresses
        self.unreachable = [a for a, v in zip(addresses, results, strict=True) if not v.reachable]
        if self.reachability is not None:
            self.reachability.update(
                {str(a): v.reachable for a, v in zip(addresses, results, strict=True)}
            )
        now = time.monotonic()
        verdicts = {}
        for address, verdict in zip(addresses, results, strict=True):
            verdicts[address] = self._changed(address, self.verdicts.get(address), verdict, now)
        self.verdicts = verdicts  # an upstream no longer named (a broker moved) is forgotten

    def _changed(self, address: Address, before: Verdict | None, now_: Verdict, now: float) -> Verdict:
        """Logs a change of `address`'s verdict; returns the verdict to keep."""
        if before is not None and before.reachable == now_.reachable:
            return before  # no change (a new reason while down is not a transition)
        upstream = str(address)
        if now_.reachable and before is None:
            log.info("upstream reachable", upstream=upstream)
        elif now_.reachable and before is not None:
            log.info(
                "upstream reachable again",
                upstream=upstream,
                down_for_s=round(now - before.since, 1),
                was=before.reason,
            )
        else:
            log.warning(
                "upstream unreachable", upstream=upstream, reason=now_.reason, error=now_.error
            )
        return Verdict(now_.reachable, now_.reason, now_.error, now)

    def verdict(
        self, need_all: bool, needed: Collection[Address] | None = None
    ) -> tuple[bool, str]:
        """(ready, why). A sidecar needs its upstream; a gateway needs the cluster, i.e.
        at least one broker: one broker down must not take every client's path away.
        `needed`: the upstreams that count for that (a gateway's brokers, not its
        controllers); by default every one probed. The unreachable are named either way."""
        unreachable = self.unreachable
        if unreachable is None:
            return False, "upstream not probed yet"
        listed = ", ".join(map(str, unreachable))
        if not unreachable:
            return True, "ready"
        counted = [a for a in self.probed if needed is None or a in needed]
        if need_all or all(a in unreachable for a in counted):
            return False, "upstream unreachable: " + listed
        return True, "ready; unreachable: " + listed

    async def _run(self) -> None:
        while True:
            await self.probe_once()
            await asyncio.sleep(self.interval)

    async def _probe(self, address: Address) -> Verdict:
        tls = self.tls
        try:
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    address.host,
                    address.port,
                    ssl=tls,
                    server_hostname=(self.server_hostname or address.host) if tls else None,
                    ssl_handshake_timeout=self.timeout if tls else None,
                ),
                self.timeout,
            )
        except OSError as exc:  # TimeoutError and ssl.SSLError are OSErrors too
            reason, error = connect_failure(exc, tls=tls is not None)
            return Verdict(False, reason, error)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return Verdict(True)
