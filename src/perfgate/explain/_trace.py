"""Read a torch profiler Chrome trace (``.json`` or ``.json.gz``) and reduce it to a :class:`ProfileTable`.

Traces are hostile input: the server wrote them, into a folder perfgate owns, but a path may be a
link out of it, a FIFO, a gzip bomb, truncated or not JSON at all. Each of those is one
:class:`ExplainError` naming the file. The whole trace is parsed in memory (``json.loads``): a
bounded slice of 20 forward steps is a few MB, and the size limit keeps it so (docs/explain.md
has the measurement that made a streaming parser unnecessary).
"""

from __future__ import annotations

import math
import os
import re
import stat
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate import _json
from perfgate._files import NotAFileError, read_bytes
from perfgate._json import JSONInputError, JSONSyntaxError
from perfgate.explain._names import normalise, variant
from perfgate.explain._table import GAP_KEY, HOST_GAP_KEY, ExplainError, KernelRow, ProfileTable, Source

DEFAULT_MAX_TRACE_BYTES = 256 * 1024 * 1024
# A time (ts or dur) past this many microseconds, 3,000 years, is no time a profiler measured:
# such events are dropped, so that the sums of millions of them stay finite numbers.
MAX_TIME_US = 1e17
DEFAULT_TOP_N = 50
_GZIP_MAGIC = b"\x1f\x8b"


