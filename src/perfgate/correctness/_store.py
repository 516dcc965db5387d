"""The probe's reference on disk: a baseline file of its own beside the workloads'.

It is a :class:`perfgate.baseline.Baseline` named :data:`NAME` (the probe's metrics as its one
repeat, its answers in ``record``), so it shares everything a baseline is held to: the
fingerprint (hardware, engine, model, flags, and the probe's prompts in place of a workload),
the file layout, atomic writes under the store's lock, symbolic links refused outside the root,
FIFOs and malformed files reported with one message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfgate.baseline import FIX_HINT, Baseline, BaselineStore, Fingerprint, provenance
from perfgate.correctness._probe import ProbeOutcome
from perfgate.correctness._record import ProbeRecord
from perfgate.correctness._verdict import NAME
from perfgate.errors import BaselineError
from perfgate.verdict import ToleranceCheck


def _record_of(b: Baseline) -> ProbeRecord:
    try:
        return ProbeRecord.from_dict(b.record)
    except ValueError as e:
        raise BaselineError(f"correctness baseline {b.source}: not a valid probe record ({e}); {FIX_HINT}") from None


def check_records(store: BaselineStore, profile: str) -> None:
    """Read every stored probe record of ``profile`` before anything boots; BaselineError for the
    first unusable one (a gate must not boot and probe only to fail on a file it could read now)."""
    found, _ = store.list_all()
    for b in found:
        if b.profile == profile and b.workload == NAME:
            _record_of(b)


def load_record(store: BaselineStore, profile: str, fingerprint: Fingerprint) -> tuple[ProbeRecord | None, str]:
    """The probe record stored for ``fingerprint`` and its path, or (None, "")."""
    b = store.load(profile, NAME, fingerprint)
    if b is None:
        return None, ""
    return _record_of(b), str(b.source)


def save_record(
    store: BaselineStore,
    profile: str,
    fingerprint: Fingerprint,
    outcome: ProbeOutcome,
    *,
    server_provenance: Mapping[str, Any],
    reason: str | None,
    repo_dir: Path,
) -> Path:
    """Store ``outcome``'s answers as the reference for ``fingerprint``; returns the file's path."""
    versions = server_provenance.get("versions") or {}
    prov = provenance(versions, reason=reason, repo_dir=repo_dir)
    prov["server"] = dict(server_provenance)
    prov["probe_reference"] = outcome.reference
    try:
        record = outcome.record.to_dict()
    except ValueError as e:
        raise BaselineError(f"correctness baseline: not recorded, {e}") from None
    metrics = {k: v for k, v in outcome.metrics.items() if math.isfinite(v)}
    baseline = Baseline(
        profile=profile,
        workload=NAME,
        fingerprint=fingerprint,
        repeats=[metrics],
        provenance=prov,
        record=record,
    )
    # No rules: a new reference is a different model's answers, which the caller only records
    # when they agree with the stored ones or a reason is given.
    return store.save(baseline, check=ToleranceCheck(()), accept_regression=reason)
