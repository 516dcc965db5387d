"""Explain: why a gate failed, from the server's own profile.

A few forward steps of an extra (never gated) repeat are profiled by the server itself
(SGLang's ``/start_profile``; the simulator's too), the torch profiler trace is reduced to a
table of kernels (or host operators on a CPU engine) per step, stored with the baseline when one
is recorded, and compared with the baseline's on a later run: ``explain: key 0.41 -> 1.63
ms/step (+298 %), 62 % of the step``.
"""

from perfgate.explain._capture import NO_ENDPOINT, Capture, capture_profile
from perfgate.explain._diff import (
    MIX_CHANGED,
    STEP_MOVED,
    TOKENS_CHANGED,
    TOP_LINES,
    ExplainDiff,
    RowChange,
    diff_tables,
    mix_changed,
    mix_distance,
)
from perfgate.explain._names import normalise, variant
from perfgate.explain._run import (
    EXCLUDED,
    TABLE_KIND,
    ExplainResult,
    compare,
    keep_trace,
    read_table,
    run_slice,
    tokens_between,
)
from perfgate.explain._table import GAP_KEY, HOST_GAP_KEY, ExplainError, KernelRow, ProfileTable
from perfgate.explain._trace import DEFAULT_MAX_TRACE_BYTES, DEFAULT_TOP_N, read_trace, reduce_trace

__all__ = [
    "DEFAULT_MAX_TRACE_BYTES",
    "DEFAULT_TOP_N",
    "EXCLUDED",
    "GAP_KEY",
    "HOST_GAP_KEY",
    "MIX_CHANGED",
    "NO_ENDPOINT",
    "STEP_MOVED",
    "TABLE_KIND",
    "TOKENS_CHANGED",
    "TOP_LINES",
    "Capture",
    "ExplainDiff",
    "ExplainError",
    "ExplainResult",
    "KernelRow",
    "ProfileTable",
    "RowChange",
    "capture_profile",
    "compare",
    "diff_tables",
    "keep_trace",
    "mix_changed",
    "mix_distance",
    "normalise",
    "read_table",
    "read_trace",
    "reduce_trace",
    "run_slice",
    "tokens_between",
    "variant",
]
