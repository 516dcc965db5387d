"""Hold one workload's repeats to its rules and its baseline.

A metric fails its tolerance when the median got worse by more than the tolerance AND the
repeats say the change is real (one-sided Mann-Whitney U on the raw repeats at ``alpha``). A
median past the limit that the test cannot tell from noise is never a pass: it is
INCONCLUSIVE, which fails the gate unless the profile makes it a warning (the session first
runs more repeats to decide it). When the repeat counts
are too small for the test ever to reach ``alpha`` (e.g. 1 repeat, or 2 against 2 at 0.05),
the tolerance alone decides and the message says that too. Absolute floors and ceilings are
checked on the median whether or not a baseline exists.

Boots (``[gate] boots``): when either side's repeats come from more than one boot of the server,
each boot's repeats are collapsed to their median and the boot medians are the samples of the
test (3 boots against 3 can reach p = 0.05), so the noise the test sees is the between-boot
noise, which on a GPU host is the larger one (docs/gpu-noise.md). A baseline whose boot medians
spread (max - min over their median) wider than the tolerance cannot decide it either way: such
a metric is INCONCLUSIVE unless it FAILS outright, never a pass that depended on which boots ran.
Repeats without boot labels (``None``: baselines recorded before boots) are one boot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from perfgate._stats import median
from perfgate.catalogue import Direction, fmt_value, unit_of
from perfgate.profile import InconclusivePolicy
from perfgate.verdict._decide import check_policy, decide, decision_message, reaches
from perfgate.verdict._mannwhitney import mann_whitney_less, min_p_value
from perfgate.verdict._rules import MetricRule

Status = Literal["pass", "fail", "inconclusive", "no-baseline", "not-measured"]
NoiseTest = Literal["mann-whitney", "tolerance-only", "none"]
Replicate = Literal["repeat", "boot"]

RECORD_HINT = "record one with `pytest perf_tests --perf-update-baselines`"


@dataclass(frozen=True)
class MetricVerdict:
    """The judgement on one gated metric of one workload.

    ``measured`` and ``baseline`` are medians over repeats (over boot medians when ``replicate`` is
    "boot", and then ``n_measured``/``n_baseline`` count boots), in the metric's unit; ``limit`` is
    the bound that failed, or else the one that applies (tolerance boundary, floor or
    ceiling); ``change_pct`` is (measured - baseline) / baseline * 100; ``ok`` is whether this
    verdict lets the gate pass ("no-baseline" is not ok under require_baseline).
    The spreads are (max - min) / median, as fractions, None where there is one value: inside each
    boot of this run (the median over its boots), between this run's boot medians, and between the
    baseline's boot medians.
    """

    workload: str
    metric: str
    direction: Direction
    status: Status
    ok: bool
    measured: float | None
    baseline: float | None
    limit: float | None
    change_pct: float | None
    p_value: float | None
    noise_test: NoiseTest
    n_measured: int
    n_baseline: int
    message: str
    replicate: Replicate = "repeat"
    within_boot_spread: float | None = None
    between_boot_spread: float | None = None
    baseline_between_boot_spread: float | None = None


class _Judged(Protocol):
    @property
    def ok(self) -> bool: ...

    @property
    def status(self) -> str: ...


V = TypeVar("V", bound=_Judged)


@dataclass(frozen=True)
class WorkloadVerdict(Generic[V]):
    """One workload's metric verdicts: against a baseline (:class:`MetricVerdict`, from
    :func:`judge`) or A against B (``PairedMetricVerdict``, from ``judge_paired``)."""

    workload: str
    metrics: tuple[V, ...]

    @property
    def passed(self) -> bool:
        return all(m.ok for m in self.metrics)

    @property
    def failures(self) -> tuple[V, ...]:
        return tuple(m for m in self.metrics if not m.ok)

    @property
    def inconclusive(self) -> tuple[V, ...]:
        """Metrics past their limit that the repeats could not tell from noise."""
        return tuple(m for m in self.metrics if m.status == "inconclusive")


def judge(
    workload: str,
    rules: Sequence[MetricRule],
    current: Sequence[Mapping[str, float]],
    baseline: Sequence[Mapping[str, float]] | None,
    *,
    alpha: float = 0.05,
    require_baseline: bool = False,
    no_baseline_note: str = "",
    inconclusive: InconclusivePolicy = "fail",
    current_boots: Sequence[int] | None = None,
    baseline_boots: Sequence[int] | None = None,
) -> WorkloadVerdict[MetricVerdict]:
    """Judge one workload.

    ``current`` and ``baseline`` are the repeats (flat metric dicts); ``baseline`` is None when
    no baseline exists for this fingerprint. ``no_baseline_note`` is added to "no-baseline"
    messages, e.g. "a baseline exists for another fingerprint (gpu_count 8 -> 4); not used".
    ``inconclusive`` decides whether an INCONCLUSIVE metric fails the gate ("fail") or not ("warn").
    ``current_boots`` and ``baseline_boots`` label each repeat with the boot it ran on (None: one boot).
    """
    check_policy(alpha, inconclusive)
    for repeats, boots, what in ((current, current_boots, "current"), (baseline, baseline_boots, "baseline")):
        if boots is not None and (repeats is None or len(boots) != len(repeats)):
            raise ValueError(f"{what}_boots must label each of the {what} repeats with its boot")
    verdicts = tuple(
        _judge_metric(
            workload,
            rule,
            _by_boot(current, current_boots, rule.metric),
            _by_boot(baseline, baseline_boots, rule.metric) if baseline is not None else None,
            alpha,
            require_baseline,
            no_baseline_note,
            inconclusive,
        )
        for rule in rules
    )
    return WorkloadVerdict(workload=workload, metrics=verdicts)


def _by_boot(repeats: Sequence[Mapping[str, float]], boots: Sequence[int] | None, metric: str) -> list[list[float]]:
    """The finite values of ``metric``, grouped by boot in order of first appearance (empty boots left out)."""
    groups: dict[int, list[float]] = {}
    for boot, r in zip(boots if boots is not None else [0] * len(repeats), repeats, strict=True):
        v = r.get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            groups.setdefault(boot, []).append(float(v))
    return list(groups.values())


def _spread(values: Sequence[float]) -> float | None:
    """(max - min) / |median|: None for fewer than 2 values or a median of 0."""
    centre = median(values) if len(values) >= 2 else 0.0
    return (max(values) - min(values)) / abs(centre) if centre else None


def _within_boot_spread(boots: Sequence[Sequence[float]]) -> float | None:
    spreads = [s for s in map(_spread, boots) if s is not None]
    return median(spreads) if spreads else None


def _samples(current: list[list[float]], baseline: list[list[float]]) -> tuple[bool, list[float], list[float]]:
    """Whether boots are the samples, and each side's samples: inside one boot the repeats, across
    boots each boot's median."""
    by_boot = len(current) > 1 or len(baseline) > 1
    if by_boot:
        return True, [median(b) for b in current], [median(b) for b in baseline]
    return False, [v for b in current for v in b], [v for b in baseline for v in b]