def read_trace(path: Path, *, root: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> tuple[list[Any], int]:
    """The trace events of ``path`` (which must lie inside ``root``) and the file's size in bytes.

    ``max_bytes`` bounds both the file and its decompressed text.
    """
    where = f"trace {path}"
    resolved = Path(os.path.realpath(path))
    if not resolved.is_relative_to(Path(os.path.realpath(root))):
        raise ExplainError(f"{where}: leads to {resolved}, outside the profile folder {root}; not read")
    try:
        size = os.stat(resolved).st_size
        if size > max_bytes:
            raise ExplainError(
                f"{where}: {size / 1e6:.1f} MB, more than [explain] max_trace_mb "
                f"({max_bytes / 1e6:.0f} MB); profile fewer steps (num_steps) or raise the limit"
            )
        data = read_bytes(resolved)
    except NotAFileError as e:
        raise ExplainError(f"{where}: {e}; not read") from None
    except OSError as e:
        raise ExplainError(f"{where}: cannot be read ({e.strerror or e})") from None
    if data.startswith(_GZIP_MAGIC):
        data = _gunzip(data, max_bytes, where)
    try:
        doc = _json.loads(data, strict=False)
    except JSONSyntaxError as e:
        raise ExplainError(f"{where}: {e}; the server may have been stopped while writing it") from None
    except JSONInputError as e:
        raise ExplainError(f"{where}: {e}; not a trace of the torch profiler") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ExplainError(f"{where}: no traceEvents list; not a Chrome trace of the torch profiler")
    return events, size


def still_written(path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> bool:
    """Whether ``path`` holds the start of a trace that has not ended: a gzip stream without its
    end, or JSON text that does not parse yet. A writer descheduled mid-file leaves its size still
    for seconds on a loaded 2-core host, so a size that held is not enough. Anything else (a link,
    FIFO, unreadable or oversized file, or no trace at all) is not being written: the reader
    refuses it by name."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return False
        data = read_bytes(path)
    except OSError:
        return False
    if data.startswith(_GZIP_MAGIC):
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            # Bounded: what is inflated is dropped, and a stream past max_bytes is the reader's to refuse.
            inflated = len(inflater.decompress(data, max_bytes + 1))
        except zlib.error:
            return False
        return inflated <= max_bytes and not inflater.eof
    if data.lstrip()[:1] not in (b"{", b"["):
        return False
    try:
        _json.loads(data, strict=False)
    except JSONSyntaxError:
        return True
    except JSONInputError:
        return False
    return False


def _gunzip(data: bytes, max_bytes: int, where: str) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, max_bytes + 1)
    except zlib.error as e:
        raise ExplainError(f"{where}: not a readable gzip file ({e})") from None
    if len(out) > max_bytes:
        raise ExplainError(
            f"{where}: decompresses to more than [explain] max_trace_mb ({max_bytes / 1e6:.0f} MB); "
            "profile fewer steps (num_steps) or raise the limit"
        )
    if not inflater.eof:
        raise ExplainError(f"{where}: the gzip stream is truncated; the server may have been stopped while writing it")
    return out


@dataclass(frozen=True)
class _Event:
    name: str
    ts_us: float
    dur_us: float
    thread: tuple[str, str]


def _events_of(events: Iterable[Any], category: str) -> tuple[list[_Event], int]:
    """Complete events (``ph == "X"``) of ``category`` with a name and times (see :func:`_time`,
    a duration not negative), and how many of the category's events had a name but no such times."""
    out = []
    untimed = 0
    for e in events:
        if not isinstance(e, Mapping) or e.get("cat") != category or e.get("ph", "X") != "X":
            continue
        name, ts, dur = e.get("name"), _time(e.get("ts")), _time(e.get("dur"))
        if not isinstance(name, str):
            continue
        if ts is None or dur is None or dur < 0:
            untimed += 1
            continue
        out.append(_Event(name, ts, dur, (str(e.get("pid")), str(e.get("tid")))))
    return out, untimed


def _time(value: object) -> float | None:
    """``value`` as a float when it is a JSON number a profiler can have measured (finite, at most
    MAX_TIME_US either side of 0), else None: NaN, Infinity or 1e308 would make the table's sums
    infinite, and NaN or Infinity in the results JSON and the stored reference profile."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_TIME_US:
        return float(value)
    return None


def _self_times(events: Sequence[_Event]) -> list[float]:
    """Each host operator's own time: its duration less that of the operators nested in it
    (aten::linear holds aten::addmm; counting both would count the GEMM twice)."""
    own = [e.dur_us for e in events]
    by_thread: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_thread[e.thread].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (events[i].ts_us, -events[i].dur_us))
        stack: list[int] = []
        for i in indices:
            start = events[i].ts_us
            while stack and events[stack[-1]].ts_us + events[stack[-1]].dur_us <= start:
                stack.pop()
            if stack:
                parent = stack[-1]
                own[parent] = max(0.0, own[parent] - events[i].dur_us)
            stack.append(i)
    return own


def reduce_trace(
    events: Sequence[Any], *, steps: int, output_tokens: int | None, trace_bytes: int, top_n: int = DEFAULT_TOP_N
) -> ProfileTable:
    """Device kernels by key, or host operators (self time) when the trace holds no kernel.

    ``steps``: forward steps the slice profiled (what was asked of the server); ``output_tokens``:
    tokens delivered while it ran. ExplainError when the trace holds neither.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    source: Source = "kernel"
    found, untimed = _events_of(events, "kernel")
    durations = [e.dur_us for e in found]
    if not found:
        source = "cpu_op"
        found, untimed = _events_of(events, "cpu_op")
        durations = _self_times(found)
    if not found:
        raise ExplainError(
            f"the trace's {len(events)} events hold no device kernel and no host operator (cat kernel or cpu_op): "
            "the profiled steps ran nothing the profiler recorded"
        )
    window_end_us = max(e.ts_us + e.dur_us for e in found)
    mix = step_kinds(events, window_end_us=window_end_us)
    # SGLang and vLLM annotate every profiled step: what it profiled beats what it was asked.
    steps = sum(mix.kinds.values()) or steps
    span_us = window_end_us - min(e.ts_us for e in found)
    step_ms = span_us / 1e3 / steps
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    by_name: dict[tuple[str, str], float] = defaultdict(float)
    for e, dur in zip(found, durations, strict=True):
        key = normalise(e.name)
        totals[key] += dur
        calls[key] += 1
        by_name[key, e.name] += dur
    names: dict[str, tuple[float, str]] = {}
    for (key, name), dur in by_name.items():
        if key not in names or (dur, name) > names[key]:
            names[key] = (dur, name)
    gap_key = GAP_KEY if source == "kernel" else HOST_GAP_KEY
    # Host operators of several threads can overlap: their sum may exceed the span.
    totals[gap_key] = max(0.0, span_us - sum(durations))
    calls[gap_key] = 0
    names[gap_key] = (0.0, gap_key)
    ranked = sorted(totals, key=lambda k: (-totals[k], k))[:top_n]
    rows = []
    for key in ranked:
        total_ms = totals[key] / 1e3
        per_step = total_ms / steps
        name = names[key][1]
        rows.append(
            KernelRow(
                key=key,
                name=name,
                variant=variant(name),
                calls=calls[key],
                total_ms=total_ms,
                per_step_ms=per_step,
                per_output_token_us=total_ms * 1e3 / output_tokens if output_tokens else None,
                step_share=per_step / step_ms if step_ms > 0 else 0.0,
            )
        )
    return ProfileTable(
        source=source,
        steps=steps,
        step_ms=step_ms,
        busy_ms_per_step=sum(durations) / 1e3 / steps,
        output_tokens=output_tokens,
        events=len(events),
        trace_bytes=trace_bytes,
        rows=tuple(rows),
        step_kinds=mix.kinds,
        step_tokens=mix.tokens,
        step_kind_ms=mix.ms,
        untimed_events=untimed,
    )


# vLLM's worker annotates each step with the requests and tokens it ran in prefill (context)
# and decode (generation): ``execute_context_1(60)_generation_63(63)``; its detailed form puts the
# scheduled total first and roofline figures in the brackets: ``execute_123_context_1(sq60sk60...)``.
_VLLM_STEP = re.compile(r"execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)[^)]*\)")


@dataclass(frozen=True)
class StepMix:
    """The profiled steps as the server annotated them, by kind: ``kinds`` how many, ``tokens``
    the tokens they processed (kinds whose annotations carry counts), ``ms`` their wall time.

    A step's wall time runs from its annotation's start to the next step's start on the same
    thread: the whole loop, the scheduler's Python between steps included, as ``step_ms`` counts
    it; on a GPU the host waits for each step's results, so that interval is device-paced where
    the device is the bottleneck. The last step of a thread ends at the later of its annotation's
    end and the window's last event."""

    kinds: dict[str, int]
    tokens: dict[str, int]
    ms: dict[str, float]


def step_kinds(events: Sequence[Any], *, window_end_us: float = -math.inf) -> StepMix:
    """Steps by kind, the tokens they processed and their wall time by kind, from the server's
    step annotations: SGLang's ``step[DECODE bs=16]`` and ``step[EXTEND bs=2 toks=8]`` (a DECODE
    processes ``bs`` tokens, an EXTEND ``toks``), vLLM's ``execute_context_N(T)_generation_M(G)``
    (DECODE with no prefill request, PREFILL with no decode one, else MIXED; T + G tokens). At most
    a few kinds are real. ``window_end_us``: where the profiled window ends (see :class:`StepMix`)."""
    kinds: dict[str, int] = defaultdict(int)
    tokens: dict[str, int] = defaultdict(int)
    # (start, end, kind) of each step, by the thread that ran it.
    tracks: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
    untimed: set[str] = set()
    for e in events:
        if not isinstance(e, Mapping) or e.get("cat") != "user_annotation":
            continue
        name = e.get("name")
        if not isinstance(name, str):
            continue
        count: int | None
        if name.startswith("step[") and name.endswith("]"):
            kind, *fields = name[5:-1].split(" ")
            counts = dict(f.split("=", 1) for f in fields if "=" in f)
            text = counts.get("toks", counts.get("bs", ""))
            # isdigit() alone takes '²', which int() refuses: a hostile trace is not a traceback.
            count = int(text) if text.isascii() and text.isdigit() else None
        elif (m := _VLLM_STEP.fullmatch(name)) is not None:
            prefills, prefill_tokens, decodes, decode_tokens = map(int, m.groups())
            kind = "MIXED" if prefills and decodes else "PREFILL" if prefills else "DECODE"
            count = prefill_tokens + decode_tokens
        else:
            continue
        kind = kind[:32]
        if kind and (kind in kinds or len(kinds) < 16):
            kinds[kind] += 1
            if count is not None:
                tokens[kind] += count
            ts, dur = _time(e.get("ts")), _time(e.get("dur"))
            if ts is None:
                untimed.add(kind)
            else:
                tracks[str(e.get("pid")), str(e.get("tid"))].append((ts, ts + max(dur or 0.0, 0.0), kind))
    ms: dict[str, float] = defaultdict(float)
    for steps in tracks.values():
        steps.sort()
        for (start, end, kind), nxt in zip(steps, [*steps[1:], None]):
            stop = nxt[0] if nxt is not None else max(end, window_end_us)
            ms[kind] += max(0.0, stop - start) / 1e3
    # A kind with a step of unknown time has no time: a part of its steps is not their time.
    return StepMix(dict(kinds), dict(tokens), {k: v for k, v in ms.items() if k not in untimed})
