"""What one workload's repeats produced: per-repeat numbers, validity, verdict and baseline action."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from perfgate._stats import median
from perfgate.baseline import Fingerprint
from perfgate.correctness import AnswerCheck
from perfgate.explain import ExplainResult
from perfgate.load import LoadRun
from perfgate.metrics import ServingMetrics, TokenGap
from perfgate.telemetry import HostCpuWindow, ServerWindow, TelemetryWindow
from perfgate.verdict import MetricVerdict, WorkloadVerdict

# Server- and client-counted output tokens differing by more than this are worth a note.
_GAP_NOTE = 0.01


def _finite(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def window_json(window: TelemetryWindow) -> dict[str, Any]:
    """A telemetry window as JSON-able data (non-finite numbers become null)."""
    doc: dict[str, Any] = _finite(asdict(window))
    return doc


@dataclass
class RepeatResult:
    """One measured run of a workload with its telemetry window (or why power was not measured)."""

    load: LoadRun
    metrics: ServingMetrics
    # None when power was not measured; telemetry_note then says why.
    telemetry: TelemetryWindow | None
    telemetry_note: str = ""
    # Per-GPU samples over the whole measured phase, for plots.
    telemetry_timeline: dict[str, Any] | None = None
    # The server's own metrics over this run; None when they were not read (server_note says why).
    server: ServerWindow | None = None
    server_note: str = ""
    # The workload's max_token_gap_s (0: not checked), the stalls longer than it, and the longest
    # stall of the measured phase whatever the bound (None when none had a request in flight).
    max_token_gap_s: float = 0.0
    stalls: list[TokenGap] = field(default_factory=list)
    longest_gap: TokenGap | None = None
    # Which boot of the server it ran on, counted from 1 per workload ([gate] boots).
    boot: int = 1
    # The CPU of the launched server's processes over the measured phase; None when not checked
    # (host_cpu_note says why). host_bound: the line naming a server process that held a core while
    # the GPUs waited ("" when none did).
    host_cpu: HostCpuWindow | None = None
    host_cpu_note: str = ""
    host_bound: str = ""
    # A sample of the load's answers scored teacher-forced after the measured phase (issue 34);
    # None when the workload asked for none.
    answers: AnswerCheck | None = None

    def flat_metrics(self) -> dict[str, float]:
        """Every number of this repeat under its metric name: serving metrics, then telemetry and the server's."""
        values = dict(self.metrics.values)
        if self.server is not None:
            values.update(self.server.metrics())
        if self.telemetry is not None:
            values.update(self.telemetry.metrics())
            energy = values.get("energy_j")
            window_tokens = self._window_output_tokens()
            if energy and window_tokens:
                values["output_tokens_per_j"] = window_tokens / energy
        return values

    def warmup_and_stall_reasons(self) -> list[str]:
        """Why this repeat's measured phase did not see a steady server: a steady warmup that did not
        settle, stalls longer than max_token_gap_s."""
        warmup = self.load.steady_warmup
        reasons = [warmup.invalid_reason()] if warmup is not None and not warmup.converged else []
        if self.stalls:
            longest = max(g.length_s for g in self.stalls)
            reasons.append(
                f"{len(self.stalls)} stall(s) longer than max_token_gap_s {self.max_token_gap_s:g} s in the measured "
                f"phase, the longest {longest:.2f} s; first: {self.stalls[0].text()}: the server paused (JIT "
                "compilation, CUDA-graph capture, its host side) while measured, so the numbers hold that pause; "
                'warm up longer (warmup = "steady") or find the pause in the server log'
            )
        return reasons

    def _client_output_tokens(self) -> int:
        return sum(r.output_tokens if r.output_tokens is not None else sum(r.chunk_tokens) for r in self.load.records)

    def output_token_gap(self) -> float | None:
        """(server-counted - client-counted) / client-counted output tokens of every measured request,
        failed ones included; None when the server's counter was not read or the client saw none."""
        if self.server is None or self.server.generation_tokens is None:
            return None
        client = self._client_output_tokens()
        return (self.server.generation_tokens - client) / client if client else None

    def notes(self) -> list[str]:
        """What the metrics, the telemetry and the server's windows and the token comparison have to
        say about this repeat."""
        notes = list(self.metrics.notes)
        if self.telemetry is not None:
            notes += self.telemetry.rejected
        if self.server is not None:
            notes += self.server.notes
        gap = self.output_token_gap()
        server_tokens = self.server.generation_tokens if self.server is not None else None
        if gap is not None and server_tokens is not None and abs(gap) > _GAP_NOTE:
            # The client's count itself, not server / (1 + gap): a server that counted 0 makes that 0 / 0.
            notes.append(
                f"the server counted {server_tokens:,.0f} output tokens, the client "
                f"{self._client_output_tokens():,.0f} ({gap:+.1%})"
            )
        return notes

    def _window_output_tokens(self) -> float:
        steady = self.metrics.steady
        if steady is not None:
            return float(steady.output_tokens)
        return self.metrics.values.get("total_output_tokens", 0.0)


def _busiest_share(rep: RepeatResult) -> float:
    busiest = rep.host_cpu.busiest() if rep.host_cpu is not None else None
    return (busiest.cpu_share or 0.0) if busiest is not None else 0.0


