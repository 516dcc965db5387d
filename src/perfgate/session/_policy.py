"""A session's gate policy: the baseline a run is judged against, the judgement under [gate],
the extra repeats that confirm or decide it, whether the repeats are valid, and recording."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from perfgate.baseline import Baseline, BaselineStore, Fingerprint, others_note
from perfgate.catalogue import metric
from perfgate.load import degenerate_output
from perfgate.profile import Profile, Workload
from perfgate.server import stack_changes
from perfgate.session._options import SessionOptions
from perfgate.session._record import record_baseline
from perfgate.session._result import RepeatResult
from perfgate.session._stack import ServerStack
from perfgate.verdict import MetricRule, MetricVerdict, WorkloadVerdict, improvements, judge


class GatePolicy:
    """How a session judges and records: ``rules`` (workload name -> its rules) and the gated
    server metrics come from the validated profile; ``stack`` gives the server's provenance
    that recorded baselines keep."""

    def __init__(
        self,
        profile: Profile,
        options: SessionOptions,
        store: BaselineStore,
        rules: Mapping[str, Sequence[MetricRule]],
        gated_server_metrics: Sequence[str],
        stack: ServerStack,
    ) -> None:
        self.profile = profile
        self.options = options
        self.store = store
        self._rules = rules
        self._gated_server_metrics = list(gated_server_metrics)
        self._stack = stack

    def repeats_for(self, workload: Workload) -> int:
        """Repeats per boot."""
        return self.options.repeats or self.profile.repeats_for(workload)

    @property
    def boots(self) -> int:
        """Boots each workload is measured on (perfgate ab's rounds are its boots: one here)."""
        return 1 if self.options.measure_only else self.options.boots or self.profile.gate.boots

    def baseline_for(self, name: str, fingerprint: Fingerprint) -> tuple[Baseline | None, str]:
        """The stored baseline of ``name`` for ``fingerprint``, or None and a note on the others that exist."""
        baseline = self.store.load(self.profile.name, name, fingerprint)
        if baseline is not None:
            return baseline, ""
        return None, others_note(fingerprint, self.store.others(self.profile.name, name, fingerprint))

    def changes_since(self, baseline: Baseline | None) -> tuple[str, ...]:
        """What changed in the server's stack since ``baseline`` was recorded, most suspect first."""
        if baseline is None:
            return ()
        return tuple(stack_changes(baseline.provenance.get("server"), self._stack.server().provenance()))

    def improved(
        self,
        rules: Sequence[MetricRule],
        current: Sequence[Mapping[str, float]],
        current_boots: Sequence[int],
        baseline: Baseline | None,
        verdict: WorkloadVerdict[MetricVerdict],
    ) -> tuple[str, ...]:
        """The ratchet: the gated metrics a passing run beats ``baseline`` on beyond their tolerance
        (see :func:`perfgate.verdict.improvements`); () when recording, failing or without a baseline."""
        if baseline is None or not verdict.passed or self.options.update_baselines:
            return ()
        return tuple(
            improvements(
                rules,
                current,
                baseline.repeats,
                alpha=self.profile.gate.alpha,
                current_boots=current_boots,
                baseline_boots=baseline.boots,
            )
        )

    def judge(
        self,
        name: str,
        rules: Sequence[MetricRule],
        current: list[dict[str, float]],
        baseline: Baseline | None,
        note: str,
        current_boots: Sequence[int] | None = None,
    ) -> WorkloadVerdict[MetricVerdict]:
        """``current`` repeats (on ``current_boots``; None: one boot) against ``baseline`` under the
        profile's [gate] policy."""
        gate = self.profile.gate
        return judge(
            name,
            rules,
            current,
            baseline.repeats if baseline else None,
            alpha=gate.alpha,
            require_baseline=gate.require_baseline and not self.options.update_baselines,
            no_baseline_note=note,
            inconclusive=gate.inconclusive,
            current_boots=current_boots,
            baseline_boots=baseline.boots if baseline else None,
        )

    def decide(
        self,
        verdict_now: Callable[[], WorkloadVerdict[MetricVerdict]],
        more: Callable[[], None],
        n: int,
        max_repeats: int,
    ) -> WorkloadVerdict[MetricVerdict]:
        """The verdict after the [gate] policy's extra repeats (``more()`` runs one): a failure is
        confirmed on twice the evidence with ``confirm_on_fail``, and a verdict past its limit but
        not yet told from noise gets repeats up to ``max_repeats``. None when recording, nor with
        more than one boot: repeats inside a boot cannot shrink the between-boot noise that decides."""
        verdict = verdict_now()
        if self.options.update_baselines or self.boots > 1:
            return verdict
        gate = self.profile.gate
        if gate.confirm_on_fail and verdict.failures and not verdict.inconclusive:
            # The same number of repeats again, judged together with the first ones.
            for _ in range(n):
                more()
            verdict = verdict_now()
        done = n * (2 if gate.confirm_on_fail and verdict.failures else 1)
        while verdict.inconclusive and done < max_repeats:
            more()
            done += 1
            verdict = verdict_now()
        return verdict

    def invalid_reasons(
        self, workload: Workload, repeats: list[RepeatResult], *, count_failures: bool = True
    ) -> list[str]:
        """Why these repeats of ``workload`` do not describe the server under this load alone;
        ``count_failures`` = False leaves failed requests out (a sweep counts them beyond the SLO)."""
        reasons = []
        for i, r in enumerate(repeats, start=1):
            total = len(r.load.records)
            failed = r.metrics.failed
            if count_failures and r.metrics.completed == 0:
                # Whatever max_error_rate allows: zeros measured nothing, and a baseline of them
                # would let every later run pass.
                first = next((rec.error for rec in r.load.records if rec.error), "")
                reasons.append(
                    f"repeat {i}: no request completed ({failed} of {total} failed"
                    + (f"; first: {first}" if first else "")
                    + "): nothing was measured"
                )
            elif count_failures and total and failed / total > workload.max_error_rate:
                kinds = ", ".join(f"{n} {k}" for k, n in sorted(r.metrics.errors.items()))
                first = next(rec.error for rec in r.load.records if rec.error)
                reasons.append(
                    f"repeat {i}: {failed} of {total} requests failed ({kinds}); first: {first}"
                    + (f" (allowed error rate {workload.max_error_rate:.1%})" if workload.max_error_rate else "")
                )
            if r.metrics.completed:
                reasons += [f"repeat {i}: {why}" for why in self._unmeasured_client_metrics(workload, r)]
            # Numbers measured on answers no model gave describe no server worth gating (issue 34).
            if degenerate := degenerate_output(workload.name, r.load.records):
                reasons.append(f"repeat {i}: {degenerate}")
            if r.answers is not None and r.answers.problem:
                reasons.append(f"repeat {i}: {r.answers.problem}")
            reasons += [f"repeat {i}: {why}" for why in r.warmup_and_stall_reasons()]
            client = r.load.client
            if not client.valid:
                reasons.append(
                    f"repeat {i}: the load client, not the server, set the pace ({client.reason}): {client.advice}"
                )
            gap = r.output_token_gap()
            bound = self.profile.gate.server_max_disagreement
            if gap is not None and abs(gap) > bound:
                reasons.append(
                    f"repeat {i}: the server's /metrics counted {gap:+.1%} output tokens against the client's "
                    f"(more than [gate] server_max_disagreement {bound:.0%}): another load shared the server during "
                    "the run, or the client or the server miscounts tokens; the numbers do not describe this "
                    "workload alone"
                )
            values = r.flat_metrics()
            # A NaN (e.g. a gauge the server reports as NaN) is not a measurement either.
            missing = [
                m
                for m in self._gated_server_metrics
                if m in self._rule_names(workload) and not math.isfinite(values.get(m, math.nan))
            ]
            if missing:
                why = r.server_note or "the server's /metrics does not report it"
                reasons.append(f"repeat {i}: gated {', '.join(missing)} not measured ({why})")
            reasons += [f"repeat {i}: {why}" for why in self._unmeasured_telemetry(workload, r, values)]
            if r.host_bound and workload.host_bound == "invalid":
                reasons.append(f'repeat {i}: {r.host_bound} (host_bound = "invalid")')
        return reasons

    def _unmeasured_telemetry(self, workload: Workload, repeat: RepeatResult, values: Mapping[str, float]) -> list[str]:
        """The gated power metrics this repeat has no number for while telemetry ran: its readings
        could not be true, or its source stopped answering. (Without any telemetry source, power is
        reported as not measured, with the reason, and ``require_power`` decides.)"""
        window = repeat.telemetry
        if window is None:
            return []
        by_why: dict[str, list[str]] = {}
        for m in sorted(self._rule_names(workload)):
            if metric(m).source == "telemetry" and not math.isfinite(values.get(m, math.nan)):
                by_why.setdefault(window.unmeasured(m), []).append(m)
        return [f"gated {', '.join(ms)} not measured ({why})" for why, ms in by_why.items()]

    def _unmeasured_client_metrics(self, workload: Workload, repeat: RepeatResult) -> list[str]:
        """The gated client metrics this repeat has no number for: the verdict would call them
        "not measured" and pass them, so the run that left them out is not valid."""
        values = repeat.metrics.values
        by_why: dict[str, list[str]] = {}
        for m in sorted(self._rule_names(workload)):
            if metric(m).source == "client" and not math.isfinite(values.get(m, math.nan)):
                why = repeat.metrics.unmeasured.get(m, "the client reported no value")
                by_why.setdefault(why, []).append(m)
        return [f"gated {', '.join(ms)} not measured ({why})" for why, ms in by_why.items()]

    def _rule_names(self, workload: Workload) -> set[str]:
        return {rule.metric for rule in self._rules.get(workload.name, ())}

    def save_baseline(
        self,
        name: str,
        fingerprint: Fingerprint,
        repeats: list[dict[str, float]],
        rules: Sequence[MetricRule],
        boots: Sequence[int],
    ) -> tuple[Path, str]:
        """Store ``repeats`` (numbers that are not a workload's repeats: a sweep's capacity per
        repeat), measured on ``boots``, as the baseline of ``name``; returns its path and the store's
        note. BaselineError when the store refuses (e.g. worse without --perf-accept-regression)."""
        path = record_baseline(
            self.store,
            self.profile,
            name,
            fingerprint,
            repeats,
            server_provenance=self._stack.server().provenance(),
            rules=rules,
            reason=self.options.accept_regression,
            boots=boots,
        )
        return path, "; ".join(["recorded", *self.store.take_notes()])
