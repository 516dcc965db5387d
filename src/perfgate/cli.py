"""``perfgate``: the commands for people, outside pytest.

    perfgate doctor [--python PY] [--sglang-root DIR] [--json]
    perfgate baselines list|show|diff ...
    perfgate compare RESULTS_A RESULTS_B [--metric NAME]...
    perfgate ab PROFILE [--candidate-python PY] [--candidate-env K=V]... [--candidate-args "..."]
                [--rounds N] [-k EXPR] ...

Exit status: 0 fine, 1 a regression, 2 bad input or a comparison that could not decide
(nothing in common, a metric missing on one side, an inconclusive verdict, a run that stopped,
an A/B whose results files could not all be written);
``perfgate ab`` stopped by a signal: 128 + its number, after the servers were stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate._redact import RedactingStream
from perfgate.ab import CLI_FLAGS, AbOptions, add_ab_options, candidate_from, rounds_from, run_ab
from perfgate.baseline import BaselineStore, diff, read_baseline
from perfgate.errors import PerfgateError
from perfgate.profile import DEFAULT_TOLERANCE, GateSpec, key_check, load_profile, option_type, seconds
from perfgate.report import Results, ResultsWorkload, read_results, report_lines, write_ab_results
from perfgate.server import Terminated, stack_changes
from perfgate.session import LOG_DIR
from perfgate.verdict import MetricRule, check_metric_name, direction_of, fmt_value, judge, unit_of

EXIT_REGRESSION = 1
EXIT_ERROR = 2
# What a command killed by SIGPIPE returns in a shell (`perfgate baselines list | head`).
EXIT_BROKEN_PIPE = 128 + 13


def _baselines(args: argparse.Namespace) -> int:
    store = BaselineStore(Path(args.dir))
    if args.action == "list":
        if not Path(args.dir).is_dir():
            # A symbolic link loop exists, and is no folder.
            what = "is not a directory" if os.path.lexists(args.dir) else "does not exist"
            raise PerfgateError(f"--dir {args.dir}: {what}; pass the baselines folder, e.g. --dir baselines")
        found, errors = store.list_all()
        if not found and not errors:
            print(f"no baselines under {args.dir}")
        for b in found:
            date = b.provenance.get("date", "?")
            print(f"{b.source}  {b.profile}/{b.workload}  {b.fingerprint.slug}  {len(b.repeats)} repeats  {date}")
        for e in errors:
            print(f"perfgate: {e}", file=sys.stderr)
        return EXIT_ERROR if errors else 0
    paths = [Path(p) for p in args.paths]
    if not paths:
        raise PerfgateError(
            f"perfgate baselines {args.action} needs baseline files; `perfgate baselines list` shows the stored ones"
        )
    docs = []
    for p in paths:
        if p.is_dir():
            raise PerfgateError(
                f"baseline {p}: is a folder; pass baseline files (e.g. {p / '*.json'}), or list the stored ones "
                f"with `perfgate baselines list --dir {p}`"
            )
        doc = read_baseline(p)
        if doc is None:
            raise PerfgateError(f"baseline {p}: file not found; `perfgate baselines list` shows the stored ones")
        docs.append(doc)
    if args.action == "show":
        for b in docs:
            print(f"{b.source}: {b.profile}/{b.workload}")
            for k, v in b.fingerprint.to_dict().items():
                print(f"  fingerprint.{k}: {v}")
            for k, v in sorted(b.provenance.items()):
                if k != "server":
                    print(f"  provenance.{k}: {v}")
            for metric, value in b.medians().items():
                print(f"  {metric}: {fmt_value(value, unit_of(metric)) if unit_of(metric) else value}")
        return 0
    if len(docs) != 2:
        raise PerfgateError("perfgate baselines diff takes exactly two baseline files: OLD NEW")
    for line in diff(docs[0], docs[1]).lines():
        print(line)
    return 0


def _rules(wl: ResultsWorkload, asked: Sequence[str]) -> list[MetricRule]:
    """The gated rules stored with the newer run, or, with --metric, those metrics only (a metric
    the run did not gate is held to its default tolerance, 3 % unless perfgate has another)."""
    stored = {r.metric: r for r in wl.rules}
    if not asked:
        return list(stored.values())
    return [stored.get(m) or MetricRule(m, direction_of(m), tolerance=DEFAULT_TOLERANCE.get(m, 0.03)) for m in asked]


def _mismatches(old: Results, new: Results, common: Sequence[str]) -> list[str]:
    """What makes the two runs measure different things: another profile, or a workload whose
    fingerprint (server, hardware, workload spec) differs."""
    out = []
    if old.profile != new.profile:
        out.append(f"the runs are of different profiles ({old.profile!r} and {new.profile!r})")
    for name in common:
        fa, fb = old.workloads[name].fingerprint, new.workloads[name].fingerprint
        if fa != fb:
            keys = sorted(k for k in {**(fa or {}), **(fb or {})} if (fa or {}).get(k) != (fb or {}).get(k))
            out.append(f"workload {name}: the fingerprints differ ({', '.join(keys) or 'one is missing'})")
    return out


def _unmeasured(wl: ResultsWorkload, path: Path) -> str:
    """Why a results file's workload measured nothing to compare: an invalid run, or a repeat
    in which no request completed; "" when it did."""
    if wl.invalid_reasons:
        return f"the run in {path} was invalid ({'; '.join(wl.invalid_reasons)})"
    for i, values in enumerate(wl.repeats, start=1):
        completed = values.get("completed")
        if completed is None or not completed > 0:
            return f"repeat {i} in {path} completed no request (completed = {completed!r}): it measured nothing"
    return ""


def _compare(args: argparse.Namespace) -> int:
    path_a, path_b = Path(args.a), Path(args.b)
    doc_a, doc_b = read_results(path_a), read_results(path_b)
    old, new = doc_a.workloads, doc_b.workloads
    common = [name for name in new if name in old]
    if not common:
        raise PerfgateError(
            f"nothing to compare: {path_a} has workloads {sorted(old) or 'none'} and {path_b} has "
            f"{sorted(new) or 'none'}, "
            "none in common; pass results of runs of the same profile"
        )
    mismatches = _mismatches(doc_a, doc_b, common)
    if mismatches and not args.force:
        raise PerfgateError(
            f"{path_a} and {path_b} do not measure the same thing: "
            + "; ".join(mismatches)
            + "; compare runs of one profile on one setup, or pass --force to compare them anyway"
        )
    for line in mismatches:
        print(f"note: {line} (compared anyway: --force)")
    for i, line in enumerate(stack_changes(doc_a.server, doc_b.server), start=1):
        # The suspects of any difference below, most likely first ("the baseline" is A).
        print(f"changed {i}: {line}")
    for name in sorted(set(old) ^ set(new)):
        print(f"skip {name}: only in {path_a if name in old else path_b}")
    regressed = undecided = False
    compared = 0
    for name in common:
        a, b = old[name], new[name]
        stopped = [str(p) for p, w in ((path_a, a), (path_b, b)) if w.error or not w.repeats]
        if stopped:
            print(f"ERROR {name}: not compared, the run in {' and '.join(stopped)} stopped with an error")
            undecided = True
            continue
        unmeasured = [why for why in (_unmeasured(a, path_a), _unmeasured(b, path_b)) if why]
        if unmeasured:
            print(f"ERROR {name}: not compared, " + "; ".join(unmeasured))
            undecided = True
            continue
        now, base = b.repeats, a.repeats
        for metric in args.metric:
            for side, repeats, path in (("new", now, path_b), ("old", base, path_a)):
                if not any(metric in r for r in repeats):
                    raise PerfgateError(f"{name}: {metric} is not in the {side} run {path}; it cannot be compared")
        # Each side's repeats by their boots ([gate] boots): the noise test then compares boot medians.
        verdict = judge(
            name,
            _rules(b, args.metric),
            now,
            base,
            alpha=args.alpha,
            inconclusive=args.inconclusive,
            current_boots=b.boots,
            baseline_boots=a.boots,
        )
        for v in verdict.metrics:
            if v.status == "no-baseline":
                print(f"skip {name}: {v.metric} is not in {path_a}; not compared")
                continue
            if v.status == "not-measured":
                print(f"skip {name}: {v.metric} is not in {path_b}; not compared")
                continue
            compared += 1
            label = {"fail": "FAIL", "inconclusive": "INCONCLUSIVE"}.get(v.status, "ok")
            print(f"{label:<5} {v.message}")
            regressed |= v.status == "fail"
            undecided |= v.status == "inconclusive" and not v.ok
    if regressed:
        print("regression")
        return EXIT_REGRESSION
    if not compared and not undecided:
        raise PerfgateError(
            f"nothing compared: no gated metric is present in both {path_a} and {path_b}; name one with --metric"
        )
    if undecided:
        print(
            "undecided: an inconclusive metric, or a workload that stopped with an error or measured nothing (exit 2)"
        )
        return EXIT_ERROR
    print("no regression")
    return 0


_AB_EXIT = {"pass": 0, "regression": EXIT_REGRESSION, "inconclusive": EXIT_ERROR, "error": EXIT_ERROR}


def _ab(args: argparse.Namespace) -> int:
    profile_path = Path(args.profile)
    if not profile_path.is_file():
        raise PerfgateError(f"profile {profile_path}: file not found; pass a profile TOML file (see profiles/)")
    results = Path(args.results) if args.results else None
    if results is not None and results.exists() and not results.is_dir():
        raise PerfgateError(f"--results {results}: that is a file; pass a directory (it is created if missing)")
    if results is not None:
        BaselineStore(Path(args.baselines)).refuse_inside(results, "--results", "--baselines")
    profile = load_profile(profile_path)

    def get(flag: str) -> Any:
        return getattr(args, flag.lstrip("-").replace("-", "_"))

    rounds, max_rounds = rounds_from(get, CLI_FLAGS)
    options = AbOptions(
        rounds=rounds,
        max_rounds=max_rounds,
        keyword=args.keyword or "",
        log_dir=results or LOG_DIR,
        baselines_dir=Path(args.baselines),
        accept_candidate=args.accept_candidate,
        reason=args.reason,
        lock_wait_s=args.lock_wait,
        explain=args.explain or profile.explain.enabled,
    )
    candidate = candidate_from(get, CLI_FLAGS)
    summary = run_ab(profile, candidate, options, on_event=lambda line: print(f"[ab] {line}", flush=True))
    print()
    print("\n".join(report_lines(summary)))
    code = _AB_EXIT[summary.outcome]
    if results is not None:
        artefacts = write_ab_results(summary, results, step_summary=os.environ.get("GITHUB_STEP_SUMMARY"))
        for path in artefacts.written:
            print(f"wrote {path}")
        for line in [*artefacts.skipped, *artefacts.failed]:
            print(f"perfgate: {line}", file=sys.stderr)
        if artefacts.failed:
            # The verdict stands (it was printed); the results a CI step keeps are incomplete.
            code = code or EXIT_ERROR
    return code


# The profile's keys' checks: an option bounded as the key that sets the same number.
_alpha = option_type(key_check(GateSpec, "alpha"))
_seconds = option_type(seconds)


def _metric(text: str) -> str:
    try:
        check_metric_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def parser() -> argparse.ArgumentParser:
    """The ``perfgate`` command's parser (also read by the options reference)."""
    parser = argparse.ArgumentParser(prog="perfgate", description="perfgate: performance gate for LLM serving")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="check a GPU host before a gate run", add_help=False)
    doctor.add_argument("rest", nargs=argparse.REMAINDER)
    b = sub.add_parser("baselines", help="list, show or diff stored baselines")
    b.add_argument(
        "action", choices=["list", "show", "diff"], help="list the store, show baseline files, or diff OLD NEW"
    )
    b.add_argument("paths", nargs="*", help="baseline files (show: one or more; diff: OLD NEW)")
    b.add_argument("--dir", default="baselines", help="baseline store (default: baselines)")
    c = sub.add_parser(
        "compare",
        help="compare two --perf-results files; exit 1 on regression, 2 when nothing could be compared or decided",
    )
    c.add_argument("a", help="results JSON of the old run")
    c.add_argument("b", help="results JSON of the new run")
    c.add_argument("--alpha", type=_alpha, default=0.05, help="significance level of the noise test (default 0.05)")
    c.add_argument(
        "--metric",
        type=_metric,
        action="append",
        default=[],
        help="compare this metric (repeatable; default: the metrics the new run gated); missing on either side is "
        "an error",
    )
    c.add_argument(
        "--inconclusive",
        choices=["fail", "warn"],
        default="fail",
        help="an inconclusive metric exits 2 (fail, the default) or is only reported (warn)",
    )
    c.add_argument(
        "--force",
        action="store_true",
        help="compare runs of different profiles or fingerprints (refused without it, exit 2)",
    )
    ab = sub.add_parser(
        "ab",
        help="gate a candidate stack (B) against the profile's (A), interleaved ABBA on this host; "
        "exit 1 on regression, 2 when it cannot decide",
        description="Boot A (the profile as written) and B (the profile with the candidate change) in turn, "
        "ABBA order, one run of every selected workload per boot, and judge B/A round by round.",
    )
    ab.add_argument("profile", help="profile TOML (A is this profile as written)")
    add_ab_options(ab.add_argument, CLI_FLAGS)
    ab.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help='select workloads by name as pytest\'s -k does: -k c64, -k "not c1024"',
    )
    ab.add_argument(
        "--results",
        metavar="DIR",
        help="write the results JSON, a Markdown summary, a plot per workload and the server logs here",
    )
    ab.add_argument(
        "--baselines",
        metavar="DIR",
        default="baselines",
        help="baseline store for --accept-candidate (default: baselines)",
    )
    ab.add_argument(
        "--reason",
        metavar="TEXT",
        help="with --accept-candidate: record B also where it did not pass; TEXT is stored with it",
    )
    ab.add_argument(
        "--explain",
        action="store_true",
        help="profile A and B on their servers in round 1 (an extra repeat each, in no verdict) and rank which "
        "kernels moved from A to B (the profile's [explain] enabled = true does the same)",
    )
    ab.add_argument(
        "--lock-wait",
        metavar="SECONDS",
        type=_seconds,
        default=0.0,
        help="wait this long for GPUs another perfgate session holds",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything the commands print passes the run's secrets' redaction (a server's answer
    # quoted in an error, a candidate's env in the A/B report).
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(out), RedactingStream(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["doctor"]:
            # doctor owns its options (--json, --python, ...); argparse would claim them here.
            from perfgate.doctor import main as doctor_main

            return doctor_main(argv[1:])
        args = parser().parse_args(argv)
        try:
            if args.command == "baselines":
                return _baselines(args)
            if args.command == "ab":
                return _ab(args)
            return _compare(args)
        except PerfgateError as e:
            print(f"perfgate: {e}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt as e:
            # Every server was stopped on the way out (the sessions' teardowns ran).
            if isinstance(e, Terminated):
                print(f"perfgate: {e}", file=sys.stderr)
                return 128 + e.signum
            print("perfgate: interrupted; the servers it started were stopped", file=sys.stderr)
            return 128 + 2
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining
        # about the unflushable stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
