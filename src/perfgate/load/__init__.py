"""Load: seeded prompts (random, shared-prefix, ShareGPT, multi-turn), pacing, and a streaming client that measures itself."""

from perfgate.load._client import ClientLimits, ClientStats, LoadRun, Progress
from perfgate.load._dataset import (
    RequestSpec,
    arrival_offsets_s,
    check_dataset,
    dataset_identity,
    make_requests,
    session_offsets_s,
    system_prompts,
    text_to_ids,
)
from perfgate.load._records import RequestRecord
from perfgate.load._run import run_workload

__all__ = [
    "ClientLimits",
    "ClientStats",
    "LoadRun",
    "Progress",
    "RequestRecord",
    "RequestSpec",
    "arrival_offsets_s",
    "check_dataset",
    "dataset_identity",
    "make_requests",
    "run_workload",
    "session_offsets_s",
    "system_prompts",
    "text_to_ids",
]
