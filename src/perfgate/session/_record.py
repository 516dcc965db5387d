"""Record measured repeats as a workload's (or a sweep's) baseline, with their telemetry and provenance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate.baseline import Baseline, BaselineStore, Fingerprint, provenance
from perfgate.profile import Profile
from perfgate.session._result import RepeatResult, window_json
from perfgate.verdict import MetricRule, ToleranceCheck


def record_baseline(
    store: BaselineStore,
    profile: Profile,
    name: str,
    fingerprint: Fingerprint,
    repeats: Sequence[RepeatResult] | Sequence[Mapping[str, float]],
    *,
    server_provenance: Mapping[str, Any],
    rules: Sequence[MetricRule],
    reason: str | None,
    evidence: Mapping[str, Any] | None = None,
    accept_option: str = "--perf-accept-regression",
    boots: Sequence[int] | None = None,
) -> Path:
    """Save ``repeats`` as the baseline of workload (or sweep) ``name`` under ``fingerprint``; return its path.

    ``repeats``: measured repeats (their metrics, and their telemetry windows alongside), or
    numbers that are not a workload's repeats (a sweep's capacity per repeat), whose boots
    ``boots`` gives (a RepeatResult carries its own; None: one boot). The provenance
    holds the server's (launch command, versions, autotune, /server_info), who and where,
    ``reason`` when given, and ``evidence`` (e.g. an A/B's) under its own keys. The store
    refuses numbers worse than the stored ones unless ``reason`` is given (BaselineError
    naming ``accept_option``, the option that gives it).
    """
    values = [r.flat_metrics() if isinstance(r, RepeatResult) else dict(r) for r in repeats]
    if boots is None:
        boots = [r.boot if isinstance(r, RepeatResult) else 1 for r in repeats]
    if len(boots) != len(repeats):
        raise ValueError(f"{name}: {len(boots)} boot labels for {len(repeats)} repeats")
    telemetry = {
        f"repeat_{i}": window_json(r.telemetry)
        for i, r in enumerate(repeats, start=1)
        if isinstance(r, RepeatResult) and r.telemetry is not None
    }
    versions = server_provenance.get("versions") or {}
    prov = provenance(versions, reason=reason, repo_dir=profile.path.parent)
    prov["server"] = dict(server_provenance)
    prov.update(evidence or {})
    baseline = Baseline(
        profile=profile.name,
        workload=name,
        fingerprint=fingerprint,
        repeats=values,
        telemetry=telemetry,
        provenance=prov,
        # One boot is stored as before boots existed: no "boots" key.
        boots=list(boots) if len(set(boots)) > 1 else None,
    )
    return store.save(
        baseline,
        check=ToleranceCheck(rules, profile.gate.alpha),
        accept_regression=reason,
        accept_option=accept_option,
    )
