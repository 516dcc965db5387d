"""What a finished (or stopped) gate run measured and decided, for reports: plain data, no live
server, monitor or store inside."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.correctness import CorrectnessResult
from perfgate.session._result import SweepResult, WorkloadResult
from perfgate.telemetry import GpuIdentity
from perfgate.verdict import MetricRule


@dataclass(frozen=True)
class ServerSummary:
    """The server the run measured: ``provenance`` is what baselines store about it (launch
    command, versions, autotune, /server_info); ``version`` is its own ("" when it reports none)."""

    kind: str
    model: str
    base_url: str
    version: str
    boot_s: float
    provenance: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSummary:
    """One gate run, as the terminal summary, the results JSON and the Markdown report see it.

    ``workloads``: every workload that ran, in order, one that stopped part-way included (its
    ``error`` set); ``sweeps``: every sweep whose capacity was judged (or that stopped);
    ``rules`` per workload and sweep, ``error_rates`` (allowed failed-request share) per workload;
    ``power_source``: where GPU power came from ("" when it was not measured, and
    ``telemetry_note`` says why); ``server_metrics_url``: where the server's own metrics were
    read ("" when they were not, and ``server_metrics_note`` says why); ``host_cpu_note``: why the
    server's processes' CPU was not checked ("" when it was); ``notes``: what the baseline store
    and the teardown reported.
    """

    profile_name: str
    profile_path: str
    server: ServerSummary | None
    gpus: tuple[GpuIdentity, ...]
    power_source: str
    telemetry_note: str
    workloads: tuple[WorkloadResult, ...]
    rules: Mapping[str, tuple[MetricRule, ...]]
    error_rates: Mapping[str, float]
    store_notes: tuple[str, ...] = ()
    teardown_notes: tuple[str, ...] = ()
    server_metrics_url: str = ""
    server_metrics_note: str = ""
    host_cpu_note: str = ""
    sweeps: tuple[SweepResult, ...] = ()
    correctness: CorrectnessResult | None = None
    """The correctness probe (None: the server never booted)."""

    @property
    def failures(self) -> dict[str, str]:
        """workload or sweep -> why it stopped, for every one that did not finish."""
        probe = {"correctness": self.correctness.error} if self.correctness and self.correctness.error else {}
        return (
            {w.workload: w.error for w in self.workloads if w.error}
            | {s.sweep: s.error for s in self.sweeps if s.error}
            | probe
        )
