"""Whether the upstream brokers accept TCP connections, checked in the background.

/readyz must answer instantly and must not open a broker connection per request
(a Kubernetes probe every few seconds per pod would otherwise do just that), so a
task probes every upstream every `interval` seconds and /readyz reads the result, as
does kafkalens_upstream_reachable{upstream} (proxy.metrics.UpstreamReachability).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from proxy.config import Address
from proxy.metrics import UpstreamReachability

PROBE_INTERVAL_SECONDS = 2.0
PROBE_TIMEOUT_SECONDS = 1.0


class UpstreamProbe:
    def __init__(
        self,
        upstreams: Callable[[], Iterable[Address]],
        interval: float = PROBE_INTERVAL_SECONDS,
        timeout: float = PROBE_TIMEOUT_SECONDS,
        reachability: UpstreamReachability | None = None,
    ) -> None:
        self._upstreams = upstreams
        self.reachability = reachability
        self.interval = interval
        self.timeout = timeout
        self.unreachable: list[Address] | None = None  # None: not probed yet
        self.probed: list[Address] = []
        self._task: asyncio.Task[None] | None = None

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
        results = await asyncio.gather(*(self._reachable(a) for a in addresses))
        self.probed = addresses
        self.unreachable = [a for a, ok in zip(addresses, results, strict=True) if not ok]
        if self.reachability is not None:
            self.reachability.update({str(a): ok for a, ok in zip(addresses, results, strict=True)})

    def verdict(self, need_all: bool) -> tuple[bool, str]:
        """(ready, why). A sidecar needs its upstream; a gateway needs the cluster, i.e.
        at least one broker: one broker down must not take every client's path away."""
        unreachable = self.unreachable
        if unreachable is None:
            return False, "upstream not probed yet"
        listed = ", ".join(map(str, unreachable))
        if not unreachable:
            return True, "ready"
        if need_all or len(unreachable) == len(self.probed):
            return False, "upstream unreachable: " + listed
        return True, "ready; unreachable: " + listed

    async def _run(self) -> None:
        while True:
            await self.probe_once()
            await asyncio.sleep(self.interval)

    async def _reachable(self, address: Address) -> bool:
        try:
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(address.host, address.port), self.timeout
            )
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
