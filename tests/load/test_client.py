"""The load client against the real simulator over loopback HTTP: every backend, every way a stream can fail."""

from __future__ import annotations

import asyncio
import signal
import time
from contextlib import ExitStack
from dataclasses import replace

import httpx
import pytest

from perfgate.errors import LoadError
from perfgate.load import ClientLimits, make_requests, run_workload
from perfgate.load._backends import BACKENDS
from perfgate.load._plan import LoadPlan
from perfgate.metrics import compute_metrics
from perfgate.profile import Workload
from perfgate.server import start_server
from tests.support import sim_spec

W = Workload(name="w", num_prompts=24, concurrency=8, input_len=16, output_len=12, warmup_requests=2)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with ExitStack() as stack:
        yield start_server(sim_spec(), log_dir=tmp_path_factory.mktemp("sim"), stack=stack)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    spec = sim_spec(error_chunk_rate=0.2, truncate_rate=0.2, short_rate=0.2, http_error_rate=0.1, seed=3)
    with ExitStack() as stack:
        yield start_server(spec, log_dir=tmp_path_factory.mktemp("faulty"), stack=stack)


@pytest.mark.parametrize("backend", ["sglang", "openai-completions", "openai-chat"])
def test_every_backend_gets_exact_server_counted_tokens(sim, backend):
    w = replace(W, backend=backend)
    run = run_workload(sim.base_url, w, model=sim.model)
    assert len(run.records) == w.num_prompts
    assert all(r.ok for r in run.records), [r.error for r in run.records if r.error][:3]
    assert all(r.output_tokens == w.output_len for r in run.records)
    assert all(sum(r.chunk_tokens) == w.output_len for r in run.records)
    if backend != "openai-chat":
        # Token-id prompts have exact lengths.
        assert all(r.input_tokens == w.input_len for r in run.records)
    else:
        # Text prompts: the server's usage.prompt_tokens counts them (one word each here, plus the chat template).
        assert all(r.input_tokens > w.input_len for r in run.records)
    m = compute_metrics(run, target_concurrency=w.concurrency)
    assert m.values["total_output_tokens"] == w.num_prompts * w.output_len
    # Chunks that reach a starved client in one read share a timestamp: TPOT may measure 0 here.
    assert m.values["mean_tpot_ms"] >= 0 and m.values["mean_ttft_ms"] > 0


@pytest.fixture(scope="module")
def sim4(tmp_path_factory):
    """SGLang's --stream-interval 4: most chunks carry four tokens."""
    with ExitStack() as stack:
        # Slower steps than the other fixtures': the steady window needs several 0.1 s bins.
        yield start_server(
            sim_spec(stream_interval=4, time_scale=0.05), log_dir=tmp_path_factory.mktemp("sim4"), stack=stack
        )


@pytest.mark.parametrize("continuous_usage", [True, False], ids=["usage-per-chunk", "usage-at-end"])
@pytest.mark.parametrize("backend", ["sglang", "openai-completions", "openai-chat"])
def test_multi_token_chunks_count_every_token_on_every_backend(sim4, backend, continuous_usage):
    extra = {} if continuous_usage or backend == "sglang" else {"stream_options": {"include_usage": True}}
    w = replace(W, backend=backend, num_prompts=64, concurrency=16, output_len=48, warmup_requests=0, extra_body=extra)
    since = time.monotonic()
    run = run_workload(sim4.base_url, w, model=sim4.model)
    assert all(r.ok for r in run.records), [r.error for r in run.records if r.error][:3]
    # Most chunks carry several tokens, and every token is counted in the chunk it came in.
    assert max(len(r.chunk_tokens) for r in run.records) < w.output_len / 2
    assert all(sum(r.chunk_tokens) == r.output_tokens == w.output_len for r in run.records)
    truth = httpx.get(f"{sim4.base_url}/sim/truth", params={"since": since}).json()["aggregates"]
    m = compute_metrics(run, target_concurrency=w.concurrency)
    assert m.values["total_output_tokens"] == truth["output_tokens"] == w.num_prompts * w.output_len
    # The steady window counts tokens from the chunks: it agrees with the whole run's throughput
    # (it read 4x low when each chunk counted as one token).
    assert m.steady is not None
    assert 0.6 < m.values["steady_output_throughput"] / m.values["output_throughput"] < 1.6


def test_broken_streams_are_failed_requests_with_reasons(faulty):
    w = replace(W, num_prompts=60, warmup_requests=0)
    run = run_workload(faulty.base_url, w, model=faulty.model)
    kinds = {r.error.split(":", 1)[0] for r in run.records if r.error}
    assert {"error chunk from server", "truncated stream", "short stream"} <= kinds
    assert any(k.startswith("HTTP 500") for k in kinds)
    m = compute_metrics(run, target_concurrency=w.concurrency)
    ok = [r for r in run.records if r.ok]
    assert m.values["total_output_tokens"] == sum(r.output_tokens for r in ok)
    assert m.failed == len(run.records) - len(ok) > 0


def test_failed_warmup_stops_the_workload_with_the_reason(faulty):
    w = replace(W, warmup_requests=20)
    with pytest.raises(LoadError, match=r"workload w: \d+ of 20 warmup requests to .* failed; first: "):
        run_workload(faulty.base_url, w, model=faulty.model)


