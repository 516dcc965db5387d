"""The A/B report: both variants side by side, the paired verdicts, and the rounds behind each failure.

Everything here reads an :class:`~perfgate.ab.AbSummary` (plain data); the results JSON holds
every run in full (the gate's per-repeat form), so plots and later tools need nothing else.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from perfgate._files import Artefacts
from perfgate.ab import AbRun, AbSummary, AbWorkload, VariantSummary
from perfgate.report._results import plain, repeat_json, write_documents
from perfgate.report._table import align
from perfgate.server import describe_autotune
from perfgate.server.autotune import compare_tactics
from perfgate.verdict import PairedMetricVerdict, fmt_value, sign_test_min_rounds, unit_of

AB_SCHEMA = 1

_LABELS = {
    "pass": "PASS",
    "fail": "FAIL",
    "inconclusive": "INCONCLUSIVE",
    "not-measured": "not measured",
    "unpaired": "ERROR",
}
_OUTCOME_LINES = {
    "pass": "PASS: B is not worse than A beyond any tolerance",
    "regression": "REGRESSION: B is worse than A",
    "inconclusive": "INCONCLUSIVE: the rounds cannot tell whether B is worse than A",
    "error": "ERROR: the A/B could not decide",
}


def _verdict_label(m: PairedMetricVerdict) -> str:
    label = _LABELS.get(m.status, m.status)
    return f"{label} (warning)" if m.status == "inconclusive" and m.ok else label


def _value(v: float | None, metric: str) -> str:
    return fmt_value(v, unit_of(metric)) if v is not None else "-"


def _order_text(summary: AbSummary) -> str:
    rounds: dict[int, str] = {}
    for n, label in summary.order:
        rounds[n] = rounds.get(n, "") + label
    return " ".join(rounds[n] for n in sorted(rounds))


def _side_by_side(a: VariantSummary, b: VariantSummary) -> list[list[str]]:
    cells = [["", f"A ({a.role})", f"B ({b.role})", ""]]

    def row(name: str, left: str, right: str) -> None:
        cells.append([name, left or "-", right or "-", "differs" if left != right else ""])

    row("python", a.python, b.python)
    for k in sorted(a.env_seen):
        row(f"env {k}", a.env_seen[k] or "(unset)", b.env_seen.get(k) or "(unset)")
    va, vb = a.versions(), b.versions()
    for k in dict.fromkeys([*va, *vb]):
        row(k, va.get(k, ""), vb.get(k, ""))
    sa, sb = a.server, b.server
    row(
        "target", f"{sa.kind} {sa.model}" if sa else "never came up", f"{sb.kind} {sb.model}" if sb else "never came up"
    )
    boots_a = [x.server.boot_s for x in a.boots if x.server]
    boots_b = [x.server.boot_s for x in b.boots if x.server]
    cells.append(["boots", _boots(boots_a, len(a.boots)), _boots(boots_b, len(b.boots)), ""])
    return cells


def _boots(times: list[float], n: int) -> str:
    up = f", ready in {min(times):.1f}-{max(times):.1f} s" if times else ""
    return f"{n} ({len(times)} came up{up})" if len(times) != n else f"{n}{up}"


def _args_line(a: VariantSummary, b: VariantSummary) -> str:
    only_a = [x for x in a.server_args if x not in b.server_args]
    only_b = [x for x in b.server_args if x not in a.server_args]
    if not only_a and not only_b:
        shown = " ".join(a.server_args) or "(none)"
        return f"server args: the same for A and B ({shown})"
    return f"server args that differ: A {' '.join(only_a) or '(none)'} | B {' '.join(only_b) or '(none)'}"


def _autotune_line(v: VariantSummary) -> str:
    at = v.autotune()
    if not at:
        kind = v.server.kind if v.server else "the server"
        return f"autotune {v.label}: not applicable ({kind} reports no FlashInfer autotune decision)"
    return f"autotune {v.label}: {describe_autotune(at)}"


def _rows(summary: AbSummary) -> list[list[str]]:
    cells = [["workload", "metric", "A median", "B median", "B/A", "CI (coverage)", "limit", "rounds", "verdict"]]
    for w in summary.workloads:
        for m in w.verdict.metrics if w.verdict else ():
            ratio = f"{m.median_ratio:.3f}" if m.median_ratio is not None else "-"
            ci = "-"
            if m.ci_low is not None and m.ci_high is not None and m.ci_coverage is not None:
                ci = f"[{m.ci_low:.3f}, {m.ci_high:.3f}] ({m.ci_coverage * 100:.0f}%)"
            limit = "-"
            if m.limit_ratio is not None:
                limit = f"{'>=' if m.direction == 'higher' else '<='} {m.limit_ratio:.3f}"
            worse = f"{m.rounds_worse}/{m.n_pairs} worse" if m.n_pairs else "-"
            cells.append(
                [
                    w.name,
                    m.metric,
                    _value(m.median_a, m.metric),
                    _value(m.median_b, m.metric),
                    ratio,
                    ci,
                    limit,
                    worse,
                    _verdict_label(m),
                ]
            )
        if w.status == "error":
            cells.append([w.name, "(runs)", "", "", "", "", "", "", "ERROR"])
    return cells


def _round_table(w: AbWorkload, m: PairedMetricVerdict) -> str:
    cells = [["round", "order", "A", "B", "B/A"]]
    by = {n: (a, b) for n, a, b in w.rounds()}
    for i, n in enumerate(sorted(by)):
        ratio = m.ratios[i] if i < len(m.ratios) else None
        a_value = m.a_values[i] if i < len(m.a_values) else None
        b_value = m.b_values[i] if i < len(m.b_values) else None
        cells.append(
            [
                str(n),
                "AB" if n % 2 else "BA",
                _value(a_value, m.metric),
                _value(b_value, m.metric),
                f"{ratio:.3f}" if ratio is not None else "-",
            ]
        )
    return align(cells, right={2, 3, 4})


def report_lines(summary: AbSummary) -> list[str]:
    """The terminal report: header, variants side by side, the verdict table, the rounds of every
    metric that did not pass, messages, baselines, and the outcome."""
    a, b = summary.variants
    extra = summary.rounds_run - summary.rounds
    lines = [
        f"perfgate ab: {summary.profile_name} ({summary.profile_path})",
        f"rounds: {summary.rounds_run} ({summary.rounds} planned"
        + (
            f", {extra} more for discarded runs or inconclusive verdicts, at most {summary.max_rounds}"
            if extra > 0
            else ""
        )
        + f"), order {_order_text(summary) or '-'} (ABBA: a trend of the host cancels); alpha {summary.alpha:g}",
        "",
        align(_side_by_side(a, b)),
        "",
        _args_line(a, b),
        _autotune_line(a),
        _autotune_line(b),
    ]
    # Two fresh tunes can pick other kernels: a B/A change may be the tactics, not the upgrade.
    tactics = compare_tactics(a.autotune().get("tactics"), b.autotune().get("tactics"), ("A", "B"))
    if tactics:
        lines.append(tactics)
    for w in summary.workloads:
        if w.fingerprint_note:
            lines.append(f"fingerprint {w.name}: {w.fingerprint_note}")
    table = _rows(summary)
    if len(table) > 1:
        lines += ["", align(table, right={2, 3, 4})]
    lines += _correctness_lines(summary) + _verdict_lines(summary) + _explain_lines(summary) + _note_lines(summary)
    lines += ["", _OUTCOME_LINES[summary.outcome]]
    return lines


_PROBE_SHOWN = (
    ("correctness_logprob_delta_mean", "mean |Δlogprob|"),
    ("correctness_logprob_delta_max", "max |Δlogprob|"),
    ("correctness_argmax_mismatch", "argmax mismatch"),
    ("correctness_greedy_match", "greedy match"),
)


def _correctness_lines(summary: AbSummary) -> list[str]:
    """Both stacks' probes: A against its own answers across concurrencies, B against A's."""
    if not summary.probes:
        return [f"correctness: {summary.probe_off}"] if summary.probe_off else []
    lines = [""]
    for label in ("A", "B"):
        r = summary.probes.get(label)
        if r is None:
            continue
        if r.outcome is None:
            lines.append(f"correctness {label}: stopped: {r.error}")
            continue
        values = r.outcome.metrics
        shown = ", ".join(
            f"{text} {fmt_value(values[name], unit_of(name)) if values[name] == values[name] else '-'}"
            for name, text in _PROBE_SHOWN
        )
        verdict = "PASS" if r.passed else "FAIL"
        lines.append(f"correctness {label}: {verdict} ({r.note}; {r.outcome.duration_s:.1f} s): {shown}")
    c = summary.correctness
    if c is not None and not c.passed:
        lines.append(c.failure_message())
    return lines


def _verdict_lines(summary: AbSummary) -> list[str]:
    """The rounds of every metric that did not pass, then every message that is not a pass."""
    lines: list[str] = []
    for w in summary.workloads:
        for m in w.verdict.metrics if w.verdict else ():
            if m.status in ("fail", "inconclusive") and m.n_pairs:
                lines += ["", f"{w.name} {m.metric}, per round ({_LABELS[m.status]}):", _round_table(w, m)]
    messages = [
        f"{_verdict_label(m):<12} {m.message}"
        for w in summary.workloads
        for m in (w.verdict.metrics if w.verdict else ())
        if m.status != "pass"
    ]
    if messages:
        lines += ["", *messages]
    return lines


def _explain_lines(summary: AbSummary) -> list[str]:
    """B's profile against A's, per workload that took one."""
    lines: list[str] = []
    for w in summary.workloads:
        explained = w.explain()
        if explained is not None:
            lines += ["", f"{w.name}, B's profile against A's ({explained.excluded}):", *explained.lines()]
    return lines


def _note_lines(summary: AbSummary) -> list[str]:
    """What else the user must know: the noise test's absence, discarded runs, baselines, problems, teardowns."""
    a, b = summary.variants
    lines: list[str] = []
    few = sorted(
        {
            m.n_pairs
            for w in summary.workloads
            for m in (w.verdict.metrics if w.verdict else ())
            if m.noise_test == "tolerance-only"
        }
    )
    if few:
        lines.append(
            f"note: {' or '.join(map(str, few))} paired round(s) are too few for the sign test at alpha "
            f"{summary.alpha:g}: "
            f"the tolerance alone decided (run {sign_test_min_rounds(summary.alpha)} rounds or more for a noise test)"
        )
    for w in summary.workloads:
        lines += [f"discarded (round not counted): {w.name} {line}" for line in w.discarded]
        if w.discard_advice:
            lines.append(f"discarded runs of {w.name}: {w.discard_advice}")
    if summary.accept:
        lines.append(
            "accepting the candidate"
            + (f", with the reason {summary.reason!r}" if summary.reason else " where it passed")
        )
    for w in summary.workloads:
        if w.baseline_note:
            recorded = f" -> {w.baseline_path}" if w.recorded else ""
            lines.append(f"baseline {w.name}: {w.baseline_note}{recorded}")
    lines += [f"baseline store: {note}" for note in summary.store_notes]
    shown = {f"{w.name}: {w.baseline_note}" for w in summary.workloads}
    lines += [f"problem: {p}" for p in summary.problems if p not in shown]
    for v in (a, b):
        # Each boot says the same about the same server: once, with how many boots said it.
        said = Counter(note for boot in v.boots for note in boot.teardown_notes)
        lines += [f"teardown {v.label}: {note}" + (f" ({n} boots)" if n > 1 else "") for note, n in said.items()]
    return lines


