"""The load's own answers: a run whose answers are one id repeated, or no text at all, is no
model's; a model's normal answers (the simulator's, one answer repeating a token) are not flagged."""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace

import pytest

from perfgate.load import KeptAnswer, OutputSample, RequestRecord, RequestSpec, degenerate_output, run_workload
from perfgate.load._backends import OpenAICompletionsBackend, SGLangBackend, StreamState
from perfgate.load._plan import answer_sample
from perfgate.profile import Workload
from perfgate.server import RunningServer, start_server
from perfgate.sim._model import ToyModel
from tests.support import sim_spec

W = Workload(name="w", num_prompts=12, concurrency=4, input_len=16, output_len=8, warmup_requests=0)


def _rec(index: int, output: OutputSample | None, error: str = "") -> RequestRecord:
    return RequestRecord(
        index=index, input_tokens=8, requested_output_tokens=8, latency_s=1.0, error=error, output=output
    )


def _ids(*ids: int, text: bool = True) -> OutputSample:
    one = ids[0] if ids and ids.count(ids[0]) == len(ids) else None
    return OutputSample(ids=len(ids), one_id=one, tokens=len(ids), text=text)


def test_every_answer_one_and_the_same_id_names_workload_request_and_positions() -> None:
    records = [_rec(0, None, error="stream stalled"), _rec(1, _ids(7, 7, 7)), _rec(2, _ids(7, 7, 7, 7))]
    assert degenerate_output("chat", records) == (
        "workload chat: the load's answers are not a model's: every output token of all 2 completed answers is "
        "token id 7; first: request 1, positions 0-2"
    )


@pytest.mark.parametrize(
    "samples",
    [
        # One answer repeating a token is a model's right.
        [_ids(7, 7, 7, 7)],
        [_ids(7, 7, 7), _ids(1, 2, 3)],
        # Each prompt collapsing to a token of its own is not one id for all.
        [_ids(7, 7, 7), _ids(8, 8, 8)],
        # Single-id answers of one token say nothing.
        [_ids(7), _ids(7)],
        # No ids (OpenAI APIs, an SGLang server without output_ids).
        [OutputSample(0, None, 8, True), OutputSample(0, None, 8, True)],
    ],
)
def test_answers_a_model_can_give_are_not_flagged(samples: list[OutputSample]) -> None:
    assert degenerate_output("w", [_rec(i, s) for i, s in enumerate(samples)]) == ""


def test_no_text_in_any_answer_that_carried_tokens() -> None:
    records = [_rec(0, _ids(1, 2, 3, text=False)), _rec(1, OutputSample(0, None, 5, False))]
    assert degenerate_output("w", records) == (
        "workload w: the load's answers are not a model's: none of the 2 completed answers that carried tokens had "
        "any text; first: request 0, 3 output ids from position 0 and no text"
    )
    openai = [_rec(4, OutputSample(0, None, 5, False)), _rec(5, OutputSample(0, None, 6, False))]
    assert "first: request 4, 5 tokens counted by the server from position 0 and no text" in degenerate_output(
        "w", openai
    )
    # Special tokens spelled as no text in some answers (EOS under ignore_eos) are a model's right.
    assert degenerate_output("w", [records[0], _rec(2, _ids(4, 5))]) == ""


def test_sglang_answer_is_read_from_the_last_parsed_chunk() -> None:
    backend = SGLangBackend("m", True, {})
    state = StreamState()
    last = {"text": "XXX", "output_ids": [9, 9, 9], "meta_info": {"completion_tokens": 3, "finish_reason": "length"}}
    backend.feed(json.dumps(last).encode(), state)
    assert backend.output_sample(state) == OutputSample(3, 9, 3, True)
    without = StreamState()
    backend.feed(b'{"text":"ab","meta_info":{"completion_tokens":2,"finish_reason":"length"}}', without)
    assert backend.output_sample(without) is None
    # --skip-tokenizer-init: ids without a text field say nothing about text.
    ids_only = StreamState()
    backend.feed(b'{"output_ids":[5,6],"meta_info":{"completion_tokens":2,"finish_reason":"length"}}', ids_only)
    assert backend.output_sample(ids_only) == OutputSample(2, None, 2, None)
    assert (
        degenerate_output("w", [_rec(0, OutputSample(2, None, 2, None)), _rec(1, OutputSample(3, None, 3, None))]) == ""
    )
    state = StreamState(content_chunks=0, server_tokens=4)
    assert OpenAICompletionsBackend("m", True, {}).output_sample(state) == OutputSample(0, None, 4, False)


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, RunningServer]]:
    """The simulator as it is, and with its load answers rewritten to one token."""
    one_token = replace(sim_spec(), env={"PERFGATE_SIM_LOAD_ONE_TOKEN": "1"})
    with ExitStack() as stack:
        yield (
            start_server(sim_spec(), log_dir=tmp_path_factory.mktemp("sim"), stack=stack),
            start_server(one_token, log_dir=tmp_path_factory.mktemp("one"), stack=stack),
        )


