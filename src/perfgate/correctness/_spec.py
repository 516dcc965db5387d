"""What one probe sends: the profile's ``[correctness]`` table resolved against its server and workloads."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from perfgate.catalogue import DEFAULT_LIMITS
from perfgate.profile import Profile

Api = Literal["sglang", "openai-completions", "openai-chat"]

# Token ids the prompts are drawn from when the workloads do not say (the load's default range).
DEFAULT_ID_RANGE = (1000, 30000)
# The low pass's concurrency: a few requests share each step, so the pass takes seconds where one
# at a time takes the whole output length per prompt (~17 s for 32 x 64 tokens on sim-glm5).
LOW_CONCURRENCY = 8
# Top tokens asked for at every position: the runner-up tells a near-tie from a real change.
TOP_LOGPROBS = 2

_WORDS = (
    "the of and to in is was for on that with as by at from his an were are which this be has or had "
    "one first new two after who they its time also their but not been year city made world school "
    "house water river music light power system number people state group place court night model "
    "engine kernel token batch cache queue graph layer value field table order north south east west"
).split()


@dataclass(frozen=True)
class Prompt:
    """One probe prompt: ``ids`` for the token APIs, ``text`` (seeded words) for chat."""

    index: int
    ids: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class ProbeSpec:
    """A resolved probe: what is sent, at which concurrencies, and the limits it is held to.

    ``concurrencies`` are in increasing order; the duplicates ride along in the highest one.
    ``limits``: metric -> absolute limit (a ceiling; a floor for "higher" metrics).
    """

    prompts: int
    prompt_len: int
    output_len: int
    concurrencies: tuple[int, ...]
    duplicates: int
    seed: int
    api: Api
    token_id_range: tuple[int, int]
    near_tie_nats: float
    limits: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    # Why the reference's tokens are not scored teacher-forced ("" when they are, where the API can).
    no_score_reason: str = ""

    def identity(self) -> dict[str, Any]:
        """What makes two probes comparable (their fingerprint's workload part): the prompts and the
        API, not the concurrencies (each pass is held to the same reference) nor the limits."""
        return {
            "correctness_probe": {
                "prompts": self.prompts,
                "prompt_len": self.prompt_len,
                "output_len": self.output_len,
                "seed": self.seed,
                "api": self.api,
                "token_id_range": list(self.token_id_range),
            }
        }

    def prompt_set(self) -> list[Prompt]:
        """The fixed, seeded prompts: the same for the same spec on any machine."""
        lo, hi = self.token_id_range
        rng = random.Random(f"perfgate-correctness-{self.seed}")
        out = []
        for i in range(self.prompts):
            ids = tuple(rng.randrange(lo, hi) for _ in range(self.prompt_len))
            text = " ".join(rng.choice(_WORDS) for _ in range(self.prompt_len))
            out.append(Prompt(i, ids, text))
        return out


def probe_spec(profile: Profile) -> ProbeSpec | None:
    """The probe ``profile`` asks for, or None when it is off."""
    c = profile.correctness
    if not c.on(profile.server.kind):
        return None
    api: Api
    if c.api != "auto":
        api = c.api
    elif profile.server.kind in ("sglang", "simulator"):
        api = "sglang"
    else:
        api = profile.workloads[0].backend
    highest = max(w.concurrency for w in profile.workloads)
    concurrencies = c.concurrencies or tuple(sorted({min(LOW_CONCURRENCY, highest), highest}))
    id_range = c.token_id_range or profile.workloads[0].token_id_range or DEFAULT_ID_RANGE
    return ProbeSpec(
        prompts=c.prompts,
        prompt_len=c.prompt_len,
        output_len=c.output_len,
        concurrencies=concurrencies,
        duplicates=c.duplicates,
        seed=c.seed,
        api=api,
        token_id_range=id_range,
        near_tie_nats=c.near_tie_nats,
        limits={**DEFAULT_LIMITS, **c.limits},
        no_score_reason="" if c.score else c.reason.strip(),
    )


def off_reason(profile: Profile) -> str:
    """Why the probe does not run for ``profile`` ("" when it does)."""
    c = profile.correctness
    if c.on(profile.server.kind):
        return ""
    if c.enabled is False:
        return f"off ([correctness] enabled = false: {c.reason or 'no reason given'})"
    return (
        f'off (opt-in for kind = "{profile.server.kind}": set [correctness] enabled = true where the server '
        "returns logprobs)"
    )
