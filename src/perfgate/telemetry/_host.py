"""Host CPU of a launched server's processes over a window of the run, from /proc.

Two reads bracket a window (as the energy counters do): each process's utime + stime at both
edges, divided by the wall time between them, is its CPU share of one core. Nothing runs between
the edges, so the client's hot path pays nothing; one edge scans /proc once (a few ms).

A process that exited inside the window is listed without a share (its last CPU seconds are
not readable); one that started inside it counts from zero. Threads are summed by the kernel
into their process's stat line.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from perfgate._cpus import format_cpu_list
from perfgate.errors import TelemetryError

PROC = Path("/proc")
# Titles longer than this are cut: a launch command holds the whole argument list.
_TITLE_CHARS = 80


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the sampler needs (CPU in clock ticks)."""

    pid: int
    ppid: int
    comm: str
    state: str
    cpu_ticks: int


def parse_stat(text: str) -> ProcStat:
    """One /proc/<pid>/stat line. The command sits in parentheses and may itself hold spaces and
    parentheses, so the fields are counted from the last ')'. ValueError when it is malformed."""
    head, sep, rest = text.rpartition(")")
    pid_text, paren, comm = head.partition(" (")
    fields = rest.split()
    if not sep or not paren or len(fields) < 13:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    # After the command: state(0) ppid(1) ... utime(11) stime(12), man 5 proc fields 3, 4, 14, 15.
    return ProcStat(int(pid_text), int(fields[1]), comm, fields[0], int(fields[11]) + int(fields[12]))


def _read_stat(proc: Path, pid: int) -> ProcStat | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text(errors="replace"))
    except (OSError, ValueError):
        # Gone between the listing and the read, or not ours to read.
        return None


def process_title(proc: Path, stat: ProcStat) -> str:
    """What ``ps`` shows: the command line as the process left it (setproctitle rewrites it,
    e.g. ``sglang::scheduler``), else the kernel's 15-character comm."""
    try:
        raw = (proc / str(stat.pid) / "cmdline").read_bytes()
    except OSError:
        raw = b""
    args = [a for a in raw.decode(errors="replace").split("\0") if a.strip()]
    if not args:
        return stat.comm
    first = args[0].strip()
    # A path to an interpreter says less than its basename and arguments.
    args[0] = os.path.basename(first) if first.startswith("/") else first
    # Whitespace of any kind (a -c program's newlines) as single spaces: a title is one line.
    title = " ".join(" ".join(args).split())
    return title if len(title) <= _TITLE_CHARS else title[: _TITLE_CHARS - 3] + "..."


def process_tree(stats: dict[int, ProcStat], root: int) -> list[int]:
    """``root`` and every descendant of it in ``stats`` (by ppid), root first, then by pid."""
    children: dict[int, list[int]] = {}
    for s in stats.values():
        children.setdefault(s.ppid, []).append(s.pid)
    tree, todo = [], [root] if root in stats else []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return [tree[0], *sorted(tree[1:])] if tree else []


