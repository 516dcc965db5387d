"""Does the gate catch regressions without crying wolf?

Each trial records a baseline (R repeats) and a current run (R repeats) of one workload on
perfgate's simulator (``perfgate.sim.simulate``: SGLang-like continuous batching in virtual
time, seeded per-step noise and a slow AR(1) drift), the current one with every engine step
slowed so that throughput drops by 0, 3, 5 or 10 %. The workload's verdict uses the default
rules (``rules_for(GateSpec(), workload)``: DEFAULT_TOLERANCE, alpha, one-sided Mann-Whitney);
a trial "fails" when any gated metric fails. Over many independent trials that gives the
false-alarm rate (0 % drop) and the detection rates, with Wilson 95 % intervals.

Noise: the simulator's drift is set so that run-to-run throughput varies by ~1 % (the
headline) and ~2 % (a noisy host); the simulator's own default is reported too. A sweep of
tolerances (with and without the noise test) on the same runs shows how the default was
chosen.

    python benchmarks/detection.py [--trials 2000] [--workers 2]

Last stdout line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from perfgate.profile import GateSpec, Workload
from perfgate.sim import SimConfig, simulate
from perfgate.verdict import MetricRule, judge, rules_for

# A quick CI-sized version of the scenario's workload (1024 prompts there): all prompts
# arrive at once, 256 tokens in, 128 out.
WORKLOAD = Workload(name="c256-in256-out128", num_prompts=256, concurrency=256, input_len=256, output_len=128)
DROPS = (0.0, 0.03, 0.05, 0.10)

# name -> (SimConfig overrides, repeats evaluated). Drift 0.016 / 0.032 give ~1 % / ~2 %
# run-to-run throughput variation on this workload (measured and printed below).
NOISE_LEVELS: dict[str, tuple[dict[str, float], tuple[int, ...]]] = {
    "sim-default": ({}, (3,)),
    "1pct": ({"drift": 0.016}, (1, 3, 5)),
    "2pct": ({"drift": 0.032}, (3, 5)),
}


def _p99(values: tuple[float, ...]) -> float:
    """99th percentile with linear interpolation (numpy's default, as bench_serving uses)."""
    s = sorted(v for v in values if not math.isnan(v))
    k = (len(s) - 1) * 0.99
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _run(overrides: dict[str, float], seed: int, drop: float) -> dict[str, float]:
    config = replace(SimConfig(seed=seed, **overrides), slowdown=1.0 / (1.0 - drop))
    arrivals = [(0.0, WORKLOAD.input_len, WORKLOAD.output_len)] * WORKLOAD.num_prompts
    r = simulate(config, arrivals)
    return {
        "request_throughput": r.request_throughput,
        "output_throughput": r.output_throughput,
        "total_throughput": r.total_throughput,
        "mean_tpot_ms": r.mean_tpot_ms,
        "p99_tpot_ms": _p99(r.tpot_ms),
    }


SWEEP_LEVELS = ("1pct", "2pct")
SWEEP_TOLERANCES = (0.02, 0.025, 0.03, 0.04, 0.05)

Outcome = tuple[str, int, float | None, bool, float]
"""(noise level, repeats, swept tolerance or None for the defaults, noise test on?, drop)."""


def _trial(args: tuple[str, int]) -> tuple[list[float], dict[Outcome, bool]]:
    """One trial at one noise level: its baseline throughputs and every verdict's outcome.

    R baseline runs and R current runs per drop, R the level's largest repeat count; smaller
    repeat counts use the first runs, so every repeat count and policy sees the same trials.
    Seeds are unique per (level, trial, role, repeat).
    """
    level, trial = args
    overrides, repeats_list = NOISE_LEVELS[level]
    most = max(repeats_list)
    level_id = list(NOISE_LEVELS).index(level)
    base_seed = (level_id * 1_000_000 + trial) * (len(DROPS) + 1) * 10
    baseline = [_run(overrides, base_seed + i, 0.0) for i in range(most)]
    current = {
        drop: [_run(overrides, base_seed + (k + 1) * 10 + i, drop) for i in range(most)] for k, drop in enumerate(DROPS)
    }
    alpha = GateSpec().alpha
    outcomes: dict[Outcome, bool] = {}
    for drop in DROPS:
        for repeats in repeats_list:
            failed, _ = _outcomes(_rules(None), current[drop][:repeats], baseline[:repeats], alpha)
            outcomes[(level, repeats, None, True, drop)] = failed
        if level in SWEEP_LEVELS:
            for tol in SWEEP_TOLERANCES:
                failed, past_tolerance = _outcomes(_rules(tol), current[drop][:3], baseline[:3], alpha)
                outcomes[(level, 3, tol, True, drop)] = failed
                outcomes[(level, 3, tol, False, drop)] = past_tolerance
    return [r["output_throughput"] for r in baseline], outcomes


def wilson(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95 % interval for a binomial proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = hits / n
    den = 1 + z * z / n
    center = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, center - half), min(1.0, center + half))


