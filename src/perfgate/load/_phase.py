"""The phases of a repeat: warmup (and the optional cache flush), then the measured phase with
the client's self-measurement. Each runs a list of jobs under the workload's concurrency and
arrival schedule on one event loop."""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import islice

from perfgate.errors import LoadError
from perfgate.load._dataset import RequestSpec, make_requests, session_offsets_s
from perfgate.load._loop import loop_name
from perfgate.load._plan import LoadPlan, warmup_seed_offset
from perfgate.load._records import RequestRecord
from perfgate.load._selfcheck import ClientStats, LagMonitor, client_stats
from perfgate.load._sizing import Sizing, WarmupCost
from perfgate.load._steady import SteadyWarmup, round_rate, settled
from perfgate.load._stream import Streamer

# Warmup requests are capped like bench_serving's: enough to exercise every path, cheap to run.
_WARMUP_OUTPUT_CAP = 32
_PROGRESS_EVERY_S = 0.5
_YIELD_EVERY = 256

Job = tuple[int, RequestSpec, float]
"""A request to send: its record index, the request, its send time in seconds after the phase start."""


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    in_flight: int
    errors: int
    output_tokens: int
    elapsed_s: float
    warmup: bool


ProgressSink = Callable[[Progress], None]


@dataclass(frozen=True)
class Part:
    """What one client process measured: its records, when its last request ended, its own cost,
    and how many requests it sent again on a fresh connection."""

    records: list[RequestRecord]
    end_s: float
    client: ClientStats
    retried: int


def measured_jobs(plan: LoadPlan, k: int = 0, n: int = 1) -> deque[Job]:
    """Shard ``k`` of ``n`` of the measured phase's requests (requests k, k + n, ...; multi-turn:
    every turn of sessions k, k + n, ..., as a session's turns wait on each other) with their
    record indices and send offsets in the one arrival schedule (multi-turn: their session's)."""
    specs = make_requests(
        plan.workload, plan.workload.num_prompts, seed_offset=plan.seed_offset, tokenizer=plan.tokenizer
    )
    jobs = zip(range(len(specs)), specs, session_offsets_s(plan.workload, specs))
    if plan.workload.dataset == "multi-turn":
        return deque(job for job in jobs if job[1].session % n == k)
    return deque(islice(jobs, k, None, n))


@asynccontextmanager
async def prepared(streamer: Streamer, jobs: deque[Job], concurrency: int) -> AsyncIterator[None]:
    """The moments before a measured phase, and the phase itself.

    Requests that are all due at once (request_rate = inf) find their keep-alive connections
    open: thousands of connects inside the measured phase would be the client's own work,
    added to the first requests' TTFT. And the garbage collector stops walking every object
    allocated so far (prompts, modules): its full collections stalled the event loop for up
    to 0.3 s with 8,192 streams.
    """
    plan = streamer.plan
    if plan.keep_alive and math.isinf(plan.workload.request_rate):
        await streamer.pool.preconnect(min(concurrency, len(jobs)))
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _units(jobs: deque[Job], by_session: bool) -> Iterator[list[tuple[int, Job]]]:
    """What runs one after the other in one concurrency slot, with each job's position in
    ``jobs``: one request, or (multi-turn) the turns of one chat session. Consumes ``jobs``."""
    if not by_session:
        position = 0
        while jobs:
            yield [(position, jobs.popleft())]
            position += 1
        return
    sessions: dict[int, list[tuple[int, Job]]] = {}
    for position, job in enumerate(jobs):
        sessions.setdefault(job[1].session, []).append((position, job))
    jobs.clear()
    yield from sessions.values()


