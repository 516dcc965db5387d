"""Hold a probe to its limits, and what the gate reports about it.

The limits are absolute (every metric of the same model is ~0, whatever the hardware), so the
one judge of ``perfgate.verdict`` checks them as floors and ceilings. A metric the probe could not
measure (NaN: e.g. no position where the server named its most likely token) fails: a gate is
never green because nothing was compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from perfgate.catalogue import METRICS
from perfgate.correctness._compare import Finding
from perfgate.correctness._probe import ProbeOutcome
from perfgate.correctness._spec import ProbeSpec
from perfgate.verdict import MetricRule, MetricVerdict, WorkloadVerdict, judge

NAME = "correctness"
"""The probe's name in reports, results and baselines."""

# Findings shown per failing metric in a message.
_SHOWN_FINDINGS = 3


def rules(spec: ProbeSpec) -> list[MetricRule]:
    """One absolute rule per limited metric, in catalogue order."""
    out = []
    for name, m in METRICS.items():
        if name not in spec.limits or m.direction is None:
            continue
        limit = spec.limits[name]
        higher = m.direction == "higher"
        out.append(MetricRule(name, m.direction, floor=limit if higher else None, ceiling=None if higher else limit))
    return out


def judge_probe(outcome: ProbeOutcome) -> WorkloadVerdict[MetricVerdict]:
    """The probe's verdict: each limited metric's worst pass against its limit, failures naming
    the first findings (prompt, position, expected and got token and logprob)."""
    values = outcome.metrics
    finite = {k: v for k, v in values.items() if math.isfinite(v)}
    verdict = judge(NAME, rules(outcome.spec), [finite], None)
    by_metric: dict[str, list[Finding]] = {}
    for f in outcome.findings():
        by_metric.setdefault(f.metric, []).append(f)
    judged = []
    for v in verdict.metrics:
        if v.status == "not-measured":
            v = replace(
                v,
                ok=False,
                message=f"{NAME}: {v.metric} could not be measured (no position of any prompt gave it); the probe "
                "compared nothing there, so it cannot pass: check that the server returns top logprobs",
            )
        elif not v.ok:
            found = by_metric.get(v.metric, [])
            shown = "; ".join(f.message() for f in found[:_SHOWN_FINDINGS])
            more = f" (+{len(found) - _SHOWN_FINDINGS} more)" if len(found) > _SHOWN_FINDINGS else ""
            v = replace(v, message=v.message + (f": {shown}{more}" if shown else ""))
        judged.append(v)
    return WorkloadVerdict(NAME, tuple(judged))


@dataclass
class CorrectnessResult:
    """What the gate made of the probe: its outcome and verdict, or why it did not run or stopped.

    ``note``: the reference it was held to, or why it was off; ``error``: why it stopped (a server
    answer it could not read, a stored record it could not use); ``baseline_path`` / ``recorded``:
    the stored record it read or wrote.
    """

    spec: ProbeSpec | None
    outcome: ProbeOutcome | None = None
    verdict: WorkloadVerdict[MetricVerdict] | None = None
    note: str = ""
    error: str = ""
    baseline_path: str = ""
    recorded: bool = False

    @property
    def ran(self) -> bool:
        return self.spec is not None

    @property
    def passed(self) -> bool:
        """True when it is off, or ran and every limit held; False when it failed or stopped."""
        if self.spec is None:
            return True
        if self.recorded:
            # Recorded: its answers are now the reference (degenerate ones never are).
            return True
        return not self.error and self.verdict is not None and self.verdict.passed

    def failure_message(self) -> str:
        """One paragraph naming every failed metric with its first findings ("" when it passed)."""
        if self.passed:
            return ""
        if self.error:
            return f"correctness probe stopped: {self.error}"
        assert self.verdict is not None
        held = f" ({self.outcome.reference})" if self.outcome is not None else ""
        batches = f"\n  {self.outcome.in_flight()}" if self.outcome is not None else ""
        return (
            f"correctness probe failed: the server does not compute what its reference did{held}\n  "
            + ("\n  ".join(m.message for m in self.verdict.failures))
            + batches
            + (f"\n  {self.note}" if self.note.startswith("not recorded") else "")
        )

    def to_json(self) -> dict[str, Any]:
        """The probe for results JSON: metrics, verdicts, each pass per prompt, findings."""
        out: dict[str, Any] = {"ran": self.ran, "note": self.note, "error": self.error, "passed": self.passed}
        out |= {"baseline_path": self.baseline_path, "recorded": self.recorded}
        if self.spec is not None:
            out["spec"] = {**self.spec.identity()["correctness_probe"], "concurrencies": list(self.spec.concurrencies)}
            out["limits"] = dict(self.spec.limits)
        if self.outcome is not None:
            o = self.outcome
            out["reference"] = o.reference
            out["duration_s"] = o.duration_s
            out["metrics"] = {k: _json_number(v) for k, v in o.metrics.items()}
            out["passes"] = [
                {
                    "concurrency": p.concurrency,
                    "duplicates": p.duplicates_sent,
                    "padding": p.padding_sent,
                    "in_flight": p.in_flight,
                    "metrics": {k: _json_number(v) for k, v in p.metrics.items()},
                    "prompts": [
                        {
                            "prompt": a.prompt,
                            "views": {
                                view: {
                                    "scored": v.scored,
                                    "delta_mean": v.delta_sum / v.deltas if v.deltas else None,
                                    "delta_max": v.delta_max,
                                    "mismatches": v.mismatches,
                                    "near_ties": v.near_ties,
                                }
                                for view, v in a.views.items()
                            },
                            "greedy_match": a.greedy_match,
                            "first_divergence": a.first_divergence,
                        }
                        for a in p.prompts
                    ],
                }
                for p in o.passes
            ]
            out["findings"] = [f.message() for f in o.findings()]
        if self.verdict is not None:
            out["verdicts"] = [
                {"metric": v.metric, "status": v.status, "ok": v.ok, "measured": v.measured, "limit": v.limit}
                | {"message": v.message}
                for v in self.verdict.metrics
            ]
        return out


def _json_number(v: float) -> float | None:
    return v if math.isfinite(v) else None
