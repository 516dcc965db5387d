"""bench_serving's metric definitions, checked on hand-computed cases."""

import collections
import itertools
import math
from array import array

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate import _stats
from perfgate.load import ClientStats, LoadRun, RequestRecord
from perfgate.metrics import _compute, compute_metrics

STATS = ClientStats(0, 1, 0, 0, 0, 0, 0, False)


def rec(i, start, offsets, tokens, out=None, error=""):
    r = RequestRecord(index=i, input_tokens=10, requested_output_tokens=sum(tokens), start_s=start)
    r.chunk_offsets_s = array("f", offsets)
    r.chunk_tokens = array("H", tokens)
    r.ttft_s = offsets[0] if offsets else None
    r.latency_s = offsets[-1] if offsets else None
    r.output_tokens = sum(tokens) if out is None else out
    r.error = error
    return r


def run(records, start=100.0, end=104.0):
    return LoadRun("w", "sglang", start, end, records, STATS, 0, False)


def test_hand_computed_two_requests():
    # Request A: chunks at 0.5, 1.0, 1.5 s (1 token each). Request B: 1.0 s (1 token), 2.0 s (2 tokens).
    a = rec(0, 100.0, [0.5, 1.0, 1.5], [1, 1, 1])
    b = rec(1, 100.0, [1.0, 2.0], [1, 2])
    m = compute_metrics(run([a, b]), target_concurrency=2).values
    assert m["duration_s"] == 4.0
    assert m["completed"] == 2
    assert m["total_output_tokens"] == 6
    assert m["output_throughput"] == pytest.approx(6 / 4)
    assert m["total_throughput"] == pytest.approx((20 + 6) / 4)
    assert m["request_throughput"] == pytest.approx(0.5)
    assert m["mean_ttft_ms"] == pytest.approx(750)
    # TPOT: A (1.5-0.5)/2 = 0.5 s; B (2.0-1.0)/2 = 0.5 s.
    assert m["mean_tpot_ms"] == pytest.approx(500)
    # ITL: A 0.5, 0.5; B's 2-token chunk splits its 1.0 s gap: 0.5, 0.5.
    assert m["mean_itl_ms"] == pytest.approx(500)
    assert m["p99_itl_ms"] == pytest.approx(500)
    # Concurrency = sum of E2E latencies / duration = (1.5 + 2.0) / 4.
    assert m["concurrency"] == pytest.approx(3.5 / 4)
    # Token arrivals: A at 0.5, 1.0, 1.5; B at 1.0, 1.5, 2.0 -> bucket [1, 2) holds 4.
    assert m["max_output_tokens_per_s"] == 4


def test_failed_requests_never_count_as_output():
    ok = rec(0, 100.0, [0.5, 1.0], [1, 1])
    bad = rec(1, 100.0, [0.5, 1.0], [1, 1], error="short stream: 2 of 8 tokens")
    m = compute_metrics(run([ok, bad]), target_concurrency=2)
    assert m.values["total_output_tokens"] == 2
    assert m.failed == 1 and m.errors == {"short stream": 1}


def test_server_count_wins_and_missing_count_is_reported():
    counted = rec(0, 100.0, [0.5, 1.0], [1, 1], out=5)
    m = compute_metrics(run([counted]), target_concurrency=1)
    assert m.values["total_output_tokens"] == 5
    unknown = rec(0, 100.0, [0.5, 1.0], [1, 1])
    unknown.output_tokens = None
    m = compute_metrics(run([unknown]), target_concurrency=1)
    assert m.values["total_output_tokens"] == 2
    assert any("no server token count" in n for n in m.notes)


def test_steady_window_is_the_plateau():
    # 10 requests in flight from 100.0 to 102.0, then only 1 until 104.
    recs = [rec(i, 100.0, [0.1 * k for k in range(1, 21)], [1] * 20) for i in range(10)]
    recs.append(rec(10, 100.0, [0.2 * k for k in range(1, 21)], [1] * 20))
    m = compute_metrics(run(recs), target_concurrency=10)
    w = m.steady
    assert w is not None
    assert w.start_s == pytest.approx(100.0)
    assert w.end_s == pytest.approx(101.9, abs=0.11)
    assert m.values["steady_output_throughput"] == pytest.approx(w.output_tokens / w.length_s)
    assert m.timeline.in_flight[0] == 11 and m.timeline.in_flight[-1] <= 1


def test_no_steady_window_is_a_note():
    m = compute_metrics(run([rec(0, 100.0, [0.5, 1.0], [1, 1])]), target_concurrency=8)
    assert m.steady is None
    assert "steady_output_throughput" not in m.values
    (why,) = {m.unmeasured[k] for k in ("steady_output_throughput", "steady_mean_tpot_ms", "steady_window_s")}
    assert why.startswith("no steady-state window") and why in m.notes


