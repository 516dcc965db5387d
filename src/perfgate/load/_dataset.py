"""Seeded synthetic prompts of exact token lengths (bench_serving's random dataset, fixed-length by default)."""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.profile import Workload

# Ids inside every common tokenizer's vocabulary and clear of the special tokens that most
# tokenizers put at the low end; a profile overrides this for small vocabularies.
DEFAULT_TOKEN_ID_RANGE = (1000, 30000)
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


@dataclass(frozen=True, slots=True)
class RequestSpec:
    input_ids: Sequence[int]
    output_len: int

    def __post_init__(self) -> None:
        # Two or four bytes a token: 100,000 prompts of 256 tokens take 50-100 MB until each is
        # sent, not the 0.9 GB of lists of Python ints.
        if not isinstance(self.input_ids, array):
            ids = self.input_ids
            object.__setattr__(self, "input_ids", array("H" if max(ids, default=0) < 65536 else "I", ids))

    @property
    def input_len(self) -> int:
        return len(self.input_ids)

    def text(self) -> str:
        """A text rendering for chat backends: one common word per token id (lengths are then approximate)."""
        return " ".join(_WORDS[i % len(_WORDS)] for i in self.input_ids)


def _length(rng: random.Random, n: int, range_ratio: float) -> int:
    # bench_serving draws uniformly in [int(n * ratio), n]; it never allows 0 tokens.
    return max(1, rng.randint(int(n * range_ratio), n))


def make_requests(workload: Workload, count: int, *, seed_offset: int = 0) -> list[RequestSpec]:
    """``count`` requests for ``workload``; the same workload and offset always give the same prompts."""
    rng = random.Random(workload.seed * 1_000_003 + seed_offset)
    lo, hi = workload.token_id_range or DEFAULT_TOKEN_ID_RANGE
    out = []
    for _ in range(count):
        n_in = _length(rng, workload.input_len, workload.range_ratio)
        n_out = _length(rng, workload.output_len, workload.range_ratio)
        out.append(RequestSpec([rng.randrange(lo, hi) for _ in range(n_in)], n_out))
    return out


def arrival_offsets_s(workload: Workload, count: int) -> list[float]:
    """Send time of each request relative to the start: all at 0 for rate inf, else Poisson or constant gaps."""
    rate = workload.request_rate
    if rate == float("inf"):
        return [0.0] * count
    if workload.pacing == "constant":
        return [i / rate for i in range(count)]
    rng = random.Random(workload.seed * 7_919 + 17)
    t, out = 0.0, []
    for _ in range(count):
        out.append(t)
        t += rng.expovariate(rate)
    return out
