"""Load: seeded exact-length prompts, pacing, and a streaming client that measures itself."""

from perfgate.load._client import ClientLimits, ClientStats, LoadRun, Progress
from perfgate.load._dataset import RequestSpec, arrival_offsets_s, make_requests
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
    "make_requests",
    "run_workload",
]
