"""Stream parsing: the /generate bytes fast path agrees with a full JSON parse on every chunk."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from perfgate.load._backends import (
    BACKENDS,
    SGLangBackend,
    StreamState,
    _running_counts,
)

# Fragments that look like the keys the fast path searches for, to be hidden inside strings.
_TRICKY = ['"completion_tokens":7', '"finish_reason":null', '"error"', "\\", '"', "}", ",", ":", " tok", "é", "\n"]
_texts = st.lists(st.sampled_from(_TRICKY) | st.text(max_size=4), max_size=6).map("".join)
_finish = st.one_of(
    st.none(), st.just("stop"), st.builds(lambda n: {"type": "length", "length": n}, st.integers(0, 99))
)


@st.composite
def generate_chunks(draw) -> dict:
    meta: dict = {"id": draw(_texts), "finish_reason": draw(_finish)}
    if draw(st.booleans()):
        meta["prompt_tokens"] = draw(st.integers(0, 9) | st.none() | st.just(1.5))
    if draw(st.booleans()):
        meta["completion_tokens"] = draw(st.integers(0, 10_000) | st.just(True) | st.just(2.0))
    if draw(st.booleans()):
        # Nested look-alikes: the fast path must step aside, not read them.
        meta["extra"] = {"completion_tokens": draw(st.integers(0, 9)), "finish_reason": None}
    chunk: dict = {
        "text": draw(_texts),
        "output_ids": draw(st.lists(st.integers(0, 151551), max_size=5)),
        "meta_info": meta,
    }
    if draw(st.booleans()):
        chunk[draw(_texts)] = draw(_texts)
    if draw(st.integers(0, 9)) == 0:
        chunk["error"] = {"message": draw(_texts)}
    return chunk


def _dump(chunk: dict, compact: bool, ascii_only: bool) -> bytes:
    seps = (",", ":") if compact else (", ", ": ")
    return json.dumps(chunk, separators=seps, ensure_ascii=ascii_only).encode()


@given(
    chunk=generate_chunks(),
    compact=st.booleans(),
    ascii_only=st.booleans(),
    before=st.builds(StreamState, tokens=st.integers(0, 50), server_tokens=st.none() | st.integers(0, 50)),
)
# Found by CI on 2026-12-03: the fast path left the prompt count unread.
@example(
    chunk={
        "text": "",
        "output_ids": [],
        "meta_info": {"finish_reason": None, "prompt_tokens": 0, "completion_tokens": 0},
    },
    compact=True,
    ascii_only=False,
    before=StreamState(),
)
def test_generate_fast_path_agrees_with_json(chunk, compact, ascii_only, before):
    payload = _dump(chunk, compact, ascii_only)
    fast, slow = replace(before), replace(before)
    backend = SGLangBackend("m", True, {})
    assert backend.feed(payload, fast) == SGLangBackend.feed_parsed(json.loads(payload), slow)
    assert fast == slow


def _sim_like_chunk(n: int, finish: object = None) -> bytes:
    meta = {"id": "abc", "finish_reason": finish, "prompt_tokens": 16, "completion_tokens": n, "cached_tokens": 0}
    return _dump({"text": " tok" * n, "output_ids": list(range(n)), "meta_info": meta}, True, False)


def test_running_generate_chunks_take_the_fast_path_and_final_ones_do_not():
    assert _running_counts(_sim_like_chunk(37)) == (37, 16)
    assert _running_counts(_sim_like_chunk(37).replace(b":37", b": 37 ")) == (37, 16)
    assert _running_counts(_sim_like_chunk(37).replace(b'"prompt_tokens":16,', b"")) == (37, None)
    # A prompt count json.loads must judge (null, a float) sends the chunk there.
    assert _running_counts(_sim_like_chunk(37).replace(b'"prompt_tokens":16', b'"prompt_tokens":null')) is None
    # The final chunk carries the finish reason the client keeps: parsed in full.
    assert _running_counts(_sim_like_chunk(40, {"type": "length", "length": 40})) is None
    # Truncated or malformed numbers are never read as a shorter count.
    assert _running_counts(_sim_like_chunk(37)[:-30]) is None
    assert _running_counts(_sim_like_chunk(37).replace(b":37", b":3.7")) is None


def test_generate_stream_counts_tokens_and_keeps_the_final_reason():
    backend, state = SGLangBackend("m", True, {}), StreamState()
    got = [backend.feed(_sim_like_chunk(n), state) for n in (1, 2, 4)]
    got.append(backend.feed(_sim_like_chunk(5, {"type": "length", "length": 5}), state))
    assert got == [1, 1, 2, 1]
    assert (state.tokens, state.server_tokens, state.finish_reason, state.error) == (5, 5, "length", "")


def test_generate_error_chunk_is_an_error_not_tokens():
    state = StreamState()
    n = SGLangBackend("m", True, {}).feed(
        b'{"error": {"message": "boom", "completion_tokens": 3, "finish_reason": null}}', state
    )
    assert n == 0 and state.error == "error chunk from server: boom"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"{not json"])
def test_non_object_chunks_raise_value_error(backend, payload):
    # The client turns ValueError into an "unparseable stream chunk" failed request.
    with pytest.raises(ValueError):
        BACKENDS[backend]("m", True, {}).feed(payload, StreamState())


def test_openai_usage_only_chunk_sets_the_server_count():
    state = StreamState()
    backend = BACKENDS["openai-completions"]("m", True, {})
    assert backend.feed(b'{"choices":[{"text":" a","finish_reason":null}]}', state) == 1
    assert backend.feed(b'{"choices":[{"text":" b","finish_reason":"length"}]}', state) == 1
    assert backend.feed(b'{"choices":[],"usage":{"completion_tokens":2}}', state) == 0
    assert (state.tokens, state.server_tokens, state.finish_reason) == (2, 2, "length")