def _rules(tolerance: float | None) -> list[MetricRule]:
    """The default rules, or the default rules with every tolerance but p99's set to one value."""
    rules = rules_for(GateSpec(), WORKLOAD)
    if tolerance is None:
        return rules
    return [r if r.metric.startswith("p99") else replace(r, tolerance=tolerance) for r in rules]


def _outcomes(rules: list[MetricRule], now: list[dict[str, float]], base: list[dict[str, float]], alpha: float) -> tuple[bool, bool]:
    """(the verdict fails, the tolerance alone would fail) for one comparison."""
    v = judge(WORKLOAD.name, rules, now, base, alpha=alpha)
    past_tolerance = any(
        m.measured is not None and m.limit is not None and (m.measured < m.limit if m.direction == "higher" else m.measured > m.limit)
        for m in v.metrics
    )
    return not v.passed, past_tolerance


def _fmt(hits: int, n: int) -> str:
    lo, hi = wilson(hits, n)
    return f"{hits / n * 100:.1f} % [{lo * 100:.1f}, {hi * 100:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    alpha = GateSpec().alpha
    n = args.trials
    started = time.perf_counter()

    hits: Counter[Outcome] = Counter()
    throughputs: dict[str, list[float]] = {level: [] for level in NOISE_LEVELS}
    jobs = [(level, i) for level in NOISE_LEVELS for i in range(n)]
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        for (level, _), (tputs, outcomes) in zip(jobs, pool.imap(_trial, jobs, chunksize=25)):
            throughputs[level].extend(tputs)
            hits.update(k for k, failed in outcomes.items() if failed)
    cv = {level: statistics.stdev(x) / statistics.mean(x) * 100 for level, x in throughputs.items()}
    default_rules = _rules(None)
    tol_desc = ", ".join(f"{r.metric} {r.tolerance * 100:g} %" for r in default_rules if r.tolerance is not None)

    print(f"## Detection study: {WORKLOAD.name} on perfgate.sim, {n} trials per cell\n")
    print(f"Default verdict: {tol_desc}; one-sided Mann-Whitney U at alpha {alpha:g} on the repeats.")
    print("A trial fails when any gated metric fails. Rates with Wilson 95 % intervals.\n")
    print("| noise (run-to-run CV of throughput) | repeats | false alarms (no change) | 3 % drop | 5 % drop | 10 % drop |")
    print("|---|---|---|---|---|---|")
    results: dict[str, dict[str, object]] = {}
    for level, (_, repeats_list) in NOISE_LEVELS.items():
        for repeats in repeats_list:
            h = {d: hits[(level, repeats, None, True, d)] for d in DROPS}
            print(f"| {level} ({cv[level]:.2f} %) | {repeats} | " + " | ".join(_fmt(h[d], n) for d in DROPS) + " |")
            results[f"{level}/r{repeats}"] = {
                "cv_pct": round(cv[level], 3),
                "repeats": repeats,
                **{
                    ("false_alarm" if d == 0 else f"detect_{round(d * 100)}pct"): {
                        "rate": h[d] / n,
                        "wilson95": [round(x, 4) for x in wilson(h[d], n)],
                    }
                    for d in DROPS
                },
            }

    print("\n### How the default was chosen (3 repeats; p99_tpot_ms keeps its own tolerance)\n")
    print("| noise | tolerance | noise test | false alarms | 3 % drop | 5 % drop | 10 % drop |")
    print("|---|---|---|---|---|---|---|")
    for level in SWEEP_LEVELS:
        for tol in SWEEP_TOLERANCES:
            for test in (True, False):
                label = f"Mann-Whitney, alpha {alpha:g}" if test else "none (tolerance alone)"
                row = " | ".join(_fmt(hits[(level, 3, tol, test, d)], n) for d in DROPS)
                print(f"| {level} ({cv[level]:.2f} %) | {tol * 100:g} % | {label} | {row} |")

    total_s = time.perf_counter() - started
    runs = sum(n * max(r) * (len(DROPS) + 1) for _, r in NOISE_LEVELS.values())
    print(f"\nsimulated {runs} runs and judged them in {total_s:.0f} s with {args.workers} workers")
    headline = results["1pct/r3"]
    summary = {
        "workload": WORKLOAD.name,
        "trials": n,
        "alpha": alpha,
        "tolerance": {r.metric: r.tolerance for r in default_rules},
        "headline": "1pct/r3",
        "false_alarm_rate": headline["false_alarm"]["rate"],  # type: ignore[index]
        "detect_3pct": headline["detect_3pct"]["rate"],  # type: ignore[index]
        "detect_5pct": headline["detect_5pct"]["rate"],  # type: ignore[index]
        "detect_10pct": headline["detect_10pct"]["rate"],  # type: ignore[index]
        "target_met": headline["detect_5pct"]["rate"] >= 0.95 and headline["false_alarm"]["rate"] <= 0.01,  # type: ignore[index]
        "cells": results,
        "seconds": round(total_s, 1),
    }
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