def scan(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every readable process under ``proc``, by pid."""
    stats = {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (s := _read_stat(proc, int(entry.name))) is not None:
            stats[s.pid] = s
    return stats


@dataclass(frozen=True)
class TreeReading:
    """One edge of a window: each live process of the tree, its title and CPU ticks."""

    time_s: float
    ticks: dict[int, tuple[str, int]]


@dataclass(frozen=True)
class ProcessCpu:
    """One process over a window: ``cpu_share`` of one core (1.0 = a whole core; None when it
    exited inside the window)."""

    pid: int
    title: str
    cpu_share: float | None


@dataclass(frozen=True)
class HostCpuWindow:
    """A server's processes over ``length_s`` of wall time, busiest first."""

    length_s: float
    processes: tuple[ProcessCpu, ...]

    def busiest(self) -> ProcessCpu | None:
        measured = [p for p in self.processes if p.cpu_share is not None]
        return max(measured, key=lambda p: p.cpu_share or 0.0) if measured else None


class HostCpuSampler:
    """Reads the CPU of the process tree under ``root_pid`` at the edges of windows.

    :func:`open_host_sampler` raises TelemetryError when the tree cannot be read at all.
    """

    def __init__(self, root_pid: int, proc: Path = PROC) -> None:
        self.root_pid = root_pid
        self._proc = proc
        self._ticks_per_s = float(os.sysconf("SC_CLK_TCK"))
        self._titles: dict[int, str] = {}

    def pids(self) -> list[int]:
        return process_tree(scan(self._proc), self.root_pid)

    def read(self) -> TreeReading:
        stats = scan(self._proc)
        ticks = {}
        for pid in process_tree(stats, self.root_pid):
            s = stats[pid]
            if s.state in ("Z", "X"):
                continue
            # A title is read once per pid: a process retitles itself once, early (SGLang's do before loading).
            if pid not in self._titles:
                self._titles[pid] = process_title(self._proc, s)
            ticks[pid] = (self._titles[pid], s.cpu_ticks)
        return TreeReading(time.monotonic(), ticks)

    def window(self, start: TreeReading, end: TreeReading) -> HostCpuWindow:
        """Each process's CPU share between two readings of this sampler."""
        wall_s = end.time_s - start.time_s
        if wall_s <= 0:
            raise ValueError(f"a window must end after it starts ({start.time_s} .. {end.time_s})")
        out = []
        for pid, (title, ticks) in end.ticks.items():
            before = start.ticks.get(pid, (title, 0))[1]
            out.append(ProcessCpu(pid, title, (ticks - before) / self._ticks_per_s / wall_s))
        out += [ProcessCpu(pid, title, None) for pid, (title, _) in start.ticks.items() if pid not in end.ticks]
        out.sort(key=lambda p: (p.cpu_share is None, -(p.cpu_share or 0.0), p.pid))
        return HostCpuWindow(wall_s, tuple(out))


def open_host_sampler(root_pid: int, proc: Path = PROC) -> HostCpuSampler:
    """A sampler of ``root_pid``'s tree; TelemetryError saying why when its processes cannot be read."""
    if not proc.is_dir():
        raise TelemetryError(f"{proc} is not there (not Linux?): the server's processes cannot be read")
    sampler = HostCpuSampler(root_pid, proc)
    if not sampler.read().ticks:
        raise TelemetryError(f"server pid {root_pid}: {proc}/{root_pid}/stat cannot be read")
    return sampler


GPU_BUSY_PCT = 90.0
"""GPUs busier than this (mean utilisation) are the bottleneck whatever the host's processes do."""


def host_bound_finding(window: HostCpuWindow, gpu_busy_pct: float | None, cpu_share_bound: float) -> str:
    """One line naming the server process that held a core (at least ``cpu_share_bound`` of one)
    while the GPUs waited, or "".

    ``gpu_busy_pct``: the GPUs' mean utilisation over the phase; None when no telemetry measured
    it (CPU-only engine, simulator): the process is named all the same, with the GPUs unknown.
    """
    busiest = window.busiest()
    if busiest is None or busiest.cpu_share is None or busiest.cpu_share < cpu_share_bound:
        return ""
    if gpu_busy_pct is not None and gpu_busy_pct >= GPU_BUSY_PCT:
        return ""
    gpus = f"the GPUs were {gpu_busy_pct:.0f} % busy" if gpu_busy_pct is not None else "GPU busy not measured"
    return (
        f"host-bound: server process {busiest.title} (pid {busiest.pid}) ran at {busiest.cpu_share:.0%} of a core "
        f"while {gpus}: this run measures the host CPU, not the GPU stack"
    )


def cpu_governors(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> str:
    """The cpufreq governors of the host's CPUs, each once ("performance", "powersave, performance"),
    or "" when cpufreq is not exposed (VMs, containers)."""
    found = []
    for path in sorted(sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            found.append(path.read_text().strip())
        except OSError:
            continue
    return ", ".join(dict.fromkeys(g for g in found if g))


def process_affinity(sampler: HostCpuSampler) -> dict[str, str]:
    """Each live process of the sampler's tree ("pid title") -> the CPUs it may run on."""
    out = {}
    for pid, (title, _) in sampler.read().ticks.items():
        try:
            out[f"{pid} {title}"] = format_cpu_list(os.sched_getaffinity(pid))
        except OSError:
            continue
    return out
