"""The reference a probe is held to: each prompt's greedy output ids and the logprob of every token.

A record is stored inside a baseline file (``perfgate.baseline``: same fingerprint rules, same
atomic and locked writes) as plain JSON; :meth:`ProbeRecord.from_dict` refuses any shape it did
not write with a ValueError naming the field, which the store turns into one clear message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.correctness._adapters import Position

RECORD_SCHEMA = 1


@dataclass(frozen=True)
class PromptRecord:
    """One prompt's greedy answer: token ids, their logprobs, and how far each led the runner-up
    (``margins``: nats, None where the server did not say)."""

    index: int
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    margins: tuple[float | None, ...]

    @classmethod
    def of(cls, index: int, positions: Sequence[Position]) -> PromptRecord:
        return cls(
            index,
            tuple(p.token for p in positions),
            tuple(p.logprob for p in positions),
            tuple(p.margin() for p in positions),
        )


@dataclass(frozen=True)
class ProbeRecord:
    """A whole probe's answers at one concurrency: the reference for later probes."""

    api: str
    concurrency: int
    prompts: tuple[PromptRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; ValueError when a logprob is not finite (a degenerate probe is never recorded)."""
        for p in self.prompts:
            bad = next((i for i, lp in enumerate(p.logprobs) if not math.isfinite(lp)), None)
            if bad is not None:
                raise ValueError(f"prompt {p.index} position {bad}: logprob {p.logprobs[bad]} is not finite")
        return {
            "schema": RECORD_SCHEMA,
            "api": self.api,
            "concurrency": self.concurrency,
            "prompts": [
                {"index": p.index, "tokens": list(p.tokens), "logprobs": list(p.logprobs), "margins": list(p.margins)}
                for p in self.prompts
            ],
        }

    @classmethod
    def from_dict(cls, data: Any) -> ProbeRecord:
        """Inverse of :meth:`to_dict`; ValueError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError("the correctness record must be an object")
        if data.get("schema") != RECORD_SCHEMA:
            raise ValueError(f"correctness record schema {data.get('schema')!r}; this perfgate reads {RECORD_SCHEMA}")
        api, concurrency, prompts = data.get("api"), data.get("concurrency"), data.get("prompts")
        if not isinstance(api, str):
            raise ValueError("api must be a string")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be a whole number >= 1, got {concurrency!r}")
        if not isinstance(prompts, list) or not prompts:
            raise ValueError("prompts must be a non-empty list")
        out = [_prompt(k, p) for k, p in enumerate(prompts)]
        if [p.index for p in out] != list(range(len(out))):
            raise ValueError("prompts must be listed by index 0, 1, 2, ...")
        return cls(api, int(concurrency), tuple(out))


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _prompt(k: int, p: Any) -> PromptRecord:
    where = f"prompts[{k}]"
    if not isinstance(p, Mapping):
        raise ValueError(f"{where} must be an object")
    index, tokens, logprobs, margins = p.get("index"), p.get("tokens"), p.get("logprobs"), p.get("margins")
    if not isinstance(index, int) or isinstance(index, bool):
        raise ValueError(f"{where}.index must be a whole number")
    if not isinstance(tokens, list) or not tokens or not all(_whole(t) and t >= 0 for t in tokens):
        raise ValueError(f"{where}.tokens must be a non-empty list of token ids")
    if not isinstance(logprobs, list) or len(logprobs) != len(tokens):
        raise ValueError(f"{where}.logprobs must be a list of one number per token")
    if not isinstance(margins, list) or len(margins) != len(tokens):
        raise ValueError(f"{where}.margins must be a list of one number (or null) per token")
    for i, lp in enumerate(logprobs):
        if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp > 0:
            raise ValueError(f"{where}.logprobs[{i}] must be a finite number <= 0, got {lp!r}")
    for i, m in enumerate(margins):
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m)):
            raise ValueError(f"{where}.margins[{i}] must be a finite number or null, got {m!r}")
    return PromptRecord(
        int(index),
        tuple(int(t) for t in tokens),
        tuple(float(x) for x in logprobs),
        tuple(None if m is None else float(m) for m in margins),
    )
