"""The simulator's toy model: a pure function of the prefix, and each fault a different wrong model."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.sim._model import BATCH_JITTER, ToyModel
from perfgate.sim._options import model_faults_from_env

VOCAB = 151552
prefixes = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12)


@given(prefixes)
def test_teacher_forcing_the_greedy_output_gives_its_logprobs(prompt: list[int]) -> None:
    model = ToyModel(VOCAB)
    greedy = model.greedy(prompt, 8, top_n=2)
    ids = [*prompt, *(s.token for s in greedy)]
    forced = model.teacher_forced(ids, len(prompt), top_n=2)
    assert [(s.token, s.logprob) for s in forced] == [(s.token, s.logprob) for s in greedy]
    assert all(s.top[0][0] == s.token and s.top[0][1] - s.top[1][1] > 0.19 for s in greedy)


@given(prefixes, st.integers(2, 4096))
def test_batching_moves_logprobs_within_the_jitter_only(prompt: list[int], batch: int) -> None:
    alone, batched = ToyModel(VOCAB).distribution(prompt, 1), ToyModel(VOCAB).distribution(prompt, batch)
    assert [t for t, _ in alone[0]] == [t for t, _ in batched[0]]
    assert all(abs(a - b) <= BATCH_JITTER for (_, a), (_, b) in zip(alone[0], batched[0], strict=True))


def _changed_share(model: ToyModel, batch: int = 1) -> float:
    rng = random.Random(7)
    contexts = [[rng.randrange(VOCAB) for _ in range(3)] for _ in range(4000)]
    right = ToyModel(VOCAB)
    return sum(model.distribution(c, batch)[0][0][0] != right.distribution(c)[0][0][0] for c in contexts) / 4000


@pytest.mark.parametrize("rate", [0.01, 0.05, 0.2])
def test_the_corrupt_rate_is_the_share_of_changed_argmaxes(rate: float) -> None:
    assert _changed_share(ToyModel(VOCAB, corrupt_rate=rate)) == pytest.approx(rate, abs=0.01)


def test_the_batch_fault_appears_only_above_its_batch() -> None:
    model = ToyModel(VOCAB, corrupt_above_batch=16)
    assert _changed_share(model, 16) == 0
    assert _changed_share(model, 17) == pytest.approx(0.05, abs=0.01)


def test_nan_logprobs_keep_the_tokens() -> None:
    nan, right = ToyModel(VOCAB, nan_logprobs=True), ToyModel(VOCAB)
    got, want = nan.greedy([1, 2, 3], 5), right.greedy([1, 2, 3], 5)
    assert [s.token for s in got] == [s.token for s in want] and all(math.isnan(s.logprob) for s in got)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PERFGATE_SIM_CORRUPT_RATE": "1.5"}, "PERFGATE_SIM_CORRUPT_RATE='1.5' is not a share of tokens"),
        ({"PERFGATE_SIM_CORRUPT_RATE": "x"}, "is not a share of tokens"),
        ({"PERFGATE_SIM_CORRUPT_ABOVE_BATCH": "0"}, "PERFGATE_SIM_CORRUPT_ABOVE_BATCH='0' is not a batch size"),
        ({"PERFGATE_SIM_NAN_LOGPROBS": "maybe"}, "PERFGATE_SIM_NAN_LOGPROBS='maybe' is not true or false"),
        ({"PERFGATE_SIM_LOAD_ONE_TOKEN": "2"}, "PERFGATE_SIM_LOAD_ONE_TOKEN='2' is not true or false"),
        ({"PERFGATE_SIM_CUT_ANSWERS": "-1"}, "PERFGATE_SIM_CUT_ANSWERS='-1' is not a token count"),
        ({"PERFGATE_SIM_NO_TOP_LOGPROBS": "maybe"}, "PERFGATE_SIM_NO_TOP_LOGPROBS='maybe' is not true or false"),
    ],
)
def test_bad_fault_settings_are_refused_with_the_fix(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="unset it") as err:
        model_faults_from_env(env)
    assert message in str(err.value)


@given(prefixes, st.integers(1, 4096), st.sampled_from([0.0, 0.3]), st.sampled_from([0, 8]), st.booleans())
def test_the_loads_next_token_is_the_distributions_most_likely(
    prompt: list[int], batch: int, rate: float, above: int, nan: bool
) -> None:
    # The load's answers take the cheap path; scoring them takes the full one: they must agree,
    # faults included (a batch-dependent one corrupts the load's tokens in a full batch only).
    model = ToyModel(VOCAB, corrupt_rate=rate, corrupt_above_batch=above, nan_logprobs=nan)
    assert model.next_token(prompt, batch) == model.distribution(prompt, batch)[0][0][0]
