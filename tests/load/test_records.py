"""Records stay small: a 100,000-request workload's records fit in well under 500 MB."""

from __future__ import annotations

import gc
import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from perfgate.load import OutputSample, RequestRecord, RequestSpec

BUDGET_BYTES = 500e6
REQUESTS = 100_000
CHUNKS = 128


def _record(index: int) -> RequestRecord:
    # What the client builds per request: the record, one add_chunk per streamed chunk, the end.
    rec = RequestRecord(index=index, input_tokens=1024, requested_output_tokens=CHUNKS)
    rec.start_s = 1000.0 + index * 1e-3
    for c in range(CHUNKS):
        rec.add_chunk(0.5 + c * 0.0213, 1)
    rec.output_tokens = CHUNKS
    rec.output = OutputSample(ids=CHUNKS, one_id=None, tokens=CHUNKS, text=True)
    rec.latency_s = 0.5 + CHUNKS * 0.0213
    return rec


def test_records_of_a_100k_request_workload_fit_in_500_mb():
    n = 2_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        records = [_record(i) for i in range(n)]
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    per_record = held / n
    assert len(records) == n and all(len(r.chunk_offsets_s) == CHUNKS for r in records)
    # float32 offsets + uint16 counts: ~6 bytes per chunk plus the object itself.
    assert 6 * CHUNKS < per_record < 1_600, per_record
    assert per_record * REQUESTS < BUDGET_BYTES


@given(st.lists(st.tuples(st.floats(0, 600, allow_nan=False), st.integers(1, 10**6)), min_size=1, max_size=50))
def test_chunks_keep_order_ttft_and_clamped_counts(chunks):
    rec = RequestRecord(index=0, input_tokens=1, requested_output_tokens=1)
    for offset, tokens in sorted(chunks):
        rec.add_chunk(offset, tokens)
    assert rec.ttft_s == min(o for o, _ in chunks)
    assert list(rec.chunk_tokens) == [min(t, 65535) for _, t in sorted(chunks)]
    # float32: 8 us resolution at 100 s, ~40 us at 600 s.
    assert all(abs(a - o) <= 6e-5 for a, (o, _) in zip(rec.chunk_offsets_s, sorted(chunks)))


@given(st.lists(st.integers(0, 2**32 - 1), max_size=300))
def test_prompts_keep_their_token_ids_exactly_in_two_or_four_bytes(ids):
    spec = RequestSpec(ids, 8)
    assert list(spec.input_ids) == ids and spec.input_len == len(ids)
    assert spec.input_ids.itemsize == (2 if max(ids, default=0) < 65536 else 4)
