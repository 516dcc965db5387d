"""Command-line options and ini keys of the perfgate pytest plugin."""

from __future__ import annotations

import pytest

from perfgate.ab import PLUGIN_FLAGS, add_ab_options
from perfgate.profile import GateSpec, key_check, option_type, seconds


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "perfgate: performance gate for LLM serving")
    group.addoption(
        "--perf-profile",
        metavar="PATH",
        default=None,
        help="profile TOML to gate (default: ini perf_profile, else profiles/sim-glm5.toml under rootdir)",
    )
    group.addoption(
        "--perf-baselines", metavar="DIR", default=None, help="baseline store (default: baselines/ under rootdir)"
    )
    group.addoption(
        "--perf-update-baselines",
        action="store_true",
        default=False,
        help="record new baselines from this run's valid workloads (after an accepted change)",
    )
    group.addoption(
        "--perf-accept-regression",
        metavar="REASON",
        default=None,
        help="allow --perf-update-baselines to record a baseline worse than the current one; REASON is stored with it",
    )
    group.addoption(
        "--perf-base-url", metavar="URL", default=None, help="attach to a running server instead of booting one"
    )
    group.addoption(
        "--perf-results", metavar="DIR", default=None, help="write results JSON, a Markdown summary and plots here"
    )
    group.addoption(
        "--perf-repeats",
        metavar="N",
        type=option_type(key_check(GateSpec, "repeats")),
        default=None,
        help="override the profile's repeats per workload",
    )
    group.addoption(
        "--perf-boots",
        metavar="N",
        type=option_type(key_check(GateSpec, "boots")),
        default=None,
        help="override the profile's [gate] boots: launch the server N times and judge each boot's median",
    )
    group.addoption(
        "--perf-lock-wait",
        metavar="SECONDS",
        type=option_type(seconds),
        default=0.0,
        help="wait this long for GPUs held by another perfgate session (default: fail at once)",
    )
    group.addoption(
        "--perf-explain",
        action="store_true",
        default=False,
        help="profile an extra repeat of each workload on the server (never a gated one) and say which kernels "
        "moved against the baseline's profile (the profile's [explain] table, switched on for this run)",
    )
    group.addoption(
        "--perf-ab",
        action="store_true",
        default=False,
        help="A/B instead of the gate: the tests report B (the profile with the --perf-candidate-* change) against A "
        "(the profile as written), interleaved ABBA on this host (see `perfgate ab --help`)",
    )
    add_ab_options(group.addoption, PLUGIN_FLAGS)
    parser.addini("perf_profile", "default profile for perfgate", default="")
