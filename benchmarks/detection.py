"""Does the gate catch regressions without crying wolf, and how often can it not decide?

Each trial records a baseline (R repeats) and a current run of one workload on perfgate's
simulator (``perfgate.sim.simulate``: SGLang-like continuous batching in virtual time, seeded
per-step noise and a slow AR(1) drift), the current one with every engine step slowed so that
throughput drops by 0, 3, 5 or 10 %. The verdict is the gate session's: the default rules
(``rules_for(GateSpec(), workload)``: DEFAULT_TOLERANCE, alpha, one-sided Mann-Whitney) on R
repeats; while a metric is past its limit but not significant (INCONCLUSIVE), one more current
repeat is run, up to ``max_repeats`` (2 R, the default); what is still undecided then is
INCONCLUSIVE, which fails the gate by default. Over many independent trials that gives, per
drop, the share of FAIL and of INCONCLUSIVE verdicts (at 0 % drop both are false alarms: the
gate is red), with Wilson 95 % intervals, and the mean number of repeats run.

Noise: the simulator's drift is set so that run-to-run throughput varies by ~1 % (the
headline), ~2 % (a noisy host), ~5 % and ~10 % (a shared, loaded host); the simulator's own
default is reported too. "Host drift" makes every run 0.5 % slower than the one before it
(thermals, a neighbour ramping up): the baseline's runs come first, the current runs after,
as in record-then-gate. A sweep of tolerances (with and without the noise test, R repeats, no
reruns) on the same runs shows how the default tolerance was chosen.

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

# name -> (SimConfig overrides, repeats evaluated, host slowdown per run). Drift 0.016 / 0.032 /
# 0.08 / 0.16 give ~1 / ~2 / ~5 / ~10 % run-to-run throughput variation on this workload
# (measured and printed below).
NOISE_LEVELS: dict[str, tuple[dict[str, float], tuple[int, ...], float]] = {
    "sim-default": ({}, (3,), 0.0),
    "1pct": ({"drift": 0.016}, (1, 3, 5), 0.0),
    "2pct": ({"drift": 0.032}, (3, 5), 0.0),
    "5pct": ({"drift": 0.08}, (3, 5), 0.0),
    "10pct": ({"drift": 0.16}, (3, 5), 0.0),
    "1pct+host-drift": ({"drift": 0.016}, (3,), 0.005),
}


def _p99(values: tuple[float, ...]) -> float:
    """99th percentile with linear interpolation (numpy's default, as bench_serving uses)."""
    s = sorted(v for v in values if not math.isnan(v))
    k = (len(s) - 1) * 0.99
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def simulate_run(overrides: dict[str, float], seed: int, drop: float, host: float = 1.0) -> dict[str, float]:
    """One run; ``host`` multiplies every step's time (the host's own slowdown at that moment)."""
    config = replace(SimConfig(seed=seed, **overrides), slowdown=host / (1.0 - drop))
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

Outcome = tuple[str, int, float | None, bool, float, str]
"""(noise level, repeats, swept tolerance or None for the defaults, noise test on?, drop, verdict)."""

Verdict = str  # "pass", "fail" or "inconclusive"


def _trial(args: tuple[str, int]) -> tuple[list[float], dict[Outcome, bool], dict[tuple[int, float], int]]:
    """One trial at one noise level: its baseline throughputs, every verdict's outcome and the
    repeats the session policy ran per (repeats, drop).

    R baseline runs and up to 2 R current runs per drop, R the level's largest repeat count;
    smaller repeat counts use the first runs, so every repeat count and policy sees the same
    trials. Seeds are unique per (level, trial, role, repeat). With host drift, run i of the
    baseline and run R + i of the current phase are slowed by (1 + drift) ** index.
    """
    level, trial = args
    overrides, repeats_list, host_drift = NOISE_LEVELS[level]
    most = max(repeats_list)
    level_id = list(NOISE_LEVELS).index(level)
    base_seed = (level_id * 1_000_000 + trial) * (len(DROPS) + 1) * 100
    baseline = [simulate_run(overrides, base_seed + i, 0.0, (1 + host_drift) ** i) for i in range(most)]
    current = {
        drop: [
            simulate_run(overrides, base_seed + (k + 1) * 100 + i, drop, (1 + host_drift) ** (most + i))
            for i in range(2 * most)
        ]
        for k, drop in enumerate(DROPS)
    }
    alpha = GateSpec().alpha
    outcomes: dict[Outcome, bool] = {}
    used: dict[tuple[int, float], int] = {}
    for drop in DROPS:
        for repeats in repeats_list:
            verdict, n = session_verdict(current[drop], baseline[:repeats], repeats, alpha)
            outcomes[(level, repeats, None, True, drop, verdict)] = True
            used[(repeats, drop)] = n
        if level in SWEEP_LEVELS:
            for tol in SWEEP_TOLERANCES:
                failed, past_tolerance = _outcomes(_rules(tol), current[drop][:3], baseline[:3], alpha)
                outcomes[(level, 3, tol, True, drop, "fail")] = failed
                outcomes[(level, 3, tol, False, drop, "fail")] = past_tolerance
    return [r["output_throughput"] for r in baseline], outcomes, used


def session_verdict(
    current: list[dict[str, float]], base: list[dict[str, float]], repeats: int, alpha: float
) -> tuple[Verdict, int]:
    """What the gate session decides: judge ``repeats`` runs, add one while inconclusive, up to 2 x repeats."""
    rules = _rules(None)
    n = repeats
    while True:
        v = judge(WORKLOAD.name, rules, current[:n], base, alpha=alpha)
        if v.inconclusive and n < 2 * repeats:
            n += 1
            continue
        failed = any(m.status == "fail" for m in v.metrics)
        return ("fail" if failed else "inconclusive" if v.inconclusive else "pass"), n


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


def _outcomes(
    rules: list[MetricRule], now: list[dict[str, float]], base: list[dict[str, float]], alpha: float
) -> tuple[bool, bool]:
    """(a metric fails, confirmed by the noise test; the tolerance alone would fail) for one comparison."""
    v = judge(WORKLOAD.name, rules, now, base, alpha=alpha)
    past_tolerance = any(
        m.measured is not None
        and m.limit is not None
        and (m.measured < m.limit if m.direction == "higher" else m.measured > m.limit)
        for m in v.metrics
    )
    return any(m.status == "fail" for m in v.metrics), past_tolerance


def fmt_rate(hits: int, n: int) -> str:
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
    repeats_run: Counter[tuple[str, int, float]] = Counter()
    throughputs: dict[str, list[float]] = {level: [] for level in NOISE_LEVELS}
    jobs = [(level, i) for level in NOISE_LEVELS for i in range(n)]
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        for (level, _), (tputs, outcomes, used) in zip(jobs, pool.imap(_trial, jobs, chunksize=25)):
            throughputs[level].extend(tputs)
            hits.update(k for k, failed in outcomes.items() if failed)
            repeats_run.update({(level, r, d): k for (r, d), k in used.items()})
    cv = {level: statistics.stdev(x) / statistics.mean(x) * 100 for level, x in throughputs.items()}
    default_rules = _rules(None)
    tol_desc = ", ".join(f"{r.metric} {r.tolerance * 100:g} %" for r in default_rules if r.tolerance is not None)

    print(f"## Detection study: {WORKLOAD.name} on perfgate.sim, {n} trials per cell\n")
    print(f"Default verdict: {tol_desc}; one-sided Mann-Whitney U at alpha {alpha:g} on the repeats;")
    print("inconclusive metrics get one more repeat at a time, up to 2 x repeats (the session's policy).")
    print("Each cell: FAIL / INCONCLUSIVE share of trials (Wilson 95 % interval of FAIL); both turn the")
    print("gate red by default. Last column: mean repeats run at 0 / 5 % drop.\n")
    print(
        "| noise (run-to-run CV of throughput) | repeats | no change (false alarms) | 3 % drop | 5 % drop | 10 % "
        "drop | repeats run |"
    )
    print("|---|---|---|---|---|---|---|")
    results: dict[str, dict[str, object]] = {}
    for level, (_, repeats_list, _) in NOISE_LEVELS.items():
        for repeats in repeats_list:
            fail = {d: hits[(level, repeats, None, True, d, "fail")] for d in DROPS}
            inconclusive = {d: hits[(level, repeats, None, True, d, "inconclusive")] for d in DROPS}
            mean_used = [repeats_run[(level, repeats, d)] / n for d in (0.0, 0.05)]
            cells = " | ".join(f"{fmt_rate(fail[d], n)} / {inconclusive[d] / n * 100:.1f} %" for d in DROPS)
            print(f"| {level} ({cv[level]:.2f} %) | {repeats} | {cells} | {mean_used[0]:.2f} / {mean_used[1]:.2f} |")
            results[f"{level}/r{repeats}"] = {
                "cv_pct": round(cv[level], 3),
                "repeats": repeats,
                "mean_repeats_run": {"no_change": round(mean_used[0], 3), "drop_5pct": round(mean_used[1], 3)},
                **{
                    ("false_alarm" if d == 0 else f"detect_{round(d * 100)}pct"): {
                        "rate": fail[d] / n,
                        "wilson95": [round(x, 4) for x in wilson(fail[d], n)],
                        "inconclusive_rate": inconclusive[d] / n,
                    }
                    for d in DROPS
                },
            }

    print("\n### How the default was chosen (3 repeats, no reruns; p99_tpot_ms keeps its own tolerance)\n")
    print("With the noise test a cell counts confirmed failures only (the rest past the limit is INCONCLUSIVE).\n")
    print("| noise | tolerance | noise test | false alarms | 3 % drop | 5 % drop | 10 % drop |")
    print("|---|---|---|---|---|---|---|")
    for level in SWEEP_LEVELS:
        for tol in SWEEP_TOLERANCES:
            for test in (True, False):
                label = f"Mann-Whitney, alpha {alpha:g}" if test else "none (tolerance alone)"
                row = " | ".join(fmt_rate(hits[(level, 3, tol, test, d, "fail")], n) for d in DROPS)
                print(f"| {level} ({cv[level]:.2f} %) | {tol * 100:g} % | {label} | {row} |")

    total_s = time.perf_counter() - started
    runs = sum(n * max(r) * (2 * len(DROPS) + 1) for _, r, _ in NOISE_LEVELS.values())
    print(f"\nsimulated {runs} runs and judged them in {total_s:.0f} s with {args.workers} workers")
    headline = results["1pct/r3"]
    summary = {
        "workload": WORKLOAD.name,
        "trials": n,
        "alpha": alpha,
        "tolerance": {r.metric: r.tolerance for r in default_rules},
        "headline": "1pct/r3",
        "false_alarm_rate": headline["false_alarm"]["rate"],  # type: ignore[index]
        "false_inconclusive_rate": headline["false_alarm"]["inconclusive_rate"],  # type: ignore[index]
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
