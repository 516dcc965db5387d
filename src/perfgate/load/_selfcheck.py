"""The client measures itself: CPU per streamed chunk and event-loop lag, and from them whether
the client, not the server, set the pace (a saturated or a starved client)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from perfgate._stats import percentile

_LAG_TICK_S = 0.05


@dataclass(frozen=True)
class ClientLimits:
    """When the client itself is the bottleneck: loop lag p99 above ``max_lag_p99_ms`` or the
    client process above ``max_cpu_share`` of one core over the measured phase."""

    max_lag_p99_ms: float = 200.0
    max_cpu_share: float = 0.9


ClientLimit = Literal["", "saturated", "starved"]

_ADVICE: dict[str, str] = {
    "saturated": (
        "the load client used up its core: shard the workload over more client processes "
        '(client_processes = "auto", or a number) or lower the request rate'
    ),
    "starved": (
        "other processes took the client's CPU (it was mostly idle, yet late): run on a quieter host, "
        "keep the server off the client's cores (e.g. taskset), start an attached server from the gate's "
        "own shell (a server in another session, a terminal or a service, is a scheduling group of its own "
        "on Linux, and its busy group can leave this client waiting seconds; or set "
        "kernel.sched_autogroup_enabled=0), or, where the server shares these cores by design, raise "
        "[gate] client_max_lag_p99_ms"
    ),
}


@dataclass(frozen=True)
class ClientStats:
    """The client's own cost during the measured phase.

    ``limit`` says whether the client, not the server, set the pace: "saturated" (its process
    used more than its share of a core), "starved" (its event loop ran late while it was mostly
    idle: other processes had the CPU), or "" (valid). Sharded over several processes: ``cpu_s``
    and ``chunks`` are summed, ``cpu_share`` and the loop lags are the busiest process's, and
    the run is limited when any process was.
    """

    cpu_s: float
    wall_s: float
    chunks: int
    cpu_us_per_chunk: float
    cpu_share: float  # process CPU seconds per wall second (1.0 = one full core)
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    limit: ClientLimit = ""
    reason: str = ""
    # "uvloop 0.23.0" or "asyncio": what ran the client's event loop.
    event_loop: str = ""
    # How many processes ran the measured phase, and why that many.
    processes: int = 1
    sizing: str = ""

    @property
    def valid(self) -> bool:
        return not self.limit

    @property
    def advice(self) -> str:
        """What to do about a limited client ("" when valid)."""
        return _ADVICE.get(self.limit, "")


class LagMonitor:
    """Event-loop lag: how late a 50 ms timer fires. A saturated loop delays every chunk it reads."""

    def __init__(self) -> None:
        self.lags_s: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            expected = loop.time() + _LAG_TICK_S
            await asyncio.sleep(_LAG_TICK_S)
            self.lags_s.append(max(0.0, loop.time() - expected))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


def client_stats(
    cpu_s: float, wall_s: float, chunks: int, lags_s: list[float], limits: ClientLimits, event_loop: str = ""
) -> ClientStats:
    """One process's cost over a measured phase, judged against ``limits``."""
    lags_ms = sorted(x * 1000.0 for x in lags_s)
    p99 = percentile(lags_ms, 99) if lags_ms else 0.0
    share = cpu_s / wall_s if wall_s > 0 else 0.0
    reasons = []
    limit: ClientLimit = ""
    if share > limits.max_cpu_share:
        reasons.append(f"client CPU {share:.0%} of one core > {limits.max_cpu_share:.0%}")
        limit = "saturated"
    if p99 > limits.max_lag_p99_ms:
        reasons.append(f"event-loop lag p99 {p99:.0f} ms > {limits.max_lag_p99_ms:.0f} ms")
        if share > limits.max_cpu_share / 2:
            limit = "saturated"
        elif not limit:
            # Late while mostly idle: the loop was ready to run and the CPU went elsewhere.
            reasons[-1] += f" while the client used only {share:.0%} of a core"
            limit = "starved"
    return ClientStats(
        cpu_s=cpu_s,
        wall_s=wall_s,
        chunks=chunks,
        cpu_us_per_chunk=cpu_s / chunks * 1e6 if chunks else 0.0,
        cpu_share=share,
        loop_lag_p99_ms=p99,
        loop_lag_max_ms=lags_ms[-1] if lags_ms else 0.0,
        limit=limit,
        reason="; ".join(reasons),
        event_loop=event_loop,
    )


def merge_client_stats(parts: list[ClientStats], wall_s: float) -> ClientStats:
    """Several client processes as one: CPU and chunks summed; share, lag and saturation from the
    busiest process (each process has one event loop on at most one core)."""
    cpu_s = sum(p.cpu_s for p in parts)
    chunks = sum(p.chunks for p in parts)
    limited = [p for p in parts if p.limit]
    reasons = [f"client process {k + 1} of {len(parts)}: {p.reason}" for k, p in enumerate(parts) if p.limit]
    # One saturated process is enough to call the run saturated: its advice (more processes) helps.
    limit: ClientLimit = "saturated" if any(p.limit == "saturated" for p in limited) else ("starved" if limited else "")
    return ClientStats(
        cpu_s=cpu_s,
        wall_s=wall_s,
        chunks=chunks,
        cpu_us_per_chunk=cpu_s / chunks * 1e6 if chunks else 0.0,
        cpu_share=max((p.cpu_share for p in parts), default=0.0),
        loop_lag_p99_ms=max((p.loop_lag_p99_ms for p in parts), default=0.0),
        loop_lag_max_ms=max((p.loop_lag_max_ms for p in parts), default=0.0),
        limit=limit,
        reason="; ".join(reasons),
        event_loop=parts[0].event_loop if parts else "",
    )
