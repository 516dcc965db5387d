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
    admin_api_key_env: str = "",
    limits: ClientLimits = _DEFAULT_LIMITS,
    on_progress: Callable[[Progress], None] | None = None,
    repeat: int = 0,
    keep_alive: bool = True,
) -> LoadRun:
    """Run ``workload`` (warmup, optional cache flush, measured phase) against ``base_url``.

    With ``workload.client_processes`` > 1 the measured phase is sharded over that many
    spawned processes and their records merged. ``repeat`` changes the prompts' seed so
    repeats do not hit identical prompts. ``api_key_env`` / ``admin_api_key_env`` name the
    variables holding the bearer tokens of the requests / of the cache flush (an admin
    endpoint; the API key when no admin key is named). ``keep_alive`` = False gives every
    request a connection of its own.
    """
    headers = _bearer(workload, api_key_env, "api_key_env")
    flush_headers = _bearer(workload, admin_api_key_env, "admin_api_key_env") if admin_api_key_env else None
    seed_offset = repeat * 7_777
    if workload.client_processes > 1:
        return run_sharded(base_url, workload, model, headers, limits, on_progress, seed_offset, keep_alive, flush_headers)
    backend = BACKENDS[workload.backend](model, workload.ignore_eos, workload.extra_body)
    return asyncio.run(
        run_single(base_url, workload, backend, headers, limits, on_progress, seed_offset, keep_alive, flush_headers)
    )


def _bearer(workload: Workload, variable: str, setting: str) -> dict[str, str]:
    if not variable:
        return {}
    token = os.environ.get(variable)
    if not token:
        raise LoadError(f"workload {workload.name}: environment variable {variable} (server.{setting}) is not set; export the API token there")
    return {"Authorization": f"Bearer {token}"}
