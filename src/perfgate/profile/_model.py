"""The validated, immutable shape of a profile."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

ServerKind = Literal["sglang", "simulator", "attach", "command"]
Backend = Literal["sglang", "openai-completions", "openai-chat"]
AutotuneMode = Literal["auto", "force", "off"]
TelemetryKind = Literal["auto", "nvml", "dcgm", "none"]


@dataclass(frozen=True)
class ServerSpec:
    """What to boot (or attach to) and how to tell it is ready."""

    kind: ServerKind
    model_path: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # NVML indices (ints) or UUIDs ("GPU-..."): the GPUs the server may use.
    gpus: tuple[int | str, ...] = ()
    host: str = "127.0.0.1"
    # 0 picks a free port at launch.
    port: int = 0
    startup_timeout_s: float = 900.0
    shutdown_timeout_s: float = 60.0
    # Interpreter that runs sglang / the simulator: SGLang often lives in its own venv.
    python: str = ""
    base_url: str = ""
    ready_path: str = "/health_generate"
    # kind = "command": argv template with {port}, {host}, {model} placeholders.
    command: tuple[str, ...] = ()
    flashinfer_cutlass_autotune: AutotuneMode = "auto"
    require_autotune: bool = False
    # Name of an environment variable holding a bearer token; the token is never stored.
    # kind = "sglang" also hands it to the server as --api-key.
    api_key_env: str = ""
    # Same for the admin key (SGLang's --admin-api-key, which alone opens /flush_cache once set).
    admin_api_key_env: str = ""
    # kind = "simulator": options forwarded to ``python -m perfgate.sim`` as --flags.
    sim: Mapping[str, str | int | float | bool] = field(default_factory=dict)


@dataclass(frozen=True)
class TelemetrySpec:
    """Where per-GPU power comes from, and whether its absence fails the run."""

    source: TelemetryKind = "auto"
    # Prometheus endpoints of dcgm-exporter; "{base_url}" expands to the server's URL.
    dcgm_endpoints: tuple[str, ...] = ()
    interval_s: float = 0.1
    # Energy/throttle counters, GPM, clocks: read this often (and at window edges). One NVML
    # energy read costs ~3 ms of CPU on an H200 driver, so per-tick reads would cost ~3 % of a core per GPU.
    counter_period_s: float = 1.0
    require_power: bool = False


@dataclass(frozen=True)
class Workload:
    """One load shape, run ``repeats`` times and gated on its own."""

    name: str
    num_prompts: int
    concurrency: int
    input_len: int
    output_len: int
    request_rate: float = math.inf
    warmup_requests: int = 1
    backend: Backend = "sglang"
    # Ask the server to ignore EOS so every request produces exactly output_len tokens.
    ignore_eos: bool = True
    range_ratio: float = 1.0
    seed: int = 0
    flush_cache: bool = False
    pacing: Literal["poisson", "constant"] = "poisson"
    max_error_rate: float = 0.0
    # Overrides [gate].repeats for this workload when set.
    repeats: int | None = None
    # Prompt token ids are drawn from [lo, hi); None uses a range safe for common vocabularies.
    token_id_range: tuple[int, int] | None = None
    # A request whose stream is silent this long fails (a hung server must not hang the gate).
    stall_timeout_s: float = 600.0
    # Load-client processes the requests are sharded over (each runs concurrency / N streams);
    # for rates one process cannot sustain without saturating.
    client_processes: int = 1
    # Extra JSON fields merged into every request body (e.g. generation_config).
    extra_body: Mapping[str, object] = field(default_factory=dict)
    floors: Mapping[str, float] = field(default_factory=dict)
    ceilings: Mapping[str, float] = field(default_factory=dict)
    tolerance: Mapping[str, float] = field(default_factory=dict)

    def spec(self) -> dict[str, object]:
        """The fields that change what is measured: part of a baseline's fingerprint."""
        return {
            "num_prompts": self.num_prompts,
            "concurrency": self.concurrency,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
            "backend": self.backend,
            "ignore_eos": self.ignore_eos,
            "range_ratio": self.range_ratio,
            "seed": self.seed,
            "pacing": self.pacing,
            "token_id_range": list(self.token_id_range) if self.token_id_range else None,
        }


# 3 %: with 3 repeats and ~1 % run-to-run noise the verdict catches 98.9 % of 5 % throughput
# drops with 0.05 % false alarms; at 5 % it caught 60 % (a drop equal to the tolerance is a
# coin flip). See benchmarks/detection.py.
DEFAULT_TOLERANCE: Mapping[str, float] = {
    "output_throughput": 0.03,
    "total_throughput": 0.03,
    "mean_tpot_ms": 0.03,
    "p99_tpot_ms": 0.10,
}


@dataclass(frozen=True)
class GateSpec:
    """What the measured numbers are held to."""

    # Three repeats let the Mann-Whitney test confirm a drop (benchmarks/detection.py).
    repeats: int = 3
    require_baseline: bool = False
    # Relative tolerance per gated metric: a throughput may drop, a latency may rise, by this much.
    tolerance: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    floors: Mapping[str, float] = field(default_factory=dict)
    ceilings: Mapping[str, float] = field(default_factory=dict)
    # Significance level of the noise test on repeats (used when repeats >= 3).
    alpha: float = 0.05
    confirm_on_fail: bool = False
    # The client's own validity limits: above these, numbers describe the client, not the server.
    # A server sharing a small host's CPUs with the client (vLLM on CPU) needs more lag allowance.
    client_max_lag_p99_ms: float = 200.0
    client_max_cpu_share: float = 0.9


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    description: str
    server: ServerSpec
    telemetry: TelemetrySpec
    workloads: tuple[Workload, ...]
    gate: GateSpec

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)

    def repeats_for(self, workload: Workload) -> int:
        return workload.repeats if workload.repeats is not None else self.gate.repeats
