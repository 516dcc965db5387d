"""Sharding a workload over client processes: same requests, complete merged records, same metrics."""

from __future__ import annotations

import asyncio
import queue
from contextlib import ExitStack
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.errors import LoadError
from perfgate.load import arrival_offsets_s, run_workload
from perfgate.load._shard import _Collector, worker_concurrency
from perfgate.metrics import compute_metrics
from perfgate.profile import Workload
from perfgate.server import start_server
from tests.support import sim_spec

W = Workload(name="w", num_prompts=30, concurrency=6, input_len=16, output_len=10, warmup_requests=2)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with ExitStack() as stack:
        yield start_server(sim_spec(), log_dir=tmp_path_factory.mktemp("sim"), stack=stack)


def test_two_processes_merge_complete_records_with_the_same_metrics(sim):
    progress = []
    single = run_workload(sim.base_url, W, model=sim.model)
    sharded = run_workload(sim.base_url, replace(W, client_processes=2), model=sim.model, on_progress=progress.append)
    assert [r.index for r in sharded.records] == list(range(W.num_prompts))
    assert all(r.ok for r in sharded.records), [r.error for r in sharded.records if r.error][:3]
    assert all(r.output_tokens == W.output_len and sum(r.chunk_tokens) == W.output_len for r in sharded.records)
    # Each answer's summary crosses the process boundary with its record (the load's own check reads it).
    assert all(r.output is not None and r.output.ids == W.output_len for r in sharded.records)
    # Both processes drew the same prompts as the single process would have.
    assert [r.input_tokens for r in sharded.records] == [r.input_tokens for r in single.records]
    # One clock across processes: every request lies inside the merged measured phase.
    assert all(sharded.start_s <= r.start_s and r.start_s + r.latency_s <= sharded.end_s for r in sharded.records)
    assert sharded.client.chunks == sum(len(r.chunk_tokens) for r in sharded.records)
    assert sharded.client.cpu_s > 0 and sharded.notes == ["client sharded over 2 processes"]
    assert progress and progress[-1].total == W.num_prompts and not progress[-1].warmup

    a = compute_metrics(single, target_concurrency=W.concurrency)
    b = compute_metrics(sharded, target_concurrency=W.concurrency)
    assert b.values.keys() == a.values.keys()
    assert (b.completed, b.failed) == (a.completed, a.failed) == (W.num_prompts, 0)
    assert b.values["total_output_tokens"] == a.values["total_output_tokens"] == W.num_prompts * W.output_len
    assert b.values["total_input_tokens"] == a.values["total_input_tokens"]


@pytest.mark.parametrize("processes", [1, 2])
def test_no_request_is_sent_before_its_slot_when_a_sleep_ends_early(sim, monkeypatch, processes):
    # uvloop's timers round to whole milliseconds and end up to ~1 ms early. Here this process's
    # sleeps end far earlier, every time; spawned client processes sleep on the real uvloop.
    sleep = asyncio.sleep

    async def early(delay: float, *args):
        await sleep(delay / 2 if delay > 0.002 else delay, *args)

    monkeypatch.setattr(asyncio, "sleep", early)
    paced = replace(W, request_rate=200.0, pacing="constant", client_processes=processes)
    run = run_workload(sim.base_url, paced, model=sim.model)
    due_s = arrival_offsets_s(paced, paced.num_prompts)
    assert all(r.ok for r in run.records)
    assert ("client sharded over 2 processes" in run.notes) == (processes == 2)
    assert all(r.start_s - run.start_s >= due_s[r.index] for r in run.records), [
        (r.index, r.start_s - run.start_s, due_s[r.index])
        for r in run.records
        if r.start_s - run.start_s < due_s[r.index]
    ][:3]


def test_more_processes_than_streams_is_refused_before_anything_runs():
    with pytest.raises(LoadError, match=r"workload w: client_processes = 7 cannot share concurrency = 6"):
        run_workload("http://127.0.0.1:9", replace(W, client_processes=7))


@given(concurrency=st.integers(1, 5000), data=st.data())
def test_concurrency_split_is_even_and_complete(concurrency, data):
    n = data.draw(st.integers(1, concurrency))
    shares = [worker_concurrency(concurrency, n, k) for k in range(n)]
    assert sum(shares) == concurrency
    assert min(shares) >= 1 and max(shares) - min(shares) <= 1


class _DeadProcess:
    exitcode = 1

    def is_alive(self) -> bool:
        return False


def test_a_worker_that_dies_without_results_fails_the_run_with_its_exit_code():
    out: queue.Queue = queue.Queue()
    out.put(("ready", 0, None))
    with pytest.raises(LoadError, match=r"workload w: client process 2 of 2 exited with code 1 before it was ready"):
        _Collector(W, [_DeadProcess(), _DeadProcess()], out).collect("ready", None, None)


def test_a_worker_error_message_fails_the_run_with_its_reason():
    out: queue.Queue = queue.Queue()
    out.put(("error", 1, "OSError: boom"))
    with pytest.raises(LoadError, match=r"client process 2 of 2 failed: OSError: boom"):
        _Collector(W, [_DeadProcess(), _DeadProcess()], out).collect("done", None, None)
