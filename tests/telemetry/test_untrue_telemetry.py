"""Telemetry that cannot be true never becomes a number: power past the GPU's limit (or a physical
bound), NaN, infinite or negative readings, energy counters that jump, an exporter that hangs."""

from __future__ import annotations

import http.server
import math
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from perfgate.telemetry import DcgmSource, GpuSample, Monitor
from perfgate.telemetry._scrape import ScrapeLimits
from perfgate.telemetry._window import summarize_gpu
from tests.support import loopback_http
from tests.telemetry.test_telemetry_window import IDENT, trace

U0 = "GPU-22db0000-1111-2222-3333-444455556666"


def body(power: str, energy_mj: str, limit_w: str = "600") -> str:
    labels = f'gpu="0",UUID="{U0}",Hostname="h"'
    return (
        f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {power}\n"
        f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {energy_mj}\n"
        f"DCGM_FI_DEV_ENFORCED_POWER_LIMIT{{{labels}}} {limit_w}\n"
    )


class _Exporter(http.server.BaseHTTPRequestHandler):
    """Serves ``bodies`` in turn (the last one forever); from answer ``hang_after`` + 1 on, never answers."""

    bodies: ClassVar[list[str]] = []
    hang_after: ClassVar[list[int]] = []
    served: ClassVar[list[int]] = []
    release: ClassVar[threading.Event]

    def do_GET(self) -> None:
        self.served.append(1)
        if self.hang_after and len(self.served) > self.hang_after[0]:
            self.release.wait(30)
            return
        text = self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[tuple[str, type[_Exporter]]]:
    handler = type(
        "Handler", (_Exporter,), {"bodies": [], "hang_after": [], "served": [], "release": threading.Event()}
    )
    with loopback_http(handler) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", handler
        handler.release.set()


def run_monitor(url: str, handler: type[_Exporter], limits: ScrapeLimits | None = None, polls: int = 0) -> Monitor:
    """A monitor of ``url`` that reads each of ``handler.bodies`` once (or ``polls`` times), one
    second apart from t=100 (the exporter's first answer is the source's open)."""
    handler.bodies.insert(0, handler.bodies[0])
    now = [100.0]
    source = DcgmSource([url], [U0]) if limits is None else DcgmSource([url], [U0], limits=limits)
    monitor = Monitor(source, clock=lambda: now[0])
    monitor.mark()
    for _ in range(polls or len(handler.bodies) - 1):
        now[0] += 1.0
        monitor.mark()
    return monitor


def test_power_past_the_limit_nan_inf_and_negative_are_rejected_once_each(exporter):
    url, handler = exporter
    # 400 W throughout by the counter (400 J/s); the power gauge lies in four ways, twice each.
    powers = ["400", "384665.4", "NaN", "+Inf", "-5", "384665.4", "NaN", "+Inf", "-5", "400"]
    handler.bodies += [body(p, f"{1e6 + i * 4e5:.0f}") for i, p in enumerate(powers)]
    monitor = run_monitor(url, handler)
    window = monitor.summarize(100.0, 109.0)
    (gpu,) = window.gpus
    assert math.isclose(gpu.mean_power_w, 400.0) and gpu.power_method == "energy_counter"
    assert gpu.power_p95_w == 400.0 and window.metrics()["gpu_power_min_w"] == pytest.approx(400.0)
    # One message per kind (NaN and infinite are one: not a number), the first reading of it shown.
    past, not_finite, negative = window.rejected
    assert past.startswith(
        f"GPU h:0 (…55556666) from dcgm-exporter {url}: power_avg_w 384,665.4 W is past 900 W (1.5 x its 600 W "
        "enforced limit); such readings are not used (a broken exporter, or something in front of it: check it)"
    )
    assert "power_avg_w nan is not a finite number" in not_finite and "power_avg_w -5.0 W is negative" in negative


def test_a_limit_that_lies_falls_back_to_the_physical_bound(exporter):
    url, handler = exporter
    handler.bodies += [body(p, "1e6", limit_w="1e30") for p in ("400", "2500", "1900")]
    monitor = run_monitor(url, handler)
    assert monitor.gpus()[0].power_limit_w is None
    (message,) = monitor.summarize(100.0, 102.0).rejected
    assert "power_avg_w 2,500.0 W is past 2,000 W (no GPU draws more; its enforced limit is unknown)" in message


