"""Which metric names a profile may gate: the catalogue's gateable ones.

A misspelt name (``mean_tpott_ms``) would otherwise be gated, never measured, and silently
pass on every run.
"""

from __future__ import annotations

from perfgate.catalogue import gateable


def check_metric_name(metric: str) -> None:
    """ValueError naming ``metric`` (with the closest known name) unless perfgate measures it and
    knows which way is better."""
    gateable(metric)
