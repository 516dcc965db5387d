"""The per-workload PNG: drawn from a results document with or without telemetry and baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate._files import Artefacts
from perfgate.report._plots import _baseline_values, _figure, rolling_rate, write_plots

pytest.importorskip("matplotlib")


def _doc(*, power: bool, baseline: float | None) -> dict:
    requests = [
        {"error": "", "ttft_s": 0.05 + i / 1000, "latency_s": 0.5 + i / 100, "output_tokens": 16} for i in range(20)
    ] + [{"error": "HTTP 500", "ttft_s": None, "latency_s": 0.01, "output_tokens": None}]
    telemetry = (
        {
            "timeline": {
                "gpus": [
                    {"index": 0, "uuid": "GPU-abcd", "t_s": [100.0, 100.5, 101.0], "power_w": [90.0, 240.0, 250.0]}
                ]
            }
        }
        if power
        else {"not_measured": "telemetry is off"}
    )
    verdict = {
        "metrics": [{"metric": "output_throughput", "baseline": baseline}, {"metric": "mean_ttft_ms", "baseline": None}]
    }
    return {
        "workloads": [
            {
                "workload": "c8",
                "verdict": verdict,
                "baseline": {"previous": {"mean_tpot_ms": 30.0}},
                "repeats": [
                    {
                        "timeline": {"start_s": 100.0, "bin_s": 0.1, "in_flight": [8] * 10, "output_tokens": [20] * 10},
                        "steady_window": {"start_s": 100.1, "end_s": 100.8},
                        "telemetry": telemetry,
                        "requests": requests,
                    }
                ],
            },
            {"workload": "stopped-before-any-repeat", "repeats": []},
        ]
    }


def test_baseline_values_prefer_the_judged_baseline_over_the_previous_one() -> None:
    wl = _doc(power=False, baseline=200.0)["workloads"][0]
    wl["baseline"]["previous"]["output_throughput"] = 150.0
    assert _baseline_values(wl) == {"mean_tpot_ms": 30.0, "output_throughput": 200.0}


def _plots(doc: dict, out_dir: Path) -> list[Path]:
    out = Artefacts()
    write_plots(doc, out_dir, out)
    assert out.failed == []
    return out.written


@pytest.mark.parametrize(("power", "baseline"), [(True, 180.0), (False, None)])
def test_one_png_per_workload_that_ran(tmp_path: Path, power: bool, baseline: float | None) -> None:
    (png,) = _plots(_doc(power=power, baseline=baseline), tmp_path)
    assert png == tmp_path / "c8.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def _sweep(capacity: float, baseline: float | None) -> dict:
    points = [
        {
            "load": load,
            "bisected": load == 48,
            "medians": {"output_throughput": 100.0 * load**0.5, "p90_tpot_ms": tpot, "p90_ttft_ms": 50.0 + load},
            "baseline_medians": {}
            if load == 48
            else {"output_throughput": 110.0 * load**0.5, "p90_tpot_ms": tpot * 0.8},
        }
        for load, tpot in ((16, 9.5), (32, 12.7), (48, 15.5), (64, 19.2), (128, 32.1))
    ]
    verdict = {"metrics": [{"metric": "capacity", "measured": capacity, "baseline": baseline}]}
    return {
        "sweep": "cap",
        "axis": "concurrency",
        "stat": "p90",
        "slo": {"ttft_ms": 500.0, "tpot_ms": 15.0},
        "points": points,
        "verdict": verdict,
    }


@pytest.mark.parametrize(("capacity", "baseline"), [(32.0, 48.0), (0.0, 32.0), (64.0, None)])
def test_one_png_per_sweep_with_the_curve_against_the_baselines(
    tmp_path: Path, capacity: float, baseline: float | None
) -> None:
    (png,) = _plots({"workloads": [], "sweeps": [_sweep(capacity, baseline)]}, tmp_path)
    assert png == tmp_path / "cap-capacity.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_rolling_rate_turns_a_comb_of_bins_into_the_steady_rate() -> None:
    # 1,000 tok/s arriving in bursts: 200 tokens every other 0.1 s bin, as at high concurrency.
    comb = [200, 0] * 30
    rates = rolling_rate(comb, 0.1, 1.0)
    assert len(rates) == len(comb)
    assert all(r == pytest.approx(1000.0) for r in rates[5:-5])
    # The edges average the bins there are, over the time they cover: never a drop to zero.
    assert all(800.0 <= r <= 1200.0 for r in rates)
    assert rolling_rate([3, 4], 0.5, 0.1) == [6.0, 8.0]  # a window below one bin is the bin itself
    assert rolling_rate([], 0.1, 1.0) == []


def test_the_throughput_panel_draws_the_rolling_rate_over_faint_bins_and_keeps_the_legend_off_the_data() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = _doc(power=True, baseline=180.0)
    doc["workloads"][0]["repeats"][0]["timeline"]["output_tokens"] = [40, 0] * 5
    fig = _figure(plt, doc["workloads"][0])
    try:
        fig.tight_layout()
        fig.canvas.draw()
        ax = fig.axes[0]
        bins, rolling = ax.get_lines()[:2]
        assert list(bins.get_ydata()) == pytest.approx([400, 0] * 5)
        assert bins.get_alpha() is not None and bins.get_alpha() <= 0.3
        assert list(rolling.get_ydata()) == pytest.approx(rolling_rate([40, 0] * 5, 0.1, 1.0))
        assert rolling.get_alpha() is None and "rolling 1 s" in rolling.get_label()
        legend = ax.get_legend()
        renderer = fig.canvas.get_renderer()
        assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    finally:
        plt.close(fig)