def test_a_steady_window_without_a_token_reports_no_steady_figures():
    # 10 requests in flight for 2 s, their tokens only at the end: the server stalled while the load held.
    m = compute_metrics(run([rec(i, 100.0, [1.98, 2.0], [1, 1]) for i in range(10)]), target_concurrency=10)
    assert m.steady is None
    steady = {"steady_output_throughput", "steady_mean_tpot_ms", "steady_window_s"}
    assert not steady & m.values.keys()
    why = "no steady figures: the steady window (1.9 s at >= 90% of 10 in flight) holds no output token"
    assert {k: m.unmeasured[k] for k in steady} == dict.fromkeys(steady, why)
    assert why in m.notes
    # The rest of the run was measured as usual.
    assert m.values["output_throughput"] == pytest.approx(20 / 4)


def test_streams_read_whole_have_no_tpot_rather_than_a_tpot_of_zero():
    # Each request's 4 tokens in one read (the client lagged): no gap was seen, none is reported.
    whole = [rec(i, 100.0 + i, [0.5, 0.5, 0.5], [2, 1, 1]) for i in range(3)]
    m = compute_metrics(run(whole), target_concurrency=1)
    for family in ("tpot", "itl"):
        assert not any(k.endswith(f"_{family}_ms") for k in m.values)
        why = f"{family.upper()} not measured: every request's tokens arrived in one read of its stream"
        assert m.unmeasured[f"mean_{family}_ms"] == m.unmeasured[f"p99_{family}_ms"] == why
        assert any(n.startswith(why) for n in m.notes)
    assert m.values["mean_ttft_ms"] == pytest.approx(500)
    # One request that streamed is a measurement: bench_serving's definition over all of them.
    m = compute_metrics(run([*whole, rec(3, 100.0, [0.5, 0.8], [1, 3])]), target_concurrency=1)
    assert m.values["mean_tpot_ms"] == pytest.approx(1000 * 0.3 / 3 / 4)
    assert "mean_tpot_ms" not in m.unmeasured


def test_no_sample_says_why():
    m = compute_metrics(run([rec(0, 100.0, [0.5], [1])]), target_concurrency=1)
    assert m.unmeasured["p99_tpot_ms"] == "no completed request had two output tokens"
    assert "p99_tpot_ms" not in m.values


def _reference_token_times(records):
    """bench_serving's reconstruction written out plainly: every token's arrival, per request, and the ITLs."""
    itls, per_request = [], []
    for r in records:
        if not r.ok or r.ttft_s is None:
            continue
        gaps = []
        for i in range(1, len(r.chunk_offsets_s)):
            n = r.chunk_tokens[i]
            if n:
                gaps += [(r.chunk_offsets_s[i] - r.chunk_offsets_s[i - 1]) / n] * n
        itls += gaps
        t = r.start_s + r.ttft_s
        times = [t]
        for g in gaps:
            t += g
            times.append(t)
        per_request.append(times)
    return itls, per_request


_requests = st.lists(
    st.tuples(
        st.floats(100.0, 101.0),
        st.lists(st.tuples(st.floats(0.001, 0.5), st.integers(0, 3)), min_size=1, max_size=8),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(_requests)
def test_the_array_computation_is_the_plain_one(monkeypatch_slice, requests):
    # Slices of 3 tokens: every sliced pass (binning, window gaps) crosses request boundaries.
    records = []
    for i, (start, chunks, failed) in enumerate(requests):
        offsets = list(itertools.accumulate(gap for gap, _ in chunks))
        tokens = [max(1, chunks[0][1])] + [n for _, n in chunks[1:]]
        records.append(rec(i, start, offsets, tokens, error="HTTP 500" if failed else ""))
    m = compute_metrics(run(records, end=110.0), target_concurrency=2)
    itls, per_request = _reference_token_times(records)
    times = [t for ts in per_request for t in ts]
    if itls:
        assert m.values["mean_itl_ms"] == pytest.approx(1000 * sum(itls) / len(itls), rel=1e-9)
        assert m.values["p99_itl_ms"] == pytest.approx(1000 * float(numpy.percentile(itls, 99)), rel=1e-9)
        assert m.values["std_itl_ms"] == pytest.approx(1000 * float(numpy.std(itls)), rel=1e-6, abs=1e-9)
    else:
        assert "mean_itl_ms" not in m.values
    per_second = collections.Counter(int((t - 100.0) // 1.0) for t in times)
    assert m.values["max_output_tokens_per_s"] == (max(per_second.values()) if times else 0)
    per_bin = collections.Counter(min(len(m.timeline.output_tokens) - 1, max(0, int((t - 100.0) / 0.1))) for t in times)
    assert m.timeline.output_tokens == [per_bin[b] for b in range(len(m.timeline.output_tokens))]
    if m.steady is not None:
        lo, hi = m.steady.start_s, m.steady.end_s
        assert m.steady.output_tokens == sum(lo <= t < hi for t in times)
        gaps = [b - a for ts in per_request for a, b in itertools.pairwise(ts) if lo <= b < hi]
        if gaps:
            assert m.steady.mean_itl_ms == pytest.approx(1000 * sum(gaps) / len(gaps), rel=1e-9)
        else:
            assert math.isnan(m.steady.mean_itl_ms)


@pytest.fixture(scope="module")
def monkeypatch_slice():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_compute, "_BIN_SLICE", 3)
        mp.setattr(_stats, "_SLICE", 3)
        yield
