"""A workload sharded over several client processes, for rates one process cannot sustain.

The parent process runs the warmup and the cache flush, then releases every worker at one
shared start time. Worker ``k`` of ``n`` sends requests ``k, k + n, ...`` of the one arrival
schedule with ``concurrency / n`` streams (the remainder spread over the first workers) and
measures its own CPU and event-loop lag. Timestamps are time.monotonic(), one clock for every
process on Linux, so the merged records need no adjustment.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue as queue_mod
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from perfgate.errors import LoadError
from perfgate.load._backends import BACKENDS
from perfgate.load._client import (
    ClientLimits,
    LoadRun,
    Measured,
    Progress,
    Runner,
    measure,
    measured_jobs,
    merge_client_stats,
    new_session,
    prepare,
    retry_note,
)
from perfgate.profile import Workload

# Spawned interpreters import aiohttp and build their prompts before they report ready.
_READY_TIMEOUT_S = 300.0
# Workers start this long after the release, so that all of them are waiting when it comes.
_START_MARGIN_S = 0.05
_POLL_S = 0.5


def worker_concurrency(concurrency: int, workers: int, k: int) -> int:
    """Streams of worker ``k``: an even split, the remainder going to the first workers."""
    return concurrency // workers + (1 if k < concurrency % workers else 0)


def _worker(
    k: int,
    n: int,
    base_url: str,
    workload: Workload,
    model: str,
    headers: dict[str, str],
    limits: ClientLimits,
    seed_offset: int,
    keep_alive: bool,
    out: Any,
    go: Any,
    start: Any,
) -> None:
    try:
        jobs = measured_jobs(workload, seed_offset)[k::n]
        mine = replace(workload, concurrency=worker_concurrency(workload.concurrency, n, k))
        backend = BACKENDS[workload.backend](model, workload.ignore_eos, workload.extra_body)
        runner = Runner(base_url, mine, backend, headers, lambda p: out.put(("progress", k, p)))
        out.put(("ready", k, None))
        go.wait()

        async def run() -> tuple[Measured, int]:
            try:
                async with new_session(keep_alive) as session:
                    return await measure(runner, session, jobs, limits, start.value), runner.retried
            finally:
                await runner.aclose()

        out.put(("done", k, asyncio.run(run())))
    except BaseException as e:  # noqa: BLE001 - every failure must reach the parent as a message
        out.put(("error", k, f"{type(e).__name__}: {e}"))


def run_sharded(
    base_url: str,
    workload: Workload,
    model: str,
    headers: dict[str, str],
    limits: ClientLimits,
    on_progress: Callable[[Progress], None] | None,
    seed_offset: int,
    keep_alive: bool = True,
    flush_headers: dict[str, str] | None = None,
) -> LoadRun:
    """Run ``workload`` over ``workload.client_processes`` spawned processes and merge what they saw."""
    n = workload.client_processes
    if n > workload.concurrency:
        raise LoadError(
            f"workload {workload.name}: client_processes = {n} cannot share concurrency = {workload.concurrency}; "
            f"use at most {workload.concurrency} processes"
        )
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    start = ctx.Value("d", 0.0)
    procs = [
        ctx.Process(
            target=_worker,
            args=(k, n, base_url, workload, model, headers, limits, seed_offset, keep_alive, out, go, start),
            name=f"perfgate-load-{k + 1}-of-{n}",
            daemon=True,
        )
        for k in range(n)
    ]
    try:
        for p in procs:
            p.start()
        backend = BACKENDS[workload.backend](model, workload.ignore_eos, workload.extra_body)

        async def warm() -> list[str]:
            runner = Runner(base_url, workload, backend, headers, on_progress)
            try:
                async with new_session(keep_alive) as session:
                    return await prepare(runner, session, seed_offset, flush_headers)
            finally:
                await runner.aclose()

        notes = asyncio.run(warm())
        waiting = _Collector(workload, procs, out)
        waiting.collect("ready", time.monotonic() + _READY_TIMEOUT_S, None)
        start.value = t0 = time.monotonic() + _START_MARGIN_S
        go.set()
        done: dict[int, tuple[Measured, int]] = waiting.collect("done", None, lambda progress: _report(on_progress, workload, progress, t0))
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5.0)
    parts = {k: m for k, (m, _) in done.items()}
    records = sorted((r for m in parts.values() for r in m.records), key=lambda r: r.index)
    end = max(m.end_s for m in parts.values())
    return LoadRun(
        workload=workload.name,
        backend=backend.name,
        start_s=t0,
        end_s=end,
        records=records,
        client=merge_client_stats([parts[k].client for k in range(n)], end - t0),
        warmup_requests=workload.warmup_requests,
        flushed_cache=workload.flush_cache,
        notes=[*notes, f"client sharded over {n} processes", *retry_note(sum(r for _, r in done.values()))],
    )


class _Collector:
    """Reads the workers' messages until each has sent ``kind``; fails fast on an error or a death."""

    def __init__(self, workload: Workload, procs: list[Any], out: Any) -> None:
        self.workload = workload
        self.procs = procs
        self.out = out
        self.progress: dict[int, Progress] = {}
        self._dead: set[int] = set()

    def collect(
        self, kind: str, deadline: float | None, on_progress: Callable[[dict[int, Progress]], None] | None
    ) -> dict[int, Any]:
        got: dict[int, Any] = {}
        n = len(self.procs)
        while len(got) < n:
            try:
                what, k, payload = self.out.get(timeout=_POLL_S)
            except queue_mod.Empty:
                self._check_alive(got, kind, deadline)
                continue
            if what == "error":
                raise LoadError(f"workload {self.workload.name}: client process {k + 1} of {n} failed: {payload}")
            if what == "progress":
                self.progress[k] = payload
                if on_progress:
                    on_progress(self.progress)
            elif what == kind:
                got[k] = payload
        return got

    def _check_alive(self, got: dict[int, Any], kind: str, deadline: float | None) -> None:
        n = len(self.procs)
        for k, p in enumerate(self.procs):
            if k in got or p.is_alive():
                continue
            # What a worker sent just before exiting can still be in the pipe: give it one more poll.
            if k not in self._dead:
                self._dead.add(k)
            else:
                raise LoadError(
                    f"workload {self.workload.name}: client process {k + 1} of {n} exited with code {p.exitcode} "
                    f"before it was {kind}; run with client_processes = 1 to see the failure in this process"
                )
        if deadline is not None and time.monotonic() > deadline:
            raise LoadError(
                f"workload {self.workload.name}: {n - len(got)} of {n} client processes not {kind} after "
                f"{_READY_TIMEOUT_S:g} s; the machine may be overloaded - lower client_processes"
            )


def _report(
    on_progress: Callable[[Progress], None] | None, workload: Workload, parts: dict[int, Progress], t0: float
) -> None:
    if on_progress is None:
        return
    ps = parts.values()
    on_progress(
        Progress(
            done=sum(p.done for p in ps),
            total=workload.num_prompts,
            in_flight=sum(p.in_flight for p in ps),
            errors=sum(p.errors for p in ps),
            output_tokens=sum(p.output_tokens for p in ps),
            elapsed_s=time.monotonic() - t0,
            warmup=False,
        )
    )