async def run_phase(
    streamer: Streamer,
    jobs: deque[Job],
    concurrency: int,
    *,
    cap: int | None,
    warmup: bool,
    on_progress: ProgressSink | None,
    start_s: float | None = None,
) -> list[RequestRecord]:
    """Run ``jobs`` (record index, request, send offset from ``start_s``, default now) with at most
    ``concurrency`` in flight; ``cap`` limits output lengths (warmup). Returns the records in
    the jobs' order. Multi-turn: the concurrency counts chat sessions, each sending its turns one
    after the other with the think time between them (none in warmup), so sessions interleave.

    ``jobs`` is consumed as requests are sent, and a finished request keeps only its record:
    memory holds the prompts not yet sent, the requests in flight and the records.
    """
    total = len(jobs)
    records: list[RequestRecord | None] = [None] * total
    sem = asyncio.Semaphore(concurrency)
    in_flight: set[asyncio.Task[None]] = set()
    t0 = time.monotonic() if start_s is None else start_s
    counters = streamer.counters
    counters.done = counters.errors = counters.output_tokens = 0

    def snapshot() -> Progress:
        c = counters
        return Progress(c.done, total, c.in_flight, c.errors, c.output_tokens, time.monotonic() - t0, warmup)

    async def report() -> None:
        while on_progress is not None:
            await asyncio.sleep(_PROGRESS_EVERY_S)
            on_progress(snapshot())

    workload = streamer.plan.workload
    think_s = 0.0 if warmup else workload.think_time_s

    async def limited(unit: list[tuple[int, Job]]) -> None:
        try:
            for k, (position, (i, spec, _)) in enumerate(unit):
                if k and think_s:
                    await asyncio.sleep(think_s)
                records[position] = await streamer.one(i, spec, min(spec.output_len, cap) if cap else spec.output_len)
        finally:
            sem.release()

    ticker = asyncio.get_running_loop().create_task(report())
    try:
        for n, unit in enumerate(_units(jobs, workload.dataset == "multi-turn")):
            await _sleep_until(t0 + unit[0][1][2])
            await sem.acquire()
            task = asyncio.create_task(limited(unit))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            if n % _YIELD_EVERY == _YIELD_EVERY - 1:
                # Thousands of requests due at once: let the loop read answers (and time its
                # own lag) between batches of sends, as one loop iteration would otherwise take
                # them all.
                await asyncio.sleep(0)
        while in_flight:
            await asyncio.gather(*in_flight)
        return [r for r in records if r is not None]
    finally:
        ticker.cancel()
        for t in in_flight:
            t.cancel()
        if on_progress:
            on_progress(snapshot())


async def _sleep_until(deadline_s: float) -> None:
    """Return at or after time.monotonic() ``deadline_s``. uvloop rounds a delay to whole
    milliseconds on a clock read at the start of the loop's iteration: a quarter of its sleeps
    ended early here, by up to 1.25 ms. A request sent then would start before its slot, or
    before the measured phase that the other client processes start at the same instant."""
    while (delay_s := deadline_s - time.monotonic()) > 0:
        await asyncio.sleep(delay_s)


@dataclass(frozen=True)
class Warmup:
    """What the warmup left: notes for the run, its cost (None without warmup requests) and, for
    ``warmup = "steady"``, its rounds."""

    notes: list[str]
    cost: WarmupCost | None
    steady: SteadyWarmup | None = None


