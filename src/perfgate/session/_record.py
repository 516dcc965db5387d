"""Record measured repeats as a workload's (or a sweep's) baseline, with their telemetry and provenance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate.baseline import Baseline, BaselineStore, Fingerprint, provenance
from perfgate.profile import Profile
from perfgate.session._result import RepeatResult, window_json
from perfgate.verdict import MetricRule


def record_baseline(
    store: BaselineStore,
    profile: Profile,
    workload: str,
    fingerprint: Fingerprint,
    repeats: Sequence[RepeatResult],
    *,
    server_provenance: Mapping[str, Any],
    rules: Sequence[MetricRule],
    reason: str | None,
    evidence: Mapping[str, Any] | None = None,
    accept_option: str = "--perf-accept-regression",
) -> Path:
    """Save ``repeats`` as the baseline of ``workload`` under ``fingerprint``; return its path.

    The provenance holds the server's (launch command, versions, autotune, /server_info), who
    and where, ``reason`` when given, and ``evidence`` (e.g. an A/B's) under its own keys. The
    store refuses numbers worse than the stored ones unless ``reason`` is given (BaselineError
    naming ``accept_option``, the option that gives it).
    """
    telemetry = {
        f"repeat_{i}": window_json(r.telemetry) for i, r in enumerate(repeats, start=1) if r.telemetry is not None
    }
    return record_values(
        store,
        profile,
        workload,
        fingerprint,
        [r.flat_metrics() for r in repeats],
        telemetry=telemetry,
        server_provenance=server_provenance,
        rules=rules,
        reason=reason,
        evidence=evidence,
        accept_option=accept_option,
    )


def record_values(
    store: BaselineStore,
    profile: Profile,
    name: str,
    fingerprint: Fingerprint,
    repeats: Sequence[Mapping[str, float]],
    *,
    telemetry: Mapping[str, Any] | None = None,
    server_provenance: Mapping[str, Any],
    rules: Sequence[MetricRule],
    reason: str | None,
    evidence: Mapping[str, Any] | None = None,
    accept_option: str = "--perf-accept-regression",
) -> Path:
    """:func:`record_baseline` for numbers that are not a workload's repeats (a sweep's capacity per repeat)."""
    versions = server_provenance.get("versions") or {}
    prov = provenance(versions, reason=reason, repo_dir=profile.path.parent)
    prov["server"] = dict(server_provenance)
    prov.update(evidence or {})
    baseline = Baseline(
        profile=profile.name,
        workload=name,
        fingerprint=fingerprint,
        repeats=[dict(r) for r in repeats],
        telemetry=dict(telemetry or {}),
        provenance=prov,
    )
    return store.save(
        baseline, rules=rules, accept_regression=reason, alpha=profile.gate.alpha, accept_option=accept_option
    )
