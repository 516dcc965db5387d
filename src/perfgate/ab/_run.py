"""Run an A/B: boot A and B in turn (ABBA), one run of every selected workload per boot, judge the pairs.

Each run is a measure-only :class:`~perfgate.session.Session` (one repeat, telemetry as in a
gate run, no baseline read), closed (the server torn down) before the next boots, so the two
variants never share the host. Rounds past ``rounds`` are added, one ABBA block (two rounds)
at a time and for the undecided workloads only, while a verdict is INCONCLUSIVE and
``max_rounds`` allows, as the gate adds repeats.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.ab._accept import accept_candidate
from perfgate.ab._candidate import Candidate, Label, Variant, variants
from perfgate.ab._options import CLI_FLAGS, DEFAULT_ROUNDS, ROUNDS, AbFlags
from perfgate.ab._order import abba_order
from perfgate.ab._select import select_workloads
from perfgate.ab._summary import AbRun, AbSummary, AbWorkload, VariantSummary
from perfgate.baseline import BaselineStore, Fingerprint, normalize_args
from perfgate.correctness import CorrectnessResult, ProbeSpec, judge_probe, off_reason, probe_spec, run_probe
from perfgate.errors import CorrectnessError, PerfgateError
from perfgate.load import Progress, check_dataset
from perfgate.profile import Profile, Workload, checked, seconds, validate
from perfgate.server import server_config
from perfgate.session import LOG_DIR, RunSummary, Session, SessionOptions
from perfgate.verdict import MetricRule, PairedMetricVerdict, WorkloadVerdict, judge_paired, rules_for


@dataclass(frozen=True)
class AbOptions:
    """How an A/B runs. ``max_rounds`` None: twice ``rounds`` (as [gate] max_repeats defaults);
    ``keyword``: pytest's ``-k`` over workload names; ``reason``: why B's numbers may be
    recorded although B did not pass (``accept_candidate`` only); ``flags``: what the options
    are called where they were given (for the messages)."""

    rounds: int = DEFAULT_ROUNDS
    max_rounds: int | None = None
    keyword: str = ""
    log_dir: Path = LOG_DIR
    baselines_dir: Path = Path("baselines")
    accept_candidate: bool = False
    reason: str | None = None
    lock_wait_s: float = 0.0
    flags: AbFlags = CLI_FLAGS
    # An explain slice for each variant in round 1 (an extra repeat; no paired verdict sees it).
    explain: bool = False

    @property
    def most_rounds(self) -> int:
        return self.max_rounds if self.max_rounds is not None else 2 * self.rounds

    def check(self) -> None:
        """PerfgateError naming the option for impossible combinations (before anything boots)."""
        f = self.flags
        try:
            # The bounds the options' types have, for options set in code.
            checked(ROUNDS, self.rounds, f.rounds)
            if self.max_rounds is not None:
                checked(ROUNDS, self.max_rounds, f.max_rounds)
            checked(seconds, self.lock_wait_s, f.lock_wait)
        except ValueError as e:
            raise PerfgateError(str(e)) from None
        if self.max_rounds is not None and self.max_rounds < self.rounds:
            raise PerfgateError(f"{f.max_rounds} {self.max_rounds}: expected at least {f.rounds} ({self.rounds})")
        if self.reason is not None and not self.accept_candidate:
            raise PerfgateError(
                f"{f.reason} only applies with {f.accept_candidate} (it is stored with the accepted baselines)"
            )
        if self.reason is not None and not self.reason.strip():
            raise PerfgateError(f"{f.reason} is empty; say why B's numbers are accepted")


class _Rounds:
    """The runs so far, per workload, and each variant's boots."""

    def __init__(
        self,
        pair: tuple[Variant, Variant],
        options: AbOptions,
        on_event: Callable[[str], None],
        on_progress: Callable[[Progress], None] | None,
    ) -> None:
        self.variants = {v.label: v for v in pair}
        self.options = options
        self.on_event = on_event
        self.on_progress = on_progress
        self.runs: dict[str, list[AbRun]] = {}
        self.boots: dict[Label, list[RunSummary]] = {"A": [], "B": []}
        self.order: list[tuple[int, Label]] = []
        self.stopped = ""
        # The correctness probe of each variant's first boot: A's answers are B's reference.
        a_profile = self.variants["A"].profile
        self.probe_spec: ProbeSpec | None = probe_spec(a_profile)
        self.probe_off = off_reason(a_profile)
        self.probes: dict[Label, CorrectnessResult] = {}

    @property
    def done(self) -> int:
        return max((r for r, _ in self.order), default=0)

    def run(self, rounds: int, workloads: Sequence[Workload], planned: int) -> None:
        for round_, label in abba_order(self.done + 1, rounds):
            if self.stopped:
                return
            self._boot(round_, label, workloads, planned)

    def _boot(self, round_: int, label: Label, workloads: Sequence[Workload], planned: int) -> None:
        variant = self.variants[label]
        self.order.append((round_, label))
        self.on_event(f"round {round_}/{planned} {label} ({variant.role}): booting")
        session = Session(
            variant.profile,
            SessionOptions(
                baselines_dir=self.options.baselines_dir,
                log_dir=self.options.log_dir,
                repeats=1,
                lock_wait_s=self.options.lock_wait_s,
                measure_only=True,
                explain=self.options.explain and round_ == 1,
            ),
        )
        notes: list[str] = []
        try:
            if label not in self.probes and self.probe_spec is not None:
                self._probe(session, label, round_, planned)
            for w in workloads:
                try:
                    result = session.measure(w, self.on_progress)
                except PerfgateError as e:
                    # A variant that cannot boot or run will not do better in the next round.
                    self.stopped = f"round {round_}, {label} ({variant.role}), workload {w.name}: {e}"
                    self.runs.setdefault(w.name, []).append(
                        AbRun(round_, label, session.results[w.name], w.max_error_rate)
                    )
                    self.on_event(f"round {round_}/{planned} {label}: {w.name}: stopped: {str(e).splitlines()[0]}")
                    break
                run = AbRun(round_, label, result, w.max_error_rate)
                self.runs.setdefault(w.name, []).append(run)
                self.on_event(f"round {round_}/{planned} {label}: {w.name}: {_headline(run)}")
        finally:
            notes = session.stack.close()
        self.boots[label].append(session.summary(tuple(notes)))

    def _probe(self, session: Session, label: Label, round_: int, planned: int) -> None:
        """Probe this boot's server before its workloads (a boot that fails is left to them to report)."""
        assert self.probe_spec is not None
        try:
            server = session.server()
        except PerfgateError:
            return
        a = self.probes.get("A")
        reference = a.outcome.record if label == "B" and a is not None and a.outcome is not None else None
        result = CorrectnessResult(self.probe_spec)
        try:
            outcome = run_probe(
                self.probe_spec,
                server.base_url,
                model=server.model,
                headers=server.headers(),
                reference=reference,
                reference_label="stack A's answers" if reference is not None else "",
            )
        except CorrectnessError as e:
            error = f"{label} ({self.variants[label].role}): {e}"
            result.error = server.with_exit(error, "during the correctness probe")
        else:
            result.outcome, result.verdict = outcome, judge_probe(outcome)
            result.note = f"{label}: held to {outcome.reference}"
        if label == "B" and reference is None:
            result.error = result.error or "B: stack A gave no answers to hold B to (A's probe stopped)"
        self.probes[label] = result
        verdict = "stopped" if result.error else "pass" if result.passed else "FAIL"
        self.on_event(f"round {round_}/{planned} {label}: correctness probe: {verdict}")

    def need_more(self, workload: Workload, verdict: WorkloadVerdict[PairedMetricVerdict] | None, planned: int) -> str:
        """Why ``workload`` needs more rounds: fewer valid ones than ``planned`` (runs the client
        paced are discarded) or an inconclusive verdict; "" when it does not, or when more cannot
        help (a run stopped or failed requests: that is the variant's own doing)."""
        runs = self.runs.get(workload.name, [])
        if any(r.problems for r in runs):
            return ""
        by = {(r.round, r.variant): r.values for r in runs}
        valid = sum(
            1 for (n, label), v in by.items() if label == "A" and v is not None and by.get((n, "B")) is not None
        )
        if valid < planned:
            return f"{valid} of {planned} rounds valid"
        if verdict is not None and any(not m.ok for m in verdict.inconclusive):
            return "inconclusive"
        return ""

    def verdict(
        self, workload: Workload, rules: Sequence[MetricRule], profile: Profile
    ) -> WorkloadVerdict[PairedMetricVerdict] | None:
        by = {(r.round, r.variant): r for r in self.runs.get(workload.name, [])}
        numbers = sorted({n for n, _ in by})
        if not numbers:
            return None
        a = [by[(n, "A")].values if (n, "A") in by else None for n in numbers]
        b = [by[(n, "B")].values if (n, "B") in by else None for n in numbers]
        if not any(x is not None and y is not None for x, y in zip(a, b)):
            return None
        return judge_paired(
            workload.name, rules, a, b, alpha=profile.gate.alpha, inconclusive=profile.gate.inconclusive
        )


