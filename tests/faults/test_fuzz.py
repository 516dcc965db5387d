"""Bad input never escapes as a bare exception: a clear error of perfgate's own, or success.

The baseline reader answers any file content with a Baseline or a BaselineError; each stream
backend answers any ``data:`` payload with a token count or a ValueError, which the client
turns into a failed request ("unparseable stream chunk").
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.baseline import Baseline
from perfgate.baseline._store import read_baseline
from perfgate.errors import BaselineError
from perfgate.load._backends import BACKENDS, StreamState

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)

# Documents shaped like a baseline, with any part replaced by anything.
baseline_like = st.fixed_dictionaries(
    {},
    optional={
        "schema_version": st.integers(-1, 3) | json_values,
        "profile": st.text(max_size=5) | json_values,
        "workload": st.text(max_size=5) | json_values,
        "fingerprint": st.dictionaries(
            st.sampled_from(
                [
                    "gpu_model",
                    "gpu_count",
                    "power_limit_w",
                    "driver_major",
                    "engine",
                    "model",
                    "server_args",
                    "workload",
                    "cpu",
                ]
            ),
            json_values,
        ),
        "repeats": st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=3), max_size=3) | json_values,
        "telemetry": json_values,
        "provenance": json_values,
    },
)


@given(doc=baseline_like | json_values)
def test_baseline_reader_gives_a_baseline_or_a_baseline_error(doc: object) -> None:
    try:
        Baseline.from_dict(doc, Path("baselines/p/w--x.json"))
    except BaselineError as e:
        assert "baselines/p/w--x.json" in str(e)


@given(raw=st.binary(max_size=200))
def test_baseline_file_of_any_bytes(raw: bytes, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("b") / "w--x.json"
    path.write_bytes(raw)
    try:
        read_baseline(path)
    except BaselineError as e:
        assert str(path) in str(e)


chunk_like = st.fixed_dictionaries(
    {},
    optional={
        "text": json_values,
        "meta_info": st.dictionaries(
            st.sampled_from(["completion_tokens", "finish_reason", "prompt_tokens"]), json_values
        )
        | json_values,
        "error": json_values,
        "usage": st.dictionaries(st.sampled_from(["completion_tokens", "prompt_tokens"]), json_values) | json_values,
        "choices": st.lists(
            st.dictionaries(st.sampled_from(["text", "delta", "finish_reason", "index"]), json_values) | json_values,
            max_size=3,
        )
        | json_values,
    },
)
payloads = (
    st.binary(max_size=120)
    | chunk_like.map(lambda d: json.dumps(d).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
)


@settings(max_examples=600)
@given(payload=payloads, backend=st.sampled_from(sorted(BACKENDS)))
def test_stream_backends_count_tokens_or_raise_value_error(payload: bytes, backend: str) -> None:
    state = StreamState()
    try:
        new = BACKENDS[backend]("m", True, {}).feed(payload, state)
    except ValueError:
        return
    assert isinstance(new, int) and new >= 0
    assert state.tokens >= 0
    assert state.server_tokens is None or isinstance(state.server_tokens, int)
