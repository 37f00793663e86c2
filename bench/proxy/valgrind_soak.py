"""`python -m bench.proxy.valgrind_soak`: the proxy under valgrind's memcheck for a short
soak, to show the C parts (proxy/_steady.c, codec/_accel.c) clean: no invalid read or
write, no use of uninitialised memory, nothing freed twice, on the steady path and
around it.

The proxy (`kafkalens proxy`, the request log on, its C parts active) runs under
`valgrind --tool=memcheck` with PYTHONMALLOC=malloc (Python objects then come from the
allocator memcheck watches, so a C read past an object's end is seen), in front of a
scripted broker that answers with real clients' captured answers (tests/data/golden,
tests/support/replay.py). Through it: the captured sessions `--rounds` times on one
connection (their second and later rounds the C path's), the benchmark's small apis
(ApiVersions, Metadata, OffsetCommit, Heartbeat) `--small` times, then hostile clients
around the C path (tests/support/steady_peers.py's, `--hostile` steps). It prints valgrind's error summary and the errors whose stack passes through
either C file, and exits 1 if there is any such error. Leaks are not looked for (the
interpreter keeps what it allocates until exit).

    .venv/bin/python -m bench.proxy.valgrind_soak            # a few minutes
    .venv/bin/python -m bench.proxy.valgrind_soak --rounds 2 --small 200 --hostile 50
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.replay import Exchange, ScriptedBroker, send_session, sessions, small_requests
from support.steady_peers import HostileClient

from proxy.tansu import free_port, wait_for_port

HOST = "127.0.0.1"
OURS = ("_steady.c", "_accel.c")
START_SECONDS = 300.0  # an interpreter starting under memcheck, on a busy machine


def proxy_command(port: int, upstream: int, work: Path) -> list[str]:
    return [
        "valgrind", "--tool=memcheck", "--leak-check=no", "--track-origins=yes", "--num-callers=30",
        f"--log-file={work / 'valgrind.log'}", sys.executable, "-m", "proxy.cli", "proxy",
        "--listen", f"{HOST}:{port}", "--upstream", f"{HOST}:{upstream}", "--metrics", f"{HOST}:{free_port(HOST)}",
        "--request-log", str(work / "requests.log"),
    ]  # fmt: skip


def errors(log: str) -> tuple[int, list[str]]:
    """valgrind's count of errors, and the error reports whose stack is in our C."""
    found = re.findall(r"ERROR SUMMARY: (\d+) errors", log)
    total = int(found[-1]) if found else -1
    reports = [block for block in re.split(r"\n==\d+== \n", log) if any(name in block for name in OURS)]
    return total, [r for r in reports if re.search(r"Invalid|uninitialised|free|overlap|Mismatched", r)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="of the captured sessions")
    parser.add_argument("--small", type=int, default=500, help="rounds of the small apis")
    parser.add_argument("--hostile", type=int, default=200, help="hostile client steps")
    parser.add_argument("--keep", type=Path, help="copy valgrind's log here")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    from proxy import steady

    if not steady.ACTIVE:
        print("the C steady path is not active here (not built, or KAFKALENS_PURE_CODEC is set)", file=sys.stderr)
        return 2
    script = [exchange for _, exchanges in sorted(sessions().items()) for exchange in exchanges]
    small = small_requests()
    with tempfile.TemporaryDirectory(prefix="kafkalens-valgrind-") as tmp:
        work = Path(tmp)
        broker = ScriptedBroker(script)
        small_broker = ScriptedBroker(small)
        env = dict(os.environ, PYTHONMALLOC="malloc")
        started = time.monotonic()
        procs = []
        try:
            for upstream, name in ((broker.port, "captured"), (small_broker.port, "small")):
                port = free_port(HOST)
                cmd = proxy_command(port, upstream, work / name)
                (work / name).mkdir()
                log = open(work / name / "proxy.out", "wb")  # noqa: SIM115 - closed with the process
                procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log, port))
            for _, _, port in procs:
                if not wait_for_port(HOST, port, START_SECONDS):
                    raise RuntimeError("the proxy did not listen under valgrind")
            send_session(procs[0][2], script, rounds=args.rounds)
            send_session(procs[1][2], small, rounds=args.small)
            hostile_steps(procs[1][2], small, args.hostile)
        finally:
            for proc, log, _ in procs:
                proc.terminate()
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                log.close()
            broker.close()
            small_broker.close()
        failed = False
        for name in ("captured", "small"):
            text = (work / name / "valgrind.log").read_text(errors="replace")
            total, ours = errors(text)
            print(f"{name}: valgrind ERROR SUMMARY {total} errors; in proxy/_steady.c or codec/_accel.c: {len(ours)}")
            for report in ours[:5]:
                print(report)
            failed = failed or bool(ours) or total < 0
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(work / name / "valgrind.log", args.keep / f"{name}-valgrind.log")
        print(f"took {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


def hostile_steps(port: int, script: list[Exchange], steps: int) -> None:
    """The hostile client of tests/proxy/test_steady_hostile.py, `steps` steps (the soak's
    broker stays honest)."""
    client = HostileClient(port, script, seed=3)
    for _ in range(steps):
        client.step()
    client.close()


if __name__ == "__main__":
    sys.exit(main())
