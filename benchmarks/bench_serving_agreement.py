"""Do perfgate's client and SGLang's own benchmark client agree on a real SGLang server?

Boots SGLang 0.5.23 (the CPU environment of ``python -m perfgate.testing.sglang_env``) through
perfgate's kind = "sglang" path with ``profiles/sglang-cpu-tiny.toml``, then runs, alternately
and against that one server, ``python -m sglang.benchmark.serving`` (from the server's venv:
``sglang.bench_serving`` is only a deprecated shim since 0.5.16) and perfgate's load client on
the same workload: ``random-ids`` prompts of exactly ``--input-len`` token ids
(``--tokenize-prompt``), fixed output lengths (range ratio 1.0, ignore_eos), the native
``/generate`` backend, the same concurrency and request rate. Prints each round, the medians
with perfgate's relative difference from bench_serving, and one JSON line last.

    python benchmarks/bench_serving_agreement.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate.load import run_workload
from perfgate.metrics import compute_metrics
from perfgate.profile import Workload, load_profile
from perfgate.server import RunningServer, start_server
from perfgate.testing._sglang_env import find_sglang_env

REPO = Path(__file__).resolve().parents[1]
METRICS = ("output_throughput", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "mean_itl_ms", "concurrency")


def bench_serving(
    server: RunningServer, python: str, args: argparse.Namespace, seed: int, env: dict[str, str]
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.jsonl"
        argv = [
            python,
            "-m",
            "sglang.benchmark.serving",
            "--backend",
            "sglang",
            "--base-url",
            server.base_url,
            "--model",
            str(args.model),
            "--tokenizer",
            str(args.model),
            "--dataset-name",
            "random-ids",
            "--tokenize-prompt",
            "--random-input-len",
            str(args.input_len),
            "--random-output-len",
            str(args.output_len),
            "--random-range-ratio",
            "1.0",
            "--num-prompts",
            str(args.num_prompts),
            "--max-concurrency",
            str(args.concurrency),
            "--request-rate",
            "inf",
            "--warmup-requests",
            str(args.warmup),
            "--seed",
            str(seed),
            "--disable-tqdm",
            "--output-file",
            str(out),
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(
                "sglang.benchmark.serving failed (exit "
                f"{proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
        result = json.loads(out.read_text().strip().splitlines()[-1])
    if result.get("completed") != args.num_prompts:
        raise SystemExit(f"bench_serving completed {result.get('completed')} of {args.num_prompts} requests")
    return {m: float(result[m]) for m in METRICS}


def perfgate_client(server: RunningServer, args: argparse.Namespace, seed: int) -> dict[str, float]:
    workload = Workload(
        name="agreement",
        num_prompts=args.num_prompts,
        concurrency=args.concurrency,
        input_len=args.input_len,
        output_len=args.output_len,
        warmup_requests=args.warmup,
        backend="sglang",
        seed=seed,
        token_id_range=(4, 2048),
    )
    run = run_workload(server.base_url, workload, model=server.model)
    failed = [r.error for r in run.records if r.error]
    if failed:
        raise SystemExit(f"perfgate: {len(failed)} requests failed; first: {failed[0]}")
    values = compute_metrics(run, target_concurrency=args.concurrency).values
    return {m: float(values[m]) for m in METRICS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (each runs both clients once)")
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=16, help="warmup requests of each client, every round")
    parser.add_argument("--model", type=Path, default=REPO / ".perfgate-cache" / "tiny-model")
    parser.add_argument("--cache", type=Path, default=REPO / ".perfgate-cache" / "sglang")
    args = parser.parse_args()

    env_info = find_sglang_env("0.5.23", args.cache)
    if env_info is None:
        raise SystemExit(
            f"no SGLang 0.5.23 environment under {args.cache}: python -m perfgate.testing.sglang_env --version "
            f"0.5.23 --cache {args.cache}"
        )
    profile = load_profile(REPO / "profiles" / "sglang-cpu-tiny.toml")
    spec = replace(
        profile.server,
        python=str(env_info.python),
        model_path=str(args.model),
        env={**profile.server.env, **env_info.env},
    )
    client_env = {**os.environ, **spec.env}
    rounds: list[dict[str, dict[str, float]]] = []
    with ExitStack() as stack:
        server = start_server(spec, log_dir=Path(tempfile.mkdtemp(prefix="agreement-")), stack=stack)
        print(
            f"SGLang {server.versions.get('server')} at {server.base_url}, ready in {server.boot_s:.1f} s", flush=True
        )
        for k in range(args.rounds):
            # Alternate which client goes first, so a drift of the shared machine hits both.
            order = ("bench_serving", "perfgate") if k % 2 == 0 else ("perfgate", "bench_serving")
            row: dict[str, dict[str, float]] = {}
            for who in order:
                t0 = time.monotonic()
                if who == "bench_serving":
                    row[who] = bench_serving(server, str(env_info.python), args, seed=k, env=client_env)
                else:
                    row[who] = perfgate_client(server, args, seed=k)
                print(
                    f"round {k + 1} {who:13s} ({time.monotonic() - t0:4.1f} s): "
                    + ", ".join(f"{m} {v:,.2f}" for m, v in row[who].items()),
                    flush=True,
                )
            rounds.append(row)
    summary: dict[str, Any] = {
        "sglang": server.versions.get("server"),
        "rounds": args.rounds,
        "workload": f"c{args.concurrency} in{args.input_len} out{args.output_len} x {args.num_prompts}",
        "metrics": {},
    }
    print(
        f"\n{'metric':20s} {'bench_serving':>14s} {'perfgate':>14s} {'perfgate vs bs':>15s}  (medians of "
        f"{args.rounds} rounds)"
    )
    for m in METRICS:
        bs = statistics.median(r["bench_serving"][m] for r in rounds)
        pg = statistics.median(r["perfgate"][m] for r in rounds)
        per_round = [(r["perfgate"][m] - r["bench_serving"][m]) / r["bench_serving"][m] for r in rounds]
        rel = (pg - bs) / bs
        summary["metrics"][m] = {
            "bench_serving": round(bs, 3),
            "perfgate": round(pg, 3),
            "rel_diff": round(rel, 4),
            "rel_diff_per_round": [round(x, 4) for x in per_round],
        }
        print(f"{m:20s} {bs:14,.2f} {pg:14,.2f} {rel:+14.1%}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
