"""A/B interleaved vs record-then-gate, the same number of server runs each, on a drifting host.

Every trial is one host: a sequence of server runs at positions 0, 1, 2, ... on perfgate's
simulator engine in virtual time (``perfgate.sim.simulate``, the detection benchmark's
workload and noise), the host slowing by a fixed share per run ("host drift"). The same runs
are judged two ways:

* **A/B** (``perfgate ab``): rounds in ABBA order, run 2i and 2i+1 are round i's A and B; the
  verdict is ``judge_paired`` (median B/A ratio, sign test at alpha 0.05).
* **record-then-gate** (``pytest perf_tests`` against a recorded baseline): the first R runs
  are the baseline (A), the next R the gated run (B); the verdict is ``judge`` (median against
  the baseline median, Mann-Whitney at alpha 0.05), as the gate judges.

Both with the default rules (3 % on throughput and mean TPOT, 10 % on p99 TPOT). B is either
the same stack (false alarms: a FAIL or an INCONCLUSIVE turns the gate red) or one whose
engine steps are slower so that throughput drops 5 % (detection: FAIL). Budgets of 6, 10 and 12
runs compare the two at equal cost; the "policy" rows add runs while a verdict is
inconclusive, as each tool does (the A/B two rounds at a time up to twice its rounds; the gate
one current repeat at a time up to twice its repeats), and report the mean runs used.

The baseline of a real record-then-gate is recorded days before; here it is recorded just
before the gated runs on the same drifting host, which is the most favourable case for it.

    python benchmarks/ab_detection.py [--trials 1000] [--workers 2]

Last stdout line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from detection import WORKLOAD, fmt_rate, session_verdict, simulate_run, wilson

from perfgate.ab import abba_order
from perfgate.profile import GateSpec
from perfgate.verdict import judge, judge_paired, rules_for

DROP = 0.05
# name -> (SimConfig overrides, host slowdown per server run). Drift 0.016 / 0.032 give ~1 / ~2 %
# run-to-run throughput variation on this workload (benchmarks/detection.py measures it).
HOSTS: dict[str, tuple[dict[str, float], float]] = {
    "1pct": ({"drift": 0.016}, 0.0),
    "2pct": ({"drift": 0.032}, 0.0),
    "1pct+host-0.5pct-per-run": ({"drift": 0.016}, 0.005),
    "2pct+host-0.5pct-per-run": ({"drift": 0.032}, 0.005),
}
BUDGETS = (6, 10, 12)
POLICY_ROUNDS = 6
POLICY_REPEATS = 3
POSITIONS = 4 * POLICY_ROUNDS  # the A/B policy's most runs: twice its rounds, two runs each

RULES = rules_for(GateSpec(), WORKLOAD)
ALPHA = GateSpec().alpha


class Runs:
    """One stack's runs on one host, position by position, simulated when first looked at (the
    policies look past 12 runs only when they are undecided)."""

    def __init__(self, overrides: dict[str, float], seed0: int, drop: float, drift: float) -> None:
        self._args = (overrides, seed0, drop, drift)
        self._runs: dict[int, dict[str, float]] = {}

    def __getitem__(self, key: int | slice) -> dict[str, float] | list[dict[str, float]]:
        if isinstance(key, slice):
            return [self[p] for p in range(*key.indices(POSITIONS))]  # type: ignore[misc]
        if key not in self._runs:
            overrides, seed0, drop, drift = self._args
            self._runs[key] = simulate_run(overrides, seed0 + key, drop, (1 + drift) ** key)
        return self._runs[key]

    def __len__(self) -> int:
        return len(self._runs)


def _status(metrics: tuple) -> str:  # type: ignore[type-arg]
    if any(m.status == "fail" for m in metrics):
        return "fail"
    return "inconclusive" if any(m.status == "inconclusive" and not m.ok for m in metrics) else "pass"


def ab_verdict(same: Runs, changed: Runs, rounds: int) -> str:
    """A/B over the first ``rounds`` rounds: A at ABBA's A positions (``same``), B at B's (``changed``)."""
    order = abba_order(1, rounds)
    a = [same[i] for i, (_, v) in enumerate(order) if v == "A"]
    b = [changed[i] for i, (_, v) in enumerate(order) if v == "B"]
    return _status(judge_paired(WORKLOAD.name, RULES, a, b, alpha=ALPHA).metrics)


def ab_policy(same: Runs, changed: Runs) -> tuple[str, int]:
    rounds = POLICY_ROUNDS
    while True:
        verdict = ab_verdict(same, changed, rounds)
        if verdict != "inconclusive" or rounds >= 2 * POLICY_ROUNDS:
            return verdict, 2 * rounds
        rounds += 2


def gate_verdict(same: Runs, changed: Runs, repeats: int) -> str:
    """Baseline = runs 0..R-1 (A), gated = runs R..2R-1 (B)."""
    return _status(judge(WORKLOAD.name, RULES, changed[repeats : 2 * repeats], same[:repeats], alpha=ALPHA).metrics)


def gate_policy(same: Runs, changed: Runs) -> tuple[str, int]:
    verdict, n = session_verdict(
        changed[POLICY_REPEATS : 3 * POLICY_REPEATS], same[:POLICY_REPEATS], POLICY_REPEATS, ALPHA
    )
    return verdict, POLICY_REPEATS + n


def _trial(args: tuple[str, int]) -> tuple[dict[tuple[str, float], tuple[str, int]], int]:
    """(scheme, drop) -> (verdict, runs used) for one host, and the runs simulated.

    Position p's run uses one seed whichever stack runs there: ``same[p]`` is the current
    stack's run, ``changed[p]`` the candidate's (the current stack again at drop 0).
    """
    host, trial = args
    overrides, drift = HOSTS[host]
    seed0 = (list(HOSTS).index(host) * 1_000_000 + trial) * 100
    same, slower = Runs(overrides, seed0, 0.0, drift), Runs(overrides, seed0, DROP, drift)
    out: dict[tuple[str, float], tuple[str, int]] = {}
    for drop, changed in ((0.0, same), (DROP, slower)):
        for runs in BUDGETS:
            out[(f"A/B {runs // 2} rounds", drop)] = (ab_verdict(same, changed, runs // 2), runs)
            out[(f"gate {runs // 2} + {runs // 2}", drop)] = (gate_verdict(same, changed, runs // 2), runs)
        out[(f"A/B policy ({POLICY_ROUNDS} rounds, up to {2 * POLICY_ROUNDS})", drop)] = ab_policy(same, changed)
        out[(f"gate policy ({POLICY_REPEATS} + {POLICY_REPEATS}, up to {2 * POLICY_REPEATS})", drop)] = gate_policy(
            same, changed
        )
    return out, len(same) + len(slower)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    n = args.trials
    started = time.perf_counter()
    verdicts: Counter[tuple[str, str, float, str]] = Counter()
    runs_used: Counter[tuple[str, str, float]] = Counter()
    schemes: list[str] = []
    simulated = 0
    jobs = [(host, i) for host in HOSTS for i in range(n)]
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        for (host, _), (out, sims) in zip(jobs, pool.imap(_trial, jobs, chunksize=10)):
            simulated += sims
            for (scheme, drop), (verdict, used) in out.items():
                verdicts[(host, scheme, drop, verdict)] += 1
                runs_used[(host, scheme, drop)] += used
                if scheme not in schemes:
                    schemes.append(scheme)

    print(f"## A/B interleaved vs record-then-gate: {WORKLOAD.name} on perfgate.sim, {n} hosts per row\n")
    print("Default rules (3 % throughput and mean TPOT, 10 % p99 TPOT), alpha 0.05. Red = FAIL or INCONCLUSIVE.")
    print("Cells: FAIL share [Wilson 95 %] + INCONCLUSIVE share.\n")
    print(
        "| host | scheme | server runs | no change: FAIL + INCONCLUSIVE | 5 % slower: FAIL (detected) + INCONCLUSIVE |"
    )
    print("|---|---|---|---|---|")
    results: dict[str, dict[str, object]] = {}
    for host in HOSTS:
        for scheme in schemes:
            cells = []
            record: dict[str, object] = {}
            for drop in (0.0, DROP):
                fail = verdicts[(host, scheme, drop, "fail")]
                inc = verdicts[(host, scheme, drop, "inconclusive")]
                cells.append(f"{fmt_rate(fail, n)} + {inc / n * 100:.1f} %")
                key = "no_change" if drop == 0 else "drop_5pct"
                record[key] = {
                    "fail": fail / n,
                    "inconclusive": inc / n,
                    "wilson95_fail": [round(x, 4) for x in wilson(fail, n)],
                }
                record[f"mean_runs_{key}"] = round(runs_used[(host, scheme, drop)] / n, 2)
            used = f"{record['mean_runs_no_change']:g} / {record['mean_runs_drop_5pct']:g}"
            print(f"| {host} | {scheme} | {used} | {cells[0]} | {cells[1]} |")
            results[f"{host}/{scheme}"] = record
    total_s = time.perf_counter() - started
    print(f"\nsimulated {simulated} runs and judged them in {total_s:.0f} s with {args.workers} workers")
    print(
        json.dumps(
            {"workload": WORKLOAD.name, "trials": n, "drop": DROP, "cells": results, "seconds": round(total_s, 1)},
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
