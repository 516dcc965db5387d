"""Turn a profile's [gate] and a workload's overrides into one rule per gated metric."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfgate.catalogue import CAPACITY, Direction, direction_of
from perfgate.metrics import SLO_METRICS
from perfgate.profile import GateSpec, Workload
from perfgate.verdict._names import check_metric_name

# A capacity is a sweep point (or a bisected load): dropping a whole point is always more than
# this, while a sweep refined by bisection may move by less without failing.
DEFAULT_CAPACITY_TOLERANCE = 0.05


@dataclass(frozen=True)
class MetricRule:
    """How one metric is judged.

    ``tolerance`` is relative (0.03 = the metric may get 3 % worse than the baseline median);
    ``floor`` / ``ceiling`` are absolute bounds in the metric's own unit, checked with or
    without a baseline. Any of the three may be None.
    """

    metric: str
    direction: Direction
    tolerance: float | None = None
    floor: float | None = None
    ceiling: float | None = None


def _merged(gate: GateSpec, workload: Workload) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    return (
        {**gate.tolerance, **workload.tolerance},
        {**gate.floors, **workload.floors},
        {**gate.ceilings, **workload.ceilings},
    )


def rules_for(gate: GateSpec, workload: Workload, *, in_sweep: bool = False) -> list[MetricRule]:
    """The rules for one workload, sorted by metric name.

    Gated metrics are the union of tolerance keys (the gate's, then the workload's own),
    floors and ceilings; a workload's value overrides the gate's for the same metric.
    Goodput and SLO attainment set in [gate] apply to workloads with an SLO; ``capacity`` is
    a sweep's, never a workload's (see :func:`capacity_rule`). Raises ValueError naming the
    metric and where it was set when its direction is unknown or the workload cannot measure it.
    """
    tolerance, floors, ceilings = _merged(gate, workload)
    own = {*workload.tolerance, *workload.floors, *workload.ceilings}
    rules = []
    for metric in sorted({*tolerance, *floors, *ceilings}):
        try:
            check_metric_name(metric)
            direction = direction_of(metric)
        except ValueError as e:
            raise ValueError(f"{_where(metric, gate, workload)}: {e}") from None
        if metric == CAPACITY:
            if metric in own and not in_sweep:
                raise ValueError(
                    f"{_where(metric, gate, workload)}: capacity is measured by sweeps only (a list of "
                    f"concurrency or request_rate values); workload {workload.name!r} runs one load"
                )
            continue
        if metric in SLO_METRICS and workload.slo is None:
            if metric in own:
                raise ValueError(
                    f"{_where(metric, gate, workload)}: {metric} counts the requests that meet the "
                    f"workload's SLO, and {workload.name!r} has none; add e.g. slo = "
                    f"{{ ttft_ms = 2000, tpot_ms = 100 }}"
                )
            continue
        rules.append(_rule(metric, direction, tolerance, floors, ceilings))
    return rules


def _rule(
    metric: str,
    direction: Direction,
    tolerance: Mapping[str, float],
    floors: Mapping[str, float],
    ceilings: Mapping[str, float],
) -> MetricRule:
    return MetricRule(
        metric=metric,
        direction=direction,
        tolerance=tolerance.get(metric),
        floor=floors.get(metric),
        ceiling=ceilings.get(metric),
    )


def capacity_rule(gate: GateSpec, workload: Workload) -> MetricRule:
    """How a sweep's capacity is judged: the [gate] and workload settings for ``capacity``, with
    :data:`DEFAULT_CAPACITY_TOLERANCE` when neither sets a tolerance."""
    tolerance, floors, ceilings = _merged(gate, workload)
    tolerance.setdefault(CAPACITY, DEFAULT_CAPACITY_TOLERANCE)
    return _rule(CAPACITY, "higher", tolerance, floors, ceilings)


def _where(metric: str, gate: GateSpec, workload: Workload) -> str:
    places = [
        f"[gate].{table}"
        for table, values in (("tolerance", gate.tolerance), ("floors", gate.floors), ("ceilings", gate.ceilings))
        if metric in values
    ]
    places += [
        f"[[workload]] {workload.name!r} {table}"
        for table, values in (
            ("tolerance", workload.tolerance),
            ("floors", workload.floors),
            ("ceilings", workload.ceilings),
        )
        if metric in values
    ]
    return " and ".join(places)
