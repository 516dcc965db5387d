"""Telemetry that cannot be true, injected from the environment (not the command line, so the
baseline's fingerprint is unchanged), for the gate's handling of it to be shown end to end.

``PERFGATE_SIM_DCGM_FAULT`` breaks /dcgm/metrics: ``nan`` (every power and energy reading NaN),
``jump`` (the energy counter jumps by 1e9 J at every 3rd scrape, as a broken exporter's did),
``hang`` (every scrape after the first two never answers). ``PERFGATE_SIM_METRICS_FAULT`` breaks
/metrics: ``zero-tokens`` (the generated-tokens counter stays 0), ``nan-tokens`` (it reads NaN).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DCGM_FAULT_ENV = "PERFGATE_SIM_DCGM_FAULT"
METRICS_FAULT_ENV = "PERFGATE_SIM_METRICS_FAULT"
DCGM_FAULTS = ("nan", "jump", "hang")
METRICS_FAULTS = ("zero-tokens", "nan-tokens")
# Scrapes answered before "hang" starts: the exporter's open and the monitor's first mark.
HANG_AFTER_SCRAPES = 2
_JUMP_EVERY = 3
_JUMP_MJ = 1e12

_POWER_OR_ENERGY = re.compile(
    r"^((?:DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_BOARD_POWER_WATTS|DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)\{.*\}) \S+$",
    re.MULTILINE,
)
_ENERGY = re.compile(r"^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{.*\}) (\S+)$", re.MULTILINE)
_GENERATED = re.compile(r"^(sglang:generation_tokens_total\{.*\}) \S+$", re.MULTILINE)


@dataclass(frozen=True)
class TelemetryFaults:
    """The broken telemetry the environment asks for ("" = none)."""

    dcgm: str = ""
    metrics: str = ""

    def dcgm_text(self, text: str, scrape: int) -> str:
        """``text`` (/dcgm/metrics) as the broken exporter serves it at its ``scrape``-th answer (from 1)."""
        if self.dcgm == "nan":
            return _POWER_OR_ENERGY.sub(r"\1 NaN", text)
        if self.dcgm == "jump":
            offset = _JUMP_MJ * (scrape // _JUMP_EVERY)
            return _ENERGY.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + offset}", text)
        return text

    def metrics_text(self, text: str) -> str:
        """``text`` (/metrics) as the broken server serves it."""
        if self.metrics:
            return _GENERATED.sub(r"\1 " + ("0.0" if self.metrics == "zero-tokens" else "NaN"), text)
        return text


def telemetry_faults_from_env(environ: Mapping[str, str]) -> TelemetryFaults:
    """PERFGATE_SIM_DCGM_FAULT and PERFGATE_SIM_METRICS_FAULT; ValueError with a clear message."""
    values = []
    for env, choices in ((DCGM_FAULT_ENV, DCGM_FAULTS), (METRICS_FAULT_ENV, METRICS_FAULTS)):
        raw = environ.get(env, "").strip()
        if raw and raw not in choices:
            raise ValueError(f"{env}={raw!r} is not one of {', '.join(choices)}: set one of them or unset it.")
        values.append(raw)
    return TelemetryFaults(*values)
