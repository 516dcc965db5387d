"""The dcgm-exporter source: scrape Prometheus text from one or more endpoints.

Both metric-name generations are understood (classic ``DCGM_FI_DEV_POWER_USAGE`` and the
exporter 4.9+ ``DCGM_FI_DEV_BOARD_POWER_WATTS`` style), and both ``Hostname`` and ``hostname``
labels. GPUs are keyed by (hostname, UUID).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from perfgate.errors import TelemetryError
from perfgate.telemetry._checks import plausible_limit_w
from perfgate.telemetry._model import SAMPLE_FIELDS, ActivitySpan, Batch, Event, GpuIdentity, GpuSample
from perfgate.telemetry._scrape import ScrapeBound, ScrapeLimits, bounded_get, check_read_series, metric_lines
from perfgate.telemetry._window import ACTIVITY_KEYS

# Prometheus name -> (our field, factor to our unit). Ratios (0-1) become percent, bytes MiB.
_METRICS: Mapping[str, tuple[str, float]] = {
    "DCGM_FI_DEV_POWER_USAGE": ("power_avg_w", 1.0),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("power_avg_w", 1.0),
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": ("power_instant_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu_pct", 1.0),
    "DCGM_FI_DEV_GPU_UTIL_RATIO": ("util_gpu_pct", 100.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": ("temperature_c", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mib", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS": ("power_limit_w", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_util_pct", 100.0),
    "DCGM_FI_PROF_SM_UTIL_RATIO": ("sm_util_pct", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_pct", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_util_pct", 100.0),
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": ("tensor_util_pct", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_bw_util_pct", 100.0),
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": ("dram_bw_util_pct", 100.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_mib_s", 1 / 2**20),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_mib_s", 1 / 2**20),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_mib_s", 1 / 2**20),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_mib_s", 1 / 2**20),
}

_NAMES = frozenset(_METRICS)

# dcgm-exporter answers in milliseconds; the sampler polls every 0.1 s and the run's edges wait on it.
DCGM_LIMITS = ScrapeLimits(deadline_s=2.0)


@dataclass(frozen=True)
class DcgmReading:
    """One GPU's values from one scrape, in perfgate units (see ``_METRICS``)."""

    hostname: str
    uuid: str
    gpu: int
    model: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    values: Mapping[str, float] = field(default_factory=dict)


def parse_dcgm_text(text: str) -> list[DcgmReading]:
    """Parse dcgm-exporter's Prometheus text into one reading per (hostname, UUID).

    Raises ``ValueError`` for text the Prometheus parser rejects. Samples without a UUID label
    and metrics perfgate does not use are ignored (their lines are not even parsed).
    """
    labels_of: dict[tuple[str, str], dict[str, str]] = {}
    values_of: dict[tuple[str, str], dict[str, float]] = {}
    for family in text_string_to_metric_families("\n".join(metric_lines(text, _NAMES)) + "\n"):
        for sample in family.samples:
            spec = _METRICS.get(sample.name) or _METRICS.get(family.name)
            labels = sample.labels
            uuid = labels.get("UUID") or labels.get("uuid")
            if spec is None or not uuid:
                continue
            host = labels.get("Hostname") or labels.get("hostname") or ""
            labels_of.setdefault((host, uuid), labels)
            values_of.setdefault((host, uuid), {})[spec[0]] = float(sample.value) * spec[1]
    readings = []
    for (host, uuid), labels in labels_of.items():
        gpu = labels.get("gpu", "")
        readings.append(
            DcgmReading(
                hostname=host,
                uuid=uuid,
                gpu=int(gpu) if gpu.isdigit() else -1,
                model=labels.get("modelName", ""),
                pci_bus_id=labels.get("pci_bus_id", ""),
                driver_version=labels.get("DCGM_FI_DRIVER_VERSION", ""),
                values=values_of[(host, uuid)],
            )
        )
    return readings


