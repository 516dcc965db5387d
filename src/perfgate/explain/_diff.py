"""Two profile tables compared: which keys' time per step moved, which appeared and vanished."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfgate.explain._table import KernelRow, ProfileTable

RowStatus = Literal["changed", "new", "vanished"]
RankedBy = Literal["ms_per_step", "step_share"]
# A step whose wall time moved less than this did not get slower on the server's side.
STEP_MOVED = 0.05
# Lines of the diff in a failure message and the Markdown summary.
TOP_LINES = 3
# Step mixes this far apart (total variation distance between the kinds' shares of the steps) did
# different work per step: 4 DECODE + 1 EXTEND against 5 EXTEND is 0.8, 10 DECODE against 9 + 1 is 0.1.
MIX_CHANGED = 0.25
# ... and so did steps whose tokens per step moved by this factor either way (a DECODE of 256
# sequences against one of 32: the batch size, not a kernel, moved the step).
TOKENS_CHANGED = 1.5


@dataclass(frozen=True)
class RowChange:
    """One key, before (the baseline, or A) and after (the candidate, or B); ms per step."""

    key: str
    status: RowStatus
    name: str
    variant_before: str
    variant_after: str
    before_ms_per_step: float
    after_ms_per_step: float
    after_step_share: float
    before_step_share: float = 0.0

    @property
    def change_ms_per_step(self) -> float:
        return self.after_ms_per_step - self.before_ms_per_step

    @property
    def change_step_share(self) -> float:
        """The change in the fraction of the step this key took (0.25 -> 0.6: +0.35)."""
        return self.after_step_share - self.before_step_share

    @property
    def change_ratio(self) -> float | None:
        """Relative change; None for a new key (nothing to be relative to)."""
        return self.change_ms_per_step / self.before_ms_per_step if self.before_ms_per_step > 0 else None

    def line(self, shares: bool = False) -> str:
        """``explain: key (cutlass, tactic 12 -> 3) 0.41 -> 1.63 ms/step (+298 %), 62 % of the step``;
        with ``shares``, the share before too (``20 -> 62 % of the step``)."""
        if self.status != "changed" or self.variant_before == self.variant_after:
            variant = self.variant_after or self.variant_before
        elif self.variant_before and self.variant_after:
            variant = _merge_variants(self.variant_before, self.variant_after)
        else:
            variant = f"{self.variant_before or '-'} -> {self.variant_after or '-'}"
        label = f"{self.key} ({variant})" if variant else self.key
        if self.status == "new":
            share = _share(self.after_step_share)
            return f"explain: {label} new, {self.after_ms_per_step:.3g} ms/step, {share} of the step"
        if self.status == "vanished":
            return f"explain: {label} vanished (was {self.before_ms_per_step:.3g} ms/step)"
        ratio = self.change_ratio
        pct = f" ({_signed(ratio)})" if ratio is not None else ""
        share = _share(self.after_step_share)
        if shares:
            share = f"{self.before_step_share * 100:.0f} -> {share}"
        times = f"{self.before_ms_per_step:.3g} -> {self.after_ms_per_step:.3g} ms/step{pct}"
        return f"explain: {label} {times}, {share} of the step"


def _signed(ratio: float) -> str:
    return f"{ratio * 100:+.0f} %"


def _share(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def _merge_variants(before: str, after: str) -> str:
    """``cutlass, tactic 12`` and ``cutlass, tactic 3`` -> ``cutlass, tactic 12 -> 3``."""
    b, a = before.split(", "), after.split(", ")
    if len(b) == len(a) and b[:-1] == a[:-1] and b[-1].split(" ")[0] == a[-1].split(" ")[0]:
        return ", ".join([*a[:-1], f"{b[-1]} -> {a[-1].split(' ', 1)[-1]}"])
    return f"{before} -> {after}"


@dataclass(frozen=True)
class ExplainDiff:
    """``after`` against ``before``, ranked by the absolute change in time per step; by the change
    in share of the step when the step mix changed (``ranked_by``; see :func:`mix_distance`).

    ``explains`` is False when the step's wall time moved by less than :data:`STEP_MOVED` (with a
    changed mix, the step time per token processed, where the server annotated its steps' tokens):
    then whatever the gate saw happened outside the profiled step, and ``note`` says so.
    """

    before_step_ms: float
    after_step_ms: float
    before_source: str
    after_source: str
    rows: tuple[RowChange, ...]
    explains: bool
    note: str
    before_kinds: str = ""
    after_kinds: str = ""
    ranked_by: RankedBy = "ms_per_step"
    # Step time per token the steps processed, where the server annotated its steps' tokens: of
    # the steps of ``per_token_kind`` where both traces timed that kind, else of every step ("").
    before_ms_per_token: float | None = None
    after_ms_per_token: float | None = None
    per_token_kind: str = ""

    @property
    def step_change_ratio(self) -> float:
        return self.after_step_ms / self.before_step_ms - 1 if self.before_step_ms > 0 else 0.0

    def lines(self, top: int = TOP_LINES) -> list[str]:
        """The step line, the top ``top`` rows (and the note when the profile cannot explain)."""
        head = (
            f"explain: step {self.before_step_ms:.3g} -> {self.after_step_ms:.3g} ms "
            f"({_signed(self.step_change_ratio)}) over the profiled steps"
        )
        if self.before_kinds or self.after_kinds:
            head += f"; steps {self.before_kinds or '?'} -> {self.after_kinds or '?'}"
        b, a = self.before_ms_per_token, self.after_ms_per_token
        if b and a:
            steps = f" {self.per_token_kind} steps" if self.per_token_kind else ""
            head += f";{steps} {b:.3g} -> {a:.3g} ms per token processed ({_signed(a / b - 1)})"
        shares = self.ranked_by == "step_share"
        out = [head, *(r.line(shares) for r in self.rows[:top])]
        return [*out, f"explain: {self.note}"] if self.note else out


def mix_distance(before: dict[str, int], after: dict[str, int]) -> float | None:
    """Total variation distance between two step mixes (0: the same shares of each kind, 1: no kind
    in common); None when either trace did not say which steps it profiled."""
    n_before, n_after = sum(before.values()), sum(after.values())
    if not n_before or not n_after:
        return None
    return 0.5 * sum(abs(before.get(k, 0) / n_before - after.get(k, 0) / n_after) for k in before.keys() | after.keys())


def per_token(before: ProfileTable, after: ProfileTable) -> tuple[str, float | None, float | None]:
    """The kind of step compared per token, and each slice's ms per token processed.

    The kind is the one both slices timed that has the most steps in the smaller of the two: its
    own steps' time per token, which no other kind's tokens dilute (one 256-token PREFILL among
    4-token DECODEs makes the window's time per token look cheap while each DECODE token took 8
    times as long). With no such kind ("") the whole window's time per token.
    """
    timed = [
        k for k in before.step_kinds.keys() & after.step_kinds.keys()
        if before.kind_ms_per_token(k) and after.kind_ms_per_token(k)
    ]  # fmt: skip
    if timed:
        kind = max(timed, key=lambda k: (min(before.step_kinds[k], after.step_kinds[k]), k))
        return kind, before.kind_ms_per_token(kind), after.kind_ms_per_token(kind)
    b, a = before.tokens_per_step(), after.tokens_per_step()
    return "", before.step_ms / b if b else None, after.step_ms / a if a else None


def mix_changed(before: ProfileTable, after: ProfileTable) -> bool:
    """Whether the two slices' steps did different work: other kinds (:data:`MIX_CHANGED`) or
    other tokens per step (:data:`TOKENS_CHANGED`); False when the traces did not say."""
    distance = mix_distance(before.step_kinds, after.step_kinds)
    if distance is not None and distance >= MIX_CHANGED:
        return True
    b, a = before.tokens_per_step(), after.tokens_per_step()
    return bool(b and a and max(a / b, b / a) >= TOKENS_CHANGED)


def diff_tables(before: ProfileTable, after: ProfileTable) -> ExplainDiff:
    """Rank every key of either table by how much its time per step moved (largest first).

    When the step mix changed (DECODEs of the whole batch became 4-token EXTENDs, or a DECODE of
    256 sequences one of 32), a step is no longer the same unit of work and its time can move
    either way while throughput falls: the rows are then ranked by how much their share of the
    step moved, which the mix does not rescale, and a note says so.
    """
    rows_before = {r.key: r for r in before.rows}
    rows_after = {r.key: r for r in after.rows}
    changes = []
    for key in [*rows_after, *(k for k in rows_before if k not in rows_after)]:
        b: KernelRow | None = rows_before.get(key)
        a: KernelRow | None = rows_after.get(key)
        status: RowStatus = "changed" if a and b else ("new" if a else "vanished")
        changes.append(
            RowChange(
                key=key,
                status=status,
                name=(a or b).name if (a or b) else key,  # type: ignore[union-attr]
                variant_before=b.variant if b else "",
                variant_after=a.variant if a else "",
                before_ms_per_step=b.per_step_ms if b else 0.0,
                after_ms_per_step=a.per_step_ms if a else 0.0,
                after_step_share=a.step_share if a else 0.0,
                before_step_share=b.step_share if b else 0.0,
            )
        )
    mixed = mix_changed(before, after)
    changes.sort(key=lambda c: (-abs(c.change_step_share if mixed else c.change_ms_per_step), c.key))
    notes = []
    if mixed:
        notes.append(
            f"the step mix changed ({before.kinds_text()} -> {after.kinds_text()}): the profiled steps did different "
            "work, so the rows are ranked by the change in their share of the step, not in their time per step; "
            "the new mix is itself a finding (chunked prefill, admission or batch-size limits)"
        )
    if before.source != after.source:
        notes.append(
            f"the baseline's profile holds {before.source} rows and this one {after.source} rows: "
            "they measured different things, so the rows do not compare"
        )
    kind, per_before, per_after = per_token(before, after)
    # Steps of another size are compared per token they processed: that time moves with
    # throughput whatever the mix, where a step's own time can fall while throughput does.
    if mixed and per_before and per_after:
        what = f"{kind} steps' time per token processed" if kind else "time per token processed"
        b_ms, a_ms, unit = per_before, per_after, "ms per token"
    else:
        what, b_ms, a_ms, unit = "step time", before.step_ms, after.step_ms, "ms"
    moved = b_ms > 0 and abs(a_ms / b_ms - 1) >= STEP_MOVED
    if not moved:
        notes.append(
            f"the profile cannot explain this change: the {what} did not move ({b_ms:.3g} -> {a_ms:.3g} {unit}, "
            f"less than {_share(STEP_MOVED)}) while the gated numbers did, so the bottleneck is outside the "
            "server's step (its scheduler, tokenizer or HTTP layer, the network or the client)"
        )
    return ExplainDiff(
        before_step_ms=before.step_ms,
        after_step_ms=after.step_ms,
        before_source=before.source,
        after_source=after.source,
        rows=tuple(changes),
        explains=moved and before.source == after.source,
        note="; ".join(notes),
        before_kinds=before.kinds_text(),
        after_kinds=after.kinds_text(),
        ranked_by="step_share" if mixed else "ms_per_step",
        before_ms_per_token=per_before,
        after_ms_per_token=per_after,
        per_token_kind=kind,
    )
