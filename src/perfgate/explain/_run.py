"""One explain slice: an extra repeat of a workload during which the server profiles a few steps.

The slice is a repeat of its own, run after the measured ones, and its numbers go nowhere near
the verdict: that is simpler to prove than cutting a profiled window out of a measured repeat.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from perfgate import _json
from perfgate._files import WriteFailed, publish_with, read_named
from perfgate._json import JSONInputError
from perfgate.explain._capture import Capture, capture_profile
from perfgate.explain._diff import ExplainDiff, diff_tables
from perfgate.explain._table import ExplainError, ProfileTable
from perfgate.explain._trace import read_trace, reduce_trace, step_kinds
from perfgate.load import LoadRun, Progress
from perfgate.profile import ExplainSpec

EXCLUDED = "profiled in an extra repeat of its own, after the measured ones; its numbers are in no gated metric"
# The extra repeat's load is steady once this share of its measured requests completed.
_TRIGGER_SHARE = 0.1


@dataclass
class ExplainResult:
    """The explain slice of one workload: its table, the reference it was compared with, the diff.

    ``note``: why something is missing (no endpoint, no trace, an unreadable file), "" when all
    is there; ``capture_s``: from ``/start_profile`` to settled trace files; ``reduce_s``: reading
    and reducing them; ``trace_path``: the raw trace kept (gzip) under the run's folder.
    """

    excluded: str = EXCLUDED
    note: str = ""
    table: ProfileTable | None = None
    reference: ProfileTable | None = None
    reference_path: str = ""
    diff: ExplainDiff | None = None
    trace_path: str = ""
    capture_s: float | None = None
    reduce_s: float | None = None
    notes: list[str] = field(default_factory=list)
    # The extra repeat's own numbers: what a profiled repeat measures, to compare with the gated ones.
    slice_metrics: dict[str, float] = field(default_factory=dict)

    def lines(self, top: int = 3) -> list[str]:
        """What a failure message and the summary say: the diff's top rows, or why there is none."""
        if self.diff is not None:
            return [*self.diff.lines(top), *(f"explain: {n}" for n in self.notes)]
        lines = [f"explain: {self.note}"] if self.note else []
        if self.table is not None:
            t = self.table
            lines.append(f"explain: profiled {t.steps} steps, {t.step_ms:.3g} ms/step; top {t.source} rows:")
            lines += [
                f"  {r.key} {r.per_step_ms:.3g} ms/step, {r.step_share * 100:.0f} % of the step" for r in t.rows[:top]
            ]
        return lines + [f"explain: {n}" for n in self.notes]

    def status(self) -> str:
        """One line for the run's summary: what the slice gave, or why it gave nothing; a recording
        learns here, not at the next gate, that no reference profile was stored."""
        if self.note:
            said = self.note
        elif self.diff is not None:
            said = f"compared with the reference profile {self.reference_path}"
        elif self.table is not None:
            steps = self.table.steps
            said = f"profiled {steps} step{'' if steps == 1 else 's'} ({self.table.source})"
        else:
            said = "nothing profiled"
        return "; ".join([said, *self.notes])

    def to_dict(self) -> dict[str, Any]:
        diff = None
        if self.diff is not None:
            diff = {
                **{k: v for k, v in asdict(self.diff).items() if k != "rows"},
                "step_change_ratio": self.diff.step_change_ratio,
                "rows": [
                    {
                        **asdict(r),
                        "change_ms_per_step": r.change_ms_per_step,
                        "change_ratio": r.change_ratio,
                        "change_step_share": r.change_step_share,
                    }
                    for r in self.diff.rows
                ],
            }
        return {
            "excluded": self.excluded,
            "note": self.note,
            "notes": self.notes,
            "table": self.table.to_dict() if self.table else None,
            "reference": self.reference.to_dict() if self.reference else None,
            "reference_path": self.reference_path,
            "diff": diff,
            "trace_path": self.trace_path,
            "capture_s": self.capture_s,
            "reduce_s": self.reduce_s,
            "slice_metrics": self.slice_metrics,
        }


RepeatRunner = Callable[[Callable[[Progress], None]], LoadRun]


