"""What every client process needs to run one repeat of a workload, built once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfgate.load._backends import Backend
from perfgate.load._selfcheck import ClientLimits
from perfgate.load._tokenize import ServerTokenizer
from perfgate.profile import Workload

# Seed offsets of a repeat's prompts: each measured repeat gets its own (a prefix cache must not
# serve repeat 2 the prompts repeat 1 left in it), and its warmup is _WARMUP_SEED_OFFSET further,
# which is no multiple of the stride, so no repeat's warmup sends another repeat's prompts.
# A steady warmup's rounds step by a prime of their own, so no two rounds draw the same prompts.
_REPEAT_SEED_STRIDE = 7_777
_WARMUP_SEED_OFFSET = 1_000_000
_WARMUP_ROUND_SEED_STRIDE = 10_007


def repeat_seed_offset(repeat: int) -> int:
    """The seed offset of the prompts of measured repeat ``repeat`` (0 for the first)."""
    return repeat * _REPEAT_SEED_STRIDE


def answer_sample(requests: int, n: int) -> frozenset[int]:
    """``n`` request indices spread evenly over ``requests`` measured ones, each in the middle of
    its share: requests sent while the batch is full, not only its ramp up and down."""
    n = min(n, requests)
    return frozenset((2 * j + 1) * requests // (2 * n) for j in range(n)) if n else frozenset()


def warmup_seed_offset(repeat_offset: int, round_index: int = 0) -> int:
    """The seed offset of warmup round ``round_index`` of the repeat whose prompts start at ``repeat_offset``."""
    return repeat_offset + _WARMUP_SEED_OFFSET + round_index * _WARMUP_ROUND_SEED_STRIDE


@dataclass(frozen=True, kw_only=True)
class LoadPlan:
    """One repeat of ``workload`` against ``base_url``.

    Built once by :func:`~perfgate.load.run_workload` (the backend included) and handed as is
    to every shard's process, so all of them speak to the server in exactly the same way.
    ``seed_offset`` gives each repeat its own prompts (:func:`repeat_seed_offset`).
    """

    base_url: str
    workload: Workload
    backend: Backend
    headers: Mapping[str, str]
    limits: ClientLimits
    seed_offset: int
    keep_alive: bool
    # The cache flush's headers (an admin endpoint); None: the requests' own.
    flush_headers: Mapping[str, str] | None = None
    # Indices of the measured requests whose whole answers are kept (RequestRecord.kept).
    keep_answers: frozenset[int] = frozenset()

    @property
    def tokenizer(self) -> ServerTokenizer | None:
        """The server's tokenizer, for a workload that counts its text with it (tokenize = "server")."""
        if self.workload.tokenize != "server":
            return None
        return ServerTokenizer(self.base_url, tuple(self.headers.items()), self.backend.model)

    def tokens(self) -> list[str]:
        """The bearer tokens its requests carry: a spawned client process registers them (its
        secret registry starts empty), so that nothing it quotes from the server shows them."""
        headers = [*self.headers.values(), *(self.flush_headers or {}).values()]
        return [v.removeprefix("Bearer ") for v in headers if v.startswith("Bearer ")]

    @property
    def url(self) -> str:
        """Where the generation requests go."""
        return self.base_url.rstrip("/") + self.backend.path