class DcgmSource:
    """Scrapes ``endpoints`` (http URLs of dcgm-exporter ``/metrics``) for the GPUs in ``gpus``.

    ``gpus`` are UUIDs or dcgm ``gpu`` label numbers; empty means every GPU the endpoints report.
    Raises :class:`~perfgate.errors.TelemetryError` naming the URL when an endpoint cannot be
    scraped at open (an answer past ``limits`` included), or naming the GPU when it is not
    reported. An endpoint whose answer goes past ``limits`` later is dropped for the rest of the
    run (its GPUs are reported lost, once).
    """

    name = "dcgm"

    def __init__(
        self, endpoints: Sequence[str], gpus: Sequence[int | str], *, limits: ScrapeLimits = DCGM_LIMITS
    ) -> None:
        if not endpoints:
            raise TelemetryError(
                'telemetry source "dcgm" needs [telemetry].dcgm_endpoints (e.g. ["http://HOST:9400/metrics"])'
            )
        self._endpoints = list(endpoints)
        self._limits = limits
        self._client = httpx.Client()
        self._seen: set[str] = set()
        self._last: dict[str, tuple[float, Mapping[str, float]]] = {}
        readings: dict[str, list[DcgmReading]] = {}
        try:
            for url in self._endpoints:
                try:
                    readings[url] = self._scrape(url)
                except ScrapeBound as err:
                    raise TelemetryError(
                        f"dcgm-exporter endpoint (profile [telemetry].dcgm_endpoints): {err}"
                    ) from None
                except (httpx.HTTPError, ValueError) as err:
                    raise TelemetryError(
                        f"dcgm-exporter endpoint {url} (profile [telemetry].dcgm_endpoints) cannot be "
                        f"scraped: {err}. Check that dcgm-exporter runs there and the URL ends in /metrics."
                    ) from err
            self._idents = _select([r for rs in readings.values() for r in rs], gpus, self._endpoints)
        except BaseException:
            self._client.close()
            raise
        self._wanted = {(i.hostname, i.uuid) for i in self._idents}
        self._url_of = {(r.hostname, r.uuid): url for url, rs in readings.items() for r in rs}
        # An endpoint with none of the monitored GPUs is not polled (nor said to have failed).
        self._endpoints = [u for u in self._endpoints if any(self._url_of.get(w) == u for w in self._wanted)]

    def _scrape(self, url: str) -> list[DcgmReading]:
        text = bounded_get(self._client, url, self._limits)
        lines = metric_lines(text, _NAMES)
        check_read_series(url, lines, self._limits)
        return parse_dcgm_text("\n".join(lines))

    def identities(self) -> list[GpuIdentity]:
        return list(self._idents)

    def origin(self, uuid: str) -> str:
        """The exporter URL ``uuid``'s readings come from, for messages."""
        urls = sorted({url for (_, u), url in self._url_of.items() if u == uuid})
        return f"dcgm-exporter {', '.join(urls)}"

    def poll(self, clock: Callable[[], float], *, full: bool, counters: bool) -> Batch:
        """Scrape every endpoint once; GPUs whose values did not change since the last scrape
        (the exporter has not collected again) yield nothing. ``full`` and ``counters`` are ignored:
        one scrape returns everything, and DCGM's profiling values are already averages over its
        collection period."""
        samples: list[GpuSample] = []
        spans: list[ActivitySpan] = []
        events: list[Event] = []
        lost: list[tuple[str, str]] = []
        for url in list(self._endpoints):
            try:
                readings = self._scrape(url)
            except ScrapeBound as err:
                self._endpoints.remove(url)
                why = f"dcgm-exporter endpoint dropped: {err}"
                lost += [
                    (uuid, why) for (host, uuid), u in self._url_of.items() if u == url and (host, uuid) in self._wanted
                ]
                continue
            except (httpx.HTTPError, ValueError) as err:
                self._note_once(
                    events, clock, f"dcgm-exporter endpoint {url}: scrape failed ({type(err).__name__}: {err})"
                )
                continue
            t = clock()
            wanted = [r for r in readings if (r.hostname, r.uuid) in self._wanted]
            if not wanted:
                self._note_once(
                    events, clock, f"dcgm-exporter endpoint {url}: scrape failed (no reading of a monitored GPU in it)"
                )
            for r in wanted:
                key = f"{r.hostname}/{r.uuid}"
                last = self._last.get(key)
                if last is not None and last[1] == r.values:
                    continue
                self._last[key] = (t, r.values)
                fields: dict[str, Any] = {f: r.values.get(f) for f in SAMPLE_FIELDS}
                samples.append(GpuSample(t_s=t, uuid=r.uuid, **fields))
                act = {k: r.values.get(k) for k in ACTIVITY_KEYS}
                if last is not None and any(v is not None for v in act.values()):
                    spans.append(ActivitySpan(last[0], t, r.uuid, act))
        return Batch(tuple(samples), tuple(spans), tuple(events), tuple(lost))

    def _note_once(self, events: list[Event], clock: Callable[[], float], message: str) -> None:
        if message not in self._seen:
            self._seen.add(message)
            events.append(Event(clock(), f"{message}; samples skipped"))

    def close(self) -> None:
        self._client.close()


def _select(readings: list[DcgmReading], gpus: Sequence[int | str], urls: Sequence[str]) -> list[GpuIdentity]:
    def ident(r: DcgmReading) -> GpuIdentity:
        return GpuIdentity(
            index=r.gpu,
            uuid=r.uuid,
            name=r.model or "?",
            pci_bus_id=r.pci_bus_id,
            hostname=r.hostname,
            power_limit_w=plausible_limit_w(r.values.get("power_limit_w")),
            driver_version=r.driver_version,
        )

    if not readings:
        raise TelemetryError(f"dcgm-exporter endpoints {', '.join(urls)} report no GPU with a UUID label")
    if not gpus:
        return [ident(r) for r in readings]
    chosen: list[GpuIdentity] = []
    for spec in gpus:
        match = [r for r in readings if (r.uuid == spec if isinstance(spec, str) else r.gpu == spec)]
        if not match:
            available = ", ".join(f"{r.hostname}:{r.gpu}={r.uuid}" for r in readings)
            raise TelemetryError(
                f"GPU {spec!r} (profile [server].gpus) is not reported by dcgm-exporter at "
                f"{', '.join(urls)}; reported: {available}"
            )
        chosen += [ident(r) for r in match if ident(r) not in chosen]
    return chosen
