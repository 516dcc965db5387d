"""Multi-turn chat sessions against a server's prefix cache, read from the server's own /metrics.

Boots the server of a profile and runs, through perfgate's session, 8 chat sessions of 4 turns
(64-token user messages, 16-token replies, 0.1 s think time, 4 sessions at once) and 32 random
prompts of the same mean length (184 tokens), one repeat each. Prints, per workload, the server's
prompt and cached token counts over the measured run and their ratio. The history's replies are
seeded ids, not the server's text, so a server finds each turn's previous prompt cached:
(64 + 144 + 224) / (64 + 144 + 224 + 304) = 0.587 of the prompt tokens. Last stdout line: JSON.

    python benchmarks/multi_turn_cache.py [--profile profiles/sim-glm5.toml] [--token-id-range 4 2048]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from perfgate.profile import Workload, load_profile
from perfgate.session import Session, SessionOptions


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="profiles/sim-glm5.toml", help="the server to use")
    p.add_argument("--token-id-range", type=int, nargs=2, default=None, metavar=("LO", "HI"))
    a = p.parse_args()
    profile = load_profile(Path(a.profile))
    ids = tuple(a.token_id_range) if a.token_id_range else None
    common = {"concurrency": 4, "output_len": 16, "token_id_range": ids, "repeats": 1, "warmup_requests": 0}
    chat = Workload(
        name="multi-turn",
        dataset="multi-turn",
        num_prompts=32,
        num_turns=4,
        think_time_s=0.1,
        input_len=64,
        seed=3,
        **common,
    )
    rand = Workload(name="random", num_prompts=32, input_len=184, seed=4, **common)
    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        session = Session(
            replace(profile, workloads=(chat, rand), sweeps=()),
            SessionOptions(baselines_dir=Path(tmp) / "baselines", log_dir=Path(tmp) / "logs"),
        )
        try:
            for w in (chat, rand):
                result = session.run(w)
                rep = result.repeats[0]
                server = rep.server
                out[w.name] = {
                    "valid": result.valid,
                    "server_cache_hit_rate": rep.flat_metrics().get("server_cache_hit_rate"),
                    "prompt_tokens": server.prompt_tokens if server else None,
                    "cached_tokens": server.cached_tokens if server else None,
                    "source": server.cache_hit_source if server else rep.server_note,
                }
                print(f"{w.name:>12}: {out[w.name]}", flush=True)
        finally:
            session.stack.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