async def warm_up(streamer: Streamer, on_progress: ProgressSink | None) -> Warmup:
    """Warmup, then the optional cache flush and settle.

    Warmup failures follow the measured phase's rule: more than ``max_error_rate`` of them
    is a LoadError (the server is not serving this workload), fewer are a note.
    """
    plan = streamer.plan
    workload = plan.workload
    notes: list[str] = []
    cost = None
    steady = None
    if workload.warmup_requests:
        cpu0 = time.process_time()
        if workload.warmup == "steady":
            records, steady = await _steady_rounds(streamer, on_progress)
            notes.append(steady.note())
        else:
            records = await run_phase(
                streamer,
                _warmup_jobs(plan, 0),
                workload.concurrency,
                cap=_WARMUP_OUTPUT_CAP,
                warmup=True,
                on_progress=on_progress,
            )
        cost = WarmupCost.of(records, time.process_time() - cpu0)
        failed = [r for r in records if r.error]
        if failed:
            what = f"{len(failed)} of {len(records)} warmup requests to {plan.url} failed; first: {failed[0].error}"
            if len(failed) / len(records) > workload.max_error_rate:
                allowed = f" (allowed error rate {workload.max_error_rate:.1%})" if workload.max_error_rate else ""
                raise LoadError(f"workload {workload.name}: {what}{allowed}")
            notes.append(f"{what} (within the allowed error rate {workload.max_error_rate:.1%})")
    if workload.flush_cache:
        await streamer.flush_cache()
        # bench_serving sleeps after a flush so the server is idle when timing starts.
        await asyncio.sleep(1.0)
    streamer.counters.retried = 0
    return Warmup(notes, cost, steady)


def _warmup_jobs(plan: LoadPlan, round_index: int) -> deque[Job]:
    """Round ``round_index``'s warmup requests, all due at once; each round draws other prompts
    (the same ones again would only measure the prefix cache)."""
    warm = make_requests(
        plan.workload,
        plan.workload.warmup_requests,
        seed_offset=warmup_seed_offset(plan.seed_offset, round_index),
        tokenizer=plan.tokenizer,
    )
    return deque((i, s, 0.0) for i, s in enumerate(warm))


async def _steady_rounds(
    streamer: Streamer, on_progress: ProgressSink | None
) -> tuple[list[RequestRecord], SteadyWarmup]:
    """Rounds at full lengths until the last two agree or ``warmup_max_s`` has passed (at least
    two rounds, and always the round under way is finished: a request cut off would be a failure).
    Returns every round's records (for the client's sizing and the error rule) and what happened."""
    workload = streamer.plan.workload
    t0 = time.monotonic()
    rates: list[float] = []
    records: list[RequestRecord] = []
    while True:
        r0 = time.monotonic()
        done = await run_phase(
            streamer,
            _warmup_jobs(streamer.plan, len(rates)),
            workload.concurrency,
            cap=None,
            warmup=True,
            on_progress=on_progress,
        )
        records += done
        rates.append(round_rate(done, time.monotonic() - r0))
        converged = len(rates) >= 2 and settled(rates[-2], rates[-1], workload.warmup_tolerance)
        elapsed = time.monotonic() - t0
        if converged or elapsed >= workload.warmup_max_s:
            return records, SteadyWarmup(
                tuple(rates), elapsed, converged, workload.warmup_tolerance, workload.warmup_max_s
            )


async def measure(
    streamer: Streamer,
    jobs: deque[Job],
    concurrency: int,
    start_s: float,
    on_progress: ProgressSink | None,
) -> Part:
    """Run the measured phase from ``start_s``, watching this process's CPU and event-loop lag."""
    lag = LagMonitor()
    lag.start()
    streamer.counters.chunks = 0
    cpu0, t0 = time.process_time(), time.monotonic()
    records = await run_phase(
        streamer, jobs, concurrency, cap=None, warmup=False, on_progress=on_progress, start_s=start_s
    )
    t1, cpu1 = time.monotonic(), time.process_time()
    await lag.stop()
    c = streamer.counters
    stats = client_stats(cpu1 - cpu0, t1 - t0, c.chunks, lag.lags_s, streamer.plan.limits, loop_name())
    return Part(records, t1, stats, c.retried)


@dataclass(frozen=True)
class Measurement:
    """A repeat as its client processes saw it: notes from the warmup and the host's limits, how
    many processes measure and why, the measured phase's start (time.monotonic(), one clock for
    every process on Linux) and one Part per process (none yet while the shards have to run)."""

    notes: list[str]
    sizing: Sizing
    start_s: float = 0.0
    parts: list[Part] = field(default_factory=list)
    steady: SteadyWarmup | None = None
