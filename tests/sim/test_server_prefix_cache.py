"""What a client and a scraper see of the simulator's prefix cache, over HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sim.test_server import sse


@pytest.fixture(scope="module")
def sims(launch_sim):
    on = launch_sim("--time-scale", "0.01", "--startup-delay-s", "0.1")
    off = launch_sim("--time-scale", "0.01", "--startup-delay-s", "0.1", "--disable-radix-cache")
    try:
        on.wait_ready()
        off.wait_ready()
        yield {"on": on, "off": off}
    finally:
        on.stop()
        off.stop()


def _counters(client: httpx.Client) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for s in family.samples:
            if s.name in ("sglang:cached_tokens_total", "sglang:prompt_tokens_total", "sglang:cache_hit_rate"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _generate(client: httpx.Client, ids: list[int]) -> dict[str, Any]:
    events = sse(client, "/generate", {"input_ids": ids, "stream": True, "sampling_params": {"max_new_tokens": 4}})
    return events[-2]["meta_info"]


def test_a_repeated_prefix_is_reported_cached_everywhere_sglang_reports_it(sims):
    system = list(range(2000, 2100))
    with httpx.Client(base_url=sims["on"].url, timeout=30) as c:
        before = _counters(c)
        assert _generate(c, [*system, 1, 2, 3])["cached_tokens"] == 0
        assert _generate(c, [*system, 4, 5, 6])["cached_tokens"] == 100
        after = _counters(c)
        assert after["sglang:cached_tokens_total"] - before.get("sglang:cached_tokens_total", 0) == 100
        assert after["sglang:prompt_tokens_total"] - before["sglang:prompt_tokens_total"] == 206
        assert after["sglang:cache_hit_rate"] == pytest.approx(100 / 103)
        # OpenAI usage: prompt_tokens_details.cached_tokens, on the final usage chunk and non-streamed.
        events = sse(
            c,
            "/v1/completions",
            {"prompt": [*system, 9], "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}},
        )
        assert events[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 100}
        body = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "same words " * 20}], "max_tokens": 2},
        ).json()
        again = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "same words " * 20}], "max_tokens": 2},
        ).json()
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] - 1
        # A flush empties the cache, as SGLang's does.
        assert c.post("/flush_cache").status_code == 200
        assert _generate(c, [*system, 7])["cached_tokens"] == 0
        assert c.get("/server_info").json()["disable_radix_cache"] is False


def test_disable_radix_cache_never_hits(sims):
    system = list(range(3000, 3100))
    with httpx.Client(base_url=sims["off"].url, timeout=30) as c:
        for q in range(3):
            assert _generate(c, [*system, q])["cached_tokens"] == 0
        assert _counters(c).get("sglang:cached_tokens_total", 0.0) == 0
        assert c.get("/server_info").json()["disable_radix_cache"] is True
