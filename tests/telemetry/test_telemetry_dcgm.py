"""dcgm-exporter text parsing and the scraping source against a real local HTTP server."""

from __future__ import annotations

import http.server
import math
import socket
from collections.abc import Iterator
from typing import ClassVar

import pytest

from perfgate.errors import TelemetryError
from perfgate.profile import TelemetrySpec
from perfgate.telemetry import DcgmSource, Monitor, open_monitor, parse_dcgm_text
from tests.support import loopback_http

U0 = "GPU-22db0000-1111-2222-3333-444455556666"
U1 = "GPU-22db0001-1111-2222-3333-444455556666"

CLASSIC = f"""# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="{U0}",pci_bus_id="00000000:53:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.105.08"}} 250.5
DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="{U1}",pci_bus_id="00000000:54:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"}} 600
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="{U0}",Hostname="node-a"}} 123456789
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{U0}",Hostname="node-a"}} 100
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu="0",UUID="{U0}",Hostname="node-a"}} 0.25
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="{U0}",Hostname="node-a"}} 70000
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="{U0}",Hostname="node-a"}} 1980
"""

NEW = f"""# TYPE DCGM_FI_DEV_BOARD_POWER_WATTS gauge
DCGM_FI_DEV_BOARD_POWER_WATTS{{gpu="0",UUID="{U0}",hostname="node-b",modelName="NVIDIA RTX PRO 6000"}} 235
# TYPE DCGM_FI_DEV_GPU_UTIL_RATIO gauge
DCGM_FI_DEV_GPU_UTIL_RATIO{{gpu="0",UUID="{U0}",hostname="node-b"}} 1
# TYPE DCGM_FI_PROF_TENSOR_UTIL_RATIO gauge
DCGM_FI_PROF_TENSOR_UTIL_RATIO{{gpu="0",UUID="{U0}",hostname="node-b"}} 0.03
# TYPE DCGM_FI_PROF_SM_UTIL_RATIO gauge
DCGM_FI_PROF_SM_UTIL_RATIO{{gpu="0",UUID="{U0}",hostname="node-b"}} 0.5
# TYPE DCGM_FI_DEV_GPU_TEMP_CELSIUS gauge
DCGM_FI_DEV_GPU_TEMP_CELSIUS{{gpu="0",UUID="{U0}",hostname="node-b"}} 61
# TYPE DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS gauge
DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS{{gpu="0",UUID="{U0}",hostname="node-b"}} 600
"""


def test_classic_names_two_gpus():
    readings = {r.uuid: r for r in parse_dcgm_text(CLASSIC)}
    g0, g1 = readings[U0], readings[U1]
    assert g0.hostname == "node-a" and g0.gpu == 0 and g0.model == "NVIDIA H100 80GB HBM3"
    assert g0.driver_version == "580.105.08" and g0.pci_bus_id == "00000000:53:00.0"
    assert g0.values["power_avg_w"] == 250.5 and g1.values["power_avg_w"] == 600.0
    assert math.isclose(g0.values["energy_j"], 123456.789)
    assert g0.values["tensor_util_pct"] == 25.0 and g0.values["util_gpu_pct"] == 100.0
    assert g0.values["memory_used_mib"] == 70000 and g0.values["sm_clock_mhz"] == 1980


def test_new_names_and_lowercase_hostname_and_same_uuid_on_two_hosts():
    readings = {(r.hostname, r.uuid): r for r in parse_dcgm_text(CLASSIC + NEW)}
    b = readings[("node-b", U0)]
    assert b.values == {
        "power_avg_w": 235.0,
        "util_gpu_pct": 100.0,
        "tensor_util_pct": 3.0,
        "sm_util_pct": 50.0,
        "temperature_c": 61.0,
        "power_limit_w": 600.0,
    }
    assert readings[("node-a", U0)].values["power_avg_w"] == 250.5


@pytest.mark.parametrize("text", ['DCGM_FI_DEV_POWER_USAGE{gpu="0" 12\n', 'DCGM_FI_DEV_POWER_USAGE{gpu="0"} abc\n'])
def test_malformed_text_is_a_value_error(text):
    with pytest.raises(ValueError):
        parse_dcgm_text(text)


class _Exporter(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        body = (self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[tuple[str, list[str]]]:
    bodies: ClassVar[list[str]] = []
    handler = type("Handler", (_Exporter,), {"bodies": bodies})
    with loopback_http(handler) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies


def body(power: float, energy_mj: float, tensor: float) -> str:
    return (
        f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="{U0}",Hostname="h"}} {power}\n'
        f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="{U0}",Hostname="h"}} {energy_mj}\n'
        f'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu="0",UUID="{U0}",Hostname="h"}} {tensor}\n'
        f'DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="{U1}",Hostname="h"}} 99\n'
    )


def test_scrapes_dedupes_and_summarises_over_http(exporter):
    url, bodies = exporter
    # open (discovery), then polls at t=101..104, then the stop poll at t=105 (repeats the last body).
    bodies += [
        body(400, 1e6, 0.5),
        body(400, 1.4e6, 0.5),
        body(400, 1.4e6, 0.5),
        "not prometheus {",
        body(400, 2.6e6, 0.5),
    ]
    now = [100.0]
    spec = TelemetrySpec(source="dcgm", dcgm_endpoints=("{base_url}/dcgm/metrics",))
    monitor = open_monitor(spec, gpus=[U0], base_url=url + "/", clock=lambda: now[0])
    assert isinstance(monitor, Monitor) and [g.uuid for g in monitor.gpus()] == [U0]
    for _ in range(4):
        now[0] += 1.0
        monitor.sample_now()
    now[0] += 1.0
    monitor.stop()
    window = monitor.summarize(100.0, 105.0)
    (gpu,) = window.gpus
    # Unchanged values (the exporter had not collected again) and malformed text yield no sample.
    assert gpu.samples == 2
    assert math.isclose(gpu.mean_power_w, 400.0) and gpu.power_method == "energy_counter"
    assert gpu.tensor_util_pct == 50.0
    assert any("scrape failed" in n and "/dcgm/metrics" in n for n in window.notes)


def test_unreachable_endpoint_at_open_names_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    with pytest.raises(TelemetryError, match=f"endpoint {url} .*cannot be scraped"):
        DcgmSource([url], [])


def test_requested_gpu_missing_from_exporter(exporter):
    url, bodies = exporter
    bodies.append(body(100, 1, 0))
    with pytest.raises(TelemetryError, match=r"GPU 5 .*not reported by dcgm-exporter"):
        DcgmSource([url], [5])


def test_dcgm_source_without_endpoints_says_which_key():
    with pytest.raises(TelemetryError, match=r"\[telemetry\].dcgm_endpoints"):
        open_monitor(TelemetrySpec(source="dcgm"), gpus=[], base_url="")
