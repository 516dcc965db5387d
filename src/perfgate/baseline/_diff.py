"""What changed between two baselines: fingerprint fields and metric medians."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.baseline._document import Baseline
from perfgate.baseline._fingerprint import Fingerprint
from perfgate.catalogue import fmt_value, unit_of


@dataclass(frozen=True)
class MetricChange:
    metric: str
    old: float | None
    new: float | None

    @property
    def change_pct(self) -> float | None:
        if self.old is None or self.new is None or self.old == 0:
            return None
        return (self.new - self.old) / abs(self.old) * 100


@dataclass(frozen=True)
class BaselineDiff:
    fingerprint: tuple[tuple[str, Any, Any], ...]
    metrics: tuple[MetricChange, ...]

    def lines(self) -> list[str]:
        """Human-readable lines, e.g. ``output_throughput 1,247.4 -> 1,121.4 tok/s (-10.1%)``."""
        out = [f"fingerprint {name}: {old!r} -> {new!r}" for name, old, new in self.fingerprint]
        for m in self.metrics:
            unit = unit_of(m.metric)
            old = "-" if m.old is None else fmt_value(m.old, "")
            new = "-" if m.new is None else fmt_value(m.new, unit)
            pct = f" ({m.change_pct:+.1f}%)" if m.change_pct is not None else ""
            out.append(f"{m.metric} {old} -> {new}{pct}")
        return out


def diff(old: Baseline, new: Baseline) -> BaselineDiff:
    """Fingerprint field differences and metric medians old -> new (every metric either has)."""
    a, b = old.medians(), new.medians()
    return BaselineDiff(
        fingerprint=tuple(old.fingerprint.differences(new.fingerprint)),
        metrics=tuple(MetricChange(k, a.get(k), b.get(k)) for k in sorted({*a, *b})),
    )


def others_note(fingerprint: Fingerprint, others: Sequence[Baseline]) -> str:
    """What to tell the user about baselines recorded under other fingerprints (never used).

    E.g. ``a baseline exists for another fingerprint (baseline -> this run: gpu_count 8 -> 4);
    not used``; "" when there are none. Pass it to ``judge(..., no_baseline_note=...)``.
    """
    if not others:
        return ""
    diffs = "; ".join(o.fingerprint.describe_difference(fingerprint) for o in others)
    many = "baselines exist for other fingerprints" if len(others) > 1 else "a baseline exists for another fingerprint"
    return f"{many} (baseline -> this run: {diffs}); not used"
