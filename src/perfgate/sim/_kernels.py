"""The simulator's kernels: how one step of a MoE model splits into the kernels a GPU profile shows,
and the profiler that writes them as a torch profiler Chrome trace.

Shares are of a step's wall time (what is left is host time between kernels). They are shaped
like a decode step of a large MoE model on one tensor-parallel rank: attention, the dense QKV
projection, the router, the grouped expert GEMMs, the all-reduce and one sampling kernel.
``PERFGATE_SIM_SLOW_KERNEL=NAME:FACTOR`` makes one of them FACTOR times slower, and the step as
much longer as that kernel's share says; a kernel with a tactic id runs another tactic then, as
an untuned autotuner's pick would.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate._limits import FACTOR_MAX

SLOW_KERNEL_ENV = "PERFGATE_SIM_SLOW_KERNEL"
# Per step, the per-layer kernels run this many times (a few layers keep the trace small).
LAYERS = 4
_SLOW_TACTIC = ("tactic_12", "tactic_3")


@dataclass(frozen=True)
class SimKernel:
    short: str
    raw: str
    share: float
    per_layer: bool = True


KERNELS: tuple[SimKernel, ...] = (
    SimKernel(
        "attention",
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128u, 8u, __nv_bfloat16, "
        "flashinfer::PosEncodingMode(0)>(flashinfer::BatchDecodeParams)",
        0.22,
    ),
    SimKernel(
        "qkv_gemm",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        0.08,
    ),
    SimKernel("moe_router", "void moe_topk_softmax_kernel<256, 8, float>(float const*, int*, float*)", 0.04),
    SimKernel(
        "moe_gemm",
        "void cutlass::fused_moe_gemm<cutlass::nv_float4_t, 128, 256>(cutlass::MoeParams, tactic_12)",
        0.36,
    ),
    SimKernel("all_reduce", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 0.12),
    SimKernel(
        "rmsnorm", "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, float)", 0.05
    ),
    SimKernel(
        "sampling",
        "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, 2, 4u, true, float, int>(float*, int*)",
        0.03,
        per_layer=False,
    ),
)
SHORT_NAMES = tuple(k.short for k in KERNELS)


@dataclass(frozen=True)
class SlowKernel:
    """One kernel ``factor`` times slower (``name`` "" = none)."""

    name: str = ""
    factor: float = 1.0

    def step_factor(self) -> float:
        """How much longer a step gets: the slowed kernel's share of it, ``factor`` times over."""
        share = next((k.share for k in KERNELS if k.short == self.name), 0.0)
        return 1.0 + share * (self.factor - 1.0)


def slow_kernel_from_env(environ: Mapping[str, str]) -> SlowKernel:
    """PERFGATE_SIM_SLOW_KERNEL=NAME:FACTOR; ValueError with a clear message."""
    raw = environ.get(SLOW_KERNEL_ENV, "").strip()
    if not raw:
        return SlowKernel()
    name, _, factor_text = raw.partition(":")
    try:
        factor = float(factor_text)
    except ValueError:
        factor = math.nan
    if name not in SHORT_NAMES or not 0 < factor <= FACTOR_MAX:
        raise ValueError(
            f"{SLOW_KERNEL_ENV}={raw!r} is not NAME:FACTOR: NAME one of {', '.join(SHORT_NAMES)}, FACTOR a number "
            f"> 0 and <= {FACTOR_MAX:g} (moe_gemm:3 makes the MoE GEMMs 3 times slower); or unset it"
        )
    return SlowKernel(name, factor)


@dataclass(frozen=True)
class ProfiledStep:
    start_us: float
    duration_us: float
    # SGLang's annotation of the step, e.g. "DECODE bs=16".
    label: str = "DECODE"


def trace_events(steps: Sequence[ProfiledStep], slow: SlowKernel) -> list[dict[str, object]]:
    """Kernel events (``cat: kernel``, µs) of ``steps``, back to back from each step's start."""
    events: list[dict[str, object]] = []
    stretch = slow.step_factor()
    order = [k for k in KERNELS if k.per_layer]
    tail = [k for k in KERNELS if not k.per_layer]
    for step in steps:
        base_us = step.duration_us / stretch
        t = step.start_us
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"step[{step.label}]",
                "pid": 1,
                "tid": 1,
                "ts": round(t, 3),
                "dur": round(step.duration_us, 3),
            }
        )
        for kernel in [*order * LAYERS, *tail]:
            factor = slow.factor if kernel.short == slow.name else 1.0
            name = kernel.raw.replace(*_SLOW_TACTIC) if factor != 1.0 else kernel.raw
            dur = base_us * kernel.share * factor / (LAYERS if kernel.per_layer else 1)
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": round(t, 3),
                    "dur": round(dur, 3),
                    "args": {"device": 0, "stream": 7},
                }
            )
            t += dur
    return events


class Profiler:
    """SGLang's profiler as the simulator plays it: records the next ``num_steps`` steps (or until
    stopped) and writes ``<profile_id>-TP-0.trace.json.gz`` into ``output_dir``."""

    def __init__(self, output_dir: Path, num_steps: int | None, profile_id: str, slow: SlowKernel) -> None:
        self.output_dir = output_dir
        self.num_steps = num_steps
        self.profile_id = profile_id
        self.slow = slow
        self.steps: list[ProfiledStep] = []

    def add(self, start_s: float, duration_s: float, kind: str, batch: int, prefill_tokens: int) -> bool:
        """Record one step (wall-clock seconds); True once the asked number of steps is recorded."""
        label = f"EXTEND bs={batch} toks={prefill_tokens}" if kind == "prefill" else f"DECODE bs={batch}"
        self.steps.append(ProfiledStep(start_s * 1e6, duration_s * 1e6, label))
        return self.num_steps is not None and len(self.steps) >= self.num_steps

    def write(self) -> Path:
        """The trace file (written under a temporary name, then renamed: a reader never sees half of it)."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        path = self.output_dir / f"{self.profile_id}-TP-0.trace.json.gz"
        doc = {"traceEvents": trace_events(self.steps, self.slow), "displayTimeUnit": "ms"}
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=6))
        os.replace(tmp, path)
        return path
