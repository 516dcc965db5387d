"""PNG plots from a results document, when matplotlib (the ``plots`` extra) is installed.

One figure per workload, readable without the documentation: the last repeat's output throughput
and requests in flight over time (steady window shaded, the baseline's median throughput
dashed), per-GPU power when measured (with the baseline's weakest-GPU power), and the TPOT
and TTFT distributions on axes of their own (at 1024 streams TPOT is ~50 ms while TTFT spans
0.6-20 s), each with the baseline's value marked. One figure per sweep: its throughput and
SLO'd latencies against load, this run solid and the baseline's points dashed, with the SLO
targets and both capacities marked. An A/B gets one figure per workload too
(:func:`write_ab_plots`): A and B per round, and B/A per round against the limit.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfgate._files import Artefacts, publish_with
from perfgate._names import file_stem, path_in
from perfgate._redact import SECRETS

_STEADY = {"color": "tab:green", "alpha": 0.12}
_BASELINE = {"color": "black", "ls": "--", "lw": 1.0}


# The throughput line of a workload's plot: a rolling rate over this many seconds of timeline bins.
_ROLLING_S = 1.0
_BIN_ALPHA = 0.25


def rolling_rate(tokens_per_bin: list[int] | list[float], bin_s: float, window_s: float) -> list[float]:
    """Tokens per second over the ``window_s`` of bins around each bin (at the edges over the bins
    there are, divided by the time they cover), from per-bin token counts."""
    n = len(tokens_per_bin)
    width = max(1, round(window_s / bin_s))
    cumulative = [0.0]
    for x in tokens_per_bin:
        cumulative.append(cumulative[-1] + x)
    rates = []
    for i in range(n):
        lo, hi = max(0, i - width // 2), min(n, i - width // 2 + width)
        rates.append((cumulative[hi] - cumulative[lo]) / ((hi - lo) * bin_s))
    return rates


def _baseline_values(wl: dict[str, Any]) -> dict[str, float]:
    """The baseline's medians this run was judged against (the previous ones when recording)."""
    values = {
        m["metric"]: m["baseline"]
        for m in (wl.get("verdict") or {}).get("metrics", [])
        if m.get("baseline") is not None
    }
    previous = (wl.get("baseline") or {}).get("previous") or {}
    return {**previous, **values}


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None without the ``plots`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt: Any, make: Callable[[], Any], path: Path, dpi: int, out: Artefacts) -> None:
    """Draw the figure ``make`` returns and write it to ``path``, recording the file or why not in ``out``."""

    def write(target: Path) -> None:
        from matplotlib.text import Text

        with warnings.catch_warnings():
            # A glyph the font lacks is drawn as a box: no reason to lose the plot, which a
            # project's filterwarnings = error would otherwise make it.
            warnings.filterwarnings("ignore", message=r"Glyph .* missing from", category=UserWarning)
            fig = make()
            try:
                for text in fig.findobj(Text):
                    text.set_text(SECRETS.text(text.get_text()))
                fig.tight_layout()
                publish_with(target, lambda f: fig.savefig(f, format="png", dpi=dpi))
            finally:
                plt.close(fig)

    out.attempt(path, write)


def write_plots(doc: dict[str, Any], out_dir: Path, out: Artefacts) -> None:
    """One PNG per workload (``<workload>.png``) and per sweep (``<sweep>-capacity.png``) into ``out``."""
    plt = _pyplot()
    if plt is None:
        return
    for wl in doc["workloads"]:
        if wl["repeats"]:
            _save(
                plt, functools.partial(_figure, plt, wl), path_in(out_dir, f"{file_stem(wl['workload'])}.png"), 110, out
            )
    for sweep in doc.get("sweeps", []):
        if sweep["points"]:
            _save(
                plt,
                functools.partial(_sweep_plot, plt, sweep),
                path_in(out_dir, f"{file_stem(sweep['sweep'])}-capacity.png"),
                110,
                out,
            )


def _figure(plt: Any, wl: dict[str, Any]) -> Any:
    repeats = wl["repeats"]
    rep = repeats[-1]
    base = _baseline_values(wl)
    tl = rep["timeline"]
    t0 = tl["start_s"]
    steady = rep.get("steady_window")
    tel = rep["telemetry"]
    series = (tel.get("timeline") or {}).get("gpus") if isinstance(tel, dict) else None
    rows = 3 if series else 2
    fig = plt.figure(figsize=(10, 2.9 * rows))
    grid = fig.add_gridspec(rows, 2)
    fig.suptitle(f"{wl['workload']}: repeat {len(repeats)} of {len(repeats)} (measured phase; steady window shaded)")

    ax = fig.add_subplot(grid[0, :])
    bin_s = tl["bin_s"]
    t = [i * bin_s for i in range(len(tl["in_flight"]))]
    # Per 0.1 s bin the rate is a comb at high concurrency (a batch's tokens land in one bin, the
    # next bin is empty): the bins stay faint, the rolling 1 s rate is the line to read.
    ax.plot(t, [x / bin_s for x in tl["output_tokens"]], lw=0.5, alpha=_BIN_ALPHA, color="tab:blue")
    lines = ax.plot(
        t,
        rolling_rate(tl["output_tokens"], bin_s, _ROLLING_S),
        lw=1.2,
        color="tab:blue",
        label=f"output tok/s, rolling {_ROLLING_S:g} s (faint: per {bin_s:g} s bin)",
    )
    ax.set_ylabel("output tokens/s")
    ax.set_xlabel("s since the measured phase started")
    if "output_throughput" in base:
        lines.append(ax.axhline(base["output_throughput"], label="baseline output_throughput (median)", **_BASELINE))
    ax2 = ax.twinx()
    lines += ax2.plot(t, tl["in_flight"], color="tab:orange", lw=0.8, label="requests in flight")
    ax2.set_ylabel("requests in flight")
    if steady:
        lines.append(ax.axvspan(steady["start_s"] - t0, steady["end_s"] - t0, label="steady window", **_STEADY))
    # Above the axes, where it covers no data.
    ax.legend(handles=lines, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=7, ncol=4, frameon=False)

    if series:
        axp = fig.add_subplot(grid[1, :])
        for gpu in series:
            axp.plot(
                [s - t0 for s in gpu["t_s"]], gpu["power_w"], lw=0.8, label=f"GPU {gpu['index']} ...{gpu['uuid'][-4:]}"
            )
        if steady:
            axp.axvspan(steady["start_s"] - t0, steady["end_s"] - t0, **_STEADY)
        if "gpu_power_min_w" in base:
            axp.axhline(base["gpu_power_min_w"], label="baseline weakest-GPU power", **_BASELINE)
        axp.set_ylabel("power (W)")
        axp.set_xlabel("s since the measured phase started")
        axp.set_title("per-GPU power", fontsize=9)
        axp.legend(fontsize=6, ncol=4)

    # One pass keeping two numbers a request: the requests' objects (chunk offsets and all)
    # are made one at a time when the results are written (report/_results.py).
    tpots: list[float] = []
    ttfts: list[float] = []
    for r in rep["requests"]:
        if r["error"] or r["ttft_s"] is None:
            continue
        ttfts.append(r["ttft_s"] * 1000)
        if (r["output_tokens"] or 0) > 1:
            tpots.append((r["latency_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) * 1000)
    for col, (name, values, metric) in enumerate((("TPOT", tpots, "mean_tpot_ms"), ("TTFT", ttfts, "mean_ttft_ms"))):
        axh = fig.add_subplot(grid[rows - 1, col])
        axh.hist(values, bins=40, color="tab:blue" if col == 0 else "tab:purple", alpha=0.75)
        if metric in base:
            axh.axvline(base[metric], label=f"baseline mean {name}", **_BASELINE)
            axh.legend(fontsize=7)
        axh.set_title(f"{name} per request", fontsize=9)
        axh.set_xlabel(f"{name} (ms)")
        axh.set_ylabel("requests")
    return fig


def write_ab_plots(doc: dict[str, Any], out_dir: Path, out: Artefacts) -> None:
    """One PNG per workload of an A/B results document (ab-<workload>.png): for each gated metric,
    A and B per round joined by a line (the paired view), and the ratio B/A per round against
    the tolerance's limit, with the median ratio and its interval."""
    plt = _pyplot()
    if plt is None:
        return
    for wl in doc["workloads"]:
        metrics = [m for m in wl["verdict"] or () if m["n_pairs"]]
        if metrics:
            _save(
                plt,
                functools.partial(_ab_figure, plt, wl, metrics),
                path_in(out_dir, f"ab-{file_stem(wl['workload'])}.png"),
                100,
                out,
            )


def _ab_figure(plt: Any, wl: dict[str, Any], metrics: list[dict[str, Any]]) -> Any:
    nan = float("nan")
    rounds = [r["round"] for r in wl["rounds"]]
    fig, axes = plt.subplots(len(metrics), 2, figsize=(11, 2.5 * len(metrics)), squeeze=False)
    for (ax, axr), m in zip(axes, metrics):
        a = [nan if v is None else v for v in m["a_values"]]
        b = [nan if v is None else v for v in m["b_values"]]
        ax.vlines(rounds, [min(x, y) for x, y in zip(a, b)], [max(x, y) for x, y in zip(a, b)], color="0.7", lw=1)
        ax.plot(rounds, a, "o", color="tab:blue", label="A (current)")
        ax.plot(rounds, b, "s", color="tab:orange", label="B (candidate)")
        ax.set_ylabel(m["metric"], fontsize=8)
        ax.set_xticks(rounds, [f"{n}\n{'AB' if n % 2 else 'BA'}" for n in rounds], fontsize=7)
        ax.legend(fontsize=7)
        ratios = [nan if v is None else v for v in m["ratios"]]
        axr.plot(rounds, ratios, "D", color="tab:purple", label="B/A per round")
        axr.axhline(1.0, color="0.5", lw=0.8)
        if m["limit_ratio"] is not None:
            axr.axhline(m["limit_ratio"], color="tab:red", ls="--", lw=1, label=f"limit {m['limit_ratio']:.3f}")
        axr.axhline(m["median_ratio"], color="black", lw=1, label=f"median {m['median_ratio']:.3f}")
        axr.axhspan(
            m["ci_low"], m["ci_high"], color="tab:purple", alpha=0.12, label=f"{m['ci_coverage'] * 100:.0f}% CI"
        )
        axr.set_xticks(rounds, [str(n) for n in rounds], fontsize=7)
        axr.set_title(f"{m['metric']}: {m['status'].upper()}", fontsize=9)
        axr.legend(fontsize=6, loc="best")
    axes[0][0].set_title(f"{wl['workload']}: A and B per round (round, order)", fontsize=9)
    return fig


_LATENCY_NAMES = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2e_latency"}


def _sweep_plot(plt: Any, sweep: dict[str, Any]) -> Any:
    """Throughput and the SLO'd latencies against load, this run solid and the baseline dashed, with
    the SLO targets and both capacities marked."""
    from matplotlib.ticker import ScalarFormatter  # matplotlib is there: plt came from it

    points = sweep["points"]
    loads = [p["load"] for p in points]
    grid = [p for p in points if p["baseline_medians"]]
    fig, (axt, axl) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    axt.plot(loads, [p["medians"].get("output_throughput") for p in points], "o-", label="output tok/s (this run)")
    if grid:
        axt.plot(
            [p["load"] for p in grid],
            [p["baseline_medians"].get("output_throughput") for p in grid],
            "s--",
            color="tab:gray",
            label="output tok/s (baseline)",
        )
    axt.set_ylabel("output tok/s")
    axt.set_title(f"{sweep['sweep']}: throughput and {sweep['stat']} latency by {sweep['axis']}")
    axt.legend(fontsize=8)
    for i, (key, target) in enumerate(sweep["slo"].items()):
        name = f"{sweep['stat']}_{_LATENCY_NAMES[key]}_ms"
        color = f"C{i + 1}"
        axl.plot(loads, [p["medians"].get(name) for p in points], "o-", color=color, label=f"{name} (this run)")
        if grid:
            axl.plot(
                [p["load"] for p in grid],
                [p["baseline_medians"].get(name) for p in grid],
                "s--",
                color=color,
                alpha=0.6,
                label=f"{name} (baseline)",
            )
        axl.axhline(target, color=color, ls=":", lw=1, label=f"SLO {key} {target:g}")
    capacity = sweep["verdict"]["metrics"][0] if sweep["verdict"] else {}
    for value, style, label in (
        (capacity.get("measured"), "-", "capacity"),
        (capacity.get("baseline"), "--", "baseline capacity"),
    ):
        if value is None:
            continue
        # A capacity of 0 (no load met the SLO) is drawn at the lowest load, and says so.
        x = value or loads[0]
        for ax in (axt, axl):
            ax.axvline(x, color="black", ls=style, lw=0.8)
        axl.text(
            x,
            axl.get_ylim()[1],
            f" {label} {value:g}" + ("" if value else " (below the lowest load)"),
            va="top",
            fontsize=8,
        )
    if loads[-1] >= 4 * loads[0]:
        axl.set_xscale("log", base=2)
    axl.set_yscale("log")
    for axis in (axl.xaxis, axl.yaxis):
        axis.set_major_formatter(ScalarFormatter())
    axl.yaxis.set_minor_formatter(ScalarFormatter())
    axl.set_ylabel("ms")
    axl.set_xlabel(sweep["axis"])
    axl.legend(fontsize=7, ncol=2)
    return fig
