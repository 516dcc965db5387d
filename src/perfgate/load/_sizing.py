"""How many client processes a repeat needs, and whether this host lets them hold their connections.

``client_processes = "auto"`` sizes the client from the warmup: the CPU the client spent per
streamed chunk, and the chunks per second one stream received, times the streams the measured
phase keeps open (or the arrival rate times the chunks per request, when that is lower). Both
are upper bounds on a batching server (its streams slow down as the batch grows; short warmup
streams cost more per chunk), so the estimate errs towards more processes. Every process should
stay at or below ``TARGET_SHARE`` of a core, well under the saturation limit, and hold at most
``MAX_STREAMS_PER_PROCESS`` streams; for the CPU there are never more processes than CPUs this
process may run on, nor ever more than streams.

Each connection is a file descriptor: a process holding N streams needs N plus what it has open
already. The soft RLIMIT_NOFILE is raised as far as the hard limit allows; beyond that, "auto"
takes more processes, and a fixed count fails before the run with the limit, the need and the
fix. All connections of a workload share this host's ephemeral port range.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from perfgate.errors import LoadError
from perfgate.load._plan import LoadPlan
from perfgate.load._records import RequestRecord

# Half a core, and then some: the estimate is an upper bound already.
TARGET_SHARE = 0.6
# Streams one process holds at most, whatever its CPU. An event loop reads every ready socket
# before it runs its timers, so with every stream busy one round costs streams x the cost of a
# read; on uvloop, while 1,024 sockets (libuv's batch) come back ready at once, libuv polls again
# up to 48 times first. Measured on 2 cores with 8,192 streams against the zero-cost simulator:
# 4,096 streams a process left the loop 0.4 s (asyncio) to 1.2 s (uvloop) late at p99, an
# invalid run; 1,024 a process, 150-160 ms (docs/benchmarks.md, "The load client").
MAX_STREAMS_PER_PROCESS = 1024
# Descriptors a client process holds besides its connections (interpreter, event loop, pipes to
# the parent), plus room for a retry's connection.
FD_HEADROOM = 64
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux
    resource = None  # type: ignore[assignment]


@dataclass(frozen=True)
class WarmupCost:
    """What the warmup showed about the client's work: its CPU seconds, the chunks it read and the
    tokens they carried, and the streams' generation (each stream's first chunk to its last:
    seconds and gaps between chunks)."""

    cpu_s: float
    chunks: int
    tokens: int
    generating_s: float
    gaps: int

    @classmethod
    def of(cls, records: list[RequestRecord], cpu_s: float) -> WarmupCost:
        ok = [r for r in records if r.ok and len(r.chunk_offsets_s) > 1]
        return cls(
            cpu_s=cpu_s,
            chunks=sum(len(r.chunk_offsets_s) for r in records),
            tokens=sum(sum(r.chunk_tokens) for r in records),
            generating_s=sum(r.chunk_offsets_s[-1] - r.chunk_offsets_s[0] for r in ok),
            gaps=sum(len(r.chunk_offsets_s) - 1 for r in ok),
        )


@dataclass(frozen=True)
class Sizing:
    """How many processes run the measured phase, and why (kept with the results)."""

    processes: int
    reason: str
    # Set when the client needed more processes than the host can give: the run may saturate.
    shortfall: str = ""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def size_client(plan: LoadPlan, warm: WarmupCost | None, cpus: int) -> Sizing:
    """The processes for ``plan``'s measured phase: the profile's count, or "auto"'s estimate."""
    workload = plan.workload
    streams = min(workload.concurrency, workload.num_prompts)
    fd_processes = math.ceil(streams / max(1, fd_hard_limit() - open_fds() - FD_HEADROOM))
    # Processes the host's limits and the loop's round time ask for, whatever the CPU.
    floor = max(fd_processes, math.ceil(streams / MAX_STREAMS_PER_PROCESS))
    if workload.client_processes != "auto":
        return Sizing(workload.client_processes, f"client_processes = {workload.client_processes} in the profile")
    if warm is None or warm.gaps == 0 or warm.chunks == 0 or warm.generating_s <= 0:
        why = (
            "no warmup stream of two or more chunks to measure"
            if warm is None or not warm.chunks
            else "the warmup streams came in single chunks"
        )
        n = max(1, floor)
        return Sizing(
            n, f'client_processes = "auto": {why}; {n} process(es)' + _floor_reason(streams, n, fd_processes), ""
        )
    cpu_us = warm.cpu_s / warm.chunks * 1e6
    per_stream = warm.gaps / warm.generating_s
    expected = per_stream * streams
    basis = f"{per_stream:,.0f} chunks/s per stream x {streams} streams"
    if not math.isinf(workload.request_rate) and workload.output_len:
        # Mean output length over the length distribution, in chunks of the warmup's size (a
        # dataset with its own lengths, ShareGPT, is sized by its streams alone).
        chunks_per_request = workload.output_len * (1 + workload.range_ratio) / 2 * warm.chunks / max(1, warm.tokens)
        by_rate = workload.request_rate * chunks_per_request
        if by_rate < expected:
            expected, basis = by_rate, f"{workload.request_rate:g} requests/s x {chunks_per_request:,.1f} chunks each"
    by_cpu = max(1, math.ceil(expected * cpu_us * 1e-6 / TARGET_SHARE))
    need = max(by_cpu, floor)
    n = min(need, max(cpus, floor), streams)
    reason = (
        f'client_processes = "auto": the warmup cost {cpu_us:.1f} us of client CPU per chunk; up to '
        f"{expected:,.0f} chunks/s expected ({basis}) need {expected * cpu_us * 1e-6:.2f} cores, "
        f"at most {TARGET_SHARE:.0%} of a core per process: {by_cpu} process(es)"
    )
    reason += _floor_reason(streams, floor, fd_processes)
    shortfall = ""
    if n < need:
        reason += f", {n} on this host ({cpus} usable CPUs)"
        shortfall = (
            f"the client needed about {need} processes for up to {expected:,.0f} chunks/s but this host "
            f"gives it {cpus} CPUs: the run may saturate the client (the self-check says)"
        )
    return Sizing(n, reason, shortfall)


