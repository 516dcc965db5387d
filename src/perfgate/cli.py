"""``perfgate``: the commands for people, outside pytest.

    perfgate doctor [--python PY] [--sglang-root DIR] [--json]
    perfgate baselines list|show|diff ...
    perfgate compare RESULTS_A RESULTS_B      (exit 1 on regression)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from perfgate.baseline import BaselineStore, diff, read_baseline
from perfgate.errors import PerfgateError
from perfgate.verdict import MetricRule, fmt_value, judge, unit_of


def _baselines(args: argparse.Namespace) -> int:
    store = BaselineStore(Path(args.dir))
    if args.action == "list":
        found = store.list_all()
        if not found:
            print(f"no baselines under {args.dir}")
        for b in found:
            date = b.provenance.get("date", "?")
            print(f"{b.source}  {b.profile}/{b.workload}  {b.fingerprint.slug}  {len(b.repeats)} repeats  {date}")
        return 0
    paths = [Path(p) for p in args.paths]
    docs = []
    for p in paths:
        b = read_baseline(p)
        if b is None:
            raise PerfgateError(f"baseline {p}: file not found; `perfgate baselines list` shows the stored ones")
        docs.append(b)
    if args.action == "show":
        for b in docs:
            print(f"{b.source}: {b.profile}/{b.workload}")
            for k, v in b.fingerprint.to_dict().items():
                print(f"  fingerprint.{k}: {v}")
            for k, v in sorted(b.provenance.items()):
                if k != "server":
                    print(f"  provenance.{k}: {v}")
            for metric, value in b.medians().items():
                print(f"  {metric}: {fmt_value(value, unit_of(metric)) if _known(metric) else value}")
        return 0
    if len(docs) != 2:
        raise PerfgateError("perfgate baselines diff takes exactly two baseline files: OLD NEW")
    for line in diff(docs[0], docs[1]).lines():
        print(line)
    return 0


def _known(metric: str) -> bool:
    return bool(unit_of(metric))


def _load_results(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise PerfgateError(f"results {path}: file not found; write results with `pytest perf_tests --perf-results DIR`") from None
    except (OSError, ValueError) as e:
        raise PerfgateError(f"results {path}: not a perfgate results JSON file ({e})") from None
    if not isinstance(doc, dict) or "workloads" not in doc:
        raise PerfgateError(f"results {path}: not a perfgate results file (no 'workloads'); pass files written by --perf-results")
    return doc


def _compare(args: argparse.Namespace) -> int:
    old, new = _load_results(Path(args.a)), _load_results(Path(args.b))
    old_by_name = {w["workload"]: w for w in old["workloads"]}
    regressed = False
    for wl in new["workloads"]:
        name = wl["workload"]
        base = old_by_name.get(name)
        if base is None:
            print(f"{name}: not in {args.a}; skipped")
            continue
        rules = [MetricRule(**r) for r in wl.get("rules", [])]
        verdict = judge(
            name,
            rules,
            [r["values"] for r in wl["repeats"]],
            [r["values"] for r in base["repeats"]],
            alpha=args.alpha,
        )
        for v in verdict.metrics:
            print(("FAIL " if not v.ok else "ok   ") + v.message)
        regressed |= not verdict.passed
    print("regression" if regressed else "no regression")
    return 1 if regressed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfgate", description="perfgate: performance gate for LLM serving")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="check a GPU host before a gate run", add_help=False)
    doctor.add_argument("rest", nargs=argparse.REMAINDER)
    b = sub.add_parser("baselines", help="list, show or diff stored baselines")
    b.add_argument("action", choices=["list", "show", "diff"])
    b.add_argument("paths", nargs="*", help="baseline files (show: one or more; diff: OLD NEW)")
    b.add_argument("--dir", default="baselines", help="baseline store (default: baselines)")
    c = sub.add_parser("compare", help="compare two --perf-results files; exit 1 on regression")
    c.add_argument("a", help="results JSON of the old run")
    c.add_argument("b", help="results JSON of the new run")
    c.add_argument("--alpha", type=float, default=0.05, help="significance level of the noise test (default 0.05)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        # doctor owns its options (--json, --python, ...); argparse would claim them here.
        from perfgate.doctor import main as doctor_main

        return doctor_main(argv[1:])
    args = parser.parse_args(argv)
    try:
        if args.command == "baselines":
            return _baselines(args)
        return _compare(args)
    except PerfgateError as e:
        print(f"perfgate: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
