"""The simulator's language model: next-token logprobs as a pure function of the prefix.

Every request that carries token ids is answered by this model: the correctness probe's with
logprobs, the load's ``/generate`` requests with their greedy ids only (:meth:`ToyModel.next_token`,
a few microseconds a token), so that scoring a load answer teacher-forced finds each of its tokens
the model's argmax. The OpenAI load streams text without ids and keeps a fixed tape (so does
``--tape-answers``, for benchmarks of the client alone). The model is a hash of the last
:data:`CONTEXT` tokens: the same prefix gives the same distribution in any request, at any
position, on any boot, which is what teacher-forced scoring needs. Each context has :data:`TOP_K`
likely tokens holding :data:`TOP_MASS` of the probability, the rest spread evenly over the
vocabulary.

Faults, each a different wrong model (see ``sim._options``):
- ``corrupt_rate``: that share of contexts swaps its most likely token for another one, and the
  logprobs follow the swap (a consistent wrong model, as a broken kernel would be);
- ``corrupt_above_batch``: the same corruption, only for tokens computed while more than that many
  requests share the engine (a batch-dependent bug);
- ``nan_logprobs``: every logprob is NaN (the tokens are still the model's).
An unchanged model still moves its logprobs by up to :data:`BATCH_JITTER` nats when a request
shares the engine with others, as a real engine's batched kernels do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONTEXT = 3
TOP_K = 4
TOP_MASS = 0.95
# Batched numerics move an unchanged model's logprobs by this much at most (nats).
BATCH_JITTER = 2e-4
# A batch-dependent fault with no corrupt rate of its own corrupts this share of contexts.
BATCH_FAULT_RATE = 0.05
_MASK = (1 << 64) - 1


def _mix(*values: int) -> int:
    """splitmix64 over ``values``: stable across processes (``hash()`` of str is salted)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        h = (h ^ (h >> 31)) * 0x94D049BB133111EB & _MASK
        h ^= h >> 29
    return h


def _unit(h: int) -> float:
    """A hash as a number in [0, 1)."""
    return (h >> 11) / float(1 << 53)


@dataclass(frozen=True)
class Scored:
    """One position: the logprob of the token there, and the model's most likely token."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class ToyModel:
    vocab_size: int
    seed: int = 0
    corrupt_rate: float = 0.0
    corrupt_above_batch: int = 0
    nan_logprobs: bool = False

    def _context(self, prefix: Sequence[int]) -> int:
        return _mix(self.seed, *prefix[-CONTEXT:])

    def _corrupted(self, h: int, batch: int) -> bool:
        rate = self.corrupt_rate
        if self.corrupt_above_batch:
            rate = (rate or BATCH_FAULT_RATE) if batch > self.corrupt_above_batch else 0.0
        return rate > 0 and _unit(_mix(h, 0xC0)) < rate

    def distribution(self, prefix: Sequence[int], batch: int = 1) -> tuple[list[tuple[int, float]], float]:
        """The top tokens with their logprobs, most likely first, and the logprob of any other token."""
        h = self._context(prefix)
        tokens: list[int] = []
        i = 0
        while len(tokens) < TOP_K:
            t = _mix(h, i) % self.vocab_size
            if t not in tokens:
                tokens.append(t)
            i += 1
        # The first token holds 40-90 % of TOP_MASS, the others share the rest unevenly: the gap
        # between the first two is never a near-tie (>= 0.19 nats).
        first = 0.4 + 0.5 * _unit(_mix(h, 0xF1))
        weights = [1.0 + _unit(_mix(h, 0xA0 + k)) for k in range(TOP_K - 1)]
        rest = [(1 - first) * w / sum(weights) for w in sorted(weights, reverse=True)]
        probs = [first * TOP_MASS, *(p * TOP_MASS for p in rest)]
        if self._corrupted(h, batch):
            # Another token takes the lead; the right one falls to the tail.
            wrong = _mix(h, 0xBAD) % self.vocab_size
            while wrong in tokens:
                wrong = (wrong + 1) % self.vocab_size
            tokens[0] = wrong
        other = math.log((1 - TOP_MASS) / max(1, self.vocab_size - TOP_K))
        jitter = 0.0
        if batch > 1:
            jitter = BATCH_JITTER * (2 * _unit(_mix(h, batch, 0x717)) - 1)
        top = [(t, math.log(p) + jitter) for t, p in zip(tokens, probs, strict=True)]
        if self.nan_logprobs:
            return [(t, math.nan) for t, _ in top], math.nan
        return top, other + jitter

    def next_token(self, prefix: Sequence[int], batch: int = 1) -> int:
        """The most likely token after ``prefix`` (``distribution``'s first) without its logprobs:
        the load's answers ask for none, and the full distribution costs 6x as much."""
        h = self._context(prefix)
        if self._corrupted(h, batch):
            return self.distribution(prefix, batch)[0][0][0]
        return _mix(h, 0) % self.vocab_size

    def score(self, prefix: Sequence[int], token: int, batch: int = 1, top_n: int = 0) -> Scored:
        """``token``'s logprob after ``prefix``, with the ``top_n`` most likely tokens."""
        top, other = self.distribution(prefix, batch)
        logprob = next((lp for t, lp in top if t == token), other)
        return Scored(token, logprob, tuple(top[:top_n]))

    def greedy(self, prompt: Sequence[int], n: int, batch: int = 1, top_n: int = 0) -> list[Scored]:
        """``n`` greedy tokens after ``prompt``."""
        ids = list(prompt)
        out = []
        for _ in range(n):
            top, _ = self.distribution(ids, batch)
            token = top[0][0]
            out.append(Scored(token, top[0][1], tuple(top[:top_n])))
            ids.append(token)
        return out

    def teacher_forced(self, ids: Sequence[int], start: int, batch: int = 1, top_n: int = 0) -> list[Scored]:
        """Every token of ``ids`` from position ``start`` on, scored given the tokens before it."""
        return [self.score(ids[:i], ids[i], batch, top_n) for i in range(max(1, start), len(ids))]
