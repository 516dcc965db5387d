"""The simulator's performance model: a continuous-batching scheduler in virtual time.

No I/O and no clock here. :class:`Engine` decides each step's batch and duration; the HTTP
layer sleeps for that duration and delivers the tokens, and :func:`simulate` runs the same
engine against a list of arrivals without HTTP (perfgate's detection benchmark calls it
thousands of times, so the hot loops only touch requests that change state).

Scheduling follows SGLang's default (no mixed chunked prefill): a prefill step runs whenever
requests wait and there is room, taking requests in arrival order up to
``chunked_prefill_size`` tokens (a long prompt spans several steps; the first output token
appears at the end of the step that finishes its prefill); otherwise a decode step gives
every running request one token. "Room" means fewer than ``max_running_requests`` admitted
and enough free KV-cache tokens: admission reserves prompt + output tokens in a pool of
``max_total_tokens`` (SGLang reserves an estimate and retracts on overflow; this model never
retracts). The KV pool is what makes 1024 concurrent requests decode in waves of a few
hundred, as on the scenario's 8x RTX PRO 6000 (mean TPOT ~200 ms at ~3,700 total tok/s).

Prefix caching (SGLang's radix cache, on unless ``disable_radix_cache``): a request submitted
with its token ids looks up its longest cached prefix when it is admitted; those tokens are
neither prefilled nor reserved again (they live in the cache), except the last prompt token,
which SGLang always computes. The prompt joins the cache when its prefill completes.
"""

from __future__ import annotations

import heapq
import math
import random
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.sim._radix import PrefixCache

# Correlation time of the slow speed drift, in simulated (unscaled) seconds.
DRIFT_TAU_S = 10.0


