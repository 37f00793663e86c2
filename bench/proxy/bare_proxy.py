"""kafkalens's forwarding machinery with the no-op `Hooks`: no decoding, request log or
per-request metrics. Not a kafkalens mode: the `kafkalens-bare` arm, to price the hooks.
The process is set up as `kafkalens proxy`'s (proxy/runner.py's `serve`): start-up objects
frozen out of the garbage collector, glibc's malloc thresholds fixed, so what it costs
against the kafkalens arm is the hooks alone.

    python -m bench.proxy.bare_proxy --listen HOST:PORT --upstream HOST:PORT --metrics HOST:PORT
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import uvloop

from proxy.config import Overrides
from proxy.features import Config, load_config
from proxy.forward.allocator import keep_large_buffers
from proxy.hooks import Hooks
from proxy.runner import freeze_startup_objects, start_proxy, wait_for_stop_signal


async def serve(config: Config) -> None:
    running = await start_proxy(config, hooks=Hooks())
    freeze_startup_objects()
    keep_large_buffers()
    await wait_for_stop_signal()
    await running.stop(0.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.bare_proxy")
    parser.add_argument("--config")
    for flag in ("--listen", "--upstream", "--metrics"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    overrides = Overrides(listen=args.listen, upstream=args.upstream, metrics=args.metrics)
    uvloop.run(serve(load_config(args.config, overrides)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
