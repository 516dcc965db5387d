"""The probe as one gate step: read the reference, probe, judge, record when asked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfgate.baseline import BaselineStore, Fingerprint
from perfgate.correctness._adapters import open_client
from perfgate.correctness._probe import ProbeOutcome, probe
from perfgate.correctness._record import ProbeRecord
from perfgate.correctness._spec import ProbeSpec
from perfgate.correctness._store import load_record, save_record
from perfgate.correctness._verdict import CorrectnessResult, judge_probe
from perfgate.errors import BaselineError, CorrectnessError

# What a probe that disagrees with its reference may still be recorded with (a reason); a
# degenerate answer is never recorded.
DEGENERATE = frozenset(
    {"correctness_nonfinite", "correctness_repeated", "correctness_zero_logprobs", "correctness_batch_disagreements"}
)


def run_probe(
    spec: ProbeSpec,
    base_url: str,
    *,
    model: str,
    headers: Mapping[str, str] | None = None,
    reference: ProbeRecord | None = None,
    reference_label: str = "",
    timeout_s: float = 120.0,
) -> ProbeOutcome:
    """Probe the server at ``base_url`` (blocking); CorrectnessError when it cannot answer the probe."""

    async def go() -> ProbeOutcome:
        client = open_client(spec.api, base_url, model=model, headers=headers, timeout_s=timeout_s)
        try:
            return await probe(client, spec, reference, reference_label)
        finally:
            await client.aclose()

    return asyncio.run(go())


def gate(
    spec: ProbeSpec,
    *,
    base_url: str,
    model: str,
    headers: Mapping[str, str],
    store: BaselineStore,
    profile: str,
    fingerprint: Callable[[], Fingerprint],
    update: bool,
    accept_reason: str | None,
    server_provenance: Callable[[], Mapping[str, Any]],
    repo_dir: Path,
) -> CorrectnessResult:
    """The probe of one gate session against its stored reference, recording it when ``update``.

    Never raises for what the probe finds: a server answer it cannot read or an unusable stored
    record is the result's ``error`` (the correctness test fails with it; the workloads still run).
    """
    result = CorrectnessResult(spec)
    try:
        fp = fingerprint()
        reference, path = load_record(store, profile, fp)
        label = f"the recorded reference {path}" if reference is not None else ""
        outcome = run_probe(spec, base_url, model=model, headers=headers, reference=reference, reference_label=label)
    except (BaselineError, CorrectnessError) as e:
        result.error = str(e)
        return result
    result.outcome, result.baseline_path = outcome, path
    result.verdict = judge_probe(outcome)
    result.note = f"held to {outcome.reference}"
    if not update:
        if reference is None:
            result.note += "; no recorded reference for this fingerprint: record one with --perf-update-baselines"
        return result
    failed = {m.metric for m in result.verdict.failures}
    if failed & DEGENERATE:
        result.note = "not recorded: degenerate answers (" + ", ".join(sorted(failed & DEGENERATE)) + ")"
        return result
    if failed and not accept_reason:
        result.note = (
            "not recorded: the answers disagree with the recorded reference; accept a different model on purpose "
            'with --perf-accept-regression="why"'
        )
        return result
    try:
        saved = save_record(
            store,
            profile,
            fp,
            outcome,
            server_provenance=server_provenance(),
            reason=accept_reason,
            repo_dir=repo_dir,
        )
    except BaselineError as e:
        result.error = f"not recorded: {e}"
        return result
    result.recorded, result.baseline_path = True, str(saved)
    result.note = "recorded" + (f" (accepted: {accept_reason})" if failed else "")
    return result
