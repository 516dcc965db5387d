"""What a shared prefix does on a server with a prefix cache, read from the server's own /metrics.

Boots the server of a profile (any kind: the simulator by default, real SGLang with e.g.
``--profile profiles/sglang-cpu-tiny.toml``) and runs, through perfgate's session, two
workloads with the same prompt length: ``shared-prefix`` (``--groups`` system prompts of
``--system-prompt-len`` tokens, then a fresh ``--input-len``-token question) and ``random``
(prompts of ``--system-prompt-len + --input-len`` random tokens). With ``--without-cache`` it
boots the server a second time with its prefix cache off (the simulator through
PERFGATE_SIM_DISABLE_RADIX_CACHE, SGLang with --disable-radix-cache) and runs the shared
prefix again. The warmup sends one request per group, so the system prompts are cached when
the measured phase starts, as in a deployment. Per workload:
the medians over repeats of the server's cache hit rate (its cached / prompt token counters
over the measured phase), TTFT, TPOT, output throughput, goodput and SLO attainment. Last
stdout line: one JSON object.

    python benchmarks/prefix_cache.py [--profile profiles/sim-glm5.toml] [--without-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from perfgate._stats import median
from perfgate.profile import Profile, Slo, Workload, load_profile
from perfgate.session import Session, SessionOptions

SHOWN = (
    "server_cache_hit_rate",
    "mean_ttft_ms",
    "p90_ttft_ms",
    "mean_tpot_ms",
    "output_throughput",
    "goodput",
    "slo_attainment_pct",
)


def _run(profile: Profile, workloads: list[Workload]) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        session = Session(
            replace(profile, workloads=tuple(workloads), sweeps=()),
            SessionOptions(baselines_dir=Path(tmp) / "baselines", log_dir=Path(tmp) / "logs"),
        )
        try:
            out = {}
            for w in workloads:
                result = session.run(w)
                if not result.valid:
                    raise SystemExit(f"{w.name}: invalid run: {'; '.join(result.invalid_reasons)}")
                repeats = result.repeat_metrics()
                out[w.name] = {
                    k: round(median([r[k] for r in repeats]), 6) for k in SHOWN if all(k in r for r in repeats)
                }
                print(f"{w.name:>24}: " + ", ".join(f"{k} {v:g}" for k, v in out[w.name].items()))
            return out
        finally:
            session.stack.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="profiles/sim-glm5.toml", help="the server (and telemetry) to use")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--system-prompt-len", type=int, default=2048)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--token-id-range", type=int, nargs=2, default=None, metavar=("LO", "HI"))
    p.add_argument(
        "--backend",
        default="sglang",
        choices=("sglang", "openai-completions"),
        help="token-id prompts either way, so lengths are exact",
    )
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=30.0)
    p.add_argument(
        "--without-cache", action="store_true", help="also run the shared prefix with the server's cache off"
    )
    a = p.parse_args()

    profile = load_profile(a.profile)
    profile = replace(profile, gate=replace(profile.gate, repeats=a.repeats, max_repeats=a.repeats))
    ids = tuple(a.token_id_range) if a.token_id_range else None
    common = {
        "num_prompts": a.num_prompts,
        "concurrency": a.concurrency,
        "output_len": a.output_len,
        "warmup_requests": a.groups,
        "token_id_range": ids,
        "backend": a.backend,
        "slo": Slo(ttft_ms=a.slo_ttft_ms, tpot_ms=a.slo_tpot_ms),
    }
    shared = Workload(
        name="shared-prefix",
        dataset="shared-prefix",
        num_groups=a.groups,
        system_prompt_len=a.system_prompt_len,
        input_len=a.input_len,
        seed=1,
        **common,
    )
    rand = Workload(name="random", input_len=a.system_prompt_len + a.input_len, seed=2, **common)
    out: dict[str, object] = {
        "profile": profile.name,
        "server": profile.server.kind,
        "concurrency": a.concurrency,
        "num_prompts": a.num_prompts,
        "groups": a.groups,
        "system_prompt_len": a.system_prompt_len,
        "input_len": a.input_len,
        "output_len": a.output_len,
        "repeats": a.repeats,
        "slo": {"ttft_ms": a.slo_ttft_ms, "tpot_ms": a.slo_tpot_ms},
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    out["with_cache"] = _run(profile, [shared, rand])
    if a.without_cache:
        server = profile.server
        if server.kind == "simulator":
            os.environ["PERFGATE_SIM_DISABLE_RADIX_CACHE"] = "1"
        else:
            server = replace(server, args=(*server.args, "--disable-radix-cache"))
        out["without_cache"] = _run(replace(profile, server=server), [replace(shared, name="shared-prefix-no-cache")])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
