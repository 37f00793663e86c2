"""Whether a connection's steady state runs in C (proxy/_steady.c), and its parts.

A read from either side of a connection goes to one C call (`Core.feed_request`, the
client's `data_received`; `Core.feed_response`, the broker's), which either does all
the Python path would do with it, or hands the whole read to the Python path untouched
(proxy/_steady.c says when, at its top). It takes only reads made of whole frames on a
connection in its steady state, and frames, forwards and pairs them in C. Where the
observing hooks met every frame before byte for byte (the memo's entries, already
rendered: proxy/observe/memo.py), it observes them in C too; where not (a Produce, a
Fetch, a first-seen frame), it hands each frame to the hooks' request_forwarded or
response_forwarded once the read went on, as the Python path does. Frames cut across
reads, identity changes the memo cannot vouch for, rewriting other than the memoised
ApiVersions cap, requests held for admit_request, SASL and every bound a peer can reach
stay Python's. Lines, metrics and forwarded bytes are the Python path's, byte for byte
(tests/proxy/test_steady.py runs both).

Built where a C compiler and the Python headers are (setup.py, optional like the
codec's); `KAFKALENS_PURE_CODEC=1` turns it off with the codec's C interpreter (every
read then takes the Python path). `ACTIVE` says whether it runs.

The pieces: `Counters` (the request metrics the C path counts, per api key, taken by
proxy/metrics.py at each flush), `Plan` (what a proxy's connections share: the classes
whose slots the C path reads, the memos, the request log's queue, which apis it may
take: proxy/forward/connection.py makes it from the hooks' `SteadyParts`), `Core`
(one connection).
"""

from __future__ import annotations

import os
from typing import Any

try:
    from proxy import _steady
except ImportError:  # built without a C compiler: every read takes the Python path
    _steady = None  # type: ignore[assignment]

AVAILABLE: bool = _steady is not None
ACTIVE: bool = AVAILABLE and not os.environ.get("KAFKALENS_PURE_CODEC")


def counters(bounds: tuple[float, ...]) -> Any:
    """The C path's request counters (duration buckets with these upper bounds), or None
    where it does not run."""
    if not ACTIVE:
        return None
    return _steady.Counters(bounds)


def plan(**parts: Any) -> Any:
    """A `Plan` of the C path (see proxy/_steady.c for the arguments), or None where it
    does not run."""
    if not ACTIVE:
        return None
    return _steady.Plan(**parts)


def forwarding_plan(**parts: Any) -> Any:
    """The `Plan` of hooks that observe nothing (`Plan.forwarding`: reads forwarded and
    paired, nothing else), or None where the C path does not run."""
    if not ACTIVE:
        return None
    return _steady.Plan.forwarding(**parts)


def lag_walks() -> Any:
    """The lag tracker's walks of a Fetch in C, (fetch_offsets, fetch_positions) (see
    proxy/_steady.c), or None where the C path does not run: the tracker's own Python
    loops then (proxy/observe/lag/tracker.py)."""
    if not ACTIVE:
        return None
    return _steady.fetch_offsets, _steady.fetch_positions


def core(plan: Any, python_request: Any, python_response: Any) -> Any:
    """One connection's C path: reads it does not take go to `python_request` and
    `python_response`."""
    return _steady.Core(plan, python_request, python_response)
