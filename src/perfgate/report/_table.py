"""The summary people read: one row per workload x metric, plus what was measured but not gated."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from perfgate._stats import median
from perfgate.catalogue import SHOWN
from perfgate.correctness import NAME as CORRECTNESS
from perfgate.session import RunSummary
from perfgate.verdict import MetricVerdict, fmt_value, unit_of


@dataclass(frozen=True)
class Row:
    workload: str
    metric: str
    measured: str
    baseline: str
    limit: str
    change: str
    verdict: str


_VERDICT_LABELS = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}


def _verdict_label(status: str, ok: bool) -> str:
    label = _VERDICT_LABELS.get(status, status)
    return f"{label} (warning)" if status == "inconclusive" and ok else label


def _verdict_row(name: str, v: MetricVerdict, recorded: bool, previous: Mapping[str, float], label: str = "") -> Row:
    unit = unit_of(v.metric)
    measured = fmt_value(v.measured, unit) if v.measured is not None else "-"
    if recorded:
        # Recording: the baseline column is the previous baseline, so the row reads old -> new.
        old = previous.get(v.metric)
        change = f"{(v.measured - old) / abs(old) * 100:+.1f}%" if old and v.measured is not None else "-"
        return Row(
            name,
            label or v.metric,
            measured,
            fmt_value(old, unit) if old is not None else "(none)",
            "",
            change,
            "recorded",
        )
    return Row(
        name,
        label or v.metric,
        measured,
        fmt_value(v.baseline, unit) if v.baseline is not None else "-",
        fmt_value(v.limit, unit) if v.limit is not None else "-",
        f"{v.change_pct:+.1f}%" if v.change_pct is not None else "-",
        _verdict_label(v.status, v.ok),
    )


def _pct(spread: float | None) -> str:
    return f"{spread:.1%}" if spread is not None else "-"


def _spread_row(name: str, v: MetricVerdict) -> Row:
    """Under a metric judged by boots: its spreads ((max - min) / median) inside the boots of this
    run and between them, and between the baseline's boots, which decide whether the tolerance can be held."""
    return Row(
        name,
        f"{v.metric} spread",
        f"within-boot {_pct(v.within_boot_spread)}, between-boot {_pct(v.between_boot_spread)}",
        f"between-boot {_pct(v.baseline_between_boot_spread)}",
        "",
        "",
        "info",
    )


def rows(summary: RunSummary) -> list[Row]:
    """The summary table: each workload's gated metrics, the informative ones, failed requests next
    to their allowed rate (a run that failed requests within its allowance still shows them), then
    each sweep's capacity."""
    out: list[Row] = _correctness_rows(summary)
    for res in summary.workloads:
        gated = set()
        for v in res.verdict.metrics if res.verdict else ():
            gated.add(v.metric)
            out.append(_verdict_row(res.workload, v, res.recorded, res.previous_values))
            if v.replicate == "boot":
                out.append(_spread_row(res.workload, v))
        repeats = res.repeat_metrics()
        for metric in SHOWN:
            if metric in gated:
                continue
            vals = [r[metric] for r in repeats if metric in r]
            if vals:
                out.append(Row(res.workload, metric, fmt_value(median(vals), unit_of(metric)), "", "", "", "info"))
        failed = sum(r.metrics.failed for r in res.repeats)
        total = sum(len(r.load.records) for r in res.repeats)
        if failed:
            allowed = summary.error_rates.get(res.workload)
            limit = f"{allowed:.1%} allowed" if allowed is not None else ""
            out.append(
                Row(
                    res.workload,
                    "failed_requests",
                    f"{failed} of {total} ({failed / total:.1%})",
                    "",
                    limit,
                    "",
                    "info",
                )
            )
        if res.error:
            out.append(Row(res.workload, f"stopped after {len(res.repeats)} repeat(s)", "", "", "", "", "ERROR"))
        elif not res.valid:
            out.append(Row(res.workload, "run validity", "", "", "", "", "INVALID"))
    for sw in summary.sweeps:
        label = f"capacity ({sw.axis}, {sw.stat})"
        for v in sw.verdict.metrics if sw.verdict else ():
            out.append(_verdict_row(sw.sweep, v, sw.recorded, sw.previous_values, label))
        if sw.error:
            out.append(Row(sw.sweep, "capacity: stopped", "", "", "", "", "ERROR"))
        elif sw.invalid_reasons:
            out.append(Row(sw.sweep, "capacity validity", "", "", "", "", "INVALID"))
    return out


def _correctness_rows(summary: RunSummary) -> list[Row]:
    """The probe's verdicts first (a fast server that is wrong is the first thing to read), its
    metrics without a limit as info, and a row when it stopped."""
    c = summary.correctness
    if c is None or not c.ran:
        return []
    out = []
    judged = set()
    for v in c.verdict.metrics if c.verdict else ():
        judged.add(v.metric)
        out.append(_verdict_row(CORRECTNESS, v, c.recorded, {}))
    if c.outcome is not None:
        for name, value in c.outcome.metrics.items():
            if name not in judged:
                shown = fmt_value(value, unit_of(name)) if value == value else "-"
                out.append(Row(CORRECTNESS, name, shown, "", "", "", "info"))
    if c.error:
        out.append(Row(CORRECTNESS, "probe stopped", "", "", "", "", "ERROR"))
    return out


HEADERS = ("workload", "metric", "measured", "baseline", "limit", "change", "verdict")


def align(cells: Sequence[Sequence[str]], right: Collection[int] = ()) -> str:
    """Rows of cells as text columns two spaces apart, the first row a header underlined with
    dashes; columns in ``right`` are right-aligned (numbers)."""
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = []
    for k, c in enumerate(cells):
        lines.append(
            "  ".join(c[i].rjust(widths[i]) if i in right else c[i].ljust(widths[i]) for i in range(len(c))).rstrip()
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_text(table: Sequence[Row]) -> str:
    cells = [HEADERS] + [(r.workload, r.metric, r.measured, r.baseline, r.limit, r.change, r.verdict) for r in table]
    return align(cells, right={2, 3, 4, 5})


def render_markdown(table: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for r in table:
        lines.append(
            f"| {r.workload} | {r.metric} | {r.measured} | {r.baseline} | {r.limit} | {r.change} | {r.verdict} |"
        )
    return "\n".join(lines)
