"""Readings that cannot be true, rejected before any window is built from them.

A power reading past what the GPU can draw, NaN, infinite or negative values, an energy counter
that jumps: a broken exporter, or something in front of it, says so, and a number built from it
would pass any floor and be stored as the baseline. Each kind is named once per GPU (the first
reading of that kind, the value in it) and the reading is not used; a window without a reading
left is "not measured" with that message as its reason.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from perfgate.telemetry._model import SAMPLE_FIELDS, ActivitySpan, GpuIdentity, GpuSample

PHYSICAL_MAX_W = 2_000.0
"""Most a single GPU board draws, when its enforced limit is unknown: B200/B300-class boards are
limited to 1,000-1,400 W; twice the largest leaves room for what comes next."""

LIMIT_HEADROOM = 1.5
"""Power capping holds a GPU's average at its enforced limit, but instant readings overshoot it for
milliseconds at load steps (p95 747 W on a 700 W H200 in docs/benchmarks.md): a reading past 1.5x
the limit is not a GPU's."""

COUNTER_SLACK_S = 30.0
"""An energy-counter step may hold energy from before the previous reading's timestamp: samples
are stamped when perfgate read them, and dcgm-exporter collects every 30 s by default. A step is a
jump only past what the bound allows over its interval plus this."""

_POWER_FIELDS = frozenset({"power_instant_w", "power_avg_w"})


@dataclass(frozen=True)
class PowerBound:
    """The most power a reading of one GPU can show (W), and how that was decided, for messages."""

    max_w: float
    text: str


def plausible_limit_w(value: float | None) -> float | None:
    """``value`` as an enforced power limit, or None where no GPU has such a limit (NaN, <= 0,
    past the physical bound): a lying limit must not lift the bound it sets."""
    return value if value is not None and math.isfinite(value) and 0 < value <= PHYSICAL_MAX_W else None


def power_bound(limit_w: float | None) -> PowerBound:
    """The bound on one GPU's power readings: ``LIMIT_HEADROOM`` x its enforced limit when known."""
    limit = plausible_limit_w(limit_w)
    if limit is None:
        return PowerBound(PHYSICAL_MAX_W, f"{PHYSICAL_MAX_W:,.0f} W (no GPU draws more; its enforced limit is unknown)")
    return PowerBound(
        limit * LIMIT_HEADROOM,
        f"{limit * LIMIT_HEADROOM:,.0f} W ({LIMIT_HEADROOM:g} x its {limit:,.0f} W enforced limit)",
    )


def counter_jump(energy0_j: float, energy1_j: float, dt_s: float, bound: PowerBound) -> bool:
    """Whether an energy-counter step holds more than the GPU can draw over ``dt_s`` (and the slack)."""
    return energy1_j - energy0_j > bound.max_w * (dt_s + COUNTER_SLACK_S)


class ReadingCheck:
    """Rejects the readings of one monitor's GPUs that cannot be true, as they arrive.

    ``origin(uuid)`` names where a GPU's readings come from (an exporter's URL, NVML). Keeps, per
    GPU, when each rejection happened and one message per (field, kind), the first reading of
    that kind in it: :meth:`messages` gives those of a window. Energy-counter jumps are named
    here, where the source is known; the window math leaves the same steps out
    (``_window.energy_counter``, with the same :func:`counter_jump`).
    """

    def __init__(self, idents: Iterable[GpuIdentity], origin: Callable[[str], str]) -> None:
        self._idents = {i.uuid: i for i in idents}
        self._bounds = {i.uuid: power_bound(i.power_limit_w) for i in self._idents.values()}
        self._origin = origin
        self._first: dict[tuple[str, str, str], str] = {}
        self._rejected: dict[str, list[tuple[float, str]]] = {u: [] for u in self._idents}
        self._last_energy: dict[str, tuple[float, float]] = {}

    def sample(self, s: GpuSample) -> GpuSample:
        """``s`` with every impossible value set to None (not measured)."""
        dropped = self._drop(s.t_s, s.uuid, ((name, getattr(s, name)) for name in SAMPLE_FIELDS))
        energy = None if "energy_j" in dropped else s.energy_j
        if energy is not None:
            last = self._last_energy.get(s.uuid)
            self._last_energy[s.uuid] = (s.t_s, energy)
            bound = self._bounds[s.uuid]
            if last is not None and counter_jump(last[1], energy, s.t_s - last[0], bound):
                self._reject(
                    s.t_s,
                    s.uuid,
                    ("energy_j", "jump"),
                    f"energy counter rose {energy - last[1]:,.6g} J in {s.t_s - last[0]:.2f} s, more than "
                    f"{bound.text} draws then (allowing {COUNTER_SLACK_S:g} s for the exporter's collection "
                    "period); such steps are not used, the sampled power fills them",
                )
        return dataclasses.replace(s, **dropped) if dropped else s

    def span(self, span: ActivitySpan) -> ActivitySpan:
        """``span`` without its non-finite or negative averages."""
        bad = self._drop(span.t1_s, span.uuid, span.values.items())
        return dataclasses.replace(span, values={**span.values, **bad}) if bad else span

    def _drop(self, t_s: float, uuid: str, values: Iterable[tuple[str, float | None]]) -> dict[str, Any]:
        """``{name: None}`` for each impossible value of ``values`` (each rejected, with its message).
        Every quantity read is non-negative: a negative one, like a non-finite one, is no reading."""
        dropped: dict[str, Any] = {}
        for name, value in values:
            if value is None:
                continue
            wrong = self._impossible(uuid, name, value)
            if wrong is not None:
                dropped[name] = None
                self._reject(t_s, uuid, (name, wrong[0]), _value_text(name, wrong[1], value))
        return dropped

    def messages(self, uuid: str, start_s: float, end_s: float) -> list[str]:
        """One message per kind of reading of ``uuid`` rejected in ``[start_s, end_s]``."""
        return list(dict.fromkeys(m for t, m in self._rejected.get(uuid, ()) if start_s <= t <= end_s))

    def _impossible(self, uuid: str, name: str, value: float) -> tuple[str, str] | None:
        """(kind, what is wrong) with ``value``; None when nothing is."""
        if not math.isfinite(value):
            return "not finite", "is not a finite number"
        if value < 0:
            return "negative", "is negative"
        bound = self._bounds[uuid]
        if name in _POWER_FIELDS and value > bound.max_w:
            return "past", f"is past {bound.text}"
        return None

    def _reject(self, t_s: float, uuid: str, kind: tuple[str, str], what: str) -> None:
        """Record one rejected reading of ``kind`` (field, what is wrong); the message of the first
        of its kind stands for all, so a GPU's broken field is named once, however often it repeats."""
        key = (uuid, kind[0], kind[1])
        message = self._first.get(key)
        if message is None:
            message = self._first[key] = (
                f"{self._idents[uuid].label} from {self._origin(uuid)}: {what} "
                "(a broken exporter, or something in front of it: check it)"
            )
        self._rejected[uuid].append((t_s, message))


def _value_text(name: str, what: str, value: float) -> str:
    unit = " W" if name in _POWER_FIELDS else ""
    shown = f"{value:,.1f}{unit}" if math.isfinite(value) else str(value)
    return f"{name} {shown} {what}; such readings are not used"