def _judge_metric(
    workload: str,
    rule: MetricRule,
    current: list[list[float]],
    baseline: list[list[float]] | None,
    alpha: float,
    require_baseline: bool,
    no_baseline_note: str,
    inconclusive: InconclusivePolicy,
) -> MetricVerdict:
    metric, unit = rule.metric, unit_of(rule.metric)
    higher = rule.direction == "higher"
    by_boot, vals, base_vals = _samples(current, baseline or [])
    replicate: Replicate = "boot" if by_boot else "repeat"
    base_spread = _spread(base_vals) if by_boot else None
    common: dict[str, Any] = {
        "workload": workload,
        "metric": metric,
        "direction": rule.direction,
        "n_measured": len(vals),
        "n_baseline": len(base_vals),
        "replicate": replicate,
        "within_boot_spread": _within_boot_spread(current),
        "between_boot_spread": _spread(vals) if by_boot else None,
        "baseline_between_boot_spread": base_spread,
    }
    if not vals:
        return MetricVerdict(
            **common,
            status="not-measured",
            ok=True,
            measured=None,
            baseline=median(base_vals) if base_vals else None,
            limit=None,
            change_pct=None,
            p_value=None,
            noise_test="none",
            message=f"{workload}: {metric} was not measured in this run (no repeat reported it); not gated",
        )

    measured = median(vals)
    base = median(base_vals) if base_vals else None
    change_pct = (measured - base) / abs(base) * 100 if base else None

    p_value: float | None = None
    noise_test: NoiseTest = "none"
    test_note = ""
    if rule.tolerance is not None and base is not None:
        if reaches(min_p_value(len(vals), len(base_vals)), alpha):
            # Test in "goodness" space so one one-sided test serves both directions.
            good_now, good_base = (vals, base_vals) if higher else ([-v for v in vals], [-v for v in base_vals])
            p_value = mann_whitney_less(good_now, good_base)
            noise_test = "mann-whitney"
            test_note = f"Mann-Whitney p={p_value:.2g}"
            if by_boot:
                test_note += f" on {len(vals)} vs {len(base_vals)} boots"
        else:
            noise_test = "tolerance-only"
            test_note = (
                f"{len(vals)} vs {len(base_vals)} {replicate}s: too few for a noise test at alpha {alpha:g}, "
                "tolerance alone"
            )
    decision = decide(
        rule,
        centre=measured,
        reference=base,
        absolute=measured,
        p_value=p_value,
        alpha=alpha,
        inconclusive=inconclusive,
    )
    status: Status = decision.status
    ok = decision.ok
    if status == "pass" and rule.tolerance is not None and base is None:
        status, ok = "no-baseline", not require_baseline
    undecidable = (
        status != "fail" and rule.tolerance is not None and base_spread is not None and base_spread > rule.tolerance
    )
    if undecidable:
        status, ok = "inconclusive", inconclusive == "warn"

    details = []
    if base is not None:
        details.append(f"baseline {fmt_value(base, '')}")
        if change_pct is not None:
            details.append(f"{change_pct:+.1f}%")
    if rule.tolerance is not None and base is not None:
        details.append(f"tolerance {rule.tolerance * 100:g}%")
    if test_note:
        details.append(test_note)
    if by_boot:
        details.append(_spread_text(common))
    detail = f" ({', '.join(details)})" if details else ""
    head = f"{workload}: {metric} {fmt_value(measured, unit)}"

    if status == "no-baseline":
        why = (
            "no baseline for this hardware/software fingerprint"
            if baseline is None
            else f"the baseline has no {metric} (it was recorded without it)"
        )
        note = f"; {no_baseline_note}" if no_baseline_note and baseline is None else ""
        consequence = "failing because require_baseline is set" if require_baseline else "not gated against a baseline"
        message = f"{head}: {why}{note}; {consequence}; {RECORD_HINT}"
    elif undecidable:
        consequence = (
            'a warning only ([gate] inconclusive = "warn")' if ok else 'failing unless [gate] inconclusive = "warn"'
        )
        message = (
            f"{head}{detail}: INCONCLUSIVE, the baseline's boots spread {base_spread:.1%} (max - min of their "
            f"medians over the median), wider than the tolerance {rule.tolerance:.0%}: which boot ran moves this "
            "metric more than the change the tolerance must catch, so no verdict here holds on the next boot; record "
            "and gate with more boots ([gate] boots, --perf-boots), widen the tolerance, or gate a workload the GPU "
            f"bounds rather than one host core; {consequence}"
        )
    else:
        message = decision_message(
            decision,
            head,
            detail,
            value_text=lambda b: fmt_value(b.value, unit),
            subject=lambda b: "",
            samples=f"{len(vals)} vs {len(base_vals)} {replicate}s",
            advice=(
                "record and gate with more boots ([gate] boots)"
                if by_boot
                else "rerun on a quieter host, with more repeats ([gate] max_repeats)"
            ),
            alpha=alpha,
        )

    return MetricVerdict(
        **common,
        status=status,
        ok=ok,
        measured=measured,
        baseline=base,
        limit=decision.shown.value if decision.shown else None,
        change_pct=change_pct,
        p_value=p_value,
        noise_test=noise_test,
        message=message,
    )


