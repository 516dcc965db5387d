"""Endpoint shapes against a real simulator subprocess (SGLang 0.5.23's shapes)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families


def sse(client: httpx.Client, path: str, body: dict[str, object]) -> list[object]:
    """POST and return the decoded data events; [DONE] as the string "[DONE]"."""
    events: list[object] = []
    with client.stream("POST", path, json=body, timeout=30) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


@pytest.fixture(scope="module")
def client(fast_sim: Any):
    with httpx.Client(base_url=fast_sim.url, timeout=30) as c:
        yield c


def test_generate_stream_with_input_ids(client: httpx.Client) -> None:
    events = sse(
        client,
        "/generate",
        {"input_ids": [1, 2, 3, 4], "stream": True, "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}},
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) == 5
    for i, chunk in enumerate(chunks, start=1):
        assert chunk["text"] == " tok" * i  # cumulative, one word per token
        assert len(chunk["output_ids"]) == i
        meta = chunk["meta_info"]
        assert meta["completion_tokens"] == i
        assert meta["prompt_tokens"] == 4
        assert meta["cached_tokens"] == 0
        assert meta["id"] == chunks[0]["meta_info"]["id"]
        if i < 5:
            assert meta["finish_reason"] is None and "e2e_latency" not in meta
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert chunks[-1]["meta_info"]["e2e_latency"] > 0


def test_generate_non_stream_with_text(client: httpx.Client) -> None:
    resp = client.post("/generate", json={"text": "one two three", "sampling_params": {"max_new_tokens": 7}})
    assert resp.status_code == 200
    body = resp.json()
    assert body["text"] == " tok" * 7
    assert len(body["output_ids"]) == 7
    assert body["meta_info"]["prompt_tokens"] == 3
    assert body["meta_info"]["completion_tokens"] == 7
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 7}


def test_generate_default_max_new_tokens_is_128(client: httpx.Client) -> None:
    body = client.post("/generate", json={"input_ids": [5]}).json()
    assert body["meta_info"]["completion_tokens"] == 128


@pytest.mark.parametrize(
    "body",
    [
        {"sampling_params": {"max_new_tokens": 3}},
        {"text": "a", "input_ids": [1]},
        {"input_ids": [1, -4]},
        {"input_ids": [1], "sampling_params": {"max_new_tokens": "x"}},
        {"input_ids": [1], "sampling_params": {"max_new_tokens": 10_000_000}},
        {"text": "   "},
    ],
)
def test_generate_validation_errors_are_400(client: httpx.Client, body: dict[str, object]) -> None:
    resp = client.post("/generate", json=body)
    assert resp.status_code == 400
    assert "error" in resp.json()


def test_completions_stream_with_token_ids_and_usage_chunk(client: httpx.Client) -> None:
    events = sse(
        client,
        "/v1/completions",
        {
            "model": "m",
            "prompt": [7] * 12,
            "max_tokens": 6,
            "ignore_eos": True,
            "min_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["prompt_tokens"] == 12
    assert usage_chunk["usage"]["completion_tokens"] == 6
    assert usage_chunk["usage"]["total_tokens"] == 18
    content = events[:-2]
    assert all(c["object"] == "text_completion" and c["model"] == "m" for c in content)
    assert "".join(c["choices"][0]["text"] for c in content) == " tok" * 6
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 5 + ["length"]


def test_completions_without_usage_and_non_stream(client: httpx.Client) -> None:
    events = sse(client, "/v1/completions", {"prompt": "a b c", "max_tokens": 3, "stream": True})
    assert all(e == "[DONE]" or e["choices"] for e in events)
    body = client.post("/v1/completions", json={"prompt": "a b c"}).json()
    assert body["usage"]["completion_tokens"] == 16  # OpenAI's default max_tokens
    assert body["choices"][0]["text"] == " tok" * 16
    bad = client.post("/v1/completions", json={"prompt": {"x": 1}})
    assert bad.status_code == 400 and bad.json()["object"] == "error"


def test_chat_stream_and_non_stream(client: httpx.Client) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there you"}]
    events = sse(
        client,
        "/v1/chat/completions",
        {
            "messages": messages,
            "max_completion_tokens": 4,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4
    assert usage["usage"]["prompt_tokens"] == 5 + 2 * 4 + 3  # words + template overhead
    chunks = events[:-2]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == " tok" * 4
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    body = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2}).json()
    assert body["choices"][0]["message"]["content"] == " tok tok"
    assert body["usage"]["completion_tokens"] == 2


@pytest.fixture(scope="module")
def four_gpu_sims(launch_sim):
    """Four simulated GPUs, the last one idle, in both DCGM name generations (started together)."""
    common = (
        "--time-scale",
        "0.01",
        "--startup-delay-s",
        "0",
        "--gpus",
        "4",
        "--idle-gpus",
        "1",
        "--stream-interval",
        "4",
    )
    sims = {gen: launch_sim(*common, "--dcgm-names", gen) for gen in ("classic", "new")}
    try:
        for sim in sims.values():
            sim.wait_ready()
        yield sims
    finally:
        for sim in sims.values():
            sim.stop()


def test_stream_interval(four_gpu_sims) -> None:
    sim = four_gpu_sims["classic"]
    with httpx.Client(base_url=sim.url) as c:
        events = sse(c, "/generate", {"input_ids": [1], "stream": True, "sampling_params": {"max_new_tokens": 10}})
    counts = [e["meta_info"]["completion_tokens"] for e in events[:-1]]
    assert counts == [1, 4, 8, 10]


def test_info_endpoints(client: httpx.Client) -> None:
    for path in ("/model_info", "/get_model_info"):
        info = client.get(path).json()
        assert info["model_path"] == "sim/GLM-5-NVFP4"
        assert info["served_model_name"] == "sim/GLM-5-NVFP4"
        assert info["is_generation"] is True and info["tokenizer_path"]
    for path in ("/server_info", "/get_server_info"):
        info = client.get(path).json()
        assert info["tp_size"] == 8
        assert info["max_running_requests"] == 1024
        assert info["chunked_prefill_size"] == 8192
        assert info["moe_runner_backend"] == "flashinfer_cutlass"
        assert info["version"].endswith("+perfgate-sim")
        sim = info["perfgate_sim"]
        assert sim["slowdown"] == 1.0
        assert sim["options"]["time_scale"] == 0.01
        assert len(sim["gpus"]) == 8
        assert sim["gpus"][0]["uuid"].startswith("GPU-")
        assert len({g["uuid"] for g in sim["gpus"]}) == 8
        assert sim["gpus"][0]["power_limit_w"] == 600
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "sim/GLM-5-NVFP4"


def test_flush_cache_when_idle_and_busy(fast_sim: Any) -> None:
    with httpx.Client(base_url=fast_sim.url, timeout=30) as c:
        assert c.post("/flush_cache").status_code == 200
        # 2000 tokens at time-scale 0.01 keep the engine busy for a few seconds.
        done = threading.Event()

        def long_request() -> None:
            with httpx.Client(base_url=fast_sim.url, timeout=60) as c2:
                c2.post("/generate", json={"input_ids": [1], "sampling_params": {"max_new_tokens": 2000}})
            done.set()

        thread = threading.Thread(target=long_request)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while c.get("/metrics").text.find('sglang:num_running_reqs{model_name="sim/GLM-5-NVFP4"} 1.0') < 0:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert c.post("/flush_cache").status_code == 400
            assert c.post("/flush_cache", params={"timeout": "60"}).status_code == 200
            assert done.wait(10)
        finally:
            thread.join()


def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_parse_with_sglang_names(client: httpx.Client) -> None:
    client.post("/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}})
    fams = _families(client.get("/metrics").text)
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:gen_throughput",
        "sglang:token_usage",
        "sglang:prompt_tokens",
        "sglang:generation_tokens",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:e2e_request_latency_seconds",
    ):
        assert name in fams, name
        assert all(s.labels["model_name"] == "sim/GLM-5-NVFP4" for s in fams[name].samples)
    gen = {s.name: s.value for s in fams["sglang:generation_tokens"].samples if s.labels["is_streaming"] == "false"}
    assert gen["sglang:generation_tokens_total"] >= 3
    ttft_count = [
        s.value
        for s in fams["sglang:time_to_first_token_seconds"].samples
        if s.name.endswith("_count") and s.labels["is_streaming"] == "false"
    ]
    assert ttft_count[0] >= 1


@pytest.mark.parametrize("generation", ["classic", "new"])
def test_dcgm_metrics_parse(four_gpu_sims, generation: str) -> None:
    sim = four_gpu_sims[generation]
    with httpx.Client(base_url=sim.url) as c:
        first = _families(c.get("/dcgm/metrics").text)
        c.post("/generate", json={"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": 200}})
        second = _families(c.get("/dcgm/metrics").text)
    power_name = "DCGM_FI_DEV_POWER_USAGE" if generation == "classic" else "DCGM_FI_DEV_BOARD_POWER_WATTS"
    host_label = "Hostname" if generation == "classic" else "hostname"
    expected = {
        "classic": [
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_DRAM_ACTIVE",
        ],
        "new": [
            "DCGM_FI_DEV_GPU_UTIL_RATIO",
            "DCGM_FI_PROF_SM_UTIL_RATIO",
            "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
            "DCGM_FI_PROF_DRAM_UTIL_RATIO",
            "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
        ],
    }[generation]
    for name in [
        power_name,
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        *expected,
    ]:
        assert name in second, name
        assert len(second[name].samples) == 4
    sample = second[power_name].samples[0]
    assert sample.labels["UUID"].startswith("GPU-") and host_label in sample.labels
    assert sample.labels["modelName"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    energy = {s.labels["gpu"]: s.value for s in second["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples}
    energy0 = {s.labels["gpu"]: s.value for s in first["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples}
    power = {s.labels["gpu"]: s.value for s in second[power_name].samples}
    assert all(energy[g] > energy0[g] for g in energy)
    assert power["3"] == pytest.approx(87.0)  # the idle GPU
    assert 87.0 < power["0"] <= 250.0 * 1.03  # busy a moment ago


def test_truth_reports_server_side_times(fast_sim: Any) -> None:
    with httpx.Client(base_url=fast_sim.url, timeout=30) as c:
        since = time.monotonic()
        sse(c, "/generate", {"input_ids": [1, 2, 3], "stream": True, "sampling_params": {"max_new_tokens": 9}})
        truth = c.get("/sim/truth", params={"since": str(since)}).json()
    reqs = truth["requests"]
    assert len(reqs["id"]) == 1 and reqs["output_tokens"] == [9]
    assert since <= reqs["arrival_s"][0] <= reqs["first_token_s"][0] <= reqs["finish_s"][0] <= time.monotonic()
    assert truth["engine"]["steps"] >= 9 and truth["engine"]["lost_s"] >= 0
    agg = truth["aggregates"]
    assert agg["completed"] == 1 and agg["output_tokens"] == 9
    expected_tpot = (reqs["finish_s"][0] - reqs["first_token_s"][0]) / 8 * 1e3
    assert agg["mean_tpot_ms"] == pytest.approx(expected_tpot)


def test_client_disconnect_frees_the_request(fast_sim: Any) -> None:
    body = {"input_ids": [1], "stream": True, "sampling_params": {"max_new_tokens": 100_000 - 1}}
    with httpx.Client(base_url=fast_sim.url, timeout=30) as c:
        with c.stream("POST", "/generate", json=body) as resp:
            lines = resp.iter_lines()
            assert next(lines).startswith("data: ")
        # Closed after one chunk: the engine notices at its next write and drops the request.
        deadline = time.monotonic() + 10
        while 'sglang:num_running_reqs{model_name="sim/GLM-5-NVFP4"} 0.0' not in c.get("/metrics").text:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert c.post("/generate", json={"input_ids": [1], "sampling_params": {"max_new_tokens": 2}}).status_code == 200
