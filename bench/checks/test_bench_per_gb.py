"""`python -m bench.proxy.per_gb`'s reading of what perf and strace wrote (the run itself needs
perf, a broker and minutes: bench/README.md)."""

from __future__ import annotations

from pathlib import Path

from bench.proxy import per_gb

PERF_STAT = """\
# started on Sun Nov 29 03:50:59 2026

     0.100261288,88.96,msec,task-clock,88960873,100.00,0.445,CPUs utilized
     0.100261288,331,,syscalls:sys_enter_read,89018145,100.00,3.721,K/sec
     0.200372182,172.97,msec,task-clock,172974834,100.00,0.865,CPUs utilized
     0.200372182,84351,,syscalls:sys_enter_read,172917562,100.00,487.650,K/sec
     0.300661826,5.00,msec,task-clock,200148521,100.00,1.001,CPUs utilized
     0.300661826,<not counted>,,syscalls:sys_enter_read,0,100.00,,
"""


def test_perf_stat_intervals_summed_per_window(tmp_path: Path) -> None:
    path = tmp_path / "stat.out"
    path.write_text(PERF_STAT)
    started = 1000.0
    # the first window covers the first two intervals (0..0.2 s), the second the third
    windows = {"produce": (1000.0, 1000.19), "consume": (1000.21, 1000.3)}
    sums = per_gb.stat_windows(path, started, windows)
    assert sums["produce"] == {"task-clock": 88.96 + 172.97, "syscalls:sys_enter_read": 84682.0}
    assert sums["consume"] == {"task-clock": 5.0}  # "<not counted>" adds nothing


PERF_SCRIPT = """\
 4051.061702:                     syscalls:sys_exit_read: 0x186a0
 4051.061716:                    syscalls:sys_exit_write: 0x100
 4051.061720:                     syscalls:sys_exit_read: 0xfffffffffffffff5
 4051.061749: kbench7:m0: (7f551b38b800) len=5000
 4052.500000:                   syscalls:sys_exit_writev: 0x10
 4060.000000:                     syscalls:sys_exit_read: 0x10
"""


def test_perf_script_bytes_and_copies_per_window() -> None:
    windows = {"produce": (4051.0, 4052.0), "consume": (4052.0, 4053.0)}
    found = per_gb.tally(PERF_SCRIPT, windows, "kbench7")
    # EAGAIN (-11) moved nothing; the sample after both windows counts in neither
    assert found["produce"] == {
        "read_calls": 1,
        "read_bytes": 100_000,
        "write_calls": 1,
        "write_bytes": 256,
        "copy_calls": 1,
        "copy_bytes": 5000,
    }
    assert found["consume"]["write_bytes"] == 16 and found["consume"]["read_calls"] == 0


STRACE = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 77.91    0.363210        4540        80        40 epoll_wait
  4.56    0.021275          12      1769           read
------ ----------- ----------- --------- --------- ----------------
100.00    0.466168                  1849        40 total
"""


def test_strace_summary_read(tmp_path: Path) -> None:
    path = tmp_path / "strace.out"
    path.write_text(STRACE)
    assert per_gb.strace_counts(path) == {"epoll_wait": 80, "read": 1769}
