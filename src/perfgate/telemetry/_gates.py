"""Power gates: absolute floors and ceilings on one window, each finding naming its GPU."""

from __future__ import annotations

from perfgate.telemetry._model import PowerFinding, TelemetryWindow


def check_power(
    window: TelemetryWindow,
    *,
    floor_w: float | None = None,
    floor_limit_share: float | None = None,
    max_imbalance: float | None = None,
    tensor_floor_pct: float | None = None,
) -> list[PowerFinding]:
    """Apply each given bound; one finding per GPU (per window for ``max_imbalance``).

    ``floor_w``: each GPU's mean power (W) at least this. ``floor_limit_share``: mean power /
    enforced limit (0-1) at least this. ``max_imbalance``: (max - min) / mean of per-GPU power at
    most this. ``tensor_floor_pct``: GPM/DCGM tensor activity (%) at least this. A GPU without the
    measurement fails its check: a gate that cannot be evaluated must not pass.
    """
    span = f"[{window.start_s:.2f}s, {window.end_s:.2f}s] ({window.length_s:.1f}s)"
    findings: list[PowerFinding] = []
    floors = (
        ("floor_w", floor_w, "mean_power_w", "W"),
        ("floor_limit_share", floor_limit_share, "limit_share", ""),
        ("tensor_floor_pct", tensor_floor_pct, "tensor_util_pct", "%"),
    )
    for check, bound, attr, unit in floors:
        if bound is None:
            continue
        for gpu in window.gpus:
            value = getattr(gpu, attr)
            findings.append(PowerFinding(check=check, gpu=gpu.label, window=span, measured=value,
                                         allowed=bound, unit=unit,
                                         passed=value is not None and value >= bound))
    if max_imbalance is not None:
        imbalance = window.imbalance
        weakest = window.weakest_gpu("gpu_imbalance").label if imbalance is not None else "all GPUs"
        findings.append(PowerFinding(check="max_imbalance", gpu=f"lowest {weakest}", window=span,
                                     measured=imbalance, allowed=max_imbalance, unit="",
                                     passed=imbalance is not None and imbalance <= max_imbalance))
    return findings
