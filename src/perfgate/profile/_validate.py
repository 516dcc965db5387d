"""The one check of what a profile gates against what its workloads can measure.

``load_profile`` checks every key's type and range; :func:`validate` checks that each gated
metric is one perfgate measures and knows the better way of, and that some workload of the
profile measures it (a rule on a metric nothing measures would gate nothing, and say nothing
about it). The gate, the A/B and the plugin call it before anything boots.
"""

from __future__ import annotations

from perfgate import catalogue
from perfgate.errors import ProfileError
from perfgate.profile._model import GateSpec, Profile, Workload


def merged_gate(gate: GateSpec, workload: Workload) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(tolerance, floors, ceilings) that hold ``workload``: [gate]'s, overridden by the workload's own."""
    return (
        {**gate.tolerance, **workload.tolerance},
        {**gate.floors, **workload.floors},
        {**gate.ceilings, **workload.ceilings},
    )


def gated_names(gate: GateSpec, workload: Workload) -> list[str]:
    """Every metric name [gate] or ``workload`` sets a tolerance, floor or ceiling for, sorted."""
    tolerance, floors, ceilings = merged_gate(gate, workload)
    return sorted({*tolerance, *floors, *ceilings})


def check_gated(gate: GateSpec, workload: Workload, *, in_sweep: bool) -> None:
    """ValueError naming the metric and where it was set when perfgate cannot gate it for
    ``workload``: an unknown or ungateable name, a capacity set on a workload outside a sweep, an
    SLO metric set on a workload without an SLO. ([gate]'s own capacity and SLO metrics apply
    only where they can: to sweeps, and to workloads with an SLO.)"""
    own = {*workload.tolerance, *workload.floors, *workload.ceilings}
    for metric in gated_names(gate, workload):
        try:
            declared = catalogue.gateable(metric)
        except ValueError as e:
            raise ValueError(f"{_where(metric, gate, workload)}: {e}") from None
        if metric == catalogue.CAPACITY and metric in own and not in_sweep:
            raise ValueError(
                f"{_where(metric, gate, workload)}: capacity is measured by sweeps only (a list of "
                f"concurrency or request_rate values); workload {workload.name!r} runs one load"
            )
        if declared.needs_slo and workload.slo is None and metric in own:
            raise ValueError(
                f"{_where(metric, gate, workload)}: {metric} counts the requests that meet the "
                f"workload's SLO, and {workload.name!r} has none; add e.g. slo = "
                f"{{ ttft_ms = 2000, tpot_ms = 100 }}"
            )


def validate(profile: Profile) -> None:
    """ProfileError naming the profile, the key and the fix for a gate the profile's workloads
    cannot be held to (see :func:`check_gated`), a [gate] capacity without a sweep, a [gate]
    SLO metric without a workload that has an SLO, or a gated server metric without
    ``[telemetry] server_metrics_path``."""
    try:
        for w in profile.workloads:
            check_gated(profile.gate, w, in_sweep=profile.sweep_of(w) is not None)
        _check_gate_applies(profile)
    except ValueError as e:
        raise ProfileError(f"profile {profile.path}: {e}") from None
    server_metrics = catalogue.names("server")
    gated_server = sorted({m for w in profile.workloads for m in gated_names(profile.gate, w)} & server_metrics)
    if gated_server and not profile.telemetry.server_metrics_path:
        raise ProfileError(
            f'profile {profile.path}: [telemetry] server_metrics_path is "" but {", ".join(gated_server)} '
            'is gated: the server\'s metrics are needed; set server_metrics_path = "/metrics"'
        )


def _check_gate_applies(profile: Profile) -> None:
    gate = profile.gate
    in_gate = {*gate.tolerance, *gate.floors, *gate.ceilings}
    if catalogue.CAPACITY in in_gate and not profile.sweeps:
        raise ValueError(
            "[gate] sets capacity, which only sweeps measure (concurrency = [...] or request_rate = "
            "[...]); this profile has none"
        )
    slo_metrics = sorted(m for m in in_gate if m in catalogue.METRICS and catalogue.metric(m).needs_slo)
    if slo_metrics and not any(w.slo is not None for w in profile.workloads):
        raise ValueError(
            f"[gate] sets {', '.join(slo_metrics)}, which only workloads with an slo measure; "
            "add slo = { ... } to a workload"
        )


def _where(metric: str, gate: GateSpec, workload: Workload) -> str:
    places = [
        f"[gate].{table}"
        for table, values in (("tolerance", gate.tolerance), ("floors", gate.floors), ("ceilings", gate.ceilings))
        if metric in values
    ]
    places += [
        f"[[workload]] {workload.name!r} {table}"
        for table, values in (
            ("tolerance", workload.tolerance),
            ("floors", workload.floors),
            ("ceilings", workload.ceilings),
        )
        if metric in values
    ]
    return " and ".join(places)
