"""The load client of one process: one asyncio event loop, one aiohttp session, every request streamed.

The client measures itself while it runs (CPU per streamed chunk, event-loop lag): numbers
from a saturated client describe the client, not the server, and are marked invalid.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import aiohttp

from perfgate._stats import percentile
from perfgate.errors import LoadError
from perfgate.load._backends import Backend, StreamState
from perfgate.load._dataset import RequestSpec, make_requests, session_offsets_s
from perfgate.load._records import RequestRecord
from perfgate.profile import Workload

# Warmup requests are capped like bench_serving's: enough to exercise every path, cheap to run.
_WARMUP_OUTPUT_CAP = 32
_LAG_TICK_S = 0.05
_PROGRESS_EVERY_S = 0.5

Job = tuple[int, RequestSpec, float]
"""A request to send: its record index, the request, its send time in seconds after the phase start."""


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
        "(client_processes) or lower the request rate"
    ),
    "starved": (
        "other processes took the client's CPU (it was mostly idle, yet late): run on a quieter host, "
        "keep the server off the client's cores (e.g. taskset), or, where the server shares these cores "
        "by design, raise [gate] client_max_lag_p99_ms"
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

    @property
    def valid(self) -> bool:
        return not self.limit

    @property
    def advice(self) -> str:
        """What to do about a limited client ("" when valid)."""
        return _ADVICE.get(self.limit, "")


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    in_flight: int
    errors: int
    output_tokens: int
    elapsed_s: float
    warmup: bool


@dataclass
class LoadRun:
    """Everything the client saw of one measured run of a workload (warmup excluded)."""

    workload: str
    backend: str
    start_s: float
    end_s: float
    records: list[RequestRecord]
    client: ClientStats
    warmup_requests: int
    flushed_cache: bool
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class _LagMonitor:
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


class Runner:
    """Sends requests and reads their streams; counts what it has seen for progress reports."""

    def __init__(
        self,
        base_url: str,
        workload: Workload,
        backend: Backend,
        headers: dict[str, str],
        on_progress: Callable[[Progress], None] | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.workload = workload
        self.backend = backend
        self.headers = headers
        self.on_progress = on_progress
        self.done = 0
        self.errors = 0
        self.in_flight = 0
        self.output_tokens = 0
        self.chunks = 0
        self.retried = 0
        self._fresh: aiohttp.ClientSession | None = None

    async def one(self, session: aiohttp.ClientSession, index: int, spec: RequestSpec, max_tokens: int) -> RequestRecord:
        rec = RequestRecord(index=index, input_tokens=spec.input_len, requested_output_tokens=max_tokens)
        state = StreamState()
        body = self.backend.body(spec, max_tokens)
        self.in_flight += 1
        rec.start_s = time.monotonic()
        try:
            resp = await self._send(session, body, rec)
            async with resp:
                if resp.status != 200:
                    text = (await resp.text())[:300].strip()
                    state.error = f"HTTP {resp.status} from {self.backend.path}: {text}"
                else:
                    await self._read_stream(resp.content, rec, state)
        except TimeoutError:
            state.error = f"stream stalled: no data for {self.workload.stall_timeout_s:g} s"
        except aiohttp.ClientPayloadError as e:
            state.error = f"truncated stream: connection broke ({type(e).__name__}: {e}) after {state.tokens} tokens"
        except aiohttp.ClientError as e:
            state.error = f"connection error: {type(e).__name__}: {e} (after {state.tokens} tokens)"
        except ValueError as e:
            state.error = f"unparseable stream chunk: {e}"
        finally:
            self.in_flight -= 1
        if rec.latency_s is None:
            # A failed request leaves the in-flight count when it fails, not at the end of the run.
            rec.latency_s = time.monotonic() - rec.start_s
        self.chunks += len(rec.chunk_offsets_s)
        counted_by_guess = state.guessed_chunks == len(rec.chunk_tokens)
        if counted_by_guess and state.server_tokens is not None and state.tokens != state.server_tokens:
            rec.spread_tokens(state.server_tokens)
        rec.output_tokens = state.server_tokens
        if state.server_prompt_tokens is not None:
            rec.input_tokens = state.server_prompt_tokens
        rec.error = state.error or self._completeness_error(state, max_tokens)
        self.done += 1
        if rec.error:
            self.errors += 1
        else:
            self.output_tokens += state.server_tokens if state.server_tokens is not None else state.tokens
        return rec

    async def _send(self, session: aiohttp.ClientSession, body: dict[str, object], rec: RequestRecord) -> aiohttp.ClientResponse:
        """POST ``body``; returns once the response headers arrived.

        A pooled keep-alive connection that the server had already closed fails before any
        answer ("Can not write request body", "Server disconnected"): the server never saw
        the request, so it is sent once more on a connection of its own, and the record says
        so. A refused or failing connect is not retried: that server is down.
        """
        url = self.base_url + self.backend.path
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.workload.stall_timeout_s)
        try:
            return await session.post(url, json=body, headers=self.headers, timeout=timeout)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            if isinstance(e, aiohttp.ClientConnectorError):
                raise
        if self._fresh is None:
            self._fresh = new_session(keep_alive=False)
        rec.retried = True
        self.retried += 1
        rec.start_s = time.monotonic()
        return await self._fresh.post(url, json=body, headers=self.headers, timeout=timeout)

    async def aclose(self) -> None:
        if self._fresh is not None:
            await self._fresh.close()
            self._fresh = None

    async def _read_stream(self, content: aiohttp.StreamReader, rec: RequestRecord, state: StreamState) -> None:
        """Read SSE ``data:`` events until [DONE], an error chunk or the end of the body.

        Reads whatever bytes have arrived and splits the events itself: aiohttp's per-line
        reader costs more CPU than parsing. A chunk's time is when the read that completed
        it returned, so chunks that arrived together share one timestamp.
        """
        clock = time.monotonic
        start = rec.start_s
        feed = self.backend.feed
        tail = b""
        async for data in content.iter_any():
            now = clock() - start
            lines = (tail + data if tail else data).split(b"\n")
            tail = lines.pop()
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    state.done = True
                    rec.latency_s = now
                    return
                n = feed(payload, state)
                if state.error:
                    rec.latency_s = now
                    return
                if n:
                    rec.add_chunk(now, n)
        # A body that ends without a newline still carries its last event.
        now = clock() - start
        if tail.startswith(b"data:"):
            payload = tail[5:].strip()
            if payload == b"[DONE]":
                state.done = True
            else:
                n = feed(payload, state)
                if n and not state.error:
                    rec.add_chunk(now, n)
        rec.latency_s = now

    def _completeness_error(self, state: StreamState, max_tokens: int) -> str:
        # Servers that never send [DONE] (transformers serve) end their stream with a finish_reason.
        if not state.done and state.finish_reason is None:
            return f"truncated stream: ended after {state.tokens} tokens without [DONE] or a finish_reason"
        # Without the server's count only chunks were counted, and one chunk can carry several
        # tokens: too few chunks proves nothing (the metrics say the counts are unknown).
        if self.workload.ignore_eos and state.server_tokens is not None and state.server_tokens < max_tokens:
            return (
                f"short stream: {state.server_tokens} of {max_tokens} tokens with ignore_eos "
                f"(finish_reason {state.finish_reason!r})"
            )
        return ""

    def snapshot(self, total: int, t0: float, warmup: bool) -> Progress:
        return Progress(self.done, total, self.in_flight, self.errors, self.output_tokens, time.monotonic() - t0, warmup)

    async def phase(
        self,
        session: aiohttp.ClientSession,
        jobs: list[Job],
        cap: int | None,
        warmup: bool,
        start_s: float | None = None,
    ) -> list[RequestRecord]:
        """Run ``jobs`` (record index, request, send offset from ``start_s``, default now) under the
        workload's concurrency; ``cap`` limits output lengths (warmup). Multi-turn: the concurrency
        counts chat sessions, each sending its turns one after the other (the think time between
        them, not in warmup), so sessions interleave."""
        if self.workload.dataset == "multi-turn":
            return await self._sessions(session, jobs, cap, warmup, start_s)
        sem = asyncio.Semaphore(self.workload.concurrency)
        tasks: list[asyncio.Task[RequestRecord]] = []
        t0 = time.monotonic() if start_s is None else start_s
        self.done = self.errors = self.output_tokens = 0
        ticker = asyncio.get_running_loop().create_task(self._progress(len(jobs), t0, warmup))

        async def limited(i: int, spec: RequestSpec) -> RequestRecord:
            try:
                return await self.one(session, i, spec, min(spec.output_len, cap) if cap else spec.output_len)
            finally:
                sem.release()

        try:
            for i, spec, at in jobs:
                delay = t0 + at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await sem.acquire()
                tasks.append(asyncio.create_task(limited(i, spec)))
            return list(await asyncio.gather(*tasks))
        finally:
            ticker.cancel()
            for t in tasks:
                t.cancel()
            if self.on_progress:
                self.on_progress(self.snapshot(len(jobs), t0, warmup))

    async def _sessions(
        self, session: aiohttp.ClientSession, jobs: list[Job], cap: int | None, warmup: bool, start_s: float | None
    ) -> list[RequestRecord]:
        sem = asyncio.Semaphore(self.workload.concurrency)
        think = 0.0 if warmup else self.workload.think_time_s
        conversations: dict[int, list[Job]] = {}
        for job in jobs:
            conversations.setdefault(job[1].session, []).append(job)
        tasks: list[asyncio.Task[list[RequestRecord]]] = []
        t0 = time.monotonic() if start_s is None else start_s
        self.done = self.errors = self.output_tokens = 0
        ticker = asyncio.get_running_loop().create_task(self._progress(len(jobs), t0, warmup))

        async def converse(turns: list[Job]) -> list[RequestRecord]:
            records = []
            try:
                for k, (i, spec, _) in enumerate(turns):
                    if k and think:
                        await asyncio.sleep(think)
                    records.append(await self.one(session, i, spec, min(spec.output_len, cap) if cap else spec.output_len))
                return records
            finally:
                sem.release()

        try:
            for turns in conversations.values():
                delay = t0 + turns[0][2] - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await sem.acquire()
                tasks.append(asyncio.create_task(converse(turns)))
            done = [r for records in await asyncio.gather(*tasks) for r in records]
            return sorted(done, key=lambda r: r.index)
        finally:
            ticker.cancel()
            for t in tasks:
                t.cancel()
            if self.on_progress:
                self.on_progress(self.snapshot(len(jobs), t0, warmup))

    async def _progress(self, total: int, t0: float, warmup: bool) -> None:
        if not self.on_progress:
            return
        while True:
            await asyncio.sleep(_PROGRESS_EVERY_S)
            self.on_progress(self.snapshot(total, t0, warmup))


async def _flush_cache(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str]) -> None:
    url = base_url.rstrip("/") + "/flush_cache?timeout=60"
    async with session.post(url, headers=headers) as resp:
        if resp.status != 200:
            raise LoadError(f"POST {url} answered HTTP {resp.status}: {(await resp.text())[:200]}; set flush_cache = false for servers without /flush_cache")


def new_session(keep_alive: bool = True) -> aiohttp.ClientSession:
    """The client's HTTP session: unlimited connections; without ``keep_alive`` each request gets
    a connection of its own (for servers that close connections without saying so)."""
    connector = aiohttp.TCPConnector(limit=0, force_close=not keep_alive)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


def measured_jobs(workload: Workload, seed_offset: int) -> list[Job]:
    """The measured phase's requests with their record indices and send offsets (shared by every shard)."""
    specs = make_requests(workload, workload.num_prompts, seed_offset=seed_offset)
    return list(zip(range(len(specs)), specs, session_offsets_s(workload, specs)))


