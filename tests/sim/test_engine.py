from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.sim import Engine, SimConfig, simulate

SCENARIO = [(0.0, 256, 128)] * 1024


def test_default_calibration_matches_the_scenario() -> None:
    run = simulate(SimConfig(), SCENARIO)
    assert run.total_throughput == pytest.approx(3700, rel=0.15)
    assert run.mean_tpot_ms == pytest.approx(200, rel=0.25)
    assert run.output_tokens_total == 1024 * 128
    assert run.input_tokens_total == 1024 * 256


def test_simulate_is_deterministic_given_seed_and_varies_across_seeds() -> None:
    a = simulate(SimConfig(seed=3), SCENARIO)
    b = simulate(SimConfig(seed=3), SCENARIO)
    c = simulate(SimConfig(seed=4), SCENARIO)
    assert a == b
    assert a.duration_s != c.duration_s
    # Noise and drift are small: seeds differ by a few percent at most.
    assert c.total_throughput == pytest.approx(a.total_throughput, rel=0.05)


def _step_times(config: SimConfig) -> list[float]:
    engine = Engine(config)
    for _ in range(40):
        engine.submit(300, 20)
    times = []
    while (step := engine.step()) is not None:
        times.append(step.duration_s)
    return times


def test_slowdown_and_time_scale_multiply_every_step_time() -> None:
    base = _step_times(SimConfig())
    slow = _step_times(SimConfig(slowdown=1.1))
    fast = _step_times(SimConfig(time_scale=0.01))
    assert len(base) == len(slow) == len(fast)
    for b, s, f in zip(base, slow, fast, strict=True):
        assert s == pytest.approx(1.1 * b, rel=1e-12)
        assert f == pytest.approx(0.01 * b, rel=1e-12)


def test_zero_cost_steps_take_no_time_but_schedule_the_same() -> None:
    config = SimConfig(zero_cost=True)
    assert set(_step_times(config)) == {0.0}
    assert len(_step_times(config)) == len(_step_times(SimConfig()))


def test_step_time_model_without_noise() -> None:
    config = SimConfig(noise=0, drift=0, step_fixed_ms=10, step_per_request_ms=1, step_per_prefill_token_ms=0.01)
    engine = Engine(config)
    engine.submit(100, 3)
    engine.submit(50, 3)
    prefill = engine.step()
    assert prefill is not None and prefill.kind == "prefill"
    assert prefill.duration_s == pytest.approx((10 + 2 * 1 + 150 * 0.01) / 1e3)
    decode = engine.step()
    assert decode is not None and decode.kind == "decode"
    assert decode.duration_s == pytest.approx((10 + 2 * 1) / 1e3)


def test_long_prompt_prefill_spans_steps_and_first_token_comes_at_its_end() -> None:
    engine = Engine(SimConfig(chunked_prefill_size=1000, noise=0, drift=0))
    rid = engine.submit(2500, 2)
    steps = [engine.step() for _ in range(3)]
    assert [s.kind for s in steps] == ["prefill"] * 3
    assert [s.prefill_tokens for s in steps] == [1000, 1000, 500]
    assert [list(s.tokens_for) for s in steps] == [[], [], [rid]]
    last = engine.step()
    assert last is not None and last.kind == "decode" and list(last.finished) == [rid]
    assert engine.step() is None and engine.idle()


def test_prefill_has_priority_over_decode() -> None:
    engine = Engine(SimConfig(chunked_prefill_size=100))
    first = engine.submit(10, 50)
    assert engine.step().kind == "prefill"
    assert engine.step().kind == "decode"
    engine.submit(10, 5)
    step = engine.step()
    assert step.kind == "prefill" and first not in step.tokens_for


def test_requests_that_can_never_run_are_refused() -> None:
    engine = Engine(SimConfig(max_total_tokens=1000))
    with pytest.raises(ValueError, match="maximum context length of 1000"):
        engine.submit(900, 200)
    with pytest.raises(ValueError, match="empty"):
        engine.submit(0, 10)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.submit(10, 0)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        SimConfig(time_scale=0)
    with pytest.raises(ValueError, match="max_running_requests"):
        SimConfig(max_running_requests=0)


def test_simulate_respects_arrival_times() -> None:
    config = SimConfig(noise=0, drift=0)
    run = simulate(config, [(0.0, 10, 5), (100.0, 10, 5)])
    assert run.duration_s > 100
    assert run.ttft_s[0] == pytest.approx(run.ttft_s[1])
    assert math.isnan(simulate(config, [(0.0, 10, 1)]).tpot_ms[0])


requests = st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 40)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    reqs=requests,
    max_running=st.integers(1, 16),
    chunk=st.integers(1, 2048),
    kv_extra=st.integers(0, 5000),
    abort_every=st.integers(0, 7),
)
def test_engine_invariants(
    reqs: list[tuple[int, int]], max_running: int, chunk: int, kv_extra: int, abort_every: int
) -> None:
    kv = max(i + o for i, o in reqs) + kv_extra
    engine = Engine(SimConfig(max_running_requests=max_running, chunked_prefill_size=chunk, max_total_tokens=kv))
    tokens: dict[int, int] = {}
    finished: set[int] = set()
    aborted: set[int] = set()
    out_len: dict[int, int] = {}
    prefilled = 0
    pending = list(reqs)
    step_no = 0
    while True:
        # Requests arrive between steps, a few at a time.
        for in_len, o_len in pending[:3]:
            rid = engine.submit(in_len, o_len)
            out_len[rid] = o_len
            tokens[rid] = 0
        pending = pending[3:]
        if abort_every and step_no % abort_every == abort_every - 1 and out_len:
            victim = step_no % len(out_len)
            if victim not in finished:
                engine.abort(victim)
                aborted.add(victim)
        step = engine.step()
        step_no += 1
        if step is None:
            if pending:
                continue
            break
        assert engine.num_running <= max_running
        assert engine.kv_used_tokens <= kv
        if step.kind == "prefill":
            assert 0 < step.prefill_tokens <= chunk
            prefilled += step.prefill_tokens
        else:
            assert step.prefill_tokens == 0
        for rid in step.tokens_for:
            assert rid not in finished and rid not in aborted
            tokens[rid] += 1
        for rid in step.finished:
            assert tokens[rid] == out_len[rid]
            finished.add(rid)
    assert engine.idle() and engine.num_running == 0 and engine.kv_used_tokens == 0
    for rid, o_len in out_len.items():
        if rid in aborted:
            assert tokens[rid] < o_len or rid in finished
        else:
            assert rid in finished and tokens[rid] == o_len
    assert engine.generated_tokens == sum(tokens.values())
    completed_inputs = sum(reqs[rid][0] for rid in finished)
    assert prefilled >= completed_inputs


def test_simconfig_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SimConfig().seed = 1  # type: ignore[misc]


def test_max_concurrency_is_a_client_semaphore() -> None:
    config = SimConfig(noise=0, drift=0)
    arrivals = [(0.0, 100, 10)] * 8
    free = simulate(config, arrivals)
    one_at_a_time = simulate(config, arrivals, max_concurrency=1)
    # Sequential requests each see an empty server: identical per-request times.
    assert max(one_at_a_time.latency_s) - min(one_at_a_time.latency_s) < 1e-9
    assert one_at_a_time.latency_s[0] == pytest.approx(simulate(config, arrivals[:1]).latency_s[0])
    assert one_at_a_time.duration_s == pytest.approx(8 * one_at_a_time.latency_s[0])
    assert one_at_a_time.duration_s > free.duration_s
    with pytest.raises(ValueError, match="max_concurrency"):
        simulate(config, arrivals, max_concurrency=0)
