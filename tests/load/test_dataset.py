"""Datasets: seeded, exact where prompts are ids, bench_serving's shapes and filters."""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.errors import LoadError
from perfgate.load import check_dataset, dataset_identity, make_requests, system_prompts, text_to_ids
from perfgate.load._dataset import draw_length
from perfgate.profile import LengthDist, Workload

W = Workload(name="w", num_prompts=64, concurrency=8, input_len=32, output_len=8)
SP = replace(W, dataset="shared-prefix", system_prompt_len=100, num_groups=4, input_len=20)


def sharegpt_file(tmp_path: Path, conversations: list, name: str = "sharegpt.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(conversations))
    return path


def conv(prompt: str, answer: str, key: str = "conversations") -> dict:
    return {"id": "x", key: [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]}


def test_random_prompts_are_seeded_exact_and_differ_between_repeats():
    a, b = make_requests(W, 10), make_requests(W, 10)
    assert [r.input_ids for r in a] == [r.input_ids for r in b]
    assert all(r.input_len == 32 and r.output_len == 8 for r in a)
    assert [r.input_ids for r in make_requests(W, 10, seed_offset=7777)] != [r.input_ids for r in a]


def test_shared_prefix_groups_share_their_system_prompt_in_every_repeat():
    prompts = system_prompts(SP)
    assert len(prompts) == 4 and all(len(p) == 100 for p in prompts)
    for offset in (0, 7777, 1_000_000):
        reqs = make_requests(SP, 64, seed_offset=offset)
        assert all(r.input_len == 120 and r.output_len == 8 for r in reqs)
        groups = [next(g for g, p in enumerate(prompts) if list(r.input_ids[:100]) == p) for r in reqs]
        # Spread evenly over the groups, in shuffled order.
        assert sorted(groups) == sorted(i % 4 for i in range(64)) and groups != sorted(groups)
    # Questions are new per repeat, system prompts are not.
    q0 = [r.input_ids[100:] for r in make_requests(SP, 8)]
    q1 = [r.input_ids[100:] for r in make_requests(SP, 8, seed_offset=7777)]
    assert not set(map(tuple, q0)) & set(map(tuple, q1))


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_normal_and_lognormal_lengths_have_the_asked_mean_and_spread(kind):
    dist = LengthDist(kind, stddev=60, min=1, max=4000)
    lengths = [r.input_len for r in make_requests(replace(W, input_len=300, input_len_distribution=dist), 4000)]
    assert statistics.mean(lengths) == pytest.approx(300, rel=0.03)
    assert statistics.pstdev(lengths) == pytest.approx(60, rel=0.08)
    if kind == "lognormal":
        # Right-skewed: the median sits below the mean.
        assert statistics.median(lengths) < statistics.mean(lengths)


def test_histogram_lengths_follow_the_bins():
    dist = LengthDist("histogram", bins=((10, 10, 3.0), (100, 200, 1.0)))
    lengths = [r.input_len for r in make_requests(replace(W, input_len=None, input_len_distribution=dist), 2000)]
    assert set(lengths) <= {10} | set(range(100, 201))
    assert lengths.count(10) / len(lengths) == pytest.approx(0.75, abs=0.04)


@given(
    n=st.integers(1, 5000),
    stddev=st.floats(0.1, 5000),
    lo=st.integers(1, 50),
    span=st.integers(0, 5000),
    seed=st.integers(0, 2**32),
    kind=st.sampled_from(["normal", "lognormal"]),
)
def test_drawn_lengths_always_lie_within_the_bounds(n, stddev, lo, span, seed, kind):
    import random

    dist = LengthDist(kind, stddev=stddev, min=lo, max=lo + span)
    x = draw_length(random.Random(seed), n, 1.0, dist)
    assert isinstance(x, int) and lo <= x <= lo + span


def test_text_to_ids_is_stable_and_counts_pre_tokens():
    text = "Hello, world! It's 2024. Don't panic."
    ids = text_to_ids(text)
    assert ids == text_to_ids(text) and len(ids) == 12
    assert all(1000 <= i < 30000 for i in ids)
    # A shared beginning is a shared prefix of ids.
    assert (
        text_to_ids("You are a helpful assistant. Say hi")[:6]
        == text_to_ids("You are a helpful assistant. Say bye")[:6]
    )


def test_sharegpt_applies_bench_servings_filters(tmp_path):
    long = " ".join(["word"] * 50)
    path = sharegpt_file(
        tmp_path,
        [
            conv("What is a radix tree, please?", "A tree of prefixes, compressed."),
            conv("hi", "Too short a prompt is dropped: one token."),
            conv("A fine prompt here", "x"),  # one-token answer: dropped
            {"id": "one-turn", "conversations": [{"from": "human", "value": "alone"}]},
            conv(long, long, key="conversation"),
            conv("Another good question to ask?", "And a good answer to it."),
        ],
    )
    w = replace(W, dataset="sharegpt", dataset_path=str(path), input_len=None, output_len=None, num_prompts=3)
    reqs = make_requests(w, 3)
    assert {r.prompt_text for r in reqs} == {"What is a radix tree, please?", long, "Another good question to ask?"}
    for r in reqs:
        assert list(r.input_ids) == text_to_ids(r.prompt_text) and r.text() == r.prompt_text
    assert sorted(r.output_len for r in reqs) == sorted(
        [len(text_to_ids("A tree of prefixes, compressed.")), 50, len(text_to_ids("And a good answer to it."))]
    )
    # context_len drops the long one; a fixed output_len overrides every answer's length.
    short = make_requests(replace(w, context_len=60, num_prompts=2), 2)
    assert long not in {r.prompt_text for r in short}
    assert {r.output_len for r in make_requests(replace(w, output_len=16), 3)} == {16}
    with pytest.raises(LoadError, match=r"has 2 usable conversations .*context_len 60.*3 are needed"):
        make_requests(replace(w, context_len=60), 3)


def test_sharegpt_identity_is_the_files_content_not_its_path(tmp_path):
    data = [conv("What is a radix tree?", "A tree of prefixes.")]
    a = replace(
        W, dataset="sharegpt", dataset_path=str(sharegpt_file(tmp_path, data, "a.json")), input_len=None, num_prompts=1
    )
    b = replace(a, dataset_path=str(sharegpt_file(tmp_path, data, "b.json")))
    assert dataset_identity(a) == dataset_identity(b) and len(dataset_identity(a)["dataset_sha256"]) == 16
    c = replace(a, dataset_path=str(sharegpt_file(tmp_path, data + data, "c.json")))
    assert dataset_identity(c) != dataset_identity(a)
    assert dataset_identity(W) == {}


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "No such file or directory; point dataset_path at a local ShareGPT JSON file (nothing is downloaded)"),
        ("{not json", "not valid JSON"),
        ('{"conversations": []}', "expected a JSON list of conversations (ShareGPT's format), got a dict"),
        ("[]", "has 0 usable conversations (of 0 with two turns"),
    ],
)
def test_unusable_sharegpt_files_are_named_before_anything_runs(tmp_path, content, fragment):
    path = tmp_path / "data.json"
    if content is not None:
        path.write_text(content)
    w = replace(W, name="chat", dataset="sharegpt", dataset_path=str(path), input_len=None, num_prompts=4)
    with pytest.raises(LoadError) as err:
        check_dataset(w)
    assert str(err.value).startswith(f"workload chat: dataset_path {path}") and fragment in str(err.value)


