"""Which metric names a profile may gate: the ones some stage of perfgate measures.

A misspelt name with a known suffix (``mean_tpott_ms``) has a direction, so without this check
it would be gated, never measured, and silently pass on every run.
"""

from __future__ import annotations

import difflib

from perfgate.metrics import METRIC_NAMES
from perfgate.telemetry import SERVER_METRICS, TELEMETRY_METRICS
from perfgate.verdict._direction import direction_of

CAPACITY = "capacity"
"""A sweep's gated number: the highest load within the SLO (see perfgate.session's sweeps)."""

KNOWN_METRICS = METRIC_NAMES | TELEMETRY_METRICS | SERVER_METRICS | {CAPACITY}


def check_metric_name(metric: str) -> None:
    """ValueError naming ``metric`` (with the closest known name) unless perfgate measures it."""
    if metric not in KNOWN_METRICS:
        close = difflib.get_close_matches(metric, sorted(KNOWN_METRICS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "the README's metric tables list the names"
        raise ValueError(f"metric {metric!r} is not one perfgate measures; {hint}")
    direction_of(metric)
