"""The validated, immutable shape of a profile; each field that is a TOML key declares its check,
default and doc once, with :func:`~perfgate.profile._keys.key`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, get_args

from perfgate import catalogue
from perfgate._limits import COUNT_MAX, FACTOR_MAX, LENGTH_MAX, MAX_BOOTS, SECONDS_MAX, SEED_MAX
from perfgate.profile._keys import (
    boolean,
    choice,
    cpu_list,
    factor,
    gpu_list,
    id_range,
    integer,
    integer_or,
    key,
    metric_map,
    nonempty_string,
    number,
    open_ratio,
    optional_url_path,
    port_number,
    positive_seconds,
    rate,
    ratio,
    scalar_map,
    seconds,
    str_list,
    str_map,
    string,
    table,
    url,
    url_path,
)
from perfgate.profile._tables import (
    LengthDist,
    Slo,
    concurrency_list,
    concurrency_or_sweep,
    length_dist,
    rate_or_sweep,
    slo_table,
)

ServerKind = Literal["sglang", "simulator", "attach", "command"]
Backend = Literal["sglang", "openai-completions", "openai-chat"]
AutotuneMode = Literal["auto", "force", "off"]
TelemetryKind = Literal["auto", "nvml", "dcgm", "none"]
Pacing = Literal["poisson", "constant"]
Dataset = Literal["random", "shared-prefix", "sharegpt", "multi-turn"]
Tokenize = Literal["approximate", "server"]
CapacityStat = Literal["median", "p90", "p95", "p99"]
SweepAxis = Literal["concurrency", "request_rate"]
InconclusivePolicy = Literal["fail", "warn"]
HostBound = Literal["note", "invalid"]
ProbeApi = Literal["auto", "sglang", "openai-completions", "openai-chat"]
# Kinds whose API the correctness probe is sure to speak (SGLang's /generate with logprobs).
PROBED_BY_DEFAULT = ("sglang", "simulator")
WarmupMode = Literal["requests", "steady"]

MAX_TURNS = 10_000
MAX_REPEATS = 1_000
# One process per core of the largest hosts; concurrency bounds it further.
MAX_CLIENT_PROCESSES = 1_024
# Halving a load gap 30 times is below any load's resolution.
MAX_BISECT_STEPS = 30
# A terabyte: the bound is the host's memory, which [explain] max_trace_mb is there to spare.
MAX_TRACE_MB = 1e6


@dataclass(frozen=True)
class ServerSpec:
    """What to boot (or attach to) and how to tell it is ready."""

    kind: ServerKind = key(
        choice(*get_args(ServerKind)), "what to run: SGLang, perfgate's simulator, a running server, or any command"
    )
    model_path: str = key(string, 'the model to serve (`{model}` in a command); needed by kind = "sglang"', default="")
    args: tuple[str, ...] = key(
        str_list, "extra server arguments; for SGLang checked against that SGLang's flags before boot", default=()
    )
    env: Mapping[str, str] = key(str_map, "extra environment variables of the server process", default_factory=dict)
    gpus: tuple[int | str, ...] = key(
        gpu_list,
        "GPUs the server may use, locked for the session; sets CUDA_VISIBLE_DEVICES and SGLang's --tp-size",
        default=(),
    )
    host: str = key(nonempty_string, "address the launched server listens on", default="127.0.0.1")
    port: int = key(port_number, "port the launched server listens on", default=0)
    startup_timeout_s: float = key(positive_seconds, "seconds to wait for the server to become ready", default=900.0)
    shutdown_timeout_s: float = key(
        positive_seconds, "seconds from SIGTERM to killing the server's process group", default=60.0
    )
    cpu_affinity: str = key(
        cpu_list,
        "CPUs the launched server and all its processes may run on (set before exec, inherited by its "
        'children); each must be one perfgate may run on. "" = perfgate\'s own. Part of the fingerprint; '
        'not for kind = "attach"',
        default="",
    )
    # SGLang often lives in its own venv.
    python: str = key(
        string, 'interpreter that runs SGLang or the simulator; "" = the one running perfgate', default=""
    )
    base_url: str = key(url, 'the running server\'s URL for kind = "attach" (`--perf-base-url` overrides)', default="")
    ready_path: str = key(
        url_path, "path polled until it answers 200 (SGLang's answers after warmup)", default="/health_generate"
    )
    connect_timeout_s: float = key(
        positive_seconds,
        'kind = "attach": how long nothing may accept connections at base_url before perfgate gives up',
        default=30.0,
    )
    keep_alive: bool = key(
        boolean,
        "reuse HTTP connections between requests; false for servers that close them after a stream without saying so",
        default=True,
    )
    command: tuple[str, ...] = key(
        str_list, 'kind = "command": argv with `{port}`, `{host}`, `{model}`, `{python}` placeholders', default=()
    )
    flashinfer_cutlass_autotune: AutotuneMode = key(
        choice(*get_args(AutotuneMode)),
        "run FlashInfer's CUTLASS MoE autotune: patch SGLang where it needs it (auto), always (force), never (off)",
        default="auto",
    )
    require_autotune: bool = key(
        boolean, "fail the boot unless its log shows a complete FlashInfer autotune", default=False
    )
    # The token itself is never stored.
    api_key_env: str = key(
        string,
        "name of an environment variable holding the server's API key: sent as a bearer "
        'token with every request; kind = "sglang" also starts the server with it (--api-key); '
        "never written anywhere",
        default="",
    )
    admin_api_key_env: str = key(
        string,
        "the same for the admin key (SGLang's --admin-api-key, which alone opens /flush_cache once set)",
        default="",
    )
    sim: Mapping[str, str | int | float | bool] = key(
        scalar_map,
        'the `[server.sim]` table for kind = "simulator": options of `python -m perfgate.sim --help` in '
        "snake_case, checked when the profile loads",
        default_factory=dict,
    )


@dataclass(frozen=True)
class TelemetrySpec:
    """Where per-GPU power comes from, and whether its absence fails the run."""

    source: TelemetryKind = key(
        choice(*get_args(TelemetryKind)),
        "where per-GPU power comes from; auto tries NVML, then dcgm_endpoints",
        default="auto",
    )
    dcgm_endpoints: tuple[str, ...] = key(
        str_list, 'dcgm-exporter /metrics URLs; "{base_url}" expands to the server\'s', default=()
    )
    interval_s: float = key(number(0.01, SECONDS_MAX), "sampling period of instant power", default=0.1)
    activity_period_s: float = key(
        number(0.1, SECONDS_MAX),
        "period of the slow reads (GPM activity, utilization, clocks, temperature); also read at window edges",
        default=1.0,
    )
    # One NVML energy read costs ~3-4 ms of driver CPU per GPU on an H200, the clock-event counters
    # ~0.4-0.8 ms: read at each measured phase's edges, and this often in between so that a
    # counter reset loses little.
    counter_period_s: float = key(
        number(1.0, SECONDS_MAX),
        "period of the cumulative-counter reads (energy, clock-event time) "
        "between the reads at every measured phase's start and end",
        default=30.0,
    )
    require_power: bool = key(
        boolean, "fail the run when power cannot be measured (else: reported as not measured)", default=False
    )
    server_metrics_path: str = key(
        optional_url_path,
        'the server\'s Prometheus metrics (SGLang needs --enable-metrics); "" = '
        "do not read them; required when a server_* metric is gated",
        default="/metrics",
    )
    server_metrics_interval_s: float = key(
        number(0.05, SECONDS_MAX),
        "sampling period of the server's gauges (requests running "
        "and queued, KV use); counters are also read at the edges of each run",
        default=0.5,
    )


@dataclass(frozen=True)
class ExplainSpec:
    """A profile of a few forward steps, taken in an extra repeat of each workload, to say why a gate failed."""

    enabled: bool = key(
        boolean,
        "profile the server in an extra repeat of each workload (never a gated one) and rank which kernels "
        "moved against the baseline's profile; --perf-explain turns it on for one run",
        default=False,
    )
    num_steps: int = key(integer(1, 10_000), "forward steps to profile once the extra repeat's load holds", default=10)
    top_n: int = key(integer(1, 10_000), "kernels (or host operators) kept per profile, by time", default=50)
    timeout_s: float = key(number(1.0, SECONDS_MAX), "longest wait for the server's trace files", default=120.0)
    max_trace_mb: float = key(
        number(0.001, MAX_TRACE_MB),
        "largest trace read or kept (compressed file and decompressed text), in MB",
        default=256.0,
    )
    server_trace_dir: str = key(
        string,
        "for a server that writes its traces where it was started to (vLLM: `--profiler-config.profiler torch "
        "--profiler-config.torch_profiler_dir DIR`): that DIR, absolute or relative to where pytest runs; perfgate "
        "asks for `max_iterations` = num_steps under a prefix of its own and moves those files into its folder. "
        '"": SGLang\'s way, the trace folder is named in the request',
        default="",
    )


@dataclass(frozen=True)
class Workload:
    """One load shape, run ``repeats`` times and gated on its own (a sweep's point is one too)."""

    name: str = key(
        nonempty_string,
        "test id and baseline file name: no `/`, `\\`, `..`, control characters or more than 120 UTF-8 bytes, "
        "and no two names of a profile that differ only in case, Unicode normal form or sanitising (`a b` / `a_b`)",
        shown_default="`c{concurrency}-in{input_len}-out{output_len}[-r{request_rate}]`; other datasets and "
        'sweeps: see "Production-like workloads"',
    )
    num_prompts: int = key(integer(1, COUNT_MAX), "measured requests per repeat")
    # A list is a capacity sweep: the loader makes one point workload per value (Profile.sweeps).
    concurrency: int = key(concurrency_or_sweep, "most requests in flight")
    dataset: Dataset = key(
        choice(*get_args(Dataset)),
        "where prompts come from: seeded random token ids, groups "
        "sharing a system prompt, conversations from a ShareGPT JSON file, or chat sessions whose turns "
        "resend the history",
        default="random",
    )
    input_len: int | None = key(
        integer(1, LENGTH_MAX),
        "prompt tokens per request (exact: prompts are token ids); shared-prefix: "
        "the question after the system prompt; multi-turn: each user message",
        default=None,
        shown_default='required, except with dataset = "sharegpt" or a histogram',
    )
    output_len: int | None = key(
        integer(1, LENGTH_MAX),
        "output tokens per request; sharegpt: overrides the conversation's answer length; multi-turn: each reply",
        default=None,
        shown_default='required, except with dataset = "sharegpt"',
    )
    input_len_distribution: LengthDist | None = key(
        length_dist,
        "how prompt lengths vary (mean input_len); default: uniform in [range_ratio x input_len, input_len]",
        default=None,
        shown_default="uniform",
    )
    output_len_distribution: LengthDist | None = key(
        length_dist,
        "how output lengths vary (mean output_len); default: uniform in [range_ratio x output_len, output_len]",
        default=None,
        shown_default="uniform",
    )
    system_prompt_len: int = key(
        integer(1, LENGTH_MAX),
        "shared-prefix: tokens of each group's system prompt",
        default=0,
        shown_default='required with dataset = "shared-prefix"',
    )
    num_groups: int = key(
        integer(1, COUNT_MAX), "shared-prefix: distinct system prompts; requests are spread evenly over them", default=1
    )
    num_turns: int = key(
        integer(1, MAX_TURNS),
        "multi-turn: requests per chat session; turn k sends the k-1 earlier user "
        "messages and replies again, then a new user message; num_prompts must be a multiple",
        default=0,
        shown_default='required with dataset = "multi-turn"',
    )
    think_time_s: float = key(
        seconds,
        "multi-turn: the user's think time between a reply's end and the session's next turn (not in warmup)",
        default=0.0,
    )
    dataset_path: str = key(
        string,
        "sharegpt: the local JSON file (ShareGPT format: a list of {conversations: [{from, value}, ...]})",
        default="",
        shown_default='required with dataset = "sharegpt"',
    )
    context_len: int | None = key(
        integer(2, LENGTH_MAX),
        "sharegpt: drop conversations whose prompt + output exceed this many "
        "tokens (bench_serving's --sharegpt-context-len)",
        default=None,
        shown_default="no limit",
    )
    tokenize: Tokenize = key(
        choice(*get_args(Tokenize)),
        'sharegpt: how prompt and answer lengths are counted: "server" asks the server\'s /v1/tokenize '
        '(exact; the prompts sent as token ids are the server\'s own tokens), "approximate" splits the text '
        "GPT-2-style before any server is up (usually 10-30 % fewer tokens than BPE)",
        default="approximate",
    )
    request_rate: float = key(
        rate_or_sweep(rate),
        'arrival rate in requests/s; "inf" sends up to concurrency at once',
        default=math.inf,
    )
    warmup_requests: int = key(
        integer(0, COUNT_MAX),
        "requests before measuring, at the same concurrency, excluded from every number",
        default=1,
    )
    warmup: WarmupMode = key(
        choice(*get_args(WarmupMode)),
        '"requests": warmup_requests requests (outputs capped at 32 tokens), once; "steady": rounds of '
        "warmup_requests requests at full length until two consecutive rounds' output throughput agree within "
        "warmup_tolerance (a repeat whose warmup does not settle within warmup_max_s is invalid)",
        default="requests",
    )
    warmup_tolerance: float = key(
        open_ratio,
        'warmup = "steady": how far apart (relative) two consecutive rounds\' output throughput may be',
        default=0.05,
    )
    warmup_max_s: float = key(
        positive_seconds,
        'warmup = "steady": the time cap of the warmup rounds; a warmup not settled by then makes the repeat invalid',
        default=300.0,
    )
    max_token_gap_s: float = key(
        seconds,
        "longest the client may see no token at all while requests are in flight in the measured phase; "
        "a longer stall (JIT compile, CUDA-graph capture, a host-side pause) makes the repeat invalid; 0: not checked",
        default=0.0,
    )
    host_bound: HostBound = key(
        choice(*get_args(HostBound)),
        "what a measured phase in which a launched server's process ran at >= host_bound_cpu_share of a core while "
        'the GPUs were under 90 % busy (or not measured) does: "note" names it in the summary, "invalid" makes '
        "the run invalid (its numbers are the host CPU's speed, not the GPU stack's)",
        default="note",
    )
    host_bound_cpu_share: float = key(
        open_ratio,
        "the share of one core over the measured phase at which a server process is the host-bound one",
        default=0.95,
    )
    backend: Backend = key(
        choice(*get_args(Backend)),
        "API the client speaks: /generate, /v1/completions or /v1/chat/completions",
        default="sglang",
    )
    ignore_eos: bool = key(
        boolean, "ask the server to ignore EOS so every request yields exactly output_len tokens", default=True
    )
    range_ratio: float = key(
        ratio, "lengths are drawn from [ratio x len, len]; bench_serving's default is 0.0", default=1.0
    )
    seed: int = key(integer(0, SEED_MAX), "seed of prompts, lengths and arrival times", default=0)
    flush_cache: bool = key(boolean, "POST /flush_cache after warmup, before measuring", default=False)
    pacing: Pacing = key(choice(*get_args(Pacing)), "arrival process at a finite request_rate", default="poisson")
    max_error_rate: float = key(ratio, "share of failed requests a valid run may have", default=0.0)
    repeats: int | None = key(
        integer(1, MAX_REPEATS), "overrides [gate] repeats", default=None, shown_default="[gate] repeats"
    )
    token_id_range: tuple[int, int] | None = key(
        id_range, "prompt token ids are drawn from [lo, hi)", default=None, shown_default="`[1000, 30000]`"
    )
    stall_timeout_s: float = key(
        positive_seconds,
        "a stream that makes no progress (no new token, count or finish reason) this long fails (a hung "
        "server must not hang the gate)",
        default=600.0,
    )
    # For rates one process cannot sustain without saturating.
    client_processes: int | Literal["auto"] = key(
        integer_or("auto", 1, MAX_CLIENT_PROCESSES),
        "load-client processes sharing the requests (concurrency / N streams each), at most "
        'concurrency; "auto" sizes them from the warmup (client CPU per chunk x expected chunks per second)',
        default=1,
    )
    extra_body: Mapping[str, object] = key(
        table, "JSON fields merged into every request body (e.g. generation_config)", default_factory=dict
    )
    slo: Slo | None = key(
        slo_table,
        "latency targets a request must meet to count toward goodput and SLO "
        "attainment; a sweep's capacity is judged against them",
        default=None,
        shown_default="none",
    )
    capacity_percentile: CapacityStat = key(
        choice(*get_args(CapacityStat)),
        "sweeps: the latency statistic that must meet every slo target for a load to count as within capacity",
        default="p90",
    )
    capacity_bisect_steps: int = key(
        integer(0, MAX_BISECT_STEPS),
        "sweeps: loads run between the last point within the SLO and the first beyond it, halving the gap each time",
        default=0,
    )
    floors: Mapping[str, float] = key(metric_map(), "absolute floors; override [gate] floors", default_factory=dict)
    ceilings: Mapping[str, float] = key(
        metric_map(), "absolute ceilings; override [gate] ceilings", default_factory=dict
    )
    tolerance: Mapping[str, float] = key(
        metric_map(0.0), "relative tolerances; override [gate] tolerance", default_factory=dict
    )

    def spec(self) -> dict[str, object]:
        """The fields that change what is measured: part of a baseline's fingerprint.

        Keys of the original random dataset are always there; the others only when they are
        set, so a workload that uses none of them keeps the fingerprint it always had.
        """
        spec: dict[str, object] = {
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
        if self.dataset != "random":
            spec["dataset"] = self.dataset
        if self.dataset == "shared-prefix":
            spec.update(system_prompt_len=self.system_prompt_len, num_groups=self.num_groups)
        if self.dataset == "multi-turn":
            spec.update(num_turns=self.num_turns, think_time_s=self.think_time_s)
        if self.context_len is not None:
            spec["context_len"] = self.context_len
        if self.tokenize != "approximate":
            spec["tokenize"] = self.tokenize
        for side, dist in (("input", self.input_len_distribution), ("output", self.output_len_distribution)):
            if dist is not None:
                spec[f"{side}_len_distribution"] = dist.spec()
        # Goodput and SLO attainment are counted against the SLO: another SLO, other numbers.
        if self.slo is not None:
            spec["slo"] = self.slo.targets()
        return spec


@dataclass(frozen=True)
class Sweep:
    """A workload run at several loads (``concurrency = [...]`` or ``request_rate = [...]``).

    ``points`` are the names of its point workloads (ordinary workloads of the profile, one per
    load, in increasing load); ``base`` is the workload as written, with the axis set to the
    first load. Its capacity is the highest load at which the ``capacity_percentile`` latency
    meets every target of ``base.slo``.
    """

    name: str
    axis: SweepAxis
    loads: tuple[float, ...]
    points: tuple[str, ...]
    base: Workload

    def spec(self) -> dict[str, object]:
        """The capacity's fingerprint: the base workload with the swept axis as its list of loads."""
        spec = self.base.spec()
        spec[self.axis] = [int(x) if self.axis == "concurrency" else x for x in self.loads]
        spec["capacity_percentile"] = self.base.capacity_percentile
        spec["capacity_bisect_steps"] = self.base.capacity_bisect_steps
        return spec

    def point_name(self, load: float) -> str:
        return f"{self.name}@c{int(load)}" if self.axis == "concurrency" else f"{self.name}@r{load:g}"

    def point(self, load: float) -> Workload:
        """The point workload at ``load`` (also for loads between the sweep's own, when bisecting).

        Each load draws its own prompts (its seed is the sweep's plus the load, in thousandths
        for rates): with the same prompts, a load would find the previous load's in the
        server's prefix cache.
        """
        if self.axis == "concurrency":
            return replace(
                self.base, name=self.point_name(load), concurrency=int(load), seed=self.base.seed + int(load)
            )
        return replace(
            self.base, name=self.point_name(load), request_rate=float(load), seed=self.base.seed + round(load * 1000)
        )


DEFAULT_TOLERANCE = catalogue.DEFAULT_TOLERANCE


@dataclass(frozen=True)
class GateSpec:
    """What the measured numbers are held to."""

    # Three repeats let the Mann-Whitney test confirm a drop (benchmarks/detection.py).
    repeats: int = key(integer(1, MAX_REPEATS), "measured repeats per workload; the noise test needs >= 3", default=3)
    # On a GPU host an unchanged server's speed is set at boot (docs/gpu-noise.md): only boots
    # replicate that, repeats inside one boot do not.
    boots: int = key(
        integer(1, MAX_BOOTS),
        "launches of the server a record or a gate run measures each workload on ([gate] repeats per boot); "
        "each boot's median is one sample of the noise test (docs/verdicts.md)",
        default=1,
    )
    require_baseline: bool = key(
        boolean, "fail a workload without a baseline for its fingerprint (else: skipped)", default=False
    )
    tolerance: Mapping[str, float] = key(
        metric_map(0.0),
        "relative worsening allowed per metric against the baseline median, direction-aware; merged over the default",
        default_factory=lambda: dict(DEFAULT_TOLERANCE),
    )
    floors: Mapping[str, float] = key(
        metric_map(), "absolute minimum per metric, checked with or without a baseline", default_factory=dict
    )
    ceilings: Mapping[str, float] = key(
        metric_map(), "absolute maximum per metric, checked with or without a baseline", default_factory=dict
    )
    alpha: float = key(open_ratio, "significance level of the one-sided Mann-Whitney test on the repeats", default=0.05)
    confirm_on_fail: bool = key(
        boolean, "before failing, run the repeats again and judge all of them together", default=False
    )
    max_repeats: int | None = key(
        integer(1, MAX_REPEATS),
        "most repeats in all when a median past its limit is not yet "
        "confirmed by the noise test (more are run one at a time); at least the repeats",
        default=None,
        shown_default="2 x repeats",
    )
    inconclusive: InconclusivePolicy = key(
        choice(*get_args(InconclusivePolicy)),
        "what a verdict still undecided after max_repeats does to the gate",
        default="fail",
    )
    # A server sharing a small host's CPUs with the client (vLLM on CPU) needs more lag allowance.
    client_max_lag_p99_ms: float = key(
        number(0.0, SECONDS_MAX * 1e3, strict_min=True),
        "a run whose client event-loop lag p99 exceeds this is invalid (it measured the client)",
        default=200.0,
    )
    client_max_cpu_share: float = key(
        factor, "a run whose client used more than this share of a core is invalid", default=0.9
    )
    server_max_disagreement: float = key(
        factor,
        "a run whose output tokens counted by the "
        "server (its /metrics) and by the client differ by more than this share is "
        "invalid: another load shared the server, or tokens were miscounted",
        default=0.05,
    )


@dataclass(frozen=True)
class CorrectnessSpec:
    """The correctness probe: is the server still the same model (see docs/correctness.md)."""

    enabled: bool | None = key(
        boolean,
        "run the probe once per session, after boot and before the workloads",
        default=None,
        shown_default='`true` for kind = "sglang" and "simulator", else `false`',
    )
    reason: str = key(
        string,
        "why the probe is off (required to turn it off where it is on by default), or why it does not score",
        default="",
    )
    prompts: int = key(integer(1, 4096), "prompts of the fixed, seeded probe set", default=32)
    prompt_len: int = key(integer(1, 65_536), "tokens per probe prompt", default=32)
    output_len: int = key(integer(2, 65_536), "greedy output tokens per prompt (temperature 0)", default=64)
    concurrencies: tuple[int, ...] = key(
        concurrency_list,
        "the concurrencies the probe runs at (batching changes numerics); each pass is scored on its own",
        default=(),
        shown_default="`[min(8, highest), highest]`, highest: the workloads' highest concurrency",
    )
    duplicates: int = key(
        integer(0, 4096),
        "prompts sent twice in the same batch of the highest concurrency; the two answers must agree",
        default=4,
    )
    seed: int = key(integer(0, SEED_MAX), "seed of the probe prompts", default=0)
    api: ProbeApi = key(
        choice(*get_args(ProbeApi)),
        'the API probed; "auto": SGLang\'s /generate for kind = "sglang" and "simulator", else the first '
        "workload's backend (teacher-forced scoring needs /generate or /v1/completions)",
        default="auto",
    )
    token_id_range: tuple[int, int] | None = key(
        id_range, "token ids the prompts are drawn from", default=None, shown_default="the first workload's"
    )
    score: bool = key(
        boolean,
        "score the reference's tokens teacher-forced (a prefill) besides the greedy view (a decode); false "
        "keeps the greedy view only, for an engine that dies scoring given tokens; needs reason",
        default=True,
    )
    load_answers: int = key(
        integer(0, 1024),
        "load requests per repeat whose answers are scored teacher-forced after the measured phase: each "
        "greedy token must be the server's argmax (workloads on SGLang's /generate; 0: none)",
        default=8,
    )
    near_tie_nats: float = key(
        number(0.0, FACTOR_MAX),
        "two answers that part where the top two tokens are closer than this (nats) part benignly",
        default=0.05,
    )
    limits: Mapping[str, float] = key(
        metric_map(0.0),
        "absolute limit per correctness metric (a ceiling, or a floor for correctness_greedy_match); "
        "merged over the catalogue's defaults",
        default_factory=dict,
    )

    def on(self, kind: str) -> bool:
        return self.enabled if self.enabled is not None else kind in PROBED_BY_DEFAULT


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    description: str
    server: ServerSpec
    telemetry: TelemetrySpec
    workloads: tuple[Workload, ...]
    gate: GateSpec
    sweeps: tuple[Sweep, ...] = ()
    correctness: CorrectnessSpec = CorrectnessSpec()
    explain: ExplainSpec = ExplainSpec()

    def sweep_of(self, workload: Workload) -> Sweep | None:
        """The sweep ``workload`` is a point of, if any."""
        return next((s for s in self.sweeps if workload.name in s.points), None)

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)

    def repeats_for(self, workload: Workload) -> int:
        return workload.repeats if workload.repeats is not None else self.gate.repeats

    def max_repeats_for(self, workload: Workload) -> int:
        """Most repeats the session may run to decide an inconclusive verdict."""
        repeats = self.repeats_for(workload)
        return max(repeats, self.gate.max_repeats if self.gate.max_repeats is not None else 2 * repeats)
