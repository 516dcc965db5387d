"""How noisy is a profile's workload on this host, and how far below it does a degraded server fall?

A CPU profile's tolerance must sit above its measured run-to-run noise, and its negative control
(a deliberately slower configuration of the same server) must fall several times further than
the tolerance allows, or the CI check passes a regression on a loaded machine. This boots the
profile's server, runs one workload ``--runs`` times, boots it again with ``--slow-args`` added to
``[server] args`` (or ``command`` for a command server), runs it ``--runs`` times, and prints
each run's numbers, the coefficient of variation, the worst-case ratio of the two
configurations and how many times the tolerance that drop is.

    python benchmarks/noise_and_control.py profiles/vllm-cpu-tiny.toml --workload c64-in64-out64 \\
        --slow-args="--max-num-seqs 1" --runs 6

Run it inside the environment that has the server (e.g. .tox/e2e-vllm/bin/python). Last stdout
line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from perfgate.load import run_workload
from perfgate.metrics import compute_metrics
from perfgate.profile import ServerSpec, load_profile
from perfgate.server import start_server

METRICS = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms")


def _runs(spec: ServerSpec, workload_name: str, profile_path: str, runs: int, log_dir: Path) -> list[dict[str, float]]:
    profile = load_profile(profile_path)
    workload = profile.workload(workload_name)
    out = []
    with ExitStack() as stack:
        server = start_server(spec, log_dir=log_dir, stack=stack)
        for i in range(runs):
            load = run_workload(server.base_url, workload, model=server.model, repeat=i, keep_alive=spec.keep_alive)
            values = compute_metrics(load, target_concurrency=min(workload.concurrency, workload.num_prompts)).values
            row = {m: values[m] for m in METRICS if m in values}
            row["failed"] = values.get("failed", 0.0)
            out.append(row)
            print(f"  run {i + 1}: " + ", ".join(f"{k} {v:,.2f}" for k, v in row.items()), flush=True)
    return out


def _cv_pct(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) * 100 if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile")
    parser.add_argument("--workload", required=True)
    parser.add_argument(
        "--slow-args", required=True, help="server flags that make the server slower (the negative control)"
    )
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--log-dir", default=".perfgate-cache/logs/noise")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    spec = profile.server
    slow = shlex.split(args.slow_args)
    slow_spec = (
        replace(spec, command=(*spec.command, *slow))
        if spec.kind == "command"
        else replace(spec, args=(*spec.args, *slow))
    )
    tolerance = profile.gate.tolerance.get("output_throughput", 0.0)
    started = time.perf_counter()
    print(f"{profile.name} / {args.workload}: {args.runs} runs as configured")
    normal = _runs(spec, args.workload, args.profile, args.runs, Path(args.log_dir))
    print(f"{profile.name} / {args.workload}: {args.runs} runs with {args.slow_args}")
    degraded = _runs(slow_spec, args.workload, args.profile, args.runs, Path(args.log_dir))
    tput = [r["output_throughput"] for r in normal]
    slow_tput = [r["output_throughput"] for r in degraded]
    # The control must fail even when the degraded server has its best run and the normal one its worst.
    worst_ratio = max(slow_tput) / min(tput)
    drop_pct = (1 - worst_ratio) * 100
    summary = {
        "profile": profile.name,
        "workload": args.workload,
        "slow_args": args.slow_args,
        "runs": args.runs,
        "output_throughput": {"normal": [round(x, 1) for x in tput], "degraded": [round(x, 1) for x in slow_tput]},
        "cv_pct": {"normal": round(_cv_pct(tput), 2), "degraded": round(_cv_pct(slow_tput), 2)},
        "median_ratio": round(statistics.median(slow_tput) / statistics.median(tput), 4),
        "worst_case_ratio": round(worst_ratio, 4),
        "tolerance": tolerance,
        "worst_case_drop_in_tolerances": round(drop_pct / (tolerance * 100), 2) if tolerance else None,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(
        f"normal CV {summary['cv_pct']['normal']} %, degraded/normal median ratio {summary['median_ratio']}, worst "
        "case "
        f"{summary['worst_case_ratio']} ({drop_pct:.1f} % drop = {summary['worst_case_drop_in_tolerances']} x the "
        f"{tolerance:.0%} tolerance)"
    )
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
