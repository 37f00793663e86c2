"""kafkalens's benchmarks and long runs: `python -m bench` lists them and the question each
answers; bench/README.md has their figures.

The benchmarks drive kafkalens with the tests' helpers (tests/support: the proxy in its
own process, the load loops, raw Kafka requests, synthetic request logs), imported as
`support.*` as the tests do; this puts tests/ on the path for them.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
