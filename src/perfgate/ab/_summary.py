"""What an A/B measured and decided, as plain data for reports: no live server or session inside."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from perfgate.ab._candidate import Label
from perfgate.correctness import CorrectnessResult
from perfgate.explain import ExplainResult, compare
from perfgate.server import SGLANG_VERSION_KEYS
from perfgate.session import RunSummary, ServerSummary, WorkloadResult
from perfgate.verdict import MetricRule, PairedMetricVerdict, WorkloadVerdict

Outcome = Literal["pass", "regression", "inconclusive", "error"]
WorkloadStatus = Literal["pass", "fail", "inconclusive", "error"]

# The versions an upgrade changes, in the order the report shows them: the SGLang stack's
# packages, the server's own version (what it reports about itself) and the GPU driver.
VERSION_KEYS = (*SGLANG_VERSION_KEYS, "server", "driver")


@dataclass(frozen=True)
class AbRun:
    """One variant's run of one workload in one round: one boot, one repeat.

    ``max_error_rate``: the workload's allowed share of failed requests (to tell a run that
    measured the client from one whose server failed requests).
    """

    round: int
    variant: Label
    result: WorkloadResult
    max_error_rate: float = 0.0

    @property
    def values(self) -> dict[str, float] | None:
        """The run's metrics; None when it cannot count: it stopped, or it was invalid (failed
        requests, or the client set the pace), so its numbers do not describe the server."""
        if not self.result.repeats or not self.result.valid:
            return None
        return self.result.repeats[0].flat_metrics()

    @property
    def discarded(self) -> bool:
        """The client, not the server, set the pace and nothing else was wrong: the run says
        nothing about the variant, so its round is left out and replaced. (Failed requests are
        the variant's own doing and are never left out.)"""
        reps = self.result.repeats
        if not reps or self.result.error or all(r.load.client.valid for r in reps):
            return False
        return all(r.metrics.failed <= self.max_error_rate * len(r.load.records) for r in reps)

    @property
    def problems(self) -> list[str]:
        """Why the run cannot be trusted, unless it was discarded (see :attr:`discarded`)."""
        if self.discarded:
            return []
        where = f"round {self.round} {self.variant}"
        return [f"{where}: {reason}" for reason in self.result.invalid_reasons] + (
            [f"{where}: {self.result.error}"] if self.result.error else []
        )


@dataclass(frozen=True)
class VariantSummary:
    """One side of the A/B: what it is, and each of its boots (plain data, in order).

    ``python``: the interpreter that ran the server; ``extra_env``/``extra_args``: what this
    variant adds to the profile (nothing for A); ``server_args``: its flags as fingerprints
    see them (normalized); ``env_seen``: for every variable either variant sets, its value
    in this one ("" when unset).
    """

    label: Label
    role: str
    python: str
    extra_env: Mapping[str, str]
    extra_args: tuple[str, ...]
    server_args: tuple[str, ...]
    env_seen: Mapping[str, str]
    boots: tuple[RunSummary, ...] = ()

    @property
    def server(self) -> ServerSummary | None:
        """The first boot that came up (versions and autotune are read from it)."""
        return next((b.server for b in self.boots if b.server is not None), None)

    def versions(self) -> dict[str, str]:
        """sglang, flashinfer, sgl-kernel, torch, CUDA, the server's own and the GPU driver's
        version, where known, then anything else the server layer reported."""
        reported = dict((self.server.provenance.get("versions") or {}) if self.server else {})
        gpus = next((b.gpus for b in self.boots if b.gpus), ())
        if gpus and gpus[0].driver_version:
            reported.setdefault("driver", gpus[0].driver_version)
        ordered = {k: str(reported.pop(k)) for k in VERSION_KEYS if reported.get(k)}
        return {**ordered, **{k: str(v) for k, v in sorted(reported.items()) if v}}

    def autotune(self) -> Mapping[str, Any]:
        """The FlashInfer autotune decision and evidence of its first boot ({} where the kind has none)."""
        return (self.server.provenance.get("autotune") or {}) if self.server else {}


@dataclass(frozen=True)
class AbWorkload:
    """One workload's runs (in the order they ran), its paired verdict and what was recorded.

    ``verdict`` is None when no round finished; ``planned``: the valid rounds asked for (fewer
    is an error); ``fingerprint_note`` says whether B's change alters the baseline fingerprint
    (and so where --accept-candidate records).
    """

    name: str
    rules: tuple[MetricRule, ...]
    runs: tuple[AbRun, ...]
    verdict: WorkloadVerdict[PairedMetricVerdict] | None
    planned: int = 0
    fingerprint_note: str = ""
    baseline_path: str = ""
    baseline_note: str = ""
    recorded: bool = False

    def explain(self) -> ExplainResult | None:
        """B's profile against A's (their round-1 explain slices); None when no run took one."""
        slices = {r.variant: r.result.explain for r in self.runs if r.result.explain is not None}
        if not slices:
            return None
        a, b = slices.get("A"), slices.get("B")
        if a is None or b is None or a.table is None or b.table is None:
            why = [f"{label}: {s.note}" for label, s in sorted(slices.items()) if s.note]
            return ExplainResult(note="; ".join(why) or "A's or B's profile is missing")
        result = ExplainResult(table=b.table, capture_s=b.capture_s, reduce_s=b.reduce_s, trace_path=b.trace_path)
        compare(result, a.table, a.trace_path)
        return result

    def rounds(self) -> list[tuple[int, AbRun | None, AbRun | None]]:
        """(round, A's run, B's run) for every round that ran this workload, in round order."""
        numbers = sorted({r.round for r in self.runs})
        by = {(r.round, r.variant): r for r in self.runs}
        return [(n, by.get((n, "A")), by.get((n, "B"))) for n in numbers]

    @property
    def valid_rounds(self) -> int:
        """Rounds in which both variants' runs count (neither stopped, invalid nor discarded)."""
        return sum(
            1
            for _, a, b in self.rounds()
            if a is not None and b is not None and a.values is not None and b.values is not None
        )

    @property
    def discarded(self) -> list[str]:
        """One line per run left out because the client set the pace (its round was replaced)."""
        return [
            f"round {r.round} {r.variant}: the client set the pace ({rep.load.client.reason})"
            for r in self.runs
            if r.discarded
            for rep in r.result.repeats
            if not rep.load.client.valid
        ]

    @property
    def discard_advice(self) -> str:
        """What to do about the runs the client paced ("" when none was)."""
        return next(
            (
                rep.load.client.advice
                for r in self.runs
                if r.discarded
                for rep in r.result.repeats
                if not rep.load.client.valid
            ),
            "",
        )

    @property
    def problems(self) -> list[str]:
        """Why this workload cannot pass whatever its verdict: runs that stopped or were invalid,
        too few valid rounds, metrics one variant lacks, nothing compared."""
        out = [p for r in self.runs for p in r.problems]
        if self.verdict is not None and self.valid_rounds < self.planned:
            out.append(
                f"only {self.valid_rounds} of the {self.planned} rounds asked for had valid runs of both variants "
                f"({len(self.discarded)} run(s) discarded because the client set the pace); rerun on a quieter host "
                "or allow more rounds (--max-rounds)"
            )
        if self.verdict is None:
            out.append("no round finished with a valid run of both variants; nothing was compared")
            return out
        out += [m.message for m in self.verdict.metrics if m.status == "unpaired"]
        if all(m.status == "not-measured" for m in self.verdict.metrics):
            out.append("no gated metric was measured in both variants; nothing was compared")
        return out

    @property
    def status(self) -> WorkloadStatus:
        metrics = self.verdict.metrics if self.verdict else ()
        if any(m.status == "fail" for m in metrics):
            return "fail"
        if self.problems:
            return "error"
        if any(m.status == "inconclusive" and not m.ok for m in metrics):
            return "inconclusive"
        return "pass"


@dataclass(frozen=True)
class AbSummary:
    """A whole A/B, as the terminal report, the results JSON and the plots see it.

    ``order``: (round, variant) of every run, as they ran; ``stopped``: why the A/B ended
    before its rounds were done ("" when it did not); ``accept``: whether --accept-candidate
    was asked (then every workload that was not recorded makes the outcome an error).
    """

    profile_name: str
    profile_path: str
    rounds: int
    max_rounds: int
    order: tuple[tuple[int, Label], ...]
    variants: tuple[VariantSummary, VariantSummary]
    workloads: tuple[AbWorkload, ...]
    alpha: float
    inconclusive: str
    stopped: str = ""
    accept: bool = False
    reason: str | None = None
    store_notes: tuple[str, ...] = field(default_factory=tuple)
    probes: Mapping[Label, CorrectnessResult] = field(default_factory=dict)
    """Each variant's correctness probe (its first boot); B's is held to A's answers."""
    probe_off: str = ""
    """Why no probe ran ("" when it did)."""

    @property
    def correctness(self) -> CorrectnessResult | None:
        """What the correctness test asserts: A's probe when A itself failed (degenerate answers,
        batch effects: then nothing is a reference), else B's held to A's; None when none ran."""
        a, b = self.probes.get("A"), self.probes.get("B")
        if a is not None and not a.passed:
            return a
        if b is None and self.probe_off:
            return CorrectnessResult(None, note=self.probe_off)
        return b

    @property
    def rounds_run(self) -> int:
        return max((r for r, _ in self.order), default=0)

    @property
    def problems(self) -> list[str]:
        out = [f"stopped: {self.stopped}"] if self.stopped else []
        c = self.correctness
        if c is not None and c.error:
            out.append(f"correctness: {c.error}")
        for w in self.workloads:
            out += [f"{w.name}: {p}" for p in w.problems]
            if self.accept and not w.recorded:
                out.append(f"{w.name}: {w.baseline_note or 'not recorded'}")
        return out

    @property
    def outcome(self) -> Outcome:
        """regression (a metric failed) before error (something stopped, was invalid or could not
        be compared or recorded) before inconclusive before pass."""
        c = self.correctness
        if any(w.status == "fail" for w in self.workloads) or (c is not None and not c.error and not c.passed):
            return "regression"
        if self.problems:
            return "error"
        if any(w.status == "inconclusive" for w in self.workloads):
            return "inconclusive"
        return "pass"
