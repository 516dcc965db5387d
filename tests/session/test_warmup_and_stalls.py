"""warmup = "steady" and the measured phase's stall detector, against the real simulator with a
one-off engine stall (--stall-after-requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.errors import ProfileError
from perfgate.profile import parse_profile
from perfgate.report import results_document
from perfgate.session import Session, SessionOptions

PROFILE = """
name = "noise"
[server]
kind = "simulator"
startup_timeout_s = 30
shutdown_timeout_s = 5
[server.sim]
gpus = 1
time_scale = 0.05
startup_delay_s = 0.2
{sim}
[telemetry]
source = "none"
server_metrics_path = ""
[gate]
repeats = 1
client_max_lag_p99_ms = 5000
{workloads}
"""

STEADY = """
[[workload]]
name = "{name}"
num_prompts = 16
concurrency = 8
input_len = 64
output_len = 16
warmup = "steady"
warmup_requests = 8
warmup_tolerance = 0.5
warmup_max_s = {max_s}
"""

GAPPED = """
[[workload]]
name = "{name}"
num_prompts = 24
concurrency = 8
input_len = 64
output_len = 16
warmup_requests = 8
max_token_gap_s = 1.0
"""


def session(tmp_path: Path, workloads: str, sim: str = "", update: bool = False) -> Session:
    profile = parse_profile(PROFILE.format(workloads=workloads, sim=sim), tmp_path / "noise.toml")
    return Session(
        profile,
        SessionOptions(baselines_dir=tmp_path / "baselines", log_dir=tmp_path / "logs", update_baselines=update),
    )


def test_a_steady_warmup_runs_past_a_slow_first_round_and_reports_its_rounds(tmp_path):
    # The engine stops for 1.5 s on the first warmup request: round 1 holds the stall, and the
    # warmup goes on until two rounds agree.
    s = session(tmp_path, STEADY.format(name="steady", max_s=60), sim="stall_after_requests = 1\nstall_s = 1.5")
    try:
        result = s.run(s.profile.workload("steady"))
    finally:
        s.stack.close()
    assert result.valid, result.invalid_reasons
    (rep,) = result.repeats
    warm = rep.load.steady_warmup
    assert warm is not None and warm.converged and warm.rounds >= 3
    # Round 1 (8 requests of 16 tokens) sat through 1.5 s of stall; the settled rounds did not.
    assert warm.rates[0] * 2 < warm.rates[-1]
    doc = results_document(s.summary())["workloads"][0]["repeats"][0]["warmup"]
    assert doc["mode"] == "steady" and doc["rounds"] == warm.rounds and doc["converged"] is True
    assert len(doc["round_output_throughput"]) == warm.rounds
    assert any(n.startswith(f'warmup = "steady": settled after {warm.rounds} rounds') for n in rep.notes())


def test_a_steady_warmup_that_does_not_settle_within_its_cap_makes_the_run_invalid_and_unrecorded(tmp_path):
    s = session(tmp_path, STEADY.format(name="capped", max_s=0.01), update=True)
    try:
        result = s.run(s.profile.workload("capped"))
    finally:
        s.stack.close()
    (rep,) = result.repeats
    warm = rep.load.steady_warmup
    assert warm is not None and not warm.converged and warm.rounds == 1
    assert not result.valid and not result.recorded
    (reason,) = result.invalid_reasons
    assert reason.startswith('repeat 1: warmup = "steady": not settled after 1 round(s)')
    assert "warmup_max_s 0.01" in reason and "raise warmup_max_s" in reason
    assert result.baseline_note.startswith("not recorded: the run was invalid")


def test_a_stall_in_the_measured_phase_makes_that_run_invalid_with_its_start_and_length(tmp_path):
    # The stall comes on the 12th request: the 8 warmup requests are done, the measured phase runs.
    # The workload after it runs on the same server, past the one-off stall: valid.
    s = session(
        tmp_path,
        GAPPED.format(name="stalled") + GAPPED.format(name="calm"),
        sim="stall_after_requests = 12\nstall_s = 2.5",
        update=True,
    )
    try:
        stalled = s.run(s.profile.workload("stalled"))
        calm = s.run(s.profile.workload("calm"))
    finally:
        s.stack.close()
    (rep,) = stalled.repeats
    (stall,) = rep.stalls
    assert 2.4 < stall.length_s < 4.0 and stall.start_s > 0 and stall.in_flight >= 1
    assert not stalled.valid and not stalled.recorded
    (reason,) = stalled.invalid_reasons
    assert reason.startswith("repeat 1: 1 stall(s) longer than max_token_gap_s 1 s in the measured phase")
    assert f"no token for {stall.length_s:.2f} s from {stall.start_s:.2f} s" in reason
    doc = results_document(s.summary())["workloads"][0]["repeats"][0]["token_gaps"]
    assert doc["max_s"] == 1.0 and doc["stalls"][0]["length_s"] == stall.length_s
    assert doc["longest"] == doc["stalls"][0]
    assert calm.valid and calm.recorded, calm.invalid_reasons
    (calm_rep,) = calm.repeats
    assert calm_rep.stalls == [] and calm_rep.longest_gap is not None and calm_rep.longest_gap.length_s < 1.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'warmup = "steady"\nwarmup_requests = 4',
            "key 'warmup_requests': 4 is below concurrency 8: with warmup = \"steady\"",
        ),
        ("warmup_tolerance = 0.1", "key 'warmup_tolerance': applies to warmup = \"steady\" only"),
        ("warmup_max_s = 10", "key 'warmup_max_s': applies to warmup = \"steady\" only"),
        ('warmup = "always"', "key 'warmup': expected one of 'requests', 'steady'"),
        ("max_token_gap_s = -1", "key 'max_token_gap_s': expected a number >= 0"),
    ],
)
def test_warmup_and_gap_keys_are_checked_when_the_profile_loads(tmp_path, extra, message):
    workload = f'[[workload]]\nname = "w"\nnum_prompts = 16\nconcurrency = 8\ninput_len = 8\noutput_len = 8\n{extra}\n'
    with pytest.raises(ProfileError) as err:
        parse_profile(PROFILE.format(workloads=workload, sim=""), tmp_path / "noise.toml")
    assert message in str(err.value)
    assert "[[workload]] #1 (w)" in str(err.value)
