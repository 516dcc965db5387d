"""The boot-to-boot spread of one unchanged configuration, from the results of N boots.

    python benchmarks/boot_spread.py WORK_DIR [--workload NAME] [--metric output_throughput]

Reads the newest WORK_DIR/boot-*/results-*.json of each boot (gpu_sglang.sh's
GPU_SGLANG_NOISE_BOOTS=N writes them: one perfgate session, so one server boot, per folder) and
prints, per boot, each repeat's value of the metric, the warmup (steady rounds and their last two
rates), the longest token gap and the run's validity; then the spread over the boots and what it
means for record-then-gate: a baseline recorded on one boot and gated on another moves by
(gate / record - 1), at worst min / max - 1 over these boots. The tolerance printed is the smallest
whole percent that no pair of these boots would have crossed; N boots see less than the range
that more boots would, so it is a floor for the profile's tolerance, not the tolerance itself.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Boot:
    name: str
    values: list[float]
    valid: bool
    invalid_reasons: list[str]
    warmup: list[dict[str, Any]]
    longest_gap_s: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.values)


@dataclass(frozen=True)
class Spread:
    boots: int
    median: float
    low: float
    high: float
    spread: float
    worst_change: float
    tolerance_floor: float
    within_boot: float | None


def _boot_key(path: str) -> tuple[int, str]:
    m = re.search(r"boot-(\d+)", path)
    return (int(m.group(1)) if m else 0, path)


def read_boots(work: str, workload: str, metric: str) -> list[Boot]:
    """One Boot per WORK/boot-*/ folder whose newest results JSON holds ``workload`` with ``metric``."""
    boots = []
    for folder in sorted(glob.glob(f"{work}/boot-*/"), key=_boot_key):
        paths = sorted(glob.glob(f"{folder}results-*.json"))
        if not paths:
            continue
        with open(paths[-1], encoding="utf-8") as f:
            doc = json.load(f)
        for w in doc.get("workloads", []):
            if w.get("workload") != workload:
                continue
            reps = w.get("repeats", [])
            values = [r["values"][metric] for r in reps if isinstance(r.get("values", {}).get(metric), (int, float))]
            if not values:
                continue
            gaps = [((r.get("token_gaps") or {}).get("longest") or {}).get("length_s") for r in reps]
            boots.append(
                Boot(
                    name=folder.rstrip("/").rsplit("/", 1)[-1],
                    values=values,
                    valid=bool(w.get("valid")),
                    invalid_reasons=list(w.get("invalid_reasons", [])),
                    warmup=[r.get("warmup", {}) for r in reps],
                    longest_gap_s=[g for g in gaps if isinstance(g, (int, float))],
                )
            )
    return boots


def spread(boots: list[Boot]) -> Spread:
    """The spread of the boots' medians (ValueError with fewer than two boots)."""
    if len(boots) < 2:
        raise ValueError(f"{len(boots)} boot(s) with results: the spread needs at least two")
    medians = [b.median for b in boots]
    mid, low, high = statistics.median(medians), min(medians), max(medians)
    worst = low / high - 1
    within = [max(b.values) / min(b.values) - 1 for b in boots if len(b.values) > 1 and min(b.values) > 0]
    return Spread(
        boots=len(boots),
        median=mid,
        low=low,
        high=high,
        spread=(high - low) / mid,
        worst_change=worst,
        tolerance_floor=math.ceil(round(-worst * 100, 6)) / 100,
        within_boot=max(within) if within else None,
    )


def _warmup_text(w: dict[str, Any]) -> str:
    if w.get("mode") == "steady":
        rates = w.get("round_output_throughput", [])
        last = ", ".join(f"{r:,.0f}" for r in rates[-2:])
        state = "settled" if w.get("converged") else "NOT settled"
        return f"steady {state}: {w.get('rounds')} rounds, {w.get('time_s', 0):.1f} s, last {last}"
    return f"{w.get('requests', '?')} requests"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work")
    p.add_argument("--workload", default="gen-c256-in512-out128")
    p.add_argument("--metric", default="output_throughput")
    args = p.parse_args(argv)
    boots = read_boots(args.work, args.workload, args.metric)
    for b in boots:
        values = ", ".join(f"{v:,.1f}" for v in b.values)
        gaps = ", ".join(f"{g:.2f}" for g in b.longest_gap_s) or "-"
        warm = "; ".join(_warmup_text(w) for w in b.warmup)
        print(f"{b.name}: {args.metric} {values} | warmup {warm} | longest token gap {gaps} s | valid {b.valid}")
        for reason in b.invalid_reasons:
            print(f"  invalid: {reason}")
    try:
        s = spread(boots)
    except ValueError as e:
        print(f"boot spread: {e} in {args.work}/boot-*/ for workload {args.workload}")
        print(json.dumps({"ok": False, "boots": len(boots), "problem": str(e)}))
        return 1
    print(
        f"boot spread of {args.metric} over {s.boots} boots: median {s.median:,.1f}, {s.low:,.1f}-{s.high:,.1f} "
        f"({s.spread:.1%} of the median); record-then-gate moves by as much as {s.worst_change:+.1%}: a tolerance "
        f"below {s.tolerance_floor:.0%} would have failed an unchanged server on these boots"
        + (f"; within one boot, repeats differed by up to {s.within_boot:.1%}" if s.within_boot is not None else "")
    )
    print(
        json.dumps(
            {
                "ok": True,
                "metric": args.metric,
                "workload": args.workload,
                **asdict(s),
                "per_boot": [b.values for b in boots],
                "valid": [b.valid for b in boots],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