def _headline(run: AbRun) -> str:
    values = run.result.repeats[0].flat_metrics() if run.result.repeats else {}
    parts = [
        f"{values[k]:,.1f} {unit}"
        for k, unit in (("output_throughput", "output tok/s"), ("mean_tpot_ms", "ms mean TPOT"))
        if k in values
    ]
    if run.result.invalid_reasons:
        parts.append("INVALID: " + run.result.invalid_reasons[0])
    return ", ".join(parts) or "no metrics"


def _server_args(variant: Variant) -> tuple[str, ...]:
    config = server_config(variant.profile.server)
    return normalize_args(config.args, config.flag_aliases)


def _fingerprint_note(runs: Sequence[AbRun]) -> str:
    """What B's change does to the baseline fingerprint."""
    first: dict[str, Fingerprint] = {}
    for r in runs:
        if r.result.fingerprint is not None:
            first.setdefault(r.variant, r.result.fingerprint)
    a, b = first.get("A"), first.get("B")
    if a is None or b is None:
        return "unknown: a variant never finished a run"
    if a == b:
        return "same for A and B: accepting B replaces the baseline A's runs would be gated against"
    return (
        f"B's differs from A's ({a.describe_difference(b)}): the A/B compares the two directly; accepted, B's numbers "
        "are stored under B's fingerprint, which gate runs use once the profile is changed the same way"
    )


