"""``validate(profile)``: the one check of what a profile gates against what it can measure."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.errors import ProfileError
from perfgate.profile import parse_profile, validate

SERVER = '[server]\nkind = "simulator"\n'
WORKLOAD = "[[workload]]\nnum_prompts = 8\nconcurrency = {c}\ninput_len = 16\noutput_len = 8\n"


def _check(text: str) -> None:
    validate(parse_profile(SERVER + text, Path("p.toml")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[gate]\ntolerance = { mean_tpott_ms = 0.1 }\n" + WORKLOAD.format(c=4), r"\[gate\]\.tolerance: metric 'mean"),
        (WORKLOAD.format(c=4) + "floors = { capacity = 8 }\n", "capacity is measured by sweeps only"),
        (WORKLOAD.format(c=4) + "floors = { goodput = 8 }\n", "has none; add e.g. slo ="),
        ("[gate]\nfloors = { capacity = 8 }\n" + WORKLOAD.format(c=4), r"\[gate\] sets capacity"),
        ("[gate]\nfloors = { goodput = 8 }\n" + WORKLOAD.format(c=4), "only workloads with an slo measure"),
        (
            '[telemetry]\nserver_metrics_path = ""\n'
            + WORKLOAD.format(c=4)
            + "ceilings = { server_queue_reqs_mean = 4 }\n",
            r'server_metrics_path is "" but server_queue_reqs_mean is gated',
        ),
    ],
)
def test_a_gate_nothing_can_measure_is_refused_naming_the_profile(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=r"^profile p\.toml: .*" + message):
        _check(text)


def test_what_a_workload_can_measure_passes() -> None:
    _check(WORKLOAD.format(c="[4, 8]") + "floors = { capacity = 8 }\nslo = { ttft_ms = 2000 }\n")
    _check(
        "[gate]\nfloors = { goodput = 8, capacity = 4 }\n" + WORKLOAD.format(c="[4, 8]") + "slo = { ttft_ms = 2000 }\n"
    )
