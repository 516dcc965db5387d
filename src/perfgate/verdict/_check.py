"""The check a baseline store runs before it replaces stored numbers: the gate's own judgement,
on the rules' tolerances only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfgate.baseline import Baseline
from perfgate.verdict._judge import judge
from perfgate.verdict._rules import MetricRule


@dataclass(frozen=True)
class ToleranceCheck:
    """New repeats are worse than stored ones where :func:`judge` fails them on ``rules``' tolerances
    at ``alpha``. Absolute floors and ceilings are left out: they are no reason to keep old numbers.
    A ``perfgate.baseline.BaselineStore`` runs it under its lock (``save(..., check=...)``)."""

    rules: Sequence[MetricRule]
    alpha: float = 0.05

    @property
    def gated(self) -> Sequence[str]:
        return [r.metric for r in self.rules]

    def regressions(self, new: Baseline, stored: Baseline) -> list[str]:
        relative = [replace(r, floor=None, ceiling=None) for r in self.rules if r.tolerance is not None]
        verdict = judge(
            new.workload,
            relative,
            new.repeats,
            stored.repeats,
            alpha=self.alpha,
            current_boots=new.boots,
            baseline_boots=stored.boots,
        )
        return [m.message for m in verdict.metrics if m.status == "fail"]