async def prepare(
    runner: Runner, session: aiohttp.ClientSession, seed_offset: int, flush_headers: dict[str, str] | None = None
) -> list[str]:
    """Warmup, then the optional cache flush and settle; returns notes for the run.

    Warmup failures follow the measured phase's rule: more than ``max_error_rate`` of them
    is a LoadError (the server is not serving this workload), fewer are a note.
    ``flush_headers`` authenticate the flush (an admin endpoint; default: the load requests' headers).
    """
    workload = runner.workload
    notes: list[str] = []
    if workload.warmup_requests:
        warm = make_requests(workload, workload.warmup_requests, seed_offset=seed_offset + 1_000_000)
        warm_records = await runner.phase(session, [(i, s, 0.0) for i, s in enumerate(warm)], _WARMUP_OUTPUT_CAP, warmup=True)
        failed = [r for r in warm_records if r.error]
        if failed:
            what = (
                f"{len(failed)} of {len(warm_records)} warmup requests to {runner.base_url}{runner.backend.path} "
                f"failed; first: {failed[0].error}"
            )
            if len(failed) / len(warm_records) > workload.max_error_rate:
                allowed = f" (allowed error rate {workload.max_error_rate:.1%})" if workload.max_error_rate else ""
                raise LoadError(f"workload {workload.name}: {what}{allowed}")
            notes.append(f"{what} (within the allowed error rate {workload.max_error_rate:.1%})")
    if workload.flush_cache:
        await _flush_cache(session, runner.base_url, runner.headers if flush_headers is None else flush_headers)
        # bench_serving sleeps after a flush so the server is idle when timing starts.
        await asyncio.sleep(1.0)
    return notes