def _floor_reason(streams: int, floor: int, fd_processes: int) -> str:
    """Why ``floor`` processes at least, when more than one."""
    if floor <= 1:
        return ""
    if fd_processes >= floor:
        return f"; the open-file limit allows {math.ceil(streams / fd_processes)} streams per process: {floor}"
    return f"; at most {MAX_STREAMS_PER_PROCESS} streams per process (the event loop's round): {floor}"


def open_fds() -> int:
    """Descriptors this process holds now (/proc/self/fd; a guess elsewhere)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # pragma: no cover - not on Linux
        return FD_HEADROOM


def fd_hard_limit() -> int:
    if resource is None:  # pragma: no cover
        return 1 << 20
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY else hard


def ensure_fds(plan: LoadPlan, streams_per_process: int, processes: int) -> str:
    """Raise the soft RLIMIT_NOFILE so that a process can hold ``streams_per_process`` connections
    (spawned processes inherit it); returns a note when it was raised. A need beyond the hard
    limit is a LoadError naming the limit, the need and the fix."""
    if resource is None:  # pragma: no cover
        return ""
    need = streams_per_process + open_fds() + FD_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return ""
    if hard != resource.RLIM_INFINITY and need > hard:
        workload = plan.workload
        more = math.ceil(workload.concurrency / max(1, hard - open_fds() - FD_HEADROOM))
        raise LoadError(
            f"workload {workload.name}: {streams_per_process} streams in one client process ({processes} in all) "
            f"need about {need} open files, but the hard limit is {hard} (RLIMIT_NOFILE, `ulimit -Hn`): raise it "
            f"(`ulimit -n {need}` as root, LimitNOFILE={need} in a systemd unit, `--ulimit nofile={need}` for "
            f'docker) or share the streams over more processes (client_processes = {more} or "auto")'
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return (
        f"raised the open-file limit (RLIMIT_NOFILE) from {soft} to {need} "
        f"for {streams_per_process} streams per process"
    )


def check_ports(plan: LoadPlan) -> None:
    """A LoadError when the workload's connections cannot all have a source port on this host."""
    try:
        lo, hi = (int(x) for x in PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        return
    ports = hi - lo + 1
    workload = plan.workload
    if workload.concurrency > ports:
        raise LoadError(
            f"workload {workload.name}: {workload.concurrency} concurrent streams need as many connections to "
            f"{plan.base_url}, but this host's ephemeral port range ({PORT_RANGE}: {lo}-{hi}) has {ports}: "
            f'widen it (sysctl -w net.ipv4.ip_local_port_range="1024 65535") or lower the concurrency'
        )
