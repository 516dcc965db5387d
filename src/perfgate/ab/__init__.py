"""A/B: gate a candidate server stack (B) against the current one (A), interleaved on one host.

``run_ab(profile, Candidate(python=..., env=..., args=...), AbOptions(rounds=...))`` boots A
and B in turn in ABBA order, runs every selected workload once per boot through a
measure-only :class:`~perfgate.session.Session`, judges B against A round by round
(:func:`perfgate.verdict.judge_paired`), records B's numbers as baselines when asked, and
returns an :class:`AbSummary` (plain data; ``outcome`` is pass, regression, inconclusive or
error). After session/ in the data flow; report/ renders the summary.
"""

from perfgate.ab._candidate import Candidate, Label, Variant, parse_args, parse_env, variants
from perfgate.ab._options import (
    CLI_FLAGS,
    DEFAULT_ROUNDS,
    PLUGIN_FLAGS,
    AbFlags,
    add_ab_options,
    candidate_from,
    rounds_from,
)
from perfgate.ab._order import abba_order
from perfgate.ab._run import AbOptions, AbPlan, plan_ab, run_ab
from perfgate.ab._select import select_workloads
from perfgate.ab._summary import VERSION_KEYS, AbRun, AbSummary, AbWorkload, Outcome, VariantSummary

__all__ = [
    "CLI_FLAGS",
    "DEFAULT_ROUNDS",
    "PLUGIN_FLAGS",
    "VERSION_KEYS",
    "AbFlags",
    "AbOptions",
    "AbPlan",
    "AbRun",
    "AbSummary",
    "AbWorkload",
    "Candidate",
    "Label",
    "Outcome",
    "Variant",
    "VariantSummary",
    "abba_order",
    "add_ab_options",
    "candidate_from",
    "parse_args",
    "parse_env",
    "plan_ab",
    "rounds_from",
    "run_ab",
    "select_workloads",
    "variants",
]