@pytest.mark.parametrize("backend", ["sglang", "openai-completions", "openai-chat"])
def test_the_simulators_answers_pass_and_its_one_token_fault_does_not(
    sims: tuple[RunningServer, RunningServer], backend: str
) -> None:
    w = replace(W, backend=backend)
    sim, one_token = sims
    run = run_workload(sim.base_url, w, model=sim.model)
    assert all(r.ok and r.output is not None for r in run.records)
    assert degenerate_output(w.name, run.records) == ""
    run = run_workload(one_token.base_url, w, model=one_token.model)
    problem = degenerate_output(w.name, run.records)
    if backend == "sglang":
        assert problem.startswith("workload w: the load's answers are not a model's: every output token of all 12")
        assert "token id 1000; first: request 0, positions 0-7" in problem
    else:
        # Text without ids: "XXXXXXXX" could be a model's answer; only scoring the answer would tell.
        assert problem == ""


@pytest.mark.parametrize(("requests", "n", "expected"), [(32, 4, {4, 12, 20, 28}), (3, 8, {0, 1, 2}), (10, 0, set())])
def test_the_answers_kept_are_spread_over_the_measured_requests(requests: int, n: int, expected: set[int]) -> None:
    assert answer_sample(requests, n) == expected


def test_the_sampled_answers_are_kept_whole_and_are_the_simulators_model(
    sims: tuple[RunningServer, RunningServer],
) -> None:
    # The simulator answers the load's /generate with its toy model (the scoring's reference); the
    # answers kept are the ones sampled, prompt and output ids exactly as sent and streamed.
    sim, _ = sims
    run = run_workload(sim.base_url, W, model=sim.model, keep_answers=4)
    assert run.kept_for == answer_sample(W.num_prompts, 4) == {1, 4, 7, 10}
    kept = {r.index: r.kept for r in run.records if r.kept is not None}
    assert set(kept) == run.kept_for
    model = ToyModel(151552)  # the simulator's default vocabulary (GLM-5's)
    for answer in kept.values():
        assert len(answer.prompt_ids) == W.input_len
        assert list(answer.output_ids) == [s.token for s in model.greedy(list(answer.prompt_ids), W.output_len)]
    # OpenAI streams carry text alone: nothing to keep.
    oai = run_workload(sim.base_url, replace(W, backend="openai-completions"), model=sim.model, keep_answers=4)
    assert all(r.ok and r.kept is None for r in oai.records)


def test_an_answer_whose_last_chunk_holds_only_its_last_ids_is_not_kept() -> None:
    # --incremental-streaming-output: the final chunk's output_ids are the last delta, not the answer.
    spec = RequestSpec([5, 6, 7], 4)
    whole = StreamState(server_tokens=4, answer={"output_ids": [1, 2, 3, 4], "text": "abcd"})
    expected = KeptAnswer(array("i", [5, 6, 7]), array("i", [1, 2, 3, 4]), "abcd")
    assert SGLangBackend("m", True, {}).kept_answer(spec, whole) == expected
    delta = StreamState(server_tokens=4, answer={"output_ids": [4], "text": "d"})
    assert SGLangBackend("m", True, {}).kept_answer(spec, delta) is None
    odd = StreamState(server_tokens=2, answer={"output_ids": [1, "2"], "text": "ab"})
    assert SGLangBackend("m", True, {}).kept_answer(spec, odd) is None
