from __future__ import annotations

from perfgate.baseline import Baseline, Fingerprint, fingerprint_for
from perfgate.profile import Workload

WL = Workload(name="c1024-in256-out128", num_prompts=1024, concurrency=1024, input_len=256, output_len=128)


def fingerprint(**overrides: object) -> Fingerprint:
    facts: dict[str, object] = {
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "power_limit_w": 700.0,
        "driver_version": "580.105.08",
        "engine": "sglang",
        "model": "/models/GLM-5-NVFP4",
        "server_args": ["--tp", "8"],
        "workload": WL,
    }
    facts.update(overrides)
    return fingerprint_for(**facts)  # type: ignore[arg-type]


def baseline(
    throughputs: list[float], fp: Fingerprint | None = None, workload: str = WL.name, **prov: object
) -> Baseline:
    return Baseline(
        profile="glm5",
        workload=workload,
        fingerprint=fp or fingerprint(),
        repeats=[{"output_throughput": t, "mean_tpot_ms": 200_000.0 / t} for t in throughputs],
        telemetry={"gpus": [{"index": i, "power_mean_w": 250.0} for i in range(2)]},
        provenance={"versions": {"sglang": "0.5.5"}, **prov},
    )