def run_slice(
    run_repeat: RepeatRunner,
    *,
    base_url: str,
    spec: ExplainSpec,
    folder: Path,
    activities: Sequence[str],
    headers: Mapping[str, str] | None = None,
) -> ExplainResult:
    """Run one extra repeat (``run_repeat(on_progress)``) and profile ``spec.num_steps`` steps of it
    once its load holds; reduce the trace into a table. Never raises for what the server does."""
    captured: list[Capture] = []
    failed: list[str] = []

    def capture() -> None:
        try:
            captured.append(
                capture_profile(
                    base_url,
                    folder,
                    num_steps=spec.num_steps,
                    activities=activities,
                    timeout_s=spec.timeout_s,
                    headers=headers,
                    server_dir=Path(spec.server_trace_dir).absolute() if spec.server_trace_dir else None,
                )
            )
        except OSError as e:
            failed.append(f"the profile folder {folder} cannot be made ({e.strerror or e})")

    worker = threading.Thread(target=capture, name="perfgate-explain", daemon=True)

    def on_progress(p: Progress) -> None:
        if not p.warmup and not worker.is_alive() and not worker.ident and p.done >= max(1, _TRIGGER_SHARE * p.total):
            worker.start()

    load = run_repeat(on_progress)
    # The load's own end: the repeat goes on after it (the load's answers are scored), with
    # requests that are not the workload's.
    load_ended_s = load.end_s
    if worker.ident is None:
        return ExplainResult(note="the extra repeat finished before its load held; nothing was profiled")
    worker.join(spec.timeout_s * 1.5 + 15)
    if failed or not captured:
        return ExplainResult(note=failed[0] if failed else f"the capture did not end within {spec.timeout_s:g} s")
    cap = captured[0]
    result = ExplainResult(capture_s=cap.capture_s)
    if load_ended_s < cap.ended_s:
        result.notes.append(
            f"the extra repeat's load ended {cap.ended_s - load_ended_s:.1f} s before the capture did: the server "
            f"may have profiled fewer than {spec.num_steps} steps, or none; give the workload more requests "
            "(the capture starts once a tenth of them completed) or ask for fewer [explain] num_steps"
        )
    if not cap.traces:
        result.note = cap.note
        return result
    started = time.monotonic()
    max_bytes = int(spec.max_trace_mb * 1e6)
    chosen = cap.traces[0]
    try:
        chosen, events, size = _stepped_trace(cap.traces, folder, max_bytes)
        result.table = reduce_trace(
            events,
            steps=spec.num_steps,
            output_tokens=tokens_between(load, cap.started_s, cap.ended_s),
            trace_bytes=size,
            top_n=spec.top_n,
        )
    except ExplainError as e:
        result.note = str(e)
    if result.table is not None and result.table.untimed_events:
        result.notes.append(
            f"{result.table.untimed_events} {result.table.source} events of {chosen.name} left out: their ts or dur "
            "is NaN, infinite, a negative duration or beyond any measured time"
        )
    if len(cap.traces) > 1:
        result.notes.append(f"{len(cap.traces)} trace files (one per rank or process); {chosen.name} is reduced")
    result.reduce_s = time.monotonic() - started
    result.trace_path, keep_note = keep_trace(chosen, max_bytes)
    if keep_note:
        result.notes.append(keep_note)
    return result


def _stepped_trace(traces: Sequence[Path], folder: Path, max_bytes: int) -> tuple[Path, list[Any], int]:
    """The first trace whose events annotate forward steps (a server's engine, not its HTTP front
    end, which vLLM profiles into a file of its own), else the first trace."""
    first: tuple[Path, list[Any], int] | None = None
    for path in traces:
        events, size = read_trace(path, root=folder, max_bytes=max_bytes)
        if step_kinds(events).kinds:
            return path, events, size
        first = first or (path, events, size)
    assert first is not None
    return first


def tokens_between(load: LoadRun, t0_s: float, t1_s: float) -> int:
    """Output tokens the client received between two ``time.monotonic()`` readings."""
    n = 0
    for r in load.records:
        for offset, tokens in zip(r.chunk_offsets_s, r.chunk_tokens, strict=False):
            if t0_s <= r.start_s + offset <= t1_s:
                n += tokens
    return n


def keep_trace(path: Path, max_bytes: int) -> tuple[str, str]:
    """The trace kept gzip-compressed beside where the server wrote it (the uncompressed file removed),
    or removed when larger than ``max_bytes``; returns its path ("" when not kept) and a note."""
    try:
        size = path.lstat().st_size
        if size > max_bytes:
            path.unlink()
            return "", f"the trace ({size / 1e6:.1f} MB) was larger than [explain] max_trace_mb and was not kept"
        if path.name.endswith(".gz"):
            return str(path), ""
        data = path.read_bytes()
        kept = path.with_name(path.name + ".gz")
        publish_with(kept, lambda f: _write(f, gzip.compress(data, compresslevel=6)))
        path.unlink()
        return str(kept), ""
    except (OSError, WriteFailed) as e:
        return "", f"the trace {path} was not kept ({e})"


def _write(f: IO[bytes], data: bytes) -> None:
    f.write(data)


TABLE_KIND = "explain"


def read_table(path: Path) -> ProfileTable | None:
    """A stored reference table, None when there is none; ExplainError for a file that is not one."""
    again = "delete it or record it again"
    try:
        text = read_named(path, "explain table", ExplainError, not_a_file=again, unreadable=again)
    except FileNotFoundError:
        return None
    try:
        data = _json.loads(text)
    except JSONInputError as e:
        raise ExplainError(f"explain table {path}: {e}; {again}") from None
    return ProfileTable.from_dict(data, str(path))


def compare(result: ExplainResult, reference: ProfileTable | None, reference_path: str) -> None:
    """Fill ``result``'s reference and diff (candidate ``result.table`` against ``reference``)."""
    result.reference, result.reference_path = reference, reference_path
    if reference is None:
        if result.table is not None and not result.note:
            result.note = "no reference profile for this fingerprint yet (record one with --perf-update-baselines)"
        return
    if result.table is not None:
        result.diff = diff_tables(reference, result.table)
