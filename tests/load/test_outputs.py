"""The load's own answers: a run whose answers are one id repeated, or no text at all, is no
model's; a model's normal answers (the simulator's, one answer repeating a token) are not flagged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace

import pytest

from perfgate.load import OutputSample, RequestRecord, degenerate_output, run_workload
from perfgate.load._backends import OpenAICompletionsBackend, SGLangBackend, StreamState
from perfgate.profile import Workload
from perfgate.server import RunningServer, start_server
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
