"""PNG plots from a results document, when matplotlib (the ``plots`` extra) is installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_plots(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for wl in doc["workloads"]:
        if not wl["repeats"]:
            continue
        rep = wl["repeats"][-1]
        tl = rep["timeline"]
        t = [i * tl["bin_s"] for i in range(len(tl["in_flight"]))]
        tel = rep["telemetry"]
        series = (tel.get("timeline") or {}).get("gpus") if isinstance(tel, dict) else None
        n_axes = 3 if series else 2
        fig, axes = plt.subplots(n_axes, 1, figsize=(9, 2.6 * n_axes), sharex=False)
        ax = axes[0]
        ax.plot(t, [x / tl["bin_s"] for x in tl["output_tokens"]], lw=0.8, label="output tok/s")
        ax.set_ylabel("output tok/s")
        ax2 = ax.twinx()
        ax2.plot(t, tl["in_flight"], color="tab:orange", lw=0.8, label="in flight")
        ax2.set_ylabel("requests in flight")
        steady = rep.get("steady_window")
        if steady:
            for a in (ax,):
                a.axvspan(steady["start_s"] - tl["start_s"], steady["end_s"] - tl["start_s"], color="tab:green", alpha=0.12)
        ax.set_title(f"{wl['workload']}: throughput and requests in flight (steady window shaded)")
        if series:
            axp = axes[1]
            for gpu in series:
                label = f"GPU {gpu['index']} ...{gpu['uuid'][-4:]}"
                axp.plot([s - tl["start_s"] for s in gpu["t_s"]], gpu["power_w"], lw=0.8, label=label)
            if steady:
                axp.axvspan(steady["start_s"] - tl["start_s"], steady["end_s"] - tl["start_s"], color="tab:green", alpha=0.12)
            axp.set_ylabel("power (W)")
            axp.set_title("per-GPU power")
            axp.legend(fontsize=6, ncol=4)
        axl = axes[-1]
        tpots = [
            (r["latency_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) * 1000
            for r in rep["requests"]
            if not r["error"] and r["ttft_s"] is not None and (r["output_tokens"] or 0) > 1
        ]
        ttfts = [r["ttft_s"] * 1000 for r in rep["requests"] if not r["error"] and r["ttft_s"] is not None]
        axl.hist(tpots, bins=40, alpha=0.7, label="TPOT (ms)")
        axl.hist(ttfts, bins=40, alpha=0.5, label="TTFT (ms)")
        axl.set_xscale("log")
        axl.set_title("latency distributions")
        axl.legend()
        for a in axes[:-1]:
            a.set_xlabel("s since start of measured phase")
        fig.tight_layout()
        path = out_dir / f"{wl['workload']}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
