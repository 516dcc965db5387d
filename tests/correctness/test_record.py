"""The record round-trips, and refuses every shape it did not write with a message naming the field."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.correctness import ProbeRecord, PromptRecord

lp = st.floats(-50, 0, allow_nan=False)
margin = st.one_of(st.none(), st.floats(-5, 50, allow_nan=False))


@st.composite
def records(draw: st.DrawFn) -> ProbeRecord:
    prompts = []
    for i in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 10))
        tokens = tuple(draw(st.lists(st.integers(0, 2**31), min_size=n, max_size=n)))
        prompts.append(
            PromptRecord(
                i,
                tokens,
                tuple(draw(st.lists(lp, min_size=n, max_size=n))),
                tuple(draw(st.lists(margin, min_size=n, max_size=n))),
            )
        )
    api = draw(st.sampled_from(["sglang", "openai-completions", "openai-chat"]))
    return ProbeRecord(api, draw(st.integers(1, 1024)), tuple(prompts))


@given(records())
def test_round_trip(record: ProbeRecord) -> None:
    assert ProbeRecord.from_dict(record.to_dict()) == record


def test_a_non_finite_logprob_is_never_written() -> None:
    record = ProbeRecord("sglang", 1, (PromptRecord(0, (1,), (math.nan,), (None,)),))
    with pytest.raises(ValueError, match="prompt 0 position 0"):
        record.to_dict()


def _good() -> dict[str, Any]:
    return ProbeRecord("sglang", 8, (PromptRecord(0, (1, 2), (-0.1, -0.2), (0.5, None)),)).to_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema=2), "schema 2"),
        (lambda d: d.update(api=3), "api"),
        (lambda d: d.update(concurrency=0), "concurrency"),
        (lambda d: d.update(concurrency=True), "concurrency"),
        (lambda d: d.update(prompts=[]), "prompts must be a non-empty list"),
        (lambda d: d["prompts"][0].update(index=3), "by index"),
        (lambda d: d["prompts"][0].update(tokens=[1, -2]), r"prompts\[0\].tokens"),
        (lambda d: d["prompts"][0].update(logprobs=[-0.1]), r"prompts\[0\].logprobs"),
        (lambda d: d["prompts"][0].update(logprobs=[-0.1, 0.5]), r"logprobs\[1\] must be a finite number <= 0"),
        (lambda d: d["prompts"][0].update(logprobs=[-0.1, "x"]), r"logprobs\[1\]"),
        (lambda d: d["prompts"][0].update(margins=[0.5, math.inf]), r"margins\[1\]"),
        (lambda d: d["prompts"].__setitem__(0, "x"), r"prompts\[0\] must be an object"),
    ],
)
def test_malformed_records_name_the_field(change: Any, message: str) -> None:
    data = _good()
    change(data)
    with pytest.raises(ValueError, match=message):
        ProbeRecord.from_dict(data)


@pytest.mark.parametrize("data", [None, [], "record", 3])
def test_a_record_that_is_not_an_object(data: Any) -> None:
    with pytest.raises(ValueError, match="must be an object"):
        ProbeRecord.from_dict(data)
