"""The /proc CPU window the benchmark's per-request figures come from."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.procs import CpuWindow, memory_kib, pss_kib, user_system_seconds


def _burn_user(seconds: float) -> None:
    # the clock is read once per ~thousand turns: reading it is a system call
    end = os.times().user + seconds
    while os.times().user < end:
        for _ in range(1000):
            sum(range(100))


def _burn_system(seconds: float) -> None:
    end = os.times().system + seconds
    while os.times().system < end:
        for _ in range(100):
            os.stat("/")  # a system call each turn: the kernel's time


@pytest.mark.slow
def test_window_splits_user_and_system_time() -> None:
    pid = os.getpid()
    user = CpuWindow(pid).start()
    _burn_user(0.3)
    assert user.stop() is not None and user.used is not None and user.system is not None
    assert user.used >= 0.2 and user.system <= user.used / 2

    kernel = CpuWindow(pid).start()
    _burn_system(0.3)
    kernel.stop()
    assert kernel.system is not None and kernel.used is not None
    assert kernel.system > user.system and kernel.system <= kernel.used


def test_no_process_no_figures() -> None:
    window = CpuWindow(None).start()
    assert window.stop() is None and window.system is None


def test_user_and_system_sum_to_cpu_seconds() -> None:
    user, system = user_system_seconds(os.getpid())
    assert user > 0 and system >= 0


# A process of its own, so that nothing else in the measured tree (the test session's own
# children: brokers a fixture started) hides what the fork adds.
_FORKER = """
import os, sys
ballast = bytearray(os.urandom(64 << 20))  # 64 MiB of private pages, touched
print("alone", flush=True)
sys.stdin.readline()
if os.fork() == 0:
    sys.stdin.readline()  # the child waits, sharing every page with its parent
    os._exit(0)
print("both", flush=True)
sys.stdin.readline()
"""


def test_pss_counts_a_forked_childs_shared_pages_once() -> None:
    forker = subprocess.Popen([sys.executable, "-c", _FORKER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert forker.stdin is not None and forker.stdout is not None
    try:
        assert forker.stdout.readline().strip() == "alone"
        alone_rss, alone_pss = memory_kib(forker.pid, "VmRSS"), pss_kib(forker.pid)
        forker.stdin.write("fork\n")
        forker.stdin.flush()
        assert forker.stdout.readline().strip() == "both"
        rss_both, pss_both = memory_kib(forker.pid, "VmRSS"), pss_kib(forker.pid)
        # the child shares nearly all its pages with its parent: RSS doubles, PSS barely grows
        assert rss_both > 1.5 * alone_rss
        assert pss_both < 1.3 * alone_pss
    finally:
        forker.stdin.close()  # the child (an orphan once the parent is killed) reads EOF
        forker.kill()
        forker.wait()
        forker.stdout.close()