@pytest.mark.parametrize(
    "energies_mj",
    [
        # One jump of 1e9 J between the 4th and 5th reading, the counter fine before and after.
        [f"{1e6 + i * 4e5 + (1e12 if i >= 4 else 0):.0f}" for i in range(9)],
        # A counter rising 1e290 mJ per scrape.
        [f"{(i + 1) * 1e290:.6g}" for i in range(9)],
    ],
    ids=["once", "every-scrape"],
)
def test_an_energy_counter_that_jumps_is_not_used(exporter, energies_mj):
    url, handler = exporter
    handler.bodies += [body("400", e) for e in energies_mj]
    monitor = run_monitor(url, handler)
    window = monitor.summarize(100.0, 108.0)
    (gpu,) = window.gpus
    # The jumped steps are filled from the sampled power (400 W): the window is 400 W, not 1e8 W.
    assert math.isclose(gpu.mean_power_w, 400.0) and gpu.power_method == "energy_counter+integrated"
    (message,) = window.rejected
    assert f"from dcgm-exporter {url}: energy counter rose" in message
    assert "more than 900 W (1.5 x its 600 W enforced limit) draws then" in message


def test_a_jump_read_by_the_closing_mark_after_the_window_is_named_in_it(exporter):
    """A window's end mark reads the counters just after its end (Monitor.end): a jump first seen
    there is in the power the window reports, so the window names it (CI of babfd51 missed it)."""
    url, handler = exporter
    handler.bodies += [body("400", f"{1e6 + i * 4e5 + (1e12 if i >= 3 else 0):.0f}") for i in range(5)]
    monitor = run_monitor(url, handler)
    window = monitor.summarize(100.5, 102.5)  # readings at 100, 101, 102 and 103 (the jump)
    (gpu,) = window.gpus
    assert math.isclose(gpu.mean_power_w, 400.0), gpu.mean_power_w
    (message,) = window.rejected
    assert "energy counter rose" in message


def test_no_reading_left_is_not_measured_and_says_why(exporter):
    url, handler = exporter
    handler.bodies += [body("NaN", "NaN")] * 3
    monitor = run_monitor(url, handler)
    window = monitor.summarize(100.0, 102.0)
    assert "gpu_power_min_w" not in window.metrics() and "energy_j" not in window.metrics()
    why = window.unmeasured("gpu_power_min_w")
    assert why.startswith("GPU h:0 (…55556666): no power reading in the window (GPU h:0 (…55556666) from dcgm-exporter")
    assert "power_avg_w nan is not a finite number" in why and "energy_j nan is not a finite number" in why


def test_a_counter_that_adds_up_past_the_bound_in_a_window_is_not_measured():
    # Each step is within the bound over its interval plus the exporter's collection slack, but a
    # 1 s window cannot hold 5 kJ on a 600 W GPU.
    samples = trace([400.0] * 11, dt=0.1)
    samples[5] = GpuSample(t_s=samples[5].t_s, uuid=IDENT.uuid, power_instant_w=400.0, energy_j=1e4 + 5e3)
    samples[6:] = [
        GpuSample(t_s=s.t_s, uuid=s.uuid, power_instant_w=400.0, energy_j=s.energy_j + 5e3) for s in samples[6:]
    ]
    window, _ = summarize_gpu(IDENT, samples, [], samples[0].t_s, samples[-1].t_s)
    assert window.mean_power_w is None and window.energy_j is None
    assert "over the window is more than 2 x 900 W (1.5 x its 600 W enforced limit)" in window.unmeasured
    assert window.unmeasured in window.rejected


def test_an_exporter_that_hangs_mid_run_is_dropped_once_and_named(exporter):
    url, handler = exporter
    handler.bodies.append(body("400", "1e6"))
    handler.hang_after.append(3)
    t0 = time.monotonic()
    monitor = run_monitor(url, handler, ScrapeLimits(deadline_s=0.3), polls=6)
    took_s = time.monotonic() - t0
    # One scrape waited out its deadline; the three after it did not ask again.
    assert len(handler.served) == 4 and took_s < 2.0, (len(handler.served), took_s)
    late = monitor.summarize(103.0, 106.0)
    assert "gpu_power_min_w" not in late.metrics()
    (lost,) = late.rejected
    assert lost == (
        f"dcgm-exporter endpoint dropped: {url} did not answer within 0.3 s; not read again this run (a scrape that "
        "hangs would hold up the sampler and the run's edges): fix the endpoint or leave it out of the profile"
    )
    assert lost in late.unmeasured("gpu_power_min_w")
    # Windows that ended before the loss are not blamed on it.
    assert monitor.summarize(100.0, 101.0).rejected == ()