def retry_note(retried: int) -> list[str]:
    if not retried:
        return []
    return [
        f"{retried} request(s) were sent again on a fresh connection: a reused keep-alive connection failed "
        "before any answer (the server closes idle connections); [server] keep_alive = false avoids reuse"
    ]


@dataclass(frozen=True)
class Measured:
    """One process's measured phase: its records and its own cost."""

    records: list[RequestRecord]
    end_s: float
    client: ClientStats


async def measure(
    runner: Runner, session: aiohttp.ClientSession, jobs: list[Job], limits: ClientLimits, start_s: float | None = None
) -> Measured:
    """Run the measured phase, watching this process's CPU and event-loop lag while it runs."""
    lag = _LagMonitor()
    lag.start()
    runner.chunks = 0
    cpu0, t0 = time.process_time(), time.monotonic()
    records = await runner.phase(session, jobs, None, warmup=False, start_s=start_s)
    t1, cpu1 = time.monotonic(), time.process_time()
    await lag.stop()
    return Measured(records, t1, _client_stats(cpu1 - cpu0, t1 - t0, runner.chunks, lag.lags_s, limits))


async def run_single(
    base_url: str,
    workload: Workload,
    backend: Backend,
    headers: dict[str, str],
    limits: ClientLimits,
    on_progress: Callable[[Progress], None] | None,
    seed_offset: int,
    keep_alive: bool = True,
    flush_headers: dict[str, str] | None = None,
) -> LoadRun:
    """The whole workload in this process."""
    runner = Runner(base_url, workload, backend, headers, on_progress)
    jobs = measured_jobs(workload, seed_offset)
    try:
        async with new_session(keep_alive) as session:
            notes = await prepare(runner, session, seed_offset, flush_headers)
            runner.retried = 0
            start = time.monotonic()
            m = await measure(runner, session, jobs, limits, start)
    finally:
        await runner.aclose()
    return LoadRun(
        workload=workload.name,
        backend=backend.name,
        start_s=start,
        end_s=m.end_s,
        records=m.records,
        client=m.client,
        warmup_requests=workload.warmup_requests,
        flushed_cache=workload.flush_cache,
        notes=notes + retry_note(runner.retried),
    )


def _client_stats(cpu_s: float, wall_s: float, chunks: int, lags_s: list[float], limits: ClientLimits) -> ClientStats:
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
    )
