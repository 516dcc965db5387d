"""Load: seeded prompts (random, shared-prefix, ShareGPT, multi-turn), pacing, and a streaming
client that measures itself.

The modules, in the order a repeat runs through them: ``_dataset`` (prompts and arrival
times; ``_tokenize`` asks the server to count ShareGPT text), ``_backends`` (each API's
request body and chunk format), ``_stream`` (one request, streamed, into a
``_records.RequestRecord``, which keeps a summary of the answer that ``_outputs`` checks after
the measured phase, and for a sample of requests the whole answer, which the session scores
teacher-forced), ``_phase`` (warmup, cache flush and the measured phase under the
workload's concurrency), ``_selfcheck`` (the client's own CPU and loop lag), ``_shard`` (the
measured phase over several processes) and ``_run`` (``run_workload``: the plan built once,
one process or several, one LoadRun).
"""

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
from perfgate.load._outputs import degenerate_output
from perfgate.load._phase import Progress
from perfgate.load._records import KeptAnswer, OutputSample, RequestRecord
from perfgate.load._run import LoadRun, run_workload
from perfgate.load._selfcheck import ClientLimits, ClientStats
from perfgate.load._steady import SteadyWarmup
from perfgate.load._tokenize import ServerTokenizer

__all__ = [
    "ClientLimits",
    "ClientStats",
    "KeptAnswer",
    "LoadRun",
    "OutputSample",
    "Progress",
    "RequestRecord",
    "RequestSpec",
    "ServerTokenizer",
    "SteadyWarmup",
    "arrival_offsets_s",
    "check_dataset",
    "dataset_identity",
    "degenerate_output",
    "make_requests",
    "run_workload",
    "session_offsets_s",
    "system_prompts",
    "text_to_ids",
]
