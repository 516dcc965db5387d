"""What restarts the stall timer: only data events that tell something new, however the bytes are
split (issue #18);
and what a request's error may quote of a body: never a key, wherever the body cuts."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from perfgate._redact import SECRETS
from perfgate.load._backends import SGLangBackend, StreamState
from perfgate.load._http import Fed
from perfgate.load._plan import LoadPlan
from perfgate.load._records import RequestRecord
from perfgate.load._selfcheck import ClientLimits
from perfgate.load._stream import EventReader, Streamer
from perfgate.profile import Workload

W = Workload(name="w", num_prompts=1, concurrency=1, input_len=8, output_len=16)
EVENT = b"data: " + json.dumps({"text": "x", "meta_info": {"completion_tokens": 1}}).encode() + b"\n\n"

# Lines an SSE stream may carry that are no data event: comments, blank lines, other fields,
# whitespace, CRLF endings.
noise_line = st.one_of(
    st.builds(lambda t: b":" + t, st.binary(max_size=20).filter(lambda b: b"\n" not in b and b"\r" not in b)),
    st.sampled_from([b"", b" ", b"\t", b"event: ping", b"event:", b"id: 7", b"retry: 1000", b"dat", b" data: 1"]),
).map(lambda line: line + b"\n")
noise = st.lists(st.tuples(noise_line, st.booleans()), max_size=30).map(
    lambda lines: b"".join(line[:-1] + b"\r\n" if crlf else line for line, crlf in lines)
)


def _plan(headers: dict[str, str] | None = None) -> LoadPlan:
    return LoadPlan(
        base_url="http://127.0.0.1:9",
        workload=W,
        backend=SGLangBackend("", False, {}),
        headers=headers or {},
        limits=ClientLimits(),
        seed_offset=0,
        keep_alive=True,
    )


def _bounds(data: bytes, cuts: list[int]) -> list[int]:
    """Where the reads of ``data`` start and end: the socket cuts it at ``cuts``."""
    return sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})


def _feed(data: bytes, cuts: list[int]) -> list[Fed]:
    reader = EventReader(_plan(), RequestRecord(index=0, input_tokens=8, requested_output_tokens=16), StreamState())
    return [reader.data(data[a:b], 1.0) for a, b in itertools.pairwise(_bounds(data, cuts))]


@given(noise, st.lists(st.integers(min_value=0), max_size=10))
def test_bytes_without_a_data_event_never_count_as_progress(data: bytes, cuts: list[int]) -> None:
    assert set(_feed(data, cuts)) <= {Fed.NOTHING}


@given(noise, noise, st.lists(st.integers(min_value=0), max_size=10))
def test_a_data_event_counts_once_it_is_complete(before: bytes, after: bytes, cuts: list[int]) -> None:
    data = before + EVENT + after
    end = len(before) + EVENT.index(b"\n") + 1
    fed = _feed(data, cuts)
    # The read that completes the data line is the first that is progress.
    first = next(i for i, b in enumerate(_bounds(data, cuts)[1:]) if b >= end)
    assert set(fed[:first]) <= {Fed.NOTHING}
    assert fed[first] is Fed.PROGRESS


# Data events that tell nothing new: empty objects, a chunk with no count or text, the same
# count again, a finish reason of null.
empty_event = st.sampled_from(
    [
        {},
        {"meta_info": {}},
        {"text": "", "meta_info": {"completion_tokens": 1}},
        {"text": "x", "meta_info": {"completion_tokens": 1, "finish_reason": None}},
        {"meta_info": {"completion_tokens": 1, "id": "q"}},
    ]
).map(lambda obj: b"data: " + json.dumps(obj).encode() + b"\n\n")


@given(st.lists(st.tuples(empty_event, noise), max_size=20), st.lists(st.integers(min_value=0), max_size=10))
def test_data_events_that_carry_nothing_new_are_no_progress(events: list[tuple[bytes, bytes]], cuts: list[int]) -> None:
    # After the first token (progress), the server repeats itself: the stall timer must not restart.
    data = b"".join(event + junk for event, junk in events)
    reader = EventReader(_plan(), RequestRecord(index=0, input_tokens=8, requested_output_tokens=16), StreamState())
    assert reader.data(EVENT, 1.0) is Fed.PROGRESS
    assert {reader.data(data[a:b], 1.0) for a, b in itertools.pairwise(_bounds(data, cuts))} <= {Fed.NOTHING}
    # A new token, a finish reason: progress again.
    two = b"data: " + json.dumps({"text": "xx", "meta_info": {"completion_tokens": 2}}).encode() + b"\n\n"
    assert reader.data(two, 1.0) is Fed.PROGRESS
    done = {"text": "xx", "meta_info": {"completion_tokens": 2, "finish_reason": {"type": "length"}}}
    assert reader.data(b"data: " + json.dumps(done).encode() + b"\n\n", 1.0) is Fed.PROGRESS


@given(st.binary(max_size=1200), st.binary(max_size=400))
def test_a_quoted_body_never_shows_a_key(before: bytes, after: bytes) -> None:
    key = "sk-0123456789abcdef"
    # Registered where the server's keys are read (perfgate.server); a client process learns
    # them from its plan's headers (LoadPlan.tokens).
    SECRETS.add(key)
    streamer = Streamer(_plan({"Authorization": f"Bearer {key}"}))
    quoted = streamer._quote(before + key.encode() + after)
    assert key not in quoted and len(quoted) <= 300
