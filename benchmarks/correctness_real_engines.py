"""False alarms, detection and cost of the correctness probe's default limits on a real engine.

Boots the profile's server ``--boots`` times (the model at ``[server] model_path``), takes the first
probe of the first boot as the reference (what ``--perf-update-baselines`` records), and holds
``--probes`` more probes per boot to it, cycling through several concurrency pairs (batching
changes numerics). Every failed verdict of an unchanged server is a false alarm. Then it boots the
same profile once per ``--wrong NAME=DIR`` model (served under the profile's own model path's
name: the same flags, only the weights differ), probes it ``--probes`` times and counts how often
the verdict fails. Each boot also runs the profile's first workload once, so a wrong model's
throughput can be compared with the right one's.

    python benchmarks/correctness_real_engines.py profiles/sglang-cpu-tiny.toml --boots 3 --probes 7 \\
        --wrong perturbed=.perfgate-cache/tinymodel/llama-h128-l2-float32-perturbed-<key> \\
        --wrong nan=.perfgate-cache/tinymodel/llama-h128-l2-float32-nan-<key>

(``python -m perfgate.testing.tinymodel --cache .perfgate-cache/tinymodel --defect perturbed`` prints
such a directory.) Run it from the repository root, in the environment that runs the server's
client side (for the vllm-cpu-tiny profile: the e2e-vllm tox env's python), one engine at a time
on a shared machine. Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from perfgate.correctness import ProbeRecord, ProbeSpec, judge_probe, probe_spec, run_probe
from perfgate.errors import CorrectnessError
from perfgate.load import run_workload
from perfgate.metrics import compute_metrics
from perfgate.profile import Profile, ServerSpec, load_profile
from perfgate.server import start_server

# Concurrency pairs the unchanged probes cycle through (the default pair is [min(8, c), c]).
PAIRS = ((1, 8), (8, 16), (16, 32), (1, 32))


def _probe(spec: ProbeSpec, url: str, model: str, reference: ProbeRecord | None) -> dict[str, Any]:
    try:
        outcome = run_probe(spec, url, model=model, reference=reference, reference_label="boot 1's first probe")
    except CorrectnessError as e:
        # What the gate reports as "correctness probe stopped": a failure, never a pass.
        return {"concurrencies": list(spec.concurrencies), "failed": ["error"], "error": str(e)[:300]}
    verdict = judge_probe(outcome)
    return {
        "concurrencies": list(spec.concurrencies),
        "seconds": round(outcome.duration_s, 2),
        "failed": sorted({v.metric for v in verdict.failures}),
        "metrics": {k: (v if math.isfinite(v) else None) for k, v in outcome.metrics.items()},
        "record": outcome.record,
    }


def _throughput(profile: Profile, url: str, model: str, keep_alive: bool) -> float:
    workload = profile.workloads[0]
    load = run_workload(url, workload, model=model, repeat=0, keep_alive=keep_alive)
    values = compute_metrics(load, target_concurrency=min(workload.concurrency, workload.num_prompts)).values
    return round(values["output_throughput"], 1)


def _boot(
    profile: Profile, server_spec: ServerSpec, spec: ProbeSpec, probes: int, reference: ProbeRecord | None, log: Path
) -> tuple[list[dict[str, Any]], float, float]:
    """``probes`` probes of one boot (the first at the default concurrencies) and its throughput."""
    out = []
    with ExitStack() as stack:
        t0 = time.monotonic()
        server = start_server(server_spec, log_dir=log, stack=stack)
        boot_s = time.monotonic() - t0
        for i in range(probes):
            pair = spec.concurrencies if i == 0 else PAIRS[(i - 1) % len(PAIRS)]
            out.append(_probe(replace(spec, concurrencies=tuple(pair)), server.base_url, server.model, reference))
            row = {k: v for k, v in out[-1].items() if k not in ("record", "metrics")}
            print(f"    probe {i + 1}: {row}", flush=True)
        tput = _throughput(profile, server.base_url, server.model, server_spec.keep_alive)
    print(f"    boot {boot_s:.0f} s, output throughput {tput} tok/s", flush=True)
    return out, tput, boot_s


def _worst(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    names = {k for r in runs for k in r.get("metrics", {})}
    worst: dict[str, float | None] = {}
    for name in sorted(names):
        values = [r["metrics"][name] for r in runs if r.get("metrics", {}).get(name) is not None]
        worst[name] = (min(values) if name == "correctness_greedy_match" else max(values)) if values else None
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile")
    parser.add_argument("--boots", type=int, default=3)
    parser.add_argument("--probes", type=int, default=7, help="probes per boot")
    parser.add_argument("--wrong", action="append", default=[], metavar="NAME=DIR", help="a wrong model to detect")
    parser.add_argument("--log-dir", default=".perfgate-cache/logs/correctness")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    base = probe_spec(profile)
    if base is None:
        sys.exit(f"{args.profile}: the correctness probe is off; set [correctness] enabled = true")
    started = time.monotonic()
    reference: ProbeRecord | None = None
    unchanged: list[dict[str, Any]] = []
    tputs, boots = [], []
    for b in range(args.boots):
        print(f"{profile.name}: unchanged server, boot {b + 1}/{args.boots}", flush=True)
        runs, tput, boot_s = _boot(profile, profile.server, base, args.probes, reference, Path(args.log_dir))
        if reference is None:
            # The first probe of the first boot is the reference; it was held to itself only.
            reference = runs[0]["record"]
            runs = runs[1:]
        unchanged += runs
        tputs.append(tput)
        boots.append(round(boot_s, 1))
    wrong: dict[str, Any] = {}
    for item in args.wrong:
        name, _, path = item.partition("=")
        print(f"{profile.name}: wrong model {name} ({path})", flush=True)
        # Only the weights differ: a command server's {model} is the model path too.
        spec = replace(profile.server, model_path=str(Path(path).resolve()))
        runs, tput, _ = _boot(profile, spec, base, args.probes, reference, Path(args.log_dir))
        wrong[name] = {
            "probes": len(runs),
            "detected": sum(1 for r in runs if r["failed"]),
            "failed_metrics": sorted({m for r in runs for m in r["failed"]}),
            "worst": _worst(runs),
            "errors": sorted({r["error"] for r in runs if "error" in r}),
            "output_throughput": tput,
        }
    by_pair: dict[str, list[float]] = {}
    for r in unchanged:
        if "seconds" in r:
            by_pair.setdefault("c" + "+c".join(map(str, r["concurrencies"])), []).append(r["seconds"])
    summary = {
        "profile": profile.name,
        "unchanged": {
            "probes": len(unchanged),
            "boots": args.boots,
            "false_alarms": sum(1 for r in unchanged if r["failed"]),
            "failed_metrics": sorted({m for r in unchanged for m in r["failed"]}),
            "worst": _worst(unchanged),
            "output_throughput": tputs,
            "boot_s": boots,
        },
        "probe_seconds": {pair: [min(v), max(v)] for pair, v in sorted(by_pair.items())},
        "default_concurrencies": list(base.concurrencies),
        "limits": dict(base.limits),
        "wrong": wrong,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
