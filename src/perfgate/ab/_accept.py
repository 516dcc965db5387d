"""--accept-candidate: B's numbers become the baselines, with the A/B as their evidence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from perfgate.ab._summary import AbSummary, AbWorkload
from perfgate.baseline import BaselineStore
from perfgate.errors import BaselineError
from perfgate.profile import Profile
from perfgate.session import record_baseline


def evidence(summary: AbSummary, workload: AbWorkload) -> dict[str, Any]:
    """The A/B behind a recorded baseline, as stored in its provenance under "ab"."""
    verdict = workload.verdict
    return {
        "profile": summary.profile_path,
        "verdict": workload.status,
        "rounds": len(workload.rounds()),
        "order": " ".join("AB" if n % 2 else "BA" for n, _, _ in workload.rounds()),
        "alpha": summary.alpha,
        "fingerprint": workload.fingerprint_note,
        "metrics": {
            m.metric: {
                "status": m.status,
                "median_ratio": m.median_ratio,
                "ci": [m.ci_low, m.ci_high],
                "ci_coverage": m.ci_coverage,
                "p_value": m.p_value,
                "tolerance": m.tolerance,
                "ratios": list(m.ratios),
                "a": list(m.a_values),
                "b": list(m.b_values),
            }
            for m in (verdict.metrics if verdict else ())
        },
        "variants": {
            v.label: {
                "python": v.python,
                "versions": v.versions(),
                "server_args": list(v.server_args),
                "extra_env": dict(v.extra_env),
                "extra_args": list(v.extra_args),
            }
            for v in summary.variants
        },
    }


def _why_not(summary: AbSummary, workload: AbWorkload, reason: str | None) -> str:
    """Why B's runs of ``workload`` may not be recorded ("" when they may)."""
    if summary.stopped:
        return "the A/B stopped before its rounds were done"
    if workload.problems:
        return workload.problems[0]
    if workload.status != "pass" and not reason:
        failed = ", ".join(m.metric for m in workload.verdict.failures) if workload.verdict else ""
        return f'B did not pass the A/B ({workload.status.upper()}: {failed}); --reason "why" records it anyway'
    return ""


def accept_candidate(summary: AbSummary, store: BaselineStore, b_profile: Profile, reason: str | None) -> AbSummary:
    """Record B's runs of every workload as its baseline (under B's fingerprint), where B passed
    or ``reason`` says why anyway; each workload's baseline fields say what happened."""
    b = summary.variants[1]
    out = []
    for w in summary.workloads:
        why = _why_not(summary, w, reason)
        b_runs = [run for _, _, run in w.rounds() if run is not None]
        fingerprint = b_runs[0].result.fingerprint if b_runs else None
        if why or b.server is None or fingerprint is None:
            if not why:
                came_up = b.server is not None and b_runs
                why = "B's runs carry no fingerprint to file them under" if came_up else "B never came up"
            out.append(replace(w, baseline_note=f"not recorded: {why}"))
            continue
        try:
            path = record_baseline(
                store,
                b_profile,
                w.name,
                fingerprint,
                [run.result.repeats[0] for run in b_runs],
                server_provenance=b.server.provenance,
                rules=w.rules,
                reason=reason,
                evidence={"ab": evidence(summary, w)},
                accept_option="--reason",
            )
        except BaselineError as e:
            out.append(replace(w, baseline_note=f"not recorded: {e}"))
            continue
        out.append(
            replace(
                w, recorded=True, baseline_path=str(path), baseline_note="; ".join(["recorded", *store.take_notes()])
            )
        )
    return replace(summary, workloads=tuple(out))
