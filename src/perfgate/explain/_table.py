"""A profile reduced to a table: one row per kernel (or host operator) key, per step and per token."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from perfgate.errors import PerfgateError

Source = Literal["kernel", "cpu_op"]
TABLE_SCHEMA = 1
GAP_KEY = "(no kernel running)"
HOST_GAP_KEY = "(outside any operator)"


class ExplainError(PerfgateError):
    """A trace or a stored table that cannot be used; the message names the file and what to do."""


@dataclass(frozen=True)
class KernelRow:
    """One kernel (``cat == "kernel"``) or host operator (``cpu_op``, self time) key of a trace.

    ``name`` is the raw name that took most of the key's time; ``variant`` its library and
    tactic; ``step_share`` the fraction of the profiled step's wall time it took.
    """

    key: str
    name: str
    variant: str
    calls: int
    total_ms: float
    per_step_ms: float
    per_output_token_us: float | None
    step_share: float


@dataclass(frozen=True)
class ProfileTable:
    """The top rows of one profiled slice.

    ``step_ms``: wall time of the profiled window (first to last aggregated event) per step;
    ``busy_ms_per_step``: the time of every aggregated event per step (the rows below the top
    ones included); ``output_tokens``: tokens the client received while the slice ran (None
    when unknown); ``trace_bytes``: the size of the trace as the server wrote it; ``step_kinds``:
    the steps by kind (``DECODE``, ``EXTEND``) where the server annotates them (SGLang's
    ``step[DECODE bs=16]``), {} where it does not; ``step_tokens``: the tokens those steps
    processed, by kind (a DECODE's batch size, an EXTEND's ``toks``), where annotated;
    ``step_kind_ms``: those steps' wall time in ms, by kind (see :class:`~perfgate.explain._trace.StepMix`);
    ``untimed_events``: events of the table's source left out for a time that is no number a
    profiler measured (NaN, Infinity, negative duration, 1e308).

    One row is no kernel: :data:`GAP_KEY` (or :data:`HOST_GAP_KEY`), the step's time in which
    nothing aggregated ran: a GPU waiting for the host, or a CPU engine's Python between operators.
    """

    source: Source
    steps: int
    step_ms: float
    busy_ms_per_step: float
    output_tokens: int | None
    events: int
    trace_bytes: int
    rows: tuple[KernelRow, ...]
    step_kinds: dict[str, int] = field(default_factory=dict)
    step_tokens: dict[str, int] = field(default_factory=dict)
    step_kind_ms: dict[str, float] = field(default_factory=dict)
    untimed_events: int = 0

    def kinds_text(self) -> str:
        """``4 DECODE (16 tokens/step) + 1 EXTEND (4 tokens/step)`` ("" when the trace did not say)."""
        parts = []
        for kind, n in sorted(self.step_kinds.items(), key=lambda kv: (-kv[1], kv[0])):
            tokens = self.step_tokens.get(kind)
            parts.append(f"{n} {kind}" + (f" ({tokens / n:.3g} tokens/step)" if tokens is not None and n else ""))
        return " + ".join(parts)

    def tokens_per_step(self) -> float | None:
        """Tokens the annotated steps processed, per step; None when the trace did not say."""
        steps = sum(n for kind, n in self.step_kinds.items() if kind in self.step_tokens)
        tokens = sum(self.step_tokens.values())
        return tokens / steps if steps and tokens else None

    def kind_ms_per_token(self, kind: str) -> float | None:
        """Wall time of the ``kind`` steps per token they processed; None when the trace did not say."""
        tokens, ms = self.step_tokens.get(kind), self.step_kind_ms.get(kind)
        return ms / tokens if tokens and ms else None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": TABLE_SCHEMA, **asdict(self), "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_dict(cls, data: object, where: str) -> ProfileTable:
        """A table read back from JSON; ExplainError naming ``where`` for anything that is not one."""

        def bad(what: str) -> ExplainError:
            return ExplainError(
                f"explain table {where}: {what}; delete the file (it is re-made by the next "
                "--perf-update-baselines --perf-explain run)"
            )

        if not isinstance(data, dict):
            raise bad("not a JSON object")
        if data.get("schema") != TABLE_SCHEMA:
            raise bad(f"schema {data.get('schema')!r}, expected {TABLE_SCHEMA}")
        try:
            rows = tuple(_row(r) for r in data["rows"])
            table = cls(
                source=_choice(data["source"]),
                steps=_count(data["steps"], low=1),
                step_ms=_number(data["step_ms"]),
                busy_ms_per_step=_number(data["busy_ms_per_step"]),
                output_tokens=None if data["output_tokens"] is None else _count(data["output_tokens"], low=0),
                events=_count(data["events"], low=0),
                trace_bytes=_count(data["trace_bytes"], low=0),
                rows=rows,
                step_kinds={_text(k): _count(v, low=0) for k, v in dict(data["step_kinds"]).items()},
                # Tables recorded before step_tokens (or step_kind_ms) existed have none.
                step_tokens={_text(k): _count(v, low=0) for k, v in dict(data.get("step_tokens", {})).items()},
                step_kind_ms={_text(k): _number(v) for k, v in dict(data.get("step_kind_ms", {})).items()},
                untimed_events=_count(data.get("untimed_events", 0), low=0),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"malformed ({type(e).__name__}: {e})") from None
        return table


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a finite number >= 0, got {value!r}")
    return float(value)


def _count(value: object, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"expected an integer >= {low}, got {value!r}")
    return value


def _choice(value: object) -> Source:
    if value == "kernel":
        return "kernel"
    if value == "cpu_op":
        return "cpu_op"
    raise ValueError(f"expected 'kernel' or 'cpu_op', got {value!r}")


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _row(data: Any) -> KernelRow:
    per_token = data["per_output_token_us"]
    return KernelRow(
        key=_text(data["key"]),
        name=_text(data["name"]),
        variant=_text(data["variant"]),
        calls=_count(data["calls"], low=0),
        total_ms=_number(data["total_ms"]),
        per_step_ms=_number(data["per_step_ms"]),
        per_output_token_us=None if per_token is None else _number(per_token),
        step_share=_number(data["step_share"]),
    )