def test_an_edited_sharegpt_file_is_read_again(tmp_path):
    path = sharegpt_file(tmp_path, [conv("First question asked here", "first answer given")])
    w = replace(W, dataset="sharegpt", dataset_path=str(path), input_len=None, num_prompts=1)
    assert make_requests(w, 1)[0].prompt_text == "First question asked here"
    path.write_text(json.dumps([conv("A second, longer question asked", "second answer")]))
    assert make_requests(w, 1)[0].prompt_text == "A second, longer question asked"


MT = replace(W, dataset="multi-turn", num_turns=4, input_len=20, output_len=6, num_prompts=16)


@given(
    turns=st.integers(1, 5),
    count=st.integers(0, 23),
    in_len=st.integers(1, 30),
    out_len=st.integers(1, 12),
    seed=st.integers(0, 10),
    offset=st.sampled_from([0, 7777]),
)
def test_multi_turn_sessions_resend_their_history(turns, count, in_len, out_len, seed, offset):
    w = replace(MT, num_turns=turns, input_len=in_len, output_len=out_len, seed=seed)
    reqs = make_requests(w, count, seed_offset=offset)
    assert len(reqs) == count
    # Session by session, turn by turn; the last session is cut short when count is not a multiple.
    assert [(r.session, r.turn) for r in reqs] == [(i // turns, i % turns) for i in range(count)]
    for prev, r in itertools.pairwise(reqs):
        if r.turn == 0:
            continue
        # Turn k: turn k-1's prompt, a reply of its output length, a new user message.
        assert r.input_ids[: prev.input_len] == prev.input_ids
        assert r.input_len == prev.input_len + prev.output_len + in_len
        assert r.pieces[:-2] == prev.pieces and r.pieces[-2:] == (prev.output_len, in_len)
    for r in reqs:
        assert sum(r.pieces) == r.input_len and len(r.pieces) == 2 * r.turn + 1
        assert [m["role"] for m in r.messages()] == ["user", "assistant"] * r.turn + ["user"]
        assert " ".join(m["content"] for m in r.messages()) == r.text()
    assert [r.input_ids for r in make_requests(w, count, seed_offset=offset)] == [r.input_ids for r in reqs]


def test_multi_turn_sessions_are_new_in_every_repeat_and_start_at_the_session_rate():
    from perfgate.load import session_offsets_s

    a, b = make_requests(MT, 16), make_requests(MT, 16, seed_offset=7777)
    assert not {tuple(r.input_ids[:20]) for r in a} & {tuple(r.input_ids[:20]) for r in b}
    offsets = session_offsets_s(replace(MT, request_rate=2.0, pacing="constant"), a)
    # One arrival per session (4 sessions at 2/s); a later turn carries its session's offset.
    assert offsets == [0.0] * 4 + [0.5] * 4 + [1.0] * 4 + [1.5] * 4
    assert session_offsets_s(replace(W, request_rate=2.0, pacing="constant"), make_requests(W, 3)) == [0.0, 0.5, 1.0]
