"""Stalls of the measured phase (no token from any stream while requests are in flight), on
hand-made records."""

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.load import ClientStats, LoadRun, RequestRecord
from perfgate.metrics import longest_token_gap, token_gaps

STATS = ClientStats(0, 1, 0, 0, 0, 0, 0, False)


def rec(i, start, offsets):
    r = RequestRecord(index=i, input_tokens=10, requested_output_tokens=len(offsets), start_s=start)
    r.chunk_offsets_s = array("f", offsets)
    r.chunk_tokens = array("H", [1] * len(offsets))
    r.ttft_s = offsets[0] if offsets else None
    r.latency_s = offsets[-1] if offsets else None
    return r


def run(records, start=100.0, end=110.0):
    return LoadRun("w", "sglang", start, end, records, STATS, 0, False)


def test_a_pause_of_every_stream_is_a_stall_with_its_start_and_length():
    # Two streams sent at the phase start: tokens every 0.1 s, then nothing from 1.0 to 3.0 s.
    a = rec(0, 100.0, [0.1 * k for k in range(1, 11)] + [3.0, 3.1])
    b = rec(1, 100.0, [0.05 + 0.1 * k for k in range(1, 10)] + [3.05])
    (gap,) = token_gaps(run([a, b]), 0.5)
    assert gap.start_s == pytest.approx(1.0, abs=1e-5)
    assert gap.length_s == pytest.approx(2.0, abs=1e-5)
    assert gap.in_flight == 2
    assert "no token for 2.00 s from 1.00 s" in gap.text()
    assert longest_token_gap(run([a, b])) == gap


def test_the_wait_for_the_first_token_counts_from_the_phase_start():
    # A compile at the start of the measured phase: the first token comes 4 s after the sends.
    (gap,) = token_gaps(run([rec(0, 100.0, [4.0, 4.1])]), 1.0)
    assert (gap.start_s, gap.length_s) == (0.0, pytest.approx(4.0, abs=1e-5))


def test_idle_time_with_nothing_in_flight_is_no_stall():
    # Paced arrivals: the first request is over at 0.3 s, the next is sent at 5 s.
    early, late = rec(0, 100.0, [0.1, 0.2, 0.3]), rec(1, 105.0, [0.1, 0.2])
    assert token_gaps(run([early, late]), 0.5) == []
    # A request sent inside a silent stretch starts the stall at its send, not at the last token.
    slow = rec(1, 105.0, [2.0, 2.1])
    (gap,) = token_gaps(run([early, slow]), 0.5)
    assert gap.start_s == pytest.approx(5.0) and gap.length_s == pytest.approx(2.0, abs=1e-5)


def test_no_records_no_gaps():
    assert token_gaps(run([]), 0.1) == [] and longest_token_gap(run([])) is None


streams = st.lists(
    st.tuples(
        st.floats(0.0, 5.0),
        st.lists(st.floats(0.001, 3.0), min_size=1, max_size=8).map(lambda xs: sorted(set(xs))),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(streams, st.floats(0.0, 1.0))
def test_longest_is_the_longest_of_all_and_every_stall_exceeds_the_bound(spec, bound):
    r = run([rec(i, 100.0 + start, offsets) for i, (start, offsets) in enumerate(spec)])
    every = token_gaps(r, 0.0)
    longest = longest_token_gap(r)
    assert (longest is None) == (not every)
    if longest is not None:
        assert longest.length_s == max(g.length_s for g in every)
    over = token_gaps(r, bound)
    assert all(g.length_s > bound and g.in_flight >= 1 for g in over)
    assert over == [g for g in every if g.length_s > bound]
    # A stall lies inside the phase, between its start and the last token.
    last = max(100.0 + s + o[-1] for s, o in spec)
    assert all(0.0 <= g.start_s and 100.0 + g.start_s + g.length_s <= last + 1e-4 for g in every)