@dataclass(frozen=True)
class AbPlan:
    """What an A/B runs: the two variants, the selected workloads and the rules each is judged on."""

    pair: tuple[Variant, Variant]
    workloads: tuple[Workload, ...]
    rules: dict[str, tuple[MetricRule, ...]]


def plan_ab(profile: Profile, candidate: Candidate, options: AbOptions) -> AbPlan:
    """The A/B's plan, with everything refused that can be without a server (PerfgateError): the
    options, the candidate, the workload selection,
    the profile's gate (:func:`perfgate.profile.validate`) and the selected workloads' datasets."""
    options.check()
    pair = variants(profile, candidate, options.flags.candidate)
    workloads = select_workloads(profile, options.keyword)
    validate(profile)
    for w in workloads:
        check_dataset(w)
    rules = {w.name: tuple(rules_for(profile.gate, w, in_sweep=profile.sweep_of(w) is not None)) for w in workloads}
    return AbPlan(pair, workloads, rules)


def run_ab(
    profile: Profile,
    candidate: Candidate,
    options: AbOptions,
    *,
    on_event: Callable[[str], None] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> AbSummary:
    """Run the A/B of ``candidate`` against ``profile`` and judge it; record B when asked.

    Everything that can be refused without a server is refused first (PerfgateError): what
    :func:`plan_ab` checks, and, for ``accept_candidate``, a baseline store that cannot be
    written or whose baselines make no sense for the gated metrics. A variant that fails to
    boot or run stops the A/B; the summary then says so (``stopped``) and holds what ran.
    """
    plan = plan_ab(profile, candidate, options)
    pair, workloads, rules = plan.pair, plan.workloads, plan.rules
    store = BaselineStore(options.baselines_dir) if options.accept_candidate else None
    gated = {name: [r.metric for r in metric_rules] for name, metric_rules in rules.items()}
    store_notes = store.check(profile.name, for_update=True, gated=gated) if store is not None else []
    server_args = {v.label: _server_args(v) for v in pair}
    emit = on_event or (lambda _: None)

    rounds = _Rounds(pair, options, emit, on_progress)
    rounds.run(options.rounds, workloads, options.rounds)
    verdicts = {w.name: rounds.verdict(w, rules[w.name], profile) for w in workloads}
    # More rounds, one ABBA block at a time, for workloads still undecided or short of valid
    # rounds (a run the client paced is discarded), as the gate adds repeats.
    while not rounds.stopped and rounds.done < options.most_rounds:
        why = {w.name: rounds.need_more(w, verdicts[w.name], options.rounds) for w in workloads}
        todo = [w for w in workloads if why[w.name]]
        if not todo:
            break
        more = min(2, options.most_rounds - rounds.done)
        emit(f"{'; '.join(f'{w.name}: {why[w.name]}' for w in todo)}: {more} more round(s)")
        rounds.run(more, todo, options.most_rounds)
        verdicts.update({w.name: rounds.verdict(w, rules[w.name], profile) for w in todo})

    env_names = sorted({*pair[0].extra_env, *pair[1].extra_env})
    a_summary, b_summary = (
        VariantSummary(
            label=v.label,
            role=v.role,
            python=v.python,
            extra_env=v.extra_env,
            extra_args=v.extra_args,
            server_args=server_args[v.label],
            env_seen={k: v.profile.server.env.get(k, os.environ.get(k, "")) for k in env_names},
            boots=tuple(rounds.boots[v.label]),
        )
        for v in pair
    )
    results = []
    for w in workloads:
        runs = tuple(rounds.runs.get(w.name, []))
        results.append(
            AbWorkload(
                w.name,
                rules[w.name],
                runs,
                verdicts[w.name],
                planned=options.rounds,
                fingerprint_note=_fingerprint_note(runs),
            )
        )
    summary = AbSummary(
        profile_name=profile.name,
        profile_path=str(profile.path),
        rounds=options.rounds,
        max_rounds=options.most_rounds,
        order=tuple(rounds.order),
        variants=(a_summary, b_summary),
        workloads=tuple(results),
        alpha=profile.gate.alpha,
        inconclusive=profile.gate.inconclusive,
        stopped=rounds.stopped,
        accept=options.accept_candidate,
        reason=options.reason,
        store_notes=tuple(store_notes),
        probes=dict(rounds.probes),
        probe_off=rounds.probe_off,
    )
    if store is not None:
        summary = accept_candidate(summary, store, pair[1].profile, options.reason)
    return summary