@dataclass(kw_only=True)
class Judgement:
    """What the gate made of a workload or a sweep: validity, verdict and what it did with the baseline.

    ``invalid_reasons``: why its numbers cannot be trusted; ``verdict``: None when it was not
    judged (invalid, or stopped: ``error`` says why); ``baseline_note``: what happened to the
    baseline (recorded, kept, refused); ``previous_values``: the medians of the baseline a
    recording replaced; ``changes``: what changed in the server's stack since that baseline was
    recorded (autotune tactics, versions), most suspect first; ``improved``: the gated metrics a
    passing run beats that baseline on beyond their tolerance (it should be recorded again).
    """

    invalid_reasons: list[str] = field(default_factory=list)
    verdict: WorkloadVerdict[MetricVerdict] | None = None
    fingerprint: Fingerprint | None = None
    baseline_path: str = ""
    baseline_note: str = ""
    recorded: bool = False
    previous_values: dict[str, float] = field(default_factory=dict)
    changes: tuple[str, ...] = ()
    improved: tuple[str, ...] = ()
    error: str = ""

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons and not self.error


@dataclass
class WorkloadResult(Judgement):
    """Everything perfgate knows about one workload after its repeats.

    A workload that stopped part-way keeps its completed repeats in ``repeats``.
    """

    workload: str
    repeats: list[RepeatResult]
    # The explain slice ([explain] / --perf-explain): an extra repeat, in no verdict.
    explain: ExplainResult | None = None

    def repeat_metrics(self) -> list[dict[str, float]]:
        """:meth:`RepeatResult.flat_metrics` of every repeat, in order."""
        return [r.flat_metrics() for r in self.repeats]

    def repeat_boots(self) -> list[int]:
        """The boot each repeat ran on, in order."""
        return [r.boot for r in self.repeats]

    def host_bound_summary(self) -> str:
        """One line for the summary: the repeat whose server process held a core the longest while
        the GPUs waited, and in how many repeats one did ("" when none did)."""
        found = [rep for rep in self.repeats if rep.host_bound]
        if not found:
            return ""
        worst = max(found, key=_busiest_share)
        return f"{worst.host_bound} ({len(found)} of {len(self.repeats)} repeats)"

    def answers_summary(self) -> str:
        """One line for the summary: the load's answers scored over all repeats ("" when none were asked for)."""
        checks = [rep.answers for rep in self.repeats if rep.answers is not None]
        if not checks:
            return ""
        total = AnswerCheck(
            sum(c.requests for c in checks),
            sum(c.positions for c in checks),
            sum(c.mismatches for c in checks),
            sum(c.nonfinite for c in checks),
            note="; ".join(dict.fromkeys(c.note for c in checks if c.note)),
            text_checked=sum(c.text_checked for c in checks),
            text_unspelled=sum(c.text_unspelled for c in checks),
            duration_s=sum(c.duration_s for c in checks),
            near_ties=sum(c.near_ties for c in checks),
        )
        failed = sum(1 for c in checks if c.problem)
        return total.line() + (f"; {failed} of {len(checks)} repeats not the model's" if failed else "")

    def verdict_medians(self) -> dict[str, float | None]:
        """Median over repeats of every gated metric (None where not measured)."""
        return {v.metric: v.measured for v in self.verdict.metrics} if self.verdict else {}


@dataclass
class SweepPoint:
    """One load of a sweep, as its capacity sees it.

    ``repeats`` is the sweep's own list: the point workload's repeats, plus any the capacity's
    noise test asked for (the point's own verdict never sees those). ``bisected`` points were
    run between two of the profile's loads to refine the capacity; they have no baseline.
    ``baseline_values``: the point's baseline medians ({} when there is none).
    """

    load: float
    workload: str
    bisected: bool
    repeats: list[RepeatResult]
    baseline_values: dict[str, float] = field(default_factory=dict)

    def medians(self) -> dict[str, float]:
        """Median over repeats of every metric any repeat has."""
        runs = [r.flat_metrics() for r in self.repeats]
        names = sorted({k for r in runs for k in r})
        return {k: median([r[k] for r in runs if k in r]) for k in names}


@dataclass
class SweepResult(Judgement):
    """A sweep's curve and capacity, judged against the capacity's baseline.

    ``within[i][j]``: whether point j (in load order) met the SLO in repeat i (its ``stat``
    latency at or below every target, and no more failed requests than the workload allows);
    ``capacities[i]``: the capacity of repeat i. ``invalid_reasons``: why the capacity cannot
    be trusted (a client that set the pace, another load on the server); ``error``: why the
    sweep stopped.
    """

    sweep: str
    axis: str
    stat: str
    slo: dict[str, float]
    points: list[SweepPoint]
    within: list[list[bool]] = field(default_factory=list)
    capacities: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def capacity_repeats(self) -> list[dict[str, float]]:
        return [{"capacity": c} for c in self.capacities]

    def capacity_boots(self) -> list[int]:
        """The boot each capacity was measured on: repeat i of every point ran on the same boot number."""
        return [self.points[0].repeats[i].boot for i in range(len(self.capacities))] if self.points else []
