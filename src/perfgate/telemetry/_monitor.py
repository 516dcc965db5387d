"""The monitor: a sampler thread over one source, and windows over what it recorded."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from perfgate.errors import TelemetryError
from perfgate.gpu import NvmlUnavailable, load_nvml
from perfgate.profile import TelemetrySpec
from perfgate.telemetry._checks import ReadingCheck
from perfgate.telemetry._dcgm import DcgmSource
from perfgate.telemetry._model import (
    ActivitySpan,
    Batch,
    Event,
    GpuIdentity,
    GpuSample,
    NotMeasured,
    TelemetryWindow,
)
from perfgate.telemetry._nvml_source import NvmlSource
from perfgate.telemetry._window import summarize_gpu


class Source(Protocol):
    name: str

    def identities(self) -> list[GpuIdentity]: ...

    def origin(self, uuid: str) -> str: ...

    def poll(self, clock: Callable[[], float], *, full: bool, counters: bool) -> Batch: ...

    def close(self) -> None: ...


class Monitor:
    """Samples ``source`` every ``interval_s`` on a background thread and keeps every sample.

    Every ``activity_period_s`` a tick is "full": it also reads the slow values (utilization,
    clocks, temperature) and closes an activity (GPM) span, so post-hoc windows' activity is
    bracketed to within that period. The cumulative counters (energy, clock-event time), by far
    the costliest reads (~3-4 ms and ~0.4-0.8 ms of driver CPU per GPU on an H200), are read at
    every :meth:`mark` (window edges; the session marks each measured phase's start and end) and
    otherwise every ``counter_period_s``, often enough to bound what a counter reset can cost;
    between readings a window's energy follows the 10 Hz instant-power trace (see
    ``_window.energy_counter``). ``clock`` is
    ``time.monotonic`` except in tests. :meth:`sample_now` drives it without the thread.
    :attr:`sampler_cpu_pct` reports the thread's own CPU cost.
    """

    def __init__(
        self,
        source: Source,
        *,
        interval_s: float = 0.1,
        activity_period_s: float = 1.0,
        counter_period_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            source.close()
            raise TelemetryError(f"[telemetry].interval_s must be > 0, got {interval_s}")
        self._source = source
        self._interval_s = interval_s
        self._activity_period_s = activity_period_s
        self._counter_period_s = counter_period_s
        self._clock = clock
        self._idents = source.identities()
        self._samples: dict[str, list[GpuSample]] = {i.uuid: [] for i in self._idents}
        self._spans: dict[str, list[ActivitySpan]] = {i.uuid: [] for i in self._idents}
        self._events: list[Event] = []
        self._check = ReadingCheck(self._idents, source.origin)
        self._lost: dict[str, tuple[float, str]] = {}
        self._windows: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_full_s = -float("inf")
        self._last_counters_s = -float("inf")
        self._cpu_s = 0.0
        self._wall_s = 0.0
        self._closed = False

    @property
    def source(self) -> str:
        return self._source.name

    def gpus(self) -> list[GpuIdentity]:
        """Identity, limits and topology of every monitored GPU, read once at open."""
        return list(self._idents)

    # -- sampling ------------------------------------------------------------------------

    def sample_now(self, *, full: bool | None = None, counters: bool | None = None) -> None:
        """Take one sample of every GPU now; full and with the counters when due (or when asked)."""
        with self._lock:
            if self._closed:
                return
            now = self._clock()
            due = full if full is not None else now - self._last_full_s >= self._activity_period_s
            read_counters = counters if counters is not None else now - self._last_counters_s >= self._counter_period_s
            batch = self._source.poll(self._clock, full=due, counters=read_counters)
            if due:
                self._last_full_s = now
            if read_counters:
                self._last_counters_s = now
            for s in batch.samples:
                self._samples[s.uuid].append(self._check.sample(s))
            for span in batch.spans:
                self._spans[span.uuid].append(self._check.span(span))
            self._events.extend(batch.events)
            for uuid, why in batch.lost:
                self._lost.setdefault(uuid, (now, why))

    def mark(self) -> None:
        """Read everything now, the counters included: call it at the edges of what will be
        summarised (a measured phase), so its energy and clock-event time are exact there."""
        self.sample_now(full=True, counters=True)

    def start(self) -> None:
        """Take a first sample and start the sampler thread."""
        if self._thread is not None or self._closed:
            raise RuntimeError("a Monitor can be started once")
        self.mark()
        self._thread = threading.Thread(target=self._run, name="perfgate-telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cpu0, wall0 = time.thread_time(), time.monotonic()
        next_s = wall0
        while True:
            next_s += self._interval_s
            delay = next_s - time.monotonic()
            if delay < 0:
                # Fell behind (a slow NVML call): skip missed ticks rather than burst.
                next_s -= delay
                delay = 0
            if self._stop.wait(delay):
                break
            try:
                self.sample_now()
            except Exception as err:
                with self._lock:
                    self._events.append(Event(self._clock(), f"sampler error: {type(err).__name__}: {err}"))
            self._cpu_s = time.thread_time() - cpu0
            self._wall_s = time.monotonic() - wall0

    def stop(self) -> None:
        """Take a last sample, stop the thread and release the source; data stays available."""
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.mark()
        with self._lock:
            self._closed = True
            self._source.close()

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def sampler_cpu_pct(self) -> float | None:
        """CPU time of the sampler thread as % of one core over its lifetime so far."""
        return 100 * self._cpu_s / self._wall_s if self._wall_s > 0 else None

    # -- windows -------------------------------------------------------------------------

    def begin_window(self, name: str) -> float:
        """Open a named live window now (samples and closes an activity span); returns its start."""
        if name in self._windows:
            raise ValueError(f"telemetry window {name!r} is already open")
        self.mark()
        start_s = self._clock()
        self._windows[name] = start_s
        return start_s

    def end_window(self, name: str) -> TelemetryWindow:
        """Close a named live window and summarise it."""
        try:
            start_s = self._windows.pop(name)
        except KeyError:
            raise ValueError(f"telemetry window {name!r} was never begun") from None
        end_s = self._clock()
        self.mark()
        return self.summarize(start_s, end_s)

    def summarize(self, start_s: float, end_s: float) -> TelemetryWindow:
        """Any ``[start_s, end_s]`` (monotonic seconds) summarised from the recorded samples."""
        if end_s <= start_s:
            raise ValueError(f"telemetry window end {end_s} is not after its start {start_s}")
        with self._lock:
            near = {u: _near(v, start_s, end_s) for u, v in self._samples.items()}
            spans = {u: list(v) for u, v in self._spans.items()}
            events = list(self._events)
            # What was rejected in every sample the window reads, the neighbours its edges interpolate
            # from included: the closing mark's counters are read after end_s, and a jump seen there
            # is this window's.
            rejected = {
                u: self._check.messages(u, min(start_s, v[0].t_s), max(end_s, v[-1].t_s)) if v else []
                for u, v in near.items()
            }
            lost = {u: why for u, (t_s, why) in self._lost.items() if t_s <= end_s}
        notes = [e.message for e in events if start_s <= e.t_s <= end_s]
        gpus = []
        for ident in self._idents:
            u = ident.uuid
            window, gpu_notes = summarize_gpu(
                ident,
                near[u],
                spans[u],
                start_s,
                end_s,
                rejected=(*([lost[u]] if u in lost else []), *rejected[u]),
            )
            gpus.append(window)
            notes += gpu_notes
        return TelemetryWindow(start_s=start_s, end_s=end_s, source=self.source, gpus=tuple(gpus), notes=tuple(notes))

    def timeline(self, start_s: float, end_s: float) -> dict[str, Any]:
        """Per-GPU sample series in ``[start_s, end_s]`` as JSON-able lists (for plots)."""
        with self._lock:
            samples = {u: [s for s in v if start_s <= s.t_s <= end_s] for u, v in self._samples.items()}
            spans = {u: [s for s in v if s.t1_s >= start_s and s.t0_s <= end_s] for u, v in self._spans.items()}
        gpus = []
        for ident in self._idents:
            rows = samples[ident.uuid]
            gpus.append(
                {
                    "index": ident.index,
                    "uuid": ident.uuid,
                    "name": ident.name,
                    "hostname": ident.hostname,
                    "t_s": [s.t_s for s in rows],
                    "power_w": [s.power_instant_w if s.power_instant_w is not None else s.power_avg_w for s in rows],
                    "energy_j": [s.energy_j for s in rows],
                    "util_gpu_pct": [s.util_gpu_pct for s in rows],
                    "sm_clock_mhz": [s.sm_clock_mhz for s in rows],
                    "temperature_c": [s.temperature_c for s in rows],
                    "activity": [{"t0_s": sp.t0_s, "t1_s": sp.t1_s, **sp.values} for sp in spans[ident.uuid]],
                }
            )
        return {"source": self.source, "start_s": start_s, "end_s": end_s, "gpus": gpus}


def _near(samples: list[GpuSample], start_s: float, end_s: float) -> list[GpuSample]:
    """The samples in the window plus, each side, the neighbours its edges interpolate from:
    back and forward to the nearest full sample (energy and clock-event counters are sparse)."""
    times = [s.t_s for s in samples]
    lo = max(bisect.bisect_left(times, start_s) - 1, 0)
    while lo > 0 and samples[lo].energy_j is None:
        lo -= 1
    hi = min(bisect.bisect_right(times, end_s), len(samples) - 1)
    while hi < len(samples) - 1 and samples[hi].energy_j is None:
        hi += 1
    return samples[lo : hi + 1]


def _monitor(source: Source, spec: TelemetrySpec, clock: Callable[[], float]) -> Monitor:
    return Monitor(
        source,
        interval_s=spec.interval_s,
        activity_period_s=spec.activity_period_s,
        counter_period_s=spec.counter_period_s,
        clock=clock,
    )


def open_monitor(
    spec: TelemetrySpec,
    *,
    gpus: Sequence[int | str],
    base_url: str = "",
    nvml: Any = None,
    clock: Callable[[], float] = time.monotonic,
) -> Monitor | NotMeasured:
    """A started-ready :class:`Monitor` for ``spec``, or :class:`NotMeasured` saying why not.

    ``source = "auto"`` tries NVML (works and resolves ``gpus``), then the dcgm endpoints if any.
    Raises :class:`~perfgate.errors.TelemetryError` for a misconfiguration: a GPU NVML cannot
    find under ``source = "nvml"``, an unreachable dcgm endpoint. ``nvml`` replaces the
    ``pynvml`` module (tests); ``"{base_url}"`` in endpoints expands to ``base_url``.
    """
    if spec.source == "none":
        return NotMeasured('telemetry is off ([telemetry].source = "none")')
    reasons = []
    if spec.source in ("auto", "nvml"):
        try:
            source: Source = NvmlSource(nvml if nvml is not None else load_nvml(), gpus)
            return _monitor(source, spec, clock)
        except NvmlUnavailable as err:
            if spec.source == "nvml":
                return NotMeasured(str(err))
            reasons.append(str(err))
        except TelemetryError as err:
            if spec.source == "nvml":
                raise
            reasons.append(str(err))
    endpoints = [e.replace("{base_url}", base_url.rstrip("/")) for e in spec.dcgm_endpoints]
    if spec.source == "dcgm" or endpoints:
        return _monitor(DcgmSource(endpoints, gpus), spec, clock)
    return NotMeasured("; ".join(reasons) + "; and no [telemetry].dcgm_endpoints are configured")