@dataclass(frozen=True)
class SimConfig:
    """The performance model's parameters. Step times are in milliseconds of model time.

    A step lasts ``step_fixed_ms + step_per_request_ms * batch_requests +
    step_per_prefill_token_ms * prefill_tokens``, where ``batch_requests`` is the number of
    requests in that step's batch, times ``time_scale * slowdown`` and a random factor
    (iid ``noise`` jitter times a slow AR(1) ``drift``), both seeded by ``seed``.
    """

    max_running_requests: int = 1024
    chunked_prefill_size: int = 8192
    max_total_tokens: int = 100_000
    step_fixed_ms: float = 60.0
    step_per_request_ms: float = 0.5
    step_per_prefill_token_ms: float = 0.03
    noise: float = 0.02
    drift: float = 0.01
    seed: int = 0
    time_scale: float = 1.0
    slowdown: float = 1.0
    zero_cost: bool = False
    disable_radix_cache: bool = False
    prefix_cache_tokens: int = 100_000

    def __post_init__(self) -> None:
        positive_ints = ("max_running_requests", "chunked_prefill_size", "max_total_tokens", "prefix_cache_tokens")
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        non_negative = (
            "step_fixed_ms",
            "step_per_request_ms",
            "step_per_prefill_token_ms",
            "noise",
            "drift",
        )
        for name in non_negative:
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("time_scale", "slowdown"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")


@dataclass(frozen=True)
class Step:
    """One engine step, already applied to the engine's state.

    ``tokens_for`` are the requests that own one more output token when the step ends (for a
    decode step this is the engine's running list at the step's start, in admission order);
    ``finished`` those among them that are now complete. ``duration_s`` is wall seconds
    (scaled); ``model_ms`` the unscaled, noise-free model time.
    """

    kind: str  # "prefill" or "decode"
    duration_s: float
    model_ms: float
    batch_requests: int
    prefill_tokens: int
    tokens_for: Sequence[int]
    finished: Sequence[int]


class Engine:
    """Scheduler state. Requests are small ints handed out by :meth:`submit`."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._drift_x = 0.0
        # Per request, compact: a server lives through millions of requests.
        self._input_len = array("q")
        self._output_len = array("q")
        # Prompt tokens found in the prefix cache at admission (never prefilled, never reserved).
        self._cached = array("q")
        self._alive = bytearray()
        # Token ids of requests not yet prefilled, for the cache lookup and insert.
        self._prompts: dict[int, Sequence[int]] = {}
        self.cache = None if config.disable_radix_cache else PrefixCache(config.prefix_cache_tokens)
        self.cached_tokens_total = 0
        # The hit rate of the last prefill batch's new requests: SGLang's sglang:cache_hit_rate gauge.
        self.last_cache_hit_rate = 0.0
        self._waiting: deque[int] = deque()
        # The request whose prefill is partially done, and how many of its tokens are.
        self._chunked: int = -1
        self._chunked_done = 0
        self._admitted = 0
        self._kv_used = 0
        # Decoding requests in admission order; finish times as decode-step counters.
        self._running: dict[int, int] = {}
        self._finish_heap: list[tuple[int, int]] = []
        self._decode_steps = 0
        self.generated_tokens = 0
        self.prefilled_tokens = 0

    # -- requests --------------------------------------------------------------------
    def submit(self, input_len: int, output_len: int, prompt_ids: Sequence[int] | None = None) -> int:
        """Queue a request; raises ValueError if it can never run. ``prompt_ids`` (``input_len`` of
        them) let the prefix cache see the prompt; without them it neither hits nor fills."""
        self.check(input_len, output_len)
        if prompt_ids is not None and len(prompt_ids) != input_len:
            raise ValueError(f"{len(prompt_ids)} prompt ids for input_len {input_len}")
        rid = len(self._input_len)
        self._input_len.append(input_len)
        self._output_len.append(output_len)
        self._cached.append(0)
        self._alive.append(1)
        if prompt_ids is not None and self.cache is not None:
            self._prompts[rid] = prompt_ids
        self._waiting.append(rid)
        return rid

    def cached_tokens(self, rid: int) -> int:
        """Prompt tokens of ``rid`` that came from the prefix cache (known once it is admitted)."""
        return self._cached[rid]

    def flush_cache(self) -> None:
        if self.cache is not None:
            self.cache.clear()

    def check(self, input_len: int, output_len: int) -> None:
        """Raise ValueError (a message for the client) if such a request can never run."""
        if input_len < 1:
            raise ValueError("The input is empty: at least one prompt token is required.")
        if output_len < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {output_len}.")
        if input_len + output_len > self.config.max_total_tokens:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.config.max_total_tokens} tokens. You requested a total of "
                f"{input_len + output_len} tokens: {input_len} tokens from the input "
                f"messages and {output_len} tokens for the completion."
            )

    def abort(self, rid: int) -> None:
        """Drop a request wherever it is (a client went away); frees its KV reservation."""
        if not self._alive[rid]:
            return
        self._alive[rid] = 0
        if rid in self._running:
            del self._running[rid]  # its heap entry is skipped lazily
            self._release(rid)
        elif rid == self._chunked:
            self._chunked = -1
            self._chunked_done = 0
            self._release(rid)
        # A waiting request holds nothing; it is skipped when it reaches the queue's head.
        self._prompts.pop(rid, None)

    def _release(self, rid: int) -> None:
        self._admitted -= 1
        self._kv_used -= self._input_len[rid] - self._cached[rid] + self._output_len[rid]

    # -- state -----------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        """Admitted requests: decoding plus the one in a chunked prefill."""
        return self._admitted

    @property
    def num_waiting(self) -> int:
        return sum(1 for rid in self._waiting if self._alive[rid])

    @property
    def kv_used_tokens(self) -> int:
        return self._kv_used

    def idle(self) -> bool:
        return not self._running and self._chunked < 0 and not self._has_waiting()

    def _has_waiting(self) -> bool:
        waiting = self._waiting
        alive = self._alive
        while waiting and not alive[waiting[0]]:
            waiting.popleft()
        return bool(waiting)

    # -- stepping ----------------------------------------------------------------------
    def step(self) -> Step | None:
        """Run the next step on the engine's state; None when there is nothing to do."""
        prefill = self._plan_prefill()
        if prefill is not None:
            return prefill
        if self._running:
            return self._decode()
        return None

    def _plan_prefill(self) -> Step | None:
        cfg = self.config
        budget = cfg.chunked_prefill_size
        tokens = 0
        batch = 0
        completed: list[int] = []
        input_len = self._input_len
        cached = self._cached
        if self._chunked >= 0:
            rid = self._chunked
            left = input_len[rid] - cached[rid] - self._chunked_done
            take = min(left, budget)
            tokens += take
            batch += 1
            if take == left:
                completed.append(rid)
                self._chunked = -1
                self._chunked_done = 0
            else:
                self._chunked_done += take
        waiting = self._waiting
        alive = self._alive
        output_len = self._output_len
        prompts = self._prompts
        cache = self.cache
        new_input = new_hits = 0
        while tokens < budget and waiting and self._admitted < cfg.max_running_requests:
            rid = waiting[0]
            if not alive[rid]:
                waiting.popleft()
                continue
            ids = prompts.get(rid)
            # SGLang computes at least the last prompt token, whatever the cache holds.
            hit = min(cache.match(ids), input_len[rid] - 1) if ids is not None and cache is not None else 0
            need = input_len[rid] - hit + output_len[rid]
            if self._kv_used + need > cfg.max_total_tokens:
                break
            waiting.popleft()
            cached[rid] = hit
            self.cached_tokens_total += hit
            new_hits += hit
            new_input += input_len[rid] - hit
            self._admitted += 1
            self._kv_used += need
            batch += 1
            take = min(input_len[rid] - hit, budget - tokens)
            tokens += take
            if take == input_len[rid] - hit:
                completed.append(rid)
            else:
                self._chunked = rid
                self._chunked_done = take
        if batch == 0:
            return None
        if new_input + new_hits:
            self.last_cache_hit_rate = new_hits / (new_input + new_hits)
        self.prefilled_tokens += tokens
        # The first output token comes out of the step that finishes the prefill.
        finished: list[int] = []
        decode_steps = self._decode_steps
        for rid in completed:
            ids = prompts.pop(rid, None)
            if ids is not None and cache is not None:
                cache.insert(ids)
            remaining = output_len[rid] - 1
            if remaining == 0:
                finished.append(rid)
                alive[rid] = 0
                self._release(rid)
            else:
                self._running[rid] = decode_steps + remaining
                heapq.heappush(self._finish_heap, (decode_steps + remaining, rid))
        self.generated_tokens += len(completed)
        return self._make_step("prefill", batch, tokens, completed, finished)

    def _decode(self) -> Step:
        tokens_for = list(self._running)
        self._decode_steps += 1
        now = self._decode_steps
        heap = self._finish_heap
        running = self._running
        finished: list[int] = []
        while heap and heap[0][0] <= now:
            _, rid = heapq.heappop(heap)
            if running.get(rid) == now:
                del running[rid]
                self._alive[rid] = 0
                self._release(rid)
                finished.append(rid)
        self.generated_tokens += len(tokens_for)
        return self._make_step("decode", len(tokens_for), 0, tokens_for, finished)

    def _make_step(
        self,
        kind: str,
        batch: int,
        prefill_tokens: int,
        tokens_for: Sequence[int],
        finished: Sequence[int],
    ) -> Step:
        cfg = self.config
        model_ms = cfg.step_fixed_ms + cfg.step_per_request_ms * batch + cfg.step_per_prefill_token_ms * prefill_tokens
        if cfg.zero_cost:
            duration_s = 0.0
        else:
            duration_s = model_ms * 1e-3 * cfg.time_scale * cfg.slowdown * self._speed_factor(model_ms)
        return Step(kind, duration_s, model_ms, batch, prefill_tokens, tokens_for, finished)

    def _speed_factor(self, model_ms: float) -> float:
        """Noise times drift for one step; drift is AR(1) over model time."""
        cfg = self.config
        gauss = self._rng.gauss
        factor = 1.0
        if cfg.drift > 0:
            rho = math.exp(-model_ms * 1e-3 / DRIFT_TAU_S)
            self._drift_x = rho * self._drift_x + math.sqrt(1.0 - rho * rho) * cfg.drift * gauss(0.0, 1.0)
            factor *= 1.0 + self._drift_x
        if cfg.noise > 0:
            factor *= 1.0 + cfg.noise * gauss(0.0, 1.0)
        # A Gaussian tail could go negative; a step never runs in (nearly) no time.
        return max(factor, 0.05)


@dataclass(frozen=True)
class SimRun:
    """Result of :func:`simulate`: durations in seconds (``*_ms``: milliseconds),
    throughputs in per second.

    Per-request tuples follow the order of ``arrivals``. ``tpot_ms`` is NaN for one-token
    requests (bench_serving leaves them out of TPOT); the means skip those.
    """

    ttft_s: tuple[float, ...]
    latency_s: tuple[float, ...]
    tpot_ms: tuple[float, ...]
    output_tokens: tuple[int, ...]
    duration_s: float
    input_tokens_total: int
    output_tokens_total: int
    mean_ttft_ms: float
    mean_tpot_ms: float
    request_throughput: float
    output_throughput: float
    total_throughput: float
    steps: int


def simulate(
    config: SimConfig,
    arrivals: Sequence[tuple[float, int, int]],
    *,
    max_concurrency: int | None = None,
) -> SimRun:
    """Run the engine in virtual time.

    ``arrivals``: (arrival time s, input tokens, output tokens) per request; a request that
    arrives while a step runs joins at the next step, as on the server. ``max_concurrency``
    models bench_serving's semaphore: an arrived request waits client-side until fewer than
    that many are in flight, and its TTFT/latency count from when it is sent. Throughputs
    are per second over [first arrival, last finish], like bench_serving's duration.
    """
    if not arrivals:
        raise ValueError("simulate() needs at least one arrival")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    limit = max_concurrency or len(arrivals)
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    engine = Engine(config)
    n = len(arrivals)
    t0 = arrivals[order[0]][0]
    sent_at = [0.0] * n
    first = [math.nan] * n
    done = [math.nan] * n
    rid_to_idx: list[int] = []
    now = t0
    nxt = 0
    in_flight = 0
    # When a semaphore slot last opened up: a request that arrived before it waited for it.
    slot_opened_at = -math.inf
    steps = 0
    while True:
        while nxt < n and in_flight < limit and arrivals[order[nxt]][0] <= now:
            idx = order[nxt]
            arrival, in_len, out_len = arrivals[idx]
            sent_at[idx] = max(arrival, slot_opened_at)
            engine.submit(in_len, out_len)
            rid_to_idx.append(idx)
            nxt += 1
            in_flight += 1
        step = engine.step()
        if step is None:
            if nxt >= n:
                break
            now = max(now, arrivals[order[nxt]][0])
            continue
        steps += 1
        now += step.duration_s
        if step.kind == "prefill":
            for rid in step.tokens_for:
                first[rid_to_idx[rid]] = now
        for rid in step.finished:
            done[rid_to_idx[rid]] = now
        if step.finished and in_flight >= limit:
            slot_opened_at = now
        in_flight -= len(step.finished)
    ttft = tuple(first[i] - sent_at[i] for i in range(n))
    latency = tuple(done[i] - sent_at[i] for i in range(n))
    outs = tuple(a[2] for a in arrivals)
    tpot = tuple((latency[i] - ttft[i]) / (outs[i] - 1) * 1e3 if outs[i] > 1 else math.nan for i in range(n))
    tpots = [x for x in tpot if not math.isnan(x)]
    duration = max(done) - t0
    in_total = sum(a[1] for a in arrivals)
    out_total = sum(outs)
    per_s = 1.0 / duration if duration > 0 else math.inf
    return SimRun(
        ttft_s=ttft,
        latency_s=latency,
        tpot_ms=tpot,
        output_tokens=outs,
        duration_s=duration,
        input_tokens_total=in_total,
        output_tokens_total=out_total,
        mean_ttft_ms=sum(ttft) / n * 1e3,
        mean_tpot_ms=sum(tpots) / len(tpots) if tpots else math.nan,
        request_throughput=n * per_s,
        output_throughput=out_total * per_s,
        total_throughput=(in_total + out_total) * per_s,
        steps=steps,
    )
