"""The metric reference (Markdown), generated from the declarations in ``_metrics.py``."""

from __future__ import annotations

from perfgate._docs import GeneratedSection
from perfgate.catalogue._metrics import METRICS

SECTION = GeneratedSection("metric reference", "python -m perfgate.catalogue --reference", "docs/metrics.md")


def reference_markdown() -> str:
    """One row per metric: name, unit, which way is better, category, the test that judges it,
    the default tolerance (or absolute limit), and what it is."""
    lines = [
        "| metric | unit | better | category | judged by | default tolerance | what it is |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in METRICS.values():
        better = m.direction or "not gated"
        test = f"`test_{'gpu_power' if m.test == 'power' else m.test}`" if m.test else "-"
        tolerance = f"{m.default_tolerance:.0%}" if m.default_tolerance is not None else "-"
        if m.default_limit is not None:
            # An absolute bound ([correctness] limits), not a relative tolerance.
            tolerance = f"{'<=' if m.direction == 'lower' else '>='} {m.default_limit:g} {m.unit}".rstrip()
        extra = " (with an `slo`)" if m.needs_slo else ""
        cells = [f"`{m.name}`", m.unit or "-", better, m.category, test, tolerance, m.summary + extra]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