def _spread_text(common: Mapping[str, Any]) -> str:
    """The spreads of a by-boot verdict, for its message."""
    parts = [
        f"{label} {value:.1%}"
        for label, value in (
            ("within-boot spread", common["within_boot_spread"]),
            ("between-boot", common["between_boot_spread"]),
            ("baseline between-boot", common["baseline_between_boot_spread"]),
        )
        if value is not None
    ]
    return ", ".join(parts) if parts else "one value per side: no spread"


def improvements(
    rules: Sequence[MetricRule],
    current: Sequence[Mapping[str, float]],
    baseline: Sequence[Mapping[str, float]],
    *,
    alpha: float = 0.05,
    current_boots: Sequence[int] | None = None,
    baseline_boots: Sequence[int] | None = None,
) -> list[str]:
    """The gated metrics this run beats its baseline on by more than the rule's tolerance, told
    from noise by the gate's own test run the other way (where the repeats allow one), e.g.
    ``output_throughput +15.7% better than the baseline (4,851.1 -> 5,612.0 tok/s; beyond its 3%
    tolerance, Mann-Whitney p=0.05)``. A baseline left below such a run hides the next regression
    under the old number: it should be recorded again."""
    out = []
    for rule in rules:
        if rule.tolerance is None:
            continue
        now_groups = _by_boot(current, current_boots, rule.metric)
        base_groups = _by_boot(baseline, baseline_boots, rule.metric)
        if not now_groups or not base_groups:
            continue
        _, now, base = _samples(now_groups, base_groups)
        measured, before = median(now), median(base)
        sign = 1 if rule.direction == "higher" else -1
        gain = sign * (measured - before) / abs(before) if before else 0.0
        if gain <= rule.tolerance:
            continue
        if reaches(min_p_value(len(now), len(base)), alpha):
            p_value = mann_whitney_less([sign * v for v in base], [sign * v for v in now])
            if not reaches(p_value, alpha):
                continue
            test = f"Mann-Whitney p={p_value:.2g}"
        else:
            test = "too few repeats for a noise test"
        unit = unit_of(rule.metric)
        out.append(
            f"{rule.metric} {gain:+.1%} better than the baseline ({fmt_value(before, '')} -> "
            f"{fmt_value(measured, unit)}; beyond its {rule.tolerance:.0%} tolerance, {test})"
        )
    return out
