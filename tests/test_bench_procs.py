"""The /proc CPU window the benchmark's per-request figures come from."""

from __future__ import annotations

import os

from bench.procs import CpuWindow, memory_kib, pss_kib, user_system_seconds


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


def test_pss_counts_a_forked_childs_shared_pages_once() -> None:
    alone_rss, alone_pss = memory_kib(os.getpid(), "VmRSS"), pss_kib(os.getpid())
    never_written, keep_open = os.pipe()
    child = os.fork()
    if child == 0:
        os.read(never_written, 1)  # blocks until killed
        os._exit(0)
    try:
        rss_both = memory_kib(os.getpid(), "VmRSS")
        pss_both = pss_kib(os.getpid())
        # the child shares nearly all its pages with us: RSS doubles, PSS barely grows
        assert rss_both > 1.5 * alone_rss
        assert pss_both < 1.3 * alone_pss
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.close(never_written)
        os.close(keep_open)
