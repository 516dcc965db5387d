"""A repeat sharded over several client processes, for rates one process cannot sustain.

The parent process has run the warmup and the cache flush (and sized the client); it spawns the
workers and releases all of them at one shared start time. Worker ``k`` of ``n`` sends requests
``k, k + n, ...`` of the one arrival schedule with ``concurrency / n`` streams (the remainder
spread over the first workers) and measures its own CPU and event-loop lag. Timestamps are
time.monotonic(), one clock for every process on Linux, so the merged records need no adjustment.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue as queue_mod
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from perfgate._redact import SECRETS
from perfgate.errors import LoadError
from perfgate.load._loop import run as run_loop
from perfgate.load._phase import Measurement, Part, Progress, ProgressSink, measure, measured_jobs, prepared
from perfgate.load._plan import LoadPlan
from perfgate.load._stream import Streamer
from perfgate.profile import Workload

# Spawned interpreters import perfgate and build their prompts before they report ready.
_READY_TIMEOUT_S = 300.0
# Workers start this long after the release, so that all of them are waiting when it comes.
_START_MARGIN_S = 0.05
_POLL_S = 0.5


def worker_concurrency(concurrency: int, workers: int, k: int) -> int:
    """Streams of worker ``k``: an even split, the remainder going to the first workers."""
    return concurrency // workers + (1 if k < concurrency % workers else 0)


def _worker(k: int, n: int, plan: LoadPlan, out: Any, go: Any, start: Any) -> None:
    for token in plan.tokens():
        SECRETS.add(token)
    try:
        jobs = measured_jobs(plan, k, n)
        concurrency = worker_concurrency(plan.workload.concurrency, n, k)

        async def run() -> Part:
            async with Streamer(plan) as streamer, prepared(streamer, jobs, concurrency):
                out.put(("ready", k, None))
                # The loop keeps serving the open connections while it waits.
                await asyncio.get_running_loop().run_in_executor(None, go.wait)
                return await measure(streamer, jobs, concurrency, start.value, lambda p: out.put(("progress", k, p)))

        out.put(("done", k, run_loop(run())))
    except BaseException as e:
        out.put(("error", k, f"{type(e).__name__}: {e}"))


def run_sharded(plan: LoadPlan, warmed: Measurement, on_progress: ProgressSink | None) -> Measurement:
    """The measured phase over ``warmed.sizing.processes`` spawned processes (the warmup is done)."""
    n = warmed.sizing.processes
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    start = ctx.Value("d", 0.0)
    procs = [
        ctx.Process(
            target=_worker, args=(k, n, plan, out, go, start), name=f"perfgate-load-{k + 1}-of-{n}", daemon=True
        )
        for k in range(n)
    ]
    workload = plan.workload
    try:
        for p in procs:
            p.start()
        waiting = _Collector(workload, procs, out)
        waiting.collect("ready", time.monotonic() + _READY_TIMEOUT_S, None)
        start.value = t0 = time.monotonic() + _START_MARGIN_S
        go.set()
        done: dict[int, Part] = waiting.collect(
            "done", None, lambda progress: _report(on_progress, workload, progress, t0)
        )
    finally:
        started = [p for p in procs if p.pid is not None]
        for p in started:
            if p.is_alive():
                p.terminate()
        for p in started:
            p.join(5.0)
    return replace(warmed, start_s=t0, parts=[done[k] for k in range(n)])


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


def _report(on_progress: ProgressSink | None, workload: Workload, parts: dict[int, Progress], t0: float) -> None:
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
