"""A sweep's capacity: the highest load whose chosen latency statistic meets every SLO target.

Pure functions over the flat metrics of each load. A load is within the SLO when, for every
target of the SLO, its statistic (``p90`` of TTFT, TPOT or end-to-end latency, ...) is at or
below the target; the capacity is the highest load such that it and every lower load are
within (a lower load beyond the SLO caps it: the curve is read from the bottom, as an operator
would raise the load). Below the lowest load the capacity is 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfgate.profile import Slo

_LATENCY = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2e_latency"}


def slo_metric_names(slo: Slo, stat: str) -> dict[str, str]:
    """SLO key -> the metric holding ``stat`` of it, e.g. {"ttft_ms": "p90_ttft_ms"}."""
    return {k: f"{stat}_{_LATENCY[k]}_ms" for k in slo.targets()}


def within_slo(values: Mapping[str, float], slo: Slo, stat: str) -> bool | None:
    """Whether one run's ``stat`` latencies meet every target; None when one was not measured."""
    names = slo_metric_names(slo, stat)
    if any(name not in values for name in names.values()):
        return None
    return all(values[name] <= slo.targets()[k] for k, name in names.items())


def capacity(loads: Sequence[float], within: Sequence[bool]) -> float:
    """The highest of ``loads`` (increasing) whose own and every lower entry of ``within`` is true; 0 if none."""
    best = 0.0
    for load, ok in zip(loads, within, strict=True):
        if not ok:
            break
        best = load
    return best


def bisect_between(low: float, high: float, integer: bool) -> float | None:
    """The load halfway between ``low`` (within the SLO) and ``high`` (beyond it); None when no load
    lies strictly between them (integer loads one apart)."""
    mid = (low + high) / 2
    if integer:
        mid = float(int(mid))
    return mid if low < mid < high else None
