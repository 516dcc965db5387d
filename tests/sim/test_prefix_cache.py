"""The simulator's prefix cache: the radix tree itself, and what it does to the engine's steps."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from perfgate.sim import Engine, SimConfig
from perfgate.sim._radix import PrefixCache


def test_match_finds_the_longest_cached_prefix_across_split_edges():
    cache = PrefixCache(1000)
    cache.insert([1, 2, 3, 4, 5])
    assert cache.match([1, 2, 3, 4, 5, 6]) == 5
    assert cache.match([1, 2, 9]) == 2
    assert cache.match([7]) == 0
    cache.insert([1, 2, 9, 9])  # splits the edge after [1, 2]
    assert cache.size_tokens == 7
    assert cache.match([1, 2, 3, 4]) == 4 and cache.match([1, 2, 9, 9, 9]) == 4
    cache.insert([1, 2])  # already a prefix: nothing new
    assert cache.size_tokens == 7


def test_eviction_drops_least_recently_used_leaves_and_keeps_the_shared_prefix():
    system = list(range(100, 150))
    cache = PrefixCache(capacity_tokens=80)
    for q in range(5):
        cache.insert(system + [q] * 10)
        # The system prompt is used by every request; each question only once.
        assert cache.match(system) == 50
    assert cache.size_tokens <= 80
    assert cache.match(system + [4] * 10) == 60  # the newest question survived
    assert cache.match(system + [0] * 10) == 50  # the oldest did not
    cache.clear()
    assert cache.size_tokens == 0 and cache.match(system) == 0


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=30), st.integers(1, 40))
def test_cache_matches_a_reference_model_and_never_exceeds_its_budget(prompts, capacity):
    cache = PrefixCache(capacity)
    for p in prompts:
        cache.insert(p)
        assert cache.size_tokens <= capacity
        # Whatever survived, a match is a true prefix of something inserted.
        for q in prompts:
            n = cache.match(q)
            assert 0 <= n <= len(q)
            assert n == 0 or any(list(q[:n]) == list(x[:n]) for x in prompts)
    # Without eviction pressure, every inserted prompt is found whole.
    big = PrefixCache(10_000)
    for p in prompts:
        big.insert(p)
    assert all(big.match(p) == len(p) for p in prompts)


def _run(config: SimConfig, prompts: list[list[int]], output_len: int = 4) -> tuple[Engine, int, list[int]]:
    engine = Engine(config)
    rids = [engine.submit(len(p), output_len, p) for p in prompts]
    prefill_tokens = 0
    while (step := engine.step()) is not None:
        prefill_tokens += step.prefill_tokens
    return engine, prefill_tokens, [engine.cached_tokens(r) for r in rids]


def test_cached_prompt_tokens_are_neither_prefilled_nor_counted_twice():
    rng = random.Random(0)
    system = [rng.randrange(1000, 30000) for _ in range(200)]
    prompts = [system + [rng.randrange(1000, 30000) for _ in range(20)] for _ in range(16)]
    # One request per prefill step, so each sees what the previous ones left in the cache.
    config = SimConfig(noise=0, drift=0, chunked_prefill_size=220)
    engine, prefilled, cached = _run(config, prompts)
    assert cached == [0] + [200] * 15
    assert prefilled == 16 * 220 - 15 * 200
    assert engine.cached_tokens_total == 3000
    assert engine.last_cache_hit_rate == 200 / 220
    off, prefilled_off, cached_off = _run(
        SimConfig(noise=0, drift=0, chunked_prefill_size=220, disable_radix_cache=True), prompts
    )
    assert cached_off == [0] * 16 and prefilled_off == 16 * 220 and off.cached_tokens_total == 0


def test_a_fully_cached_prompt_still_computes_its_last_token():
    _, prefilled, cached = _run(SimConfig(chunked_prefill_size=4), [[5, 6, 7, 8]] * 3)
    assert cached == [0, 3, 3] and prefilled == 4 + 1 + 1


def test_cached_tokens_do_not_hold_kv_so_more_requests_run_at_once():
    rng = random.Random(1)
    system = [rng.randrange(1000, 30000) for _ in range(900)]
    prompts = [system + [rng.randrange(1000, 30000) for _ in range(10)] for _ in range(20)]
    # Room for 10 requests of 910 + 50 tokens; with the system prompt cached, a request reserves 60.
    config = SimConfig(noise=0, drift=0, max_total_tokens=9600, chunked_prefill_size=100_000)

    def peak_running(cfg: SimConfig) -> int:
        engine = Engine(cfg)
        engine.submit(len(prompts[0]), 50, prompts[0])
        while engine.step() is not None:  # the first request fills the cache
            pass
        for p in prompts:
            engine.submit(len(p), 50, p)
        peak = 0
        while engine.step() is not None:
            peak = max(peak, engine.num_running)
        return peak

    assert peak_running(config) == 20
    assert (
        peak_running(
            SimConfig(noise=0, drift=0, max_total_tokens=9600, chunked_prefill_size=100_000, disable_radix_cache=True)
        )
        == 10
    )


def test_a_request_without_ids_neither_hits_nor_fills_and_aborts_release_everything():
    engine = Engine(SimConfig())
    engine.submit(50, 5)
    while engine.step() is not None:
        pass
    assert engine.cache is not None and engine.cache.size_tokens == 0
    rid = engine.submit(3, 5, [1, 2, 3])
    engine.abort(rid)
    assert engine.idle() and engine.kv_used_tokens == 0
