"""Turn a profile's [gate] and a workload's overrides into one rule per gated metric."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfgate.catalogue import CAPACITY, Direction, direction_of
from perfgate.metrics import SLO_METRICS
from perfgate.profile import GateSpec, Workload, check_gated, merged_gate

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


def rules_for(gate: GateSpec, workload: Workload, *, in_sweep: bool = False) -> list[MetricRule]:
    """The rules for one workload, sorted by metric name.

    Gated metrics are the union of tolerance keys (the gate's, then the workload's own),
    floors and ceilings; a workload's value overrides the gate's for the same metric.
    Goodput and SLO attainment set in [gate] apply to workloads with an SLO; ``capacity`` is
    a sweep's, never a workload's (see :func:`capacity_rule`). Raises ValueError naming the
    metric and where it was set when its direction is unknown or the workload cannot measure it
    (``perfgate.profile.check_gated``).
    """
    check_gated(gate, workload, in_sweep=in_sweep)
    tolerance, floors, ceilings = merged_gate(gate, workload)
    rules = []
    for metric in sorted({*tolerance, *floors, *ceilings}):
        # [gate]'s capacity is the sweeps' (capacity_rule); its SLO metrics hold workloads with an SLO.
        if metric == CAPACITY or (metric in SLO_METRICS and workload.slo is None):
            continue
        rules.append(_rule(metric, direction_of(metric), tolerance, floors, ceilings))
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
    tolerance, floors, ceilings = merged_gate(gate, workload)
    tolerance.setdefault(CAPACITY, DEFAULT_CAPACITY_TOLERANCE)
    return _rule(CAPACITY, "higher", tolerance, floors, ceilings)