def test_late_idle_client_is_marked_starved_with_its_own_advice(sim):
    # A progress callback that hogs the event loop starves the client just as CPU contention would.
    def hog(_):
        time.sleep(0.3)

    # Long enough (~1.5 s at the fixture's time scale) for several progress ticks.
    w = replace(W, warmup_requests=0, output_len=400)
    run = run_workload(sim.base_url, w, model=sim.model, on_progress=hog, limits=ClientLimits(max_lag_p99_ms=100))
    assert run.client.wall_s > 1.0
    assert not run.client.valid and run.client.limit == "starved"
    assert "event-loop lag" in run.client.reason and "while the client used only" in run.client.reason
    # Starved is not saturated: more client processes would not help, a quieter host would.
    assert "quieter host" in run.client.advice and "client_processes" not in run.client.advice
    healthy = run_workload(sim.base_url, w, model=sim.model, limits=ClientLimits(max_lag_p99_ms=100, max_cpu_share=1.5))
    assert healthy.client.chunks == w.num_prompts * w.output_len
    assert healthy.client.valid and healthy.client.advice == ""


def test_the_servers_headers_go_with_every_request_and_their_tokens_are_named(sim):
    """The load reads no key itself: the running server's headers are passed down, and a spawned
    client process learns the tokens to hide from the plan it is handed."""
    headers = {"Authorization": "Bearer s3cret-token-0123"}
    run = run_workload(sim.base_url, replace(W, num_prompts=4), model=sim.model, headers=headers)
    assert all(r.ok for r in run.records)
    plan = LoadPlan(
        base_url=sim.base_url,
        workload=W,
        backend=BACKENDS[W.backend](sim.model, W.ignore_eos, W.extra_body),
        headers=headers,
        limits=ClientLimits(),
        seed_offset=0,
        keep_alive=True,
        flush_headers={"Authorization": "Bearer admin-token-4567", "X-Other": "Bearer-less"},
    )
    assert plan.tokens() == ["s3cret-token-0123", "admin-token-4567"]


def test_prompts_are_seeded_exact_and_in_range():
    w = replace(W, token_id_range=(5, 50))
    a, b = make_requests(w, 10), make_requests(w, 10)
    assert [r.input_ids for r in a] == [r.input_ids for r in b]
    assert all(len(r.input_ids) == w.input_len and all(5 <= t < 50 for t in r.input_ids) for r in a)
    assert [r.input_ids for r in make_requests(w, 10, seed_offset=1)] != [r.input_ids for r in a]
    varied = make_requests(replace(w, range_ratio=0.5), 200)
    assert {r.input_len for r in varied} <= set(range(8, 17)) and len({r.input_len for r in varied}) > 3


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_client_runs_on_either_event_loop_and_says_which(sim, monkeypatch, loop):
    pytest.importorskip("uvloop")
    monkeypatch.setenv("PERFGATE_EVENT_LOOP", loop)
    run = run_workload(sim.base_url, W, model=sim.model)
    assert all(r.ok and r.output_tokens == W.output_len for r in run.records), [r.error for r in run.records][:3]
    assert run.client.event_loop.split()[0] == loop
    assert run.client.chunks == W.num_prompts * W.output_len


def test_a_server_that_refuses_connections_fails_every_request_with_the_address():
    run = run_workload("http://127.0.0.1:9", replace(W, warmup_requests=0, num_prompts=3))
    assert all(
        r.error.startswith("connection error: cannot connect to 127.0.0.1:9: ConnectionRefusedError")
        for r in run.records
    ), [r.error for r in run.records]


def test_an_unknown_event_loop_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv("PERFGATE_EVENT_LOOP", "uvlop")
    with pytest.raises(LoadError, match=r"PERFGATE_EVENT_LOOP='uvlop': expected uvloop, asyncio or unset"):
        run_workload("http://127.0.0.1:9", W)


def test_connections_opened_ahead_are_kept_and_a_refusal_stops_the_opening(sim):
    from perfgate.load._http import Pool

    async def opened(url: str, n: int) -> int:
        pool = Pool(url, {}, keep_alive=True)
        try:
            await pool.preconnect(n)
            return pool.open_connections
        finally:
            pool.close()

    assert asyncio.run(opened(sim.base_url, 300)) == 300
    assert asyncio.run(opened("http://127.0.0.1:9", 300)) == 0


def test_a_connect_that_hangs_fails_after_the_timeout_naming_the_address():
    from perfgate.load._http import HTTPFailure, Pool

    async def hang(*args: object, **kwargs: object) -> None:
        await asyncio.sleep(60)

    async def request() -> HTTPFailure:
        # A connect that never completes (a firewall dropping SYNs), without depending on the network.
        asyncio.get_running_loop().create_connection = hang  # type: ignore[method-assign]
        pool = Pool("http://10.0.0.1:8000", {}, keep_alive=True, connect_timeout_s=0.05)
        with pytest.raises(HTTPFailure) as failure:
            await pool.request("POST", "/generate", b"{}", sink=None, stall_s=1.0)
        return failure.value

    failure = asyncio.run(request())
    assert failure.kind == "connect" and str(failure) == "no connection to 10.0.0.1:8000 within 0.05 s"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_signal_landing_in_a_protocol_callback_stops_the_run(sim, monkeypatch, loop):
    # SIGTERM / SIGHUP raise Terminated wherever Python is; when that is a connection's
    # data_received, uvloop used to take it for a broken connection: the warmup "failed" and the
    # gate went on instead of stopping (seen once in a fresh clone's fault tests).
    pytest.importorskip("uvloop")
    from perfgate.load import _http
    from perfgate.server._signals import Terminated

    monkeypatch.setenv("PERFGATE_EVENT_LOOP", loop)
    received = _http._Connection.data_received
    calls = 0

    def signal_lands(self, data):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise Terminated(signal.SIGTERM)
        received(self, data)

    monkeypatch.setattr(_http._Connection, "data_received", signal_lands)
    with pytest.raises(Terminated):
        run_workload(sim.base_url, W, model=sim.model)