def _run_json(run: AbRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    res = run.result
    return {
        "valid": res.valid,
        "discarded": run.discarded,
        "invalid_reasons": res.invalid_reasons,
        "error": res.error,
        "fingerprint": plain(res.fingerprint),
        "repeat": repeat_json(res.repeats[0]) if res.repeats else None,
    }


def _variant_json(v: VariantSummary, rounds: list[int]) -> dict[str, Any]:
    """``rounds``: the round of each of ``v``'s boots, in order."""
    return {
        "role": v.role,
        "python": v.python,
        "extra_env": dict(v.extra_env),
        "extra_args": list(v.extra_args),
        "server_args": list(v.server_args),
        "env_seen": dict(v.env_seen),
        "versions": v.versions(),
        "autotune": dict(v.autotune()),
        "boots": [
            {
                "round": n,
                "server": dict(boot.server.provenance) if boot.server else None,
                "gpus": plain(list(boot.gpus)),
                "power_source": boot.power_source,
                "telemetry_note": boot.telemetry_note,
                "teardown_notes": list(boot.teardown_notes),
            }
            for n, boot in zip(rounds, v.boots)
        ],
    }


def ab_document(summary: AbSummary) -> dict[str, Any]:
    """The A/B as JSON-able data: both variants, every run in full, the verdicts, the outcome."""
    variants = {
        v.label: _variant_json(v, [n for n, label in summary.order if label == v.label]) for v in summary.variants
    }
    return {
        "schema_version": AB_SCHEMA,
        "kind": "ab",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profile": {"name": summary.profile_name, "path": summary.profile_path},
        "rounds": {"planned": summary.rounds, "run": summary.rounds_run, "max": summary.max_rounds},
        "order": [[n, label] for n, label in summary.order],
        "alpha": summary.alpha,
        "inconclusive": summary.inconclusive,
        "outcome": summary.outcome,
        "problems": summary.problems,
        "stopped": summary.stopped,
        "correctness": {label: r.to_json() for label, r in summary.probes.items()},
        "variants": variants,
        "workloads": [
            {
                "workload": w.name,
                "status": w.status,
                "rules": plain(w.rules),
                "fingerprint": w.fingerprint_note,
                "baseline": {"recorded": w.recorded, "path": w.baseline_path, "note": w.baseline_note},
                "verdict": plain(w.verdict.metrics) if w.verdict else None,
                "explain": explained.to_dict() if (explained := w.explain()) is not None else None,
                "rounds": [
                    {"round": n, "order": "AB" if n % 2 else "BA", "A": _run_json(ra), "B": _run_json(rb)}
                    for n, ra, rb in w.rounds()
                ],
            }
            for w in summary.workloads
        ],
    }


def write_ab_results(summary: AbSummary, out_dir: Path, *, step_summary: str | None = None) -> Artefacts:
    """Write ab-<profile>-<time>.json and, in the folder of that name, summary.md (also appended
    to ``step_summary``) and, with the ``plots`` extra, one PNG per workload (ab-<workload>.png);
    see :func:`write_documents`."""
    from perfgate.report._plots import write_ab_plots

    doc = ab_document(summary)
    md = f"## perfgate ab: {summary.profile_name}\n\n```\n" + "\n".join(report_lines(summary)) + "\n```\n"
    return write_documents(out_dir, f"ab-{summary.profile_name}", doc, md, step_summary, write_ab_plots)
