"""run_workload: one workload, in this process or sharded over several."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from perfgate.errors import LoadError
from perfgate.load._backends import BACKENDS
from perfgate.load._client import ClientLimits, LoadRun, Progress, run_single
from perfgate.load._shard import run_sharded
from perfgate.profile import Workload

_DEFAULT_LIMITS = ClientLimits()


def run_workload(
    base_url: str,
    workload: Workload,
    *,
    model: str = "",
    api_key_env: str = "",
    limits: ClientLimits = _DEFAULT_LIMITS,
    on_progress: Callable[[Progress], None] | None = None,
    repeat: int = 0,
    keep_alive: bool = True,
) -> LoadRun:
    """Run ``workload`` (warmup, optional cache flush, measured phase) against ``base_url``.

    With ``workload.client_processes`` > 1 the measured phase is sharded over that many
    spawned processes and their records merged. ``repeat`` changes the prompts' seed so
    repeats do not hit identical prompts. ``keep_alive`` = False gives every request a
    connection of its own.
    """
    headers: dict[str, str] = {}
    if api_key_env:
        token = os.environ.get(api_key_env)
        if not token:
            raise LoadError(f"workload {workload.name}: environment variable {api_key_env} (server.api_key_env) is not set; export the API token there")
        headers["Authorization"] = f"Bearer {token}"
    seed_offset = repeat * 7_777
    if workload.client_processes > 1:
        return run_sharded(base_url, workload, model, headers, limits, on_progress, seed_offset, keep_alive)
    backend = BACKENDS[workload.backend](model, workload.ignore_eos, workload.extra_body)
    return asyncio.run(run_single(base_url, workload, backend, headers, limits, on_progress, seed_offset, keep_alive))
