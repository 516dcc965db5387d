"""The fault matrix of the load client: servers that close connections, count nothing, fail requests,
answer with no model."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from array import array
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from perfgate.load import ClientStats, LoadRun, RequestRecord, run_workload
from perfgate.load._selfcheck import ClientLimits, client_stats, merge_client_stats
from perfgate.metrics import compute_metrics
from perfgate.profile import Workload
from perfgate.server import start_server
from tests.faults.conftest import Gate, free_port
from tests.support import sim_spec

LYING_PROXY = Path(__file__).with_name("lying_proxy.py")

W = Workload(name="w", num_prompts=24, concurrency=1, input_len=8, output_len=6, warmup_requests=2)


def test_reused_connection_closed_by_the_server_is_sent_again_once(quirky) -> None:
    server = quirky("--drop-reused")
    run = run_workload(server.base_url, W)
    assert all(r.ok for r in run.records), [r.error for r in run.records if r.error]
    # Up to every second request finds its pooled connection dropped (the retry's connection is
    # not pooled); how many depends on when aiohttp returns a connection to its pool.
    assert any(r.retried for r in run.records)
    assert any("sent again on a fresh connection" in n and "keep_alive = false" in n for n in run.notes)
    metrics = compute_metrics(run, target_concurrency=1)
    assert metrics.values["completed"] == W.num_prompts and metrics.failed == 0


def test_keep_alive_off_opens_a_connection_per_request(quirky) -> None:
    server = quirky("--drop-reused")
    run = run_workload(server.base_url, W, keep_alive=False)
    assert all(r.ok and not r.retried for r in run.records)
    assert not any("fresh connection" in n for n in run.notes)


def test_connection_close_is_honoured(quirky) -> None:
    server = quirky("--close-header")
    run = run_workload(server.base_url, replace(W, concurrency=4))
    assert all(r.ok and not r.retried for r in run.records)


def test_sharded_client_retries_too(quirky) -> None:
    server = quirky("--drop-reused")
    run = run_workload(server.base_url, replace(W, concurrency=2, client_processes=2))
    assert all(r.ok for r in run.records)
    assert any("sent again on a fresh connection" in n for n in run.notes)


def test_several_tokens_per_chunk_without_counts_is_not_a_short_stream(quirky) -> None:
    server = quirky("--tokens-per-chunk", "3", "--no-counts")
    run = run_workload(server.base_url, W)
    # Two chunks of three tokens: the client cannot know it got six, and must not claim it got two.
    assert all(r.ok for r in run.records), [r.error for r in run.records if r.error]
    assert all(r.output_tokens is None for r in run.records)
    notes = compute_metrics(run, target_concurrency=1).notes
    assert any("carried no server token count" in n for n in notes)


def test_short_stream_with_server_counts_still_fails(quirky) -> None:
    server = quirky("--tokens-per-chunk", "3")
    run = run_workload(server.base_url, replace(W, output_len=7, warmup_requests=0))
    # The quirky server counts honestly and stops at max_new_tokens: complete, never short.
    assert all(r.ok and r.output_tokens == 7 for r in run.records)


def test_warmup_failures_within_the_allowance_are_a_note(quirky) -> None:
    # A stalled stream fails; two warmup requests of which both fail exceed any allowance below 100 %.
    server = quirky("--hang-after", "2")
    w = replace(W, num_prompts=2, warmup_requests=2, stall_timeout_s=0.5, max_error_rate=1.0)
    run = run_workload(server.base_url, w)
    assert any("2 of 2 warmup requests" in n and "within the allowed error rate 100.0%" in n for n in run.notes)
    assert all(r.error.startswith("stream stalled") for r in run.records)


def _record(index: int, start_s: float, latency_s: float, error: str = "") -> RequestRecord:
    rec = RequestRecord(
        index=index, input_tokens=8, requested_output_tokens=4, start_s=start_s, latency_s=latency_s, error=error
    )
    if not error:
        rec.ttft_s = latency_s / 4
        rec.chunk_offsets_s = array("f", [latency_s / 4 * k for k in range(1, 5)])
        rec.chunk_tokens = array("H", [1, 1, 1, 1])
        rec.output_tokens = 4
    return rec


def test_failed_requests_leave_the_in_flight_count_when_they_fail() -> None:
    client = ClientStats(
        cpu_s=0.1, wall_s=10.0, chunks=8, cpu_us_per_chunk=1.0, cpu_share=0.01, loop_lag_p99_ms=1.0, loop_lag_max_ms=1.0
    )
    # Two requests fail 0.5 s in; two succeed after 10 s.
    records = [
        _record(0, 100.0, 10.0),
        _record(1, 100.0, 10.0),
        _record(2, 100.0, 0.5, "HTTP 500"),
        _record(3, 100.0, 0.5, "HTTP 500"),
    ]
    run = LoadRun("w", "sglang", 100.0, 110.0, records, client, 0, False)
    timeline = compute_metrics(run, target_concurrency=4).timeline
    assert timeline.in_flight[0] == 4
    assert timeline.in_flight[10] == 2 and timeline.in_flight[-1] == 2


@pytest.mark.parametrize(
    ("cpu_s", "lags_s", "limit"),
    [
        (0.95, [0.001] * 100, "saturated"),
        (0.95, [0.5] * 100, "saturated"),
        (0.05, [0.5] * 100, "starved"),
        (0.05, [0.001] * 100, ""),
    ],
)
def test_saturated_and_starved_get_their_own_advice(cpu_s: float, lags_s: list[float], limit: str) -> None:
    stats = client_stats(cpu_s, 1.0, 100, lags_s, ClientLimits(max_lag_p99_ms=200, max_cpu_share=0.9))
    assert stats.limit == limit and stats.valid == (not limit)
    if limit == "saturated":
        assert "client_processes" in stats.advice
    elif limit == "starved":
        assert "quieter host" in stats.advice and "client_processes" not in stats.advice
    merged = merge_client_stats([stats, client_stats(0.05, 1.0, 100, [0.001] * 100, ClientLimits())], 1.0)
    assert merged.limit == limit


@pytest.mark.parametrize("quirk", ["--split-writes", "--crlf", "--close-delimited"])
def test_streams_split_across_reads_crlf_or_ended_by_close_are_read_whole(quirky, quirk: str) -> None:
    server = quirky(quirk, "--tokens-per-chunk", "2")
    run = run_workload(server.base_url, replace(W, concurrency=4, output_len=9))
    assert all(r.ok for r in run.records), [r.error for r in run.records if r.error][:3]
    # Chunks of 2, 2, 2, 2 and 1 tokens, each counted in the chunk it came in.
    assert all(list(r.chunk_tokens) == [2, 2, 2, 2, 1] and r.output_tokens == 9 for r in run.records)
    assert all(len(r.chunk_offsets_s) == 5 for r in run.records)


def test_an_encoded_stream_is_a_failed_request_that_says_so(quirky) -> None:
    server = quirky("--gzip-header")
    run = run_workload(server.base_url, replace(W, warmup_requests=0, num_prompts=3))
    assert [r.error for r in run.records] == [
        "invalid response: the stream is encoded (Content-Encoding: gzip) although the client asked for identity"
    ] * 3


# A small probe: the case is the load's answers, which the probe never sees.
_PROBE = "[correctness]\nprompts = 8\noutput_len = 16\nduplicates = 2\n"


def test_load_answers_rewritten_to_one_token_fail_the_run_while_the_probe_passes(gate: Gate) -> None:
    # Issue 34, item 2: the probe's requests pass through, the load's answers are all "X" (one
    # id); before, the run passed. The unchanged simulator records and passes.
    profile = gate.profile(correctness=_PROBE)
    honest = gate.run("--perf-update-baselines", profile=profile)
    assert honest.ret == 0, honest.out[-3000:]
    assert "not a model's" not in honest.out
    recorded = gate.baseline_bytes()
    outcome = gate.run("-rA", profile=profile, env={"PERFGATE_SIM_LOAD_ONE_TOKEN": "1"})
    assert outcome.ret == int(pytest.ExitCode.TESTS_FAILED), outcome.out[-3000:]
    assert re.search(r"PASSED \S+::test_correctness", outcome.out), outcome.out[-3000:]
    message = (
        "repeat 1: workload c16-in32-out16: the load's answers are not a model's: every output token of all 32 "
        "completed answers is token id 1000; first: request 0, positions 0-15"
    )
    assert message in outcome.out, outcome.out[-3000:]
    assert re.search(r"FAILED \S+::test_run_is_valid\[c16-in32-out16\]", outcome.out), outcome.out[-3000:]
    assert "Traceback" not in outcome.out
    assert gate.baseline_bytes() == recorded


@pytest.mark.parametrize(
    ("rewrite", "message"),
    [
        # The case of issue 34 as it was found; before, exit 0.
        (
            "one",
            "repeat 1: workload c16-in32-out16: the load's answers are not a model's: every output token of all 32 "
            "completed answers is token id 1000; first: request 0, positions 0-15",
        ),
        # Plausible answers of the wrong tokens: only the sampled answers, scored, show it.
        (
            "shift",
            "repeat 1: workload c16-in32-out16: the load's answers are not the model's greedy tokens: request 1, "
            "output position 0: it answered token ",
        ),
        # The model's ids, other text: the text must hold the tokens' texts as the server spells them.
        (
            "text",
            "repeat 1: workload c16-in32-out16: the load's answers' text does not spell their ids: request 1: 0 of 16 "
            "of its tokens' texts",
        ),
    ],
)
def test_a_proxy_rewriting_the_loads_answers_fails_the_run(
    gate: Gate, tmp_path_factory: pytest.TempPathFactory, rewrite: str, message: str
) -> None:
    with ExitStack() as stack:
        sim = start_server(sim_spec(), log_dir=tmp_path_factory.mktemp("sim"), stack=stack)
        port = free_port()
        proxy = subprocess.Popen(
            [sys.executable, str(LYING_PROXY), "--upstream", sim.base_url, "--port", str(port), "--rewrite", rewrite],
            stdout=subprocess.DEVNULL,
        )
        stack.callback(proxy.wait, timeout=10)
        stack.callback(proxy.kill)
        url = f"http://127.0.0.1:{port}"
        _wait_for(url + "/health")
        # The probe on (opt-in when attached): its requests, and the scoring's, pass through.
        probe = _PROBE + "enabled = true\n"
        outcome = gate.run("-rfE", kind="attach", server=f'base_url = "{url}"', correctness=probe)
    assert outcome.ret == int(pytest.ExitCode.TESTS_FAILED), outcome.out[-3000:]
    assert message in outcome.out, outcome.out[-3000:]
    assert re.search(r"FAILED \S+::test_run_is_valid\[c16-in32-out16\]", outcome.out), outcome.out[-3000:]
    assert "Traceback" not in outcome.out


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer")
