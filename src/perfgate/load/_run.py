"""run_workload: one repeat of a workload, in this process or sharded over several, as one LoadRun."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from perfgate.errors import LoadError
from perfgate.load._backends import BACKENDS
from perfgate.load._loop import run as run_loop
from perfgate.load._phase import Measurement, ProgressSink, measure, measured_jobs, prepared, warm_up
from perfgate.load._plan import LoadPlan, answer_sample, repeat_seed_offset
from perfgate.load._records import RequestRecord
from perfgate.load._selfcheck import ClientLimits, ClientStats, merge_client_stats
from perfgate.load._shard import run_sharded, worker_concurrency
from perfgate.load._sizing import check_ports, ensure_fds, size_client, usable_cpus
from perfgate.load._steady import SteadyWarmup
from perfgate.load._stream import Streamer
from perfgate.profile import Workload

_DEFAULT_LIMITS = ClientLimits()


@dataclass(frozen=True)
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
    # warmup = "steady": its rounds (None for a fixed count of warmup requests).
    steady_warmup: SteadyWarmup | None = None
    # The measured requests sampled to keep their whole answers (RequestRecord.kept).
    kept_for: frozenset[int] = frozenset()

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def run_workload(
    base_url: str,
    workload: Workload,
    *,
    model: str = "",
    headers: Mapping[str, str] | None = None,
    flush_headers: Mapping[str, str] | None = None,
    limits: ClientLimits = _DEFAULT_LIMITS,
    on_progress: ProgressSink | None = None,
    repeat: int = 0,
    keep_alive: bool = True,
    keep_answers: int = 0,
) -> LoadRun:
    """Run ``workload`` (warmup, optional cache flush, measured phase) against ``base_url``.

    The measured phase runs in this process or over ``workload.client_processes`` spawned
    processes ("auto": as many as the warmup says the client needs), their records merged.
    ``repeat`` changes the prompts' seed so repeats do not hit identical prompts.
    ``headers`` go with every request (the server's bearer token: ``RunningServer.headers()``),
    ``flush_headers`` with the cache flush, an admin endpoint (None: ``headers``).
    ``keep_alive`` = False gives every request a connection of its own. ``keep_answers``: how many
    measured requests, spread over the run, keep their whole answers (``RequestRecord.kept``).
    """
    n = workload.client_processes
    if n != "auto" and n > workload.concurrency:
        raise LoadError(
            f"workload {workload.name}: client_processes = {n} cannot share concurrency = {workload.concurrency}; "
            f"use at most {workload.concurrency} processes"
        )
    backend = BACKENDS[workload.backend](model, workload.ignore_eos, workload.extra_body)
    plan = LoadPlan(
        base_url=base_url,
        workload=workload,
        backend=backend,
        headers=dict(headers or {}),
        limits=limits,
        seed_offset=repeat_seed_offset(repeat),
        keep_alive=keep_alive,
        flush_headers=flush_headers,
        keep_answers=answer_sample(workload.num_prompts, keep_answers),
    )
    check_ports(plan)
    notes = []
    if n != "auto":
        # A fixed count fails on the host's limits before anything runs.
        notes.append(ensure_fds(plan, worker_concurrency(workload.concurrency, n, 0), n))
    measured = run_loop(_warm_then_measure(plan, on_progress, notes))
    if not measured.parts:
        measured = run_sharded(plan, measured, on_progress)
    return _load_run(plan, measured)


async def _warm_then_measure(plan: LoadPlan, on_progress: ProgressSink | None, notes: list[str]) -> Measurement:
    """Warm up and size the client here, then measure here when one process is enough; else the
    Measurement comes back without parts, for the shards to measure."""
    workload = plan.workload
    async with Streamer(plan) as streamer:
        warm = await warm_up(streamer, on_progress)
        sizing = size_client(plan, warm.cost, usable_cpus())
        notes = [
            *notes,
            *warm.notes,
            ensure_fds(plan, worker_concurrency(workload.concurrency, sizing.processes, 0), sizing.processes),
        ]
        if sizing.shortfall:
            notes.append(sizing.shortfall)
        notes = [note for note in notes if note]
        if sizing.processes > 1:
            return Measurement(notes, sizing, steady=warm.steady)
        jobs = measured_jobs(plan)
        async with prepared(streamer, jobs, workload.concurrency):
            start = time.monotonic()
            part = await measure(streamer, jobs, workload.concurrency, start, on_progress)
    return Measurement(notes, sizing, start, [part], warm.steady)


def _load_run(plan: LoadPlan, measured: Measurement) -> LoadRun:
    parts = measured.parts
    end = max(p.end_s for p in parts)
    notes = list(measured.notes)
    if len(parts) == 1:
        records, client = parts[0].records, parts[0].client
    else:
        records = sorted((r for p in parts for r in p.records), key=lambda r: r.index)
        client = merge_client_stats([p.client for p in parts], end - measured.start_s)
        notes.append(f"client sharded over {len(parts)} processes")
    retried = sum(p.retried for p in parts)
    if retried:
        notes.append(
            f"{retried} request(s) were sent again on a fresh connection: a reused keep-alive connection failed "
            "before any answer (the server closes idle connections); [server] keep_alive = false avoids reuse"
        )
    return LoadRun(
        workload=plan.workload.name,
        backend=plan.backend.name,
        start_s=measured.start_s,
        end_s=end,
        records=records,
        client=replace(client, processes=len(parts), sizing=measured.sizing.reason),
        warmup_requests=plan.workload.warmup_requests,
        flushed_cache=plan.workload.flush_cache,
        notes=notes,
        steady_warmup=measured.steady,
        kept_for=plan.keep_answers,
    )
