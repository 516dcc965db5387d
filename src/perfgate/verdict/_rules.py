"""Turn a profile's [gate] and a workload's overrides into one rule per gated metric."""

from __future__ import annotations

from dataclasses import dataclass

from perfgate.profile import GateSpec, Workload
from perfgate.verdict._direction import Direction, direction_of
from perfgate.verdict._names import check_metric_name


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


def rules_for(gate: GateSpec, workload: Workload) -> list[MetricRule]:
    """The rules for one workload, sorted by metric name.

    Gated metrics are the union of tolerance keys (the gate's, then the workload's own),
    floors and ceilings; a workload's value overrides the gate's for the same metric.
    Raises ValueError naming the metric and where it was set when its direction is unknown.
    """
    tolerance = {**gate.tolerance, **workload.tolerance}
    floors = {**gate.floors, **workload.floors}
    ceilings = {**gate.ceilings, **workload.ceilings}
    rules = []
    for metric in sorted({*tolerance, *floors, *ceilings}):
        try:
            check_metric_name(metric)
            direction = direction_of(metric)
        except ValueError as e:
            raise ValueError(f"{_where(metric, gate, workload)}: {e}") from None
        rules.append(
            MetricRule(
                metric=metric,
                direction=direction,
                tolerance=tolerance.get(metric),
                floor=floors.get(metric),
                ceiling=ceilings.get(metric),
            )
        )
    return rules


def _where(metric: str, gate: GateSpec, workload: Workload) -> str:
    places = [
        f"[gate].{table}"
        for table, values in (("tolerance", gate.tolerance), ("floors", gate.floors), ("ceilings", gate.ceilings))
        if metric in values
    ]
    places += [
        f"[[workload]] {workload.name!r} {table}"
        for table, values in (("tolerance", workload.tolerance), ("floors", workload.floors), ("ceilings", workload.ceilings))
        if metric in values
    ]
    return " and ".join(places)
