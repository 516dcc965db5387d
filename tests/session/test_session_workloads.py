"""The session with the server's own metrics, datasets and sweeps, against the real simulator."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import httpx
import pytest

from perfgate.catalogue import names
from perfgate.errors import ProfileError, TelemetryError
from perfgate.profile import parse_profile
from perfgate.session import Session, SessionOptions

PROFILE = """
name = "s"
[server]
kind = "simulator"
startup_timeout_s = 30
shutdown_timeout_s = 5
[server.sim]
gpus = 2
time_scale = {time_scale}
startup_delay_s = 0.2
{sim}
[telemetry]
source = "none"
server_metrics_interval_s = 0.1
{telemetry}
[gate]
repeats = 1
client_max_lag_p99_ms = 5000
{gate}
{workloads}
"""

SHARED = """
[[workload]]
name = "shared"
dataset = "shared-prefix"
num_prompts = 48
concurrency = 12
num_groups = 3
system_prompt_len = 400
input_len = 40
output_len = 8
warmup_requests = 6
"""

RANDOM = """
[[workload]]
name = "random"
num_prompts = 48
concurrency = 12
input_len = 440
output_len = 8
warmup_requests = 6
"""


def session(
    tmp_path: Path, workloads: str, *, telemetry: str = "", gate: str = "", time_scale: float = 0.02, sim: str = ""
) -> Session:
    text = PROFILE.format(workloads=workloads, telemetry=telemetry, gate=gate, time_scale=time_scale, sim=sim)
    profile = parse_profile(text, tmp_path / "s.toml")
    return Session(profile, SessionOptions(baselines_dir=tmp_path / "baselines", log_dir=tmp_path / "logs"))


def test_the_servers_counters_hold_exactly_the_measured_requests(tmp_path):
    s = session(tmp_path, SHARED + RANDOM)
    try:
        shared = s.run(s.profile.workload("shared"))
        random_ = s.run(s.profile.workload("random"))
    finally:
        s.stack.close()
    for result in (shared, random_):
        (rep,) = result.repeats
        window = rep.server
        assert window is not None and window.engine == "sglang"
        # Warmup requests finish before the scrape at the warmup's end: none of their tokens count.
        assert window.prompt_tokens == sum(r.input_tokens for r in rep.load.records) == 48 * 440
        assert window.generation_tokens == 48 * 8 and rep.output_token_gap() == 0.0
        assert result.valid, result.invalid_reasons
    hit_shared = shared.repeats[0].flat_metrics()["server_cache_hit_rate"]
    hit_random = random_.repeats[0].flat_metrics()["server_cache_hit_rate"]
    # 3 system prompts of 400 tokens before 40-token questions; the warmup already cached them.
    assert hit_shared > 0.8 and hit_random < 0.01


def test_another_load_on_the_server_makes_the_run_invalid(tmp_path):
    s = session(tmp_path, RANDOM.replace("num_prompts = 48", "num_prompts = 200"), time_scale=0.05)
    server = s.server()
    stop = threading.Event()

    def intruder() -> None:
        with httpx.Client(base_url=server.base_url, timeout=30) as c:
            while not stop.is_set():
                c.post("/generate", json={"input_ids": [7] * 20, "sampling_params": {"max_new_tokens": 64}})

    thread = threading.Thread(target=intruder)
    thread.start()
    try:
        result = s.run(s.profile.workload("random"))
    finally:
        stop.set()
        thread.join()
        s.stack.close()
    gap = result.repeats[0].output_token_gap()
    assert gap is not None and gap > 0.05
    assert any(
        "the server's /metrics counted +" in r and "another load shared the server" in r for r in result.invalid_reasons
    )


def test_a_gated_server_metric_needs_the_servers_metrics(tmp_path):
    gated = SHARED.replace('name = "shared"', 'name = "shared"\nfloors = { server_cache_hit_rate = 0.5 }')
    with pytest.raises(ProfileError, match=r'server_metrics_path is "" but server_cache_hit_rate is gated'):
        session(tmp_path, gated, telemetry='server_metrics_path = ""')
    s = session(tmp_path, gated, telemetry='server_metrics_path = "/nope"')
    try:
        with pytest.raises(
            TelemetryError,
            match=r"server_cache_hit_rate is gated but the server's metrics cannot be read: "
            r"GET http://127.0.0.1:\d+/nope answered HTTP 404 \(SGLang serves /metrics only with --enable-metrics\)",
        ):
            s.server()
    finally:
        s.stack.close()
    # Not gated: the run goes on and says why the server's metrics are missing.
    s = session(tmp_path, SHARED, telemetry='server_metrics_path = "/nope"')
    try:
        (rep,) = s.run(s.profile.workload("shared")).repeats
        assert rep.server is None and "HTTP 404" in rep.server_note and "HTTP 404" in s.summary().server_metrics_note
    finally:
        s.stack.close()


SWEEP = """
[[workload]]
name = "cap"
num_prompts = 48
concurrency = [4, 16, 48]
input_len = 32
output_len = 16
warmup_requests = 2
slo = { tpot_ms = 1e6 }
"""


def test_a_sweep_whose_client_set_the_pace_has_no_capacity_to_judge(tmp_path):
    s = session(tmp_path, SWEEP, gate="client_max_cpu_share = 0.0001")
    try:
        result = s.run_sweep(s.profile.sweeps[0])
    finally:
        s.stack.close()
    assert result.capacities == [48]
    assert not result.valid and len(result.invalid_reasons) == 3
    assert all("the load client, not the server, set the pace" in r for r in result.invalid_reasons)


@pytest.mark.long
def test_sweep_bisects_between_the_last_load_within_and_the_first_beyond(tmp_path):
    # Beyond max_running_requests = 24 the first wave's extra requests wait in the queue for the
    # whole wave (96 decode steps, ~700 ms here): of 48 requests, L - 24 wait at concurrency L,
    # so the p90 TTFT stays a few steps up to L = 28 (4 wait) and jumps from L = 29 (5 wait).
    sweep = SWEEP.replace("output_len = 16", "output_len = 96").replace(
        "slo = { tpot_ms = 1e6 }", "slo = { ttft_ms = 300 }\ncapacity_bisect_steps = 3"
    )
    s = session(tmp_path, sweep, time_scale=0.1, sim="max_running_requests = 24")
    try:
        result = s.run_sweep(s.profile.sweeps[0])
    finally:
        s.stack.close()
    assert [(p.load, p.bisected) for p in result.points] == [
        (4, False),
        (16, False),
        (24, True),
        (28, True),
        (32, True),
        (48, False),
    ]
    assert result.within == [[True, True, True, True, False, False]]
    assert result.capacities == [28]
    assert result.notes == [
        "bisected: ran concurrency 32 between 16 and 48",
        "bisected: ran concurrency 24 between 16 and 32",
        "bisected: ran concurrency 28 between 24 and 32",
    ]
    assert result.verdict is not None and result.verdict.metrics[0].status == "no-baseline"


@pytest.mark.long
def test_a_sweep_on_two_boots_runs_every_point_on_both_and_records_its_capacity_per_boot(tmp_path):
    # As the bisection case above, one bisection step: 32 between 16 and 48 (beyond the SLO).
    sweep = SWEEP.replace("output_len = 16", "output_len = 96").replace(
        "slo = { tpot_ms = 1e6 }", "slo = { ttft_ms = 300 }\ncapacity_bisect_steps = 1"
    )
    text = PROFILE.format(
        workloads=sweep, telemetry="", gate="boots = 2", time_scale=0.1, sim="max_running_requests = 24"
    )
    profile = parse_profile(text, tmp_path / "s.toml")
    options = SessionOptions(baselines_dir=tmp_path / "baselines", log_dir=tmp_path / "logs", update_baselines=True)
    s = Session(profile, options)
    try:
        result = s.run_sweep(s.profile.sweeps[0])
    finally:
        s.stack.close()
    # The bisected load too ran on both boots: without them its one repeat cut every capacity but boot 1's.
    assert [(p.load, p.bisected, [r.boot for r in p.repeats]) for p in result.points] == [
        (4, False, [1, 2]),
        (16, False, [1, 2]),
        (32, True, [1, 2]),
        (48, False, [1, 2]),
    ]
    assert result.within == [[True, True, False, False]] * 2
    assert result.capacities == [16, 16] and result.capacity_boots() == [1, 2]
    assert result.recorded and result.verdict is not None
    (metric,) = result.verdict.metrics
    assert metric.replicate == "boot" and metric.n_measured == 2, metric
    stored = json.loads(Path(result.baseline_path).read_text())
    assert stored["repeats"] == [{"capacity": 16}, {"capacity": 16}] and stored["boots"] == [1, 2]


MULTI_TURN = """
[[workload]]
name = "chat"
dataset = "multi-turn"
num_prompts = 24
num_turns = 4
think_time_s = 0.2
concurrency = 3
input_len = 100
output_len = 8
warmup_requests = 0
"""


@pytest.mark.parametrize("processes", [1, 2])
def test_multi_turn_sessions_wait_think_interleave_and_hit_the_cache(tmp_path, processes):
    # Over 2 client processes, each takes whole sessions (0, 2, 4 and 1, 3, 5) with 2 and 1 of the 3 slots.
    chat_workload = MULTI_TURN + f"client_processes = {processes}\n"
    s = session(tmp_path, chat_workload + RANDOM.replace("input_len = 440", "input_len = 262"))
    try:
        chat = s.run(s.profile.workload("chat"))
        random_ = s.run(s.profile.workload("random"))
    finally:
        s.stack.close()
    (rep,) = chat.repeats
    assert chat.valid, chat.invalid_reasons
    assert rep.load.client.processes == processes
    records = rep.load.records
    assert [r.input_tokens for r in records] == [100, 208, 316, 424] * 6
    spans = []
    for k in range(6):
        turns = records[4 * k : 4 * k + 4]
        for prev, nxt in itertools.pairwise(turns):
            # The next turn goes after the reply and the think time, never before.
            assert nxt.start_s >= prev.start_s + prev.latency_s + 0.2 - 1e-3
        spans.append((turns[0].start_s, turns[-1].start_s + turns[-1].latency_s))
    # At most 3 sessions at once, and sessions do overlap (3 slots for 6 sessions).
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = [sum(d for _, d in edges[: i + 1]) for i in range(len(edges))]
    assert max(running) == 3
    hit_chat = rep.flat_metrics()["server_cache_hit_rate"]
    hit_random = random_.repeats[0].flat_metrics()["server_cache_hit_rate"]
    # Turn k finds turn k-1's prompt in the cache: (100 + 208 + 316) / (100 + 208 + 316 + 424) = 0.595.
    assert hit_chat == pytest.approx(624 / 1048, abs=0.02) and hit_random < 0.01


def _repeat(values, *, unmeasured=None, server_note="", telemetry=None, server=None, records=()):
    from types import SimpleNamespace

    from perfgate.session import RepeatResult

    load = SimpleNamespace(records=list(records), client=SimpleNamespace(valid=True), steady_warmup=None)
    # One completed request: a repeat without any is invalid for that reason alone.
    metrics = SimpleNamespace(values=values, failed=0, completed=1, steady=None, unmeasured=unmeasured or {}, notes=[])
    return RepeatResult(load, metrics, telemetry, server_note=server_note, server=server)  # type: ignore[arg-type]


# Every client metric measured: what a repeat that measured everything carries.
CLIENT = dict.fromkeys(names("client"), 1.0)


@pytest.mark.parametrize(
    ("values", "note"),
    [
        ({}, ""),
        ({"server_cache_hit_rate": float("nan")}, ""),
        ({}, "server metrics at http://x/metrics: no scrape after the measured run"),
    ],
)
def test_a_gated_server_metric_missing_or_nan_makes_the_run_invalid(tmp_path, values, note):
    gated = SHARED.replace('name = "shared"', 'name = "shared"\nfloors = { server_cache_hit_rate = 0.5 }')
    s = session(tmp_path, gated)
    rep = _repeat(CLIENT | values, server_note=note)
    (reason,) = s.policy.invalid_reasons(s.profile.workload("shared"), [rep])
    why = note or "the server's /metrics does not report it"
    assert reason == f"repeat 1: gated server_cache_hit_rate not measured ({why})"
    rep.metrics.values = CLIENT | {"server_cache_hit_rate": 0.2}
    assert s.policy.invalid_reasons(s.profile.workload("shared"), [rep]) == []


STEADY = "no steady figures: the steady window (0.7 s at >= 90% of 12 in flight) holds no output token"
ONE_READ = "TPOT not measured: every request's tokens arrived in one read of its stream"


@pytest.mark.parametrize(
    ("gated", "unmeasured", "reasons"),
    [
        # A stall while the load held: the steady figures are absent, and only a gate on them cares.
        ("", dict.fromkeys(["steady_output_throughput", "steady_mean_tpot_ms"], STEADY), []),
        (
            "floors = { steady_output_throughput = 10 }",
            dict.fromkeys(["steady_output_throughput", "steady_mean_tpot_ms"], STEADY),
            [f"repeat 1: gated steady_output_throughput not measured ({STEADY})"],
        ),
        # The verdict would say "not measured" and pass a gated TPOT that no request gave.
        (
            "",
            dict.fromkeys(["mean_tpot_ms", "p99_tpot_ms"], ONE_READ),
            [f"repeat 1: gated mean_tpot_ms, p99_tpot_ms not measured ({ONE_READ})"],
        ),
        (
            "floors = { steady_output_throughput = 10 }",
            {"mean_tpot_ms": ONE_READ, "p99_tpot_ms": ONE_READ, "steady_output_throughput": STEADY},
            [
                f"repeat 1: gated mean_tpot_ms, p99_tpot_ms not measured ({ONE_READ})",
                f"repeat 1: gated steady_output_throughput not measured ({STEADY})",
            ],
        ),
        # Missing without a reason given: still invalid, and it says the client had no value.
        ("", {"p99_tpot_ms": ""}, ["repeat 1: gated p99_tpot_ms not measured (the client reported no value)"]),
        ("", {"mean_itl_ms": "no completed request had two output tokens"}, []),
    ],
)
def test_a_gated_client_metric_the_repeat_did_not_measure_makes_the_run_invalid(tmp_path, gated, unmeasured, reasons):
    s = session(tmp_path, SHARED.replace('name = "shared"', f'name = "shared"\n{gated}'))
    values = {k: v for k, v in CLIENT.items() if k not in unmeasured}
    why = {k: v for k, v in unmeasured.items() if v}
    workload = s.profile.workload("shared")
    assert s.policy.invalid_reasons(workload, [_repeat(values, unmeasured=why)]) == reasons
    # A NaN is no number either.
    nan = CLIENT | dict.fromkeys(unmeasured, float("nan"))
    assert s.policy.invalid_reasons(workload, [_repeat(nan, unmeasured=why)]) == reasons
    assert s.policy.invalid_reasons(workload, [_repeat(CLIENT)]) == []


LIED = "GPU 0 (…0000beef) from dcgm-exporter http://x/metrics: power_avg_w nan is not a finite number; ..."


def _telemetry(mean_power_w, unmeasured=""):
    from perfgate.telemetry import GpuWindow, TelemetryWindow

    gpu = GpuWindow(0, "GPU-0000beef", "H200", mean_power_w=mean_power_w, unmeasured=unmeasured)
    return TelemetryWindow(0.0, 1.0, "dcgm", (gpu,))


def test_a_gated_power_floor_that_telemetry_could_not_measure_makes_the_run_invalid(tmp_path):
    s = session(tmp_path, SHARED.replace('name = "shared"', 'name = "shared"\nfloors = { gpu_power_min_w = 100 }'))
    workload = s.profile.workload("shared")
    window = _telemetry(None, f"GPU 0 (…0000beef): no power reading in the window ({LIED})")
    rep = _repeat(CLIENT | window.metrics(), telemetry=window)
    assert s.policy.invalid_reasons(workload, [rep]) == [
        f"repeat 1: gated gpu_power_min_w not measured (GPU 0 (…0000beef): no power reading in the window ({LIED}))"
    ]
    measured = _telemetry(300.0)
    assert s.policy.invalid_reasons(workload, [_repeat(CLIENT | measured.metrics(), telemetry=measured)]) == []
    # Without any telemetry source power is "not measured" with its reason, and require_power decides.
    assert s.policy.invalid_reasons(workload, [_repeat(CLIENT)]) == []


def test_a_server_that_counted_zero_output_tokens_is_a_note_not_a_crash():
    from types import SimpleNamespace

    from perfgate.telemetry import ServerWindow

    server = ServerWindow("sglang", 0.0, 1.0, 0.0, 1.0, 1, 100.0, 0.0, 0.0, "")
    rep = _repeat(CLIENT, server=server, records=[SimpleNamespace(output_tokens=16, chunk_tokens=[1] * 16)] * 4)
    assert rep.output_token_gap() == -1.0
    assert "the server counted 0 output tokens, the client 64 (-100.0%)" in rep.notes()
