"""The host-CPU sampler on a fake /proc: stat parsing, process trees, titles, windows with
processes that exit or start inside them, and the host-bound finding."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from perfgate.errors import TelemetryError
from perfgate.telemetry import (
    HostCpuSampler,
    HostCpuWindow,
    ProcessCpu,
    TreeReading,
    cpu_governors,
    host_bound_finding,
    open_host_sampler,
)
from perfgate.telemetry._host import parse_stat, process_tree, scan

TICKS = os.sysconf("SC_CLK_TCK")


def stat_line(pid: int, comm: str, ppid: int, ticks: int, state: str = "S") -> str:
    # man 5 proc: pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
    utime, stime = ticks - ticks // 3, ticks // 3
    return f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194304 10 0 0 0 {utime} {stime} 0 0 20 0 1 0 100\n"


def fake_proc(root: Path, procs: list[tuple[int, str, int, int, str, bytes]]) -> Path:
    """(pid, comm, ppid, cpu ticks, state, cmdline) per process, written as /proc would show them."""
    for pid, comm, ppid, ticks, state, cmdline in procs:
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stat").write_text(stat_line(pid, comm, ppid, ticks, state))
        (d / "cmdline").write_bytes(cmdline)
    (root / "self").mkdir(exist_ok=True)  # not a pid: skipped
    return root


def test_a_stat_line_whose_command_holds_spaces_and_parentheses():
    s = parse_stat(stat_line(42, "sglang::sch (x) y", 7, 300))
    assert (s.pid, s.ppid, s.comm, s.state, s.cpu_ticks) == (42, 7, "sglang::sch (x) y", "S", 300)


@pytest.mark.parametrize("text", ["", "42 sglang S 1 2", "42 (x) S 1 2 3"])
def test_a_malformed_stat_line_is_refused(text):
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        parse_stat(text)


def test_the_tree_is_the_root_and_its_descendants_only(tmp_path):
    proc = fake_proc(
        tmp_path,
        [
            (100, "python", 1, 0, "S", b""),
            (101, "sglang::schedul", 100, 0, "S", b""),
            (102, "sglang::detoken", 100, 0, "S", b""),
            (103, "grandchild", 101, 0, "S", b""),
            (200, "unrelated", 1, 0, "S", b""),
        ],
    )
    (proc / "300").mkdir()  # gone between listing and read: no stat
    stats = scan(proc)
    assert sorted(stats) == [100, 101, 102, 103, 200]
    assert process_tree(stats, 100) == [100, 101, 102, 103]
    assert process_tree(stats, 999) == []


def test_titles_come_from_the_command_line_as_setproctitle_leaves_it_else_from_comm(tmp_path):
    proc = fake_proc(
        tmp_path,
        [
            (100, "python3", 1, 0, "S", b"/usr/bin/python3\x00-m\x00sglang.launch_server\x00--port\x00300\x00"),
            # setproctitle overwrites argv in place and pads it with NULs.
            (101, "sglang::schedul", 100, 0, "S", b"sglang::scheduler\0\0\0\0\0\0"),
            (102, "kworker", 100, 0, "S", b""),
        ],
    )
    reading = HostCpuSampler(100, proc).read()
    assert {pid: title for pid, (title, _) in reading.ticks.items()} == {
        100: "python3 -m sglang.launch_server --port 300",
        101: "sglang::scheduler",
        102: "kworker",
    }


def test_zombies_are_left_out_of_a_reading(tmp_path):
    proc = fake_proc(tmp_path, [(100, "python", 1, 5, "S", b""), (101, "dead", 100, 9, "Z", b"")])
    assert set(HostCpuSampler(100, proc).read().ticks) == {100}


def test_shares_over_a_window_with_a_process_that_exits_and_one_that_starts(tmp_path):
    sampler = HostCpuSampler(100, tmp_path)
    start = TreeReading(10.0, {100: ("leader", 50), 101: ("sglang::scheduler", 1000), 102: ("worker", 7)})
    # Two seconds later: the scheduler used 2 s of CPU, the worker exited, a new process used 0.5 s.
    end = TreeReading(
        12.0,
        {100: ("leader", 50 + TICKS // 10), 101: ("sglang::scheduler", 1000 + 2 * TICKS), 103: ("new", TICKS // 2)},
    )
    window = sampler.window(start, end)
    assert window.length_s == 2.0
    assert [(p.pid, p.title) for p in window.processes] == [
        (101, "sglang::scheduler"),
        (103, "new"),
        (100, "leader"),
        (102, "worker"),
    ]
    shares = {p.pid: p.cpu_share for p in window.processes}
    assert shares[101] == pytest.approx(1.0)
    assert shares[103] == pytest.approx(0.25, abs=0.01)
    assert shares[100] == pytest.approx(0.05, abs=0.01)
    assert shares[102] is None  # its last CPU seconds cannot be read
    assert window.busiest() == window.processes[0]
    with pytest.raises(ValueError, match="must end after it starts"):
        sampler.window(end, start)


def test_the_sampler_reads_this_process_tree_for_real():
    sampler = open_host_sampler(os.getpid())
    a = sampler.read()
    busy_until = a.time_s + 0.2
    while time.monotonic() < busy_until:
        pass
    window = sampler.window(a, sampler.read())
    me = next(p for p in window.processes if p.pid == os.getpid())
    # A noisy 2-core machine may take some of the spin away: more than nothing, at most a core.
    assert me.cpu_share is not None and 0.0 < me.cpu_share <= 1.2


def test_a_server_whose_processes_cannot_be_read_is_refused_with_why(tmp_path):
    with pytest.raises(TelemetryError, match="is not there"):
        open_host_sampler(100, tmp_path / "missing")
    with pytest.raises(TelemetryError, match=r"server pid 100: .*/100/stat cannot be read"):
        open_host_sampler(100, tmp_path)


def window(*shares: float | None) -> HostCpuWindow:
    return HostCpuWindow(10.0, tuple(ProcessCpu(100 + i, f"p{i}", s) for i, s in enumerate(shares)))


def test_the_host_bound_finding_names_the_busiest_process_while_the_gpus_wait():
    line = host_bound_finding(window(0.3, 0.99, None), 55.0, 0.95)
    assert line == (
        "host-bound: server process p1 (pid 101) ran at 99% of a core while the GPUs were 55 % busy: "
        "this run measures the host CPU, not the GPU stack"
    )
    assert "while GPU busy not measured" in host_bound_finding(window(0.97), None, 0.95)


@pytest.mark.parametrize(
    ("shares", "gpu_busy_pct"),
    [((0.94, 0.5), 10.0), ((0.99,), 90.0), ((None,), None), ((), None)],
    ids=["under the bound", "GPUs busy", "exited", "no process"],
)
def test_no_finding_when_no_process_held_a_core_or_the_gpus_were_busy(shares, gpu_busy_pct):
    assert host_bound_finding(window(*shares), gpu_busy_pct, 0.95) == ""


def test_cpu_governors(tmp_path):
    # The affinity's CPU lists: tests/test_cpus.py.
    assert cpu_governors(tmp_path) == ""
    for cpu, governor in ((0, "performance"), (1, "powersave"), (2, "performance")):
        d = tmp_path / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(governor + "\n")
    assert cpu_governors(tmp_path) == "performance, powersave"
