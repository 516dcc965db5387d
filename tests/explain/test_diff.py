"""Two tables ranked by the change in time per step; new and vanished keys; a step that did not move."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.explain import (
    MIX_CHANGED,
    TOKENS_CHANGED,
    ExplainError,
    KernelRow,
    ProfileTable,
    diff_tables,
    mix_changed,
    mix_distance,
)


def row(key: str, per_step_ms: float, share: float = 0.1, variant: str = "") -> KernelRow:
    return KernelRow(key, key + "<raw>", variant, 10, per_step_ms * 10, per_step_ms, None, share)


def table(
    step_ms: float, *rows: KernelRow, source: str = "kernel", kinds: dict[str, int] | None = None
) -> ProfileTable:
    return ProfileTable(source, 10, step_ms, sum(r.per_step_ms for r in rows), None, 100, 1000, rows, kinds or {})  # type: ignore[arg-type]


def test_the_founding_case_line() -> None:
    before = table(2.0, row("fused_moe_gemm", 0.41, 0.2, "cutlass, tactic 12"), row("attn", 0.5, 0.25))
    after = table(3.2, row("fused_moe_gemm", 1.63, 0.62, "cutlass, tactic 3"), row("attn", 0.5, 0.16))
    d = diff_tables(before, after)
    assert d.explains and not d.note
    assert [r.key for r in d.rows] == ["fused_moe_gemm", "attn"]
    assert d.rows[0].line() == (
        "explain: fused_moe_gemm (cutlass, tactic 12 -> 3) 0.41 -> 1.63 ms/step (+298 %), 62 % of the step"
    )
    assert d.lines(1) == ["explain: step 2 -> 3.2 ms (+60 %) over the profiled steps", d.rows[0].line()]


def test_new_and_vanished_keys() -> None:
    d = diff_tables(table(1.0, row("old", 0.2)), table(1.5, row("new", 0.6, 0.4, "triton")))
    assert [(r.key, r.status) for r in d.rows] == [("new", "new"), ("old", "vanished")]
    assert d.rows[0].line() == "explain: new (triton) new, 0.6 ms/step, 40 % of the step"
    assert d.rows[1].line() == "explain: old vanished (was 0.2 ms/step)"
    assert d.rows[0].change_ratio is None


def test_a_step_that_did_not_move_cannot_explain() -> None:
    d = diff_tables(table(10.0, row("a", 5.0)), table(10.2, row("a", 5.1)))
    assert not d.explains
    assert "the profile cannot explain this change" in d.note and "outside the server's step" in d.note
    assert d.lines()[-1].startswith("explain: the profile cannot explain")


def test_tables_of_different_sources_do_not_compare() -> None:
    d = diff_tables(table(1.0, row("a", 0.5)), table(2.0, row("a", 0.5), source="cpu_op"))
    assert not d.explains and "do not compare" in d.note


def test_a_changed_step_mix_ranks_by_share_of_the_step() -> None:
    """The CI case (SGLang's CPU engine, --chunked-prefill-size 4): 10 DECODEs of the batch became
    10 4-token EXTENDs; every operator's time per step fell, the host's Python per step did not,
    and ranked by ms/step the three operators that shrank most hid it."""
    before = table(
        9.34,
        row("aten::index", 1.2, 0.13),
        row("aten::mm", 1.0, 0.11),
        row("sdpa", 0.9, 0.1),
        row("(outside any operator)", 3.0, 0.32),
        kinds={"DECODE": 10},
    )
    after = table(
        4.45,
        row("aten::index", 0.06, 0.015),
        row("aten::mm", 0.2, 0.045),
        row("sdpa", 0.1, 0.022),
        row("(outside any operator)", 3.2, 0.72),
        kinds={"EXTEND": 10},
    )
    d = diff_tables(before, after)
    assert d.ranked_by == "step_share" and d.explains
    assert d.rows[0].key == "(outside any operator)"
    assert d.rows[0].change_step_share == pytest.approx(0.40)
    assert "the step mix changed (10 DECODE -> 10 EXTEND)" in d.note
    assert d.lines(1)[1] == "explain: (outside any operator) 3 -> 3.2 ms/step (+7 %), 32 -> 72 % of the step"
    # The same tables with the same mix rank by time per step, as before.
    same = diff_tables(
        replace(before, step_kinds={"DECODE": 10}), replace(after, step_kinds={"DECODE": 9, "EXTEND": 1})
    )
    assert same.ranked_by == "ms_per_step" and same.rows[0].key == "aten::index" and "mix" not in same.note


def test_a_smaller_batch_is_a_changed_mix_and_the_head_says_per_token() -> None:
    """--max-running-requests 32 on a c256 load: DECODEs of 256 became DECODEs of 32; every kernel's
    time per step fell while throughput did too; per token the step got slower."""
    before = replace(
        table(12.0, row("gemm", 6.0, 0.5), row("attn", 4.0, 0.33)),
        step_kinds={"DECODE": 10},
        step_tokens={"DECODE": 2560},
    )
    after = replace(
        table(5.0, row("gemm", 3.5, 0.7), row("attn", 0.5, 0.1)),
        step_kinds={"DECODE": 10},
        step_tokens={"DECODE": 320},
    )
    assert mix_changed(before, after) and not mix_changed(before, before)
    d = diff_tables(before, after)
    assert d.ranked_by == "step_share" and [r.key for r in d.rows] == ["attn", "gemm"]
    assert d.lines()[0] == (
        "explain: step 12 -> 5 ms (-58 %) over the profiled steps; steps 10 DECODE (256 tokens/step) -> "
        "10 DECODE (32 tokens/step); 0.0469 -> 0.156 ms per token processed (+233 %)"
    )
    # Within TOKENS_CHANGED (the batch a steady c256 load fills wobbles) the ranking stays per step.
    near = replace(after, step_tokens={"DECODE": int(2560 / TOKENS_CHANGED) + 10})
    assert not mix_changed(before, near) and diff_tables(before, near).ranked_by == "ms_per_step"


def test_with_a_changed_mix_the_time_per_token_decides_whether_the_profile_explains() -> None:
    before = replace(table(12.0, row("gemm", 6.0, 0.5)), step_kinds={"DECODE": 10}, step_tokens={"DECODE": 2560})
    # Half the tokens in half the time: every step shorter, each token as fast as before.
    halved = replace(table(6.0, row("gemm", 3.0, 0.5)), step_kinds={"DECODE": 10}, step_tokens={"DECODE": 1280})
    d = diff_tables(before, halved)
    assert d.ranked_by == "step_share" and not d.explains
    assert "the time per token processed did not move (0.0469 -> 0.0469 ms per token" in d.note
    # The same step time over a quarter of the tokens: each token takes 4 times as long.
    starved = replace(table(12.0, row("gemm", 6.0, 0.5)), step_kinds={"DECODE": 10}, step_tokens={"DECODE": 640})
    d = diff_tables(before, starved)
    assert d.explains and "cannot explain" not in d.note and "the step mix changed" in d.note
    # Without token annotations the step time decides, as for an unchanged mix.
    plain = diff_tables(replace(before, step_tokens={}), replace(starved, step_tokens={}, step_kinds={"EXTEND": 10}))
    assert plain.ranked_by == "step_share" and not plain.explains and "the step time did not move" in plain.note


def test_a_prefill_in_the_slice_does_not_dilute_the_decode_tokens_time() -> None:
    """vLLM's CPU engine at 64 sequences against 4 (CI, 2026-12-02): the slower slice caught one
    256-token PREFILL among its 4-token DECODEs. Over the whole window a token cost 0.0848 -> 0.105
    ms (+24 %), while each DECODE token took 8 times as long: the DECODE steps compare per token."""
    gemm = row("aten::mm", 2.0, 0.4)
    before = replace(
        table(5.43, gemm, source="cpu_op"),
        step_kinds={"DECODE": 10},
        step_tokens={"DECODE": 640},
        step_kind_ms={"DECODE": 55.96},
    )
    after = replace(
        table(3.06, gemm, source="cpu_op"),
        step_kinds={"DECODE": 9, "PREFILL": 1},
        step_tokens={"DECODE": 36, "PREFILL": 256},
        step_kind_ms={"DECODE": 25.77, "PREFILL": 6.0},
    )
    d = diff_tables(before, after)
    assert d.per_token_kind == "DECODE" and d.explains
    assert d.after_ms_per_token == pytest.approx(25.77 / 36) and d.before_ms_per_token == pytest.approx(55.96 / 640)
    assert d.lines()[0].endswith("; DECODE steps 0.0874 -> 0.716 ms per token processed (+719 %)")
    # Untimed (tables stored before step_kind_ms), the whole window's time per token, as before.
    untimed = diff_tables(replace(before, step_kind_ms={}), replace(after, step_kind_ms={}))
    assert untimed.per_token_kind == "" and untimed.after_ms_per_token == pytest.approx(3.06 * 10 / 292)
    assert untimed.lines()[0].endswith("; 0.0848 -> 0.105 ms per token processed (+24 %)")
    # A per-token time that did not move is no explanation, named by its kind.
    same = replace(after, step_kind_ms={"DECODE": 36 * 55.96 / 640, "PREFILL": 6.0})
    assert "the DECODE steps' time per token processed did not move" in diff_tables(before, same).note
    # No kind in common: the window's.
    extend = replace(after, step_kinds={"EXTEND": 10}, step_tokens={"EXTEND": 40}, step_kind_ms={"EXTEND": 30.0})
    assert diff_tables(before, extend).per_token_kind == ""


def test_the_kind_compared_per_token_is_the_one_both_slices_ran_most() -> None:
    before = replace(
        table(5.0),
        step_kinds={"DECODE": 8, "MIXED": 2},
        step_tokens={"DECODE": 512, "MIXED": 2000},
        step_kind_ms={"DECODE": 40.0, "MIXED": 10.0},
    )
    after = replace(before, step_kinds={"DECODE": 1, "MIXED": 9})
    assert diff_tables(before, after).per_token_kind == "MIXED"
    assert diff_tables(before, before).per_token_kind == "DECODE"


def test_the_mix_distance() -> None:
    assert mix_distance({"DECODE": 4, "EXTEND": 1}, {"EXTEND": 5}) == pytest.approx(0.8)
    small = mix_distance({"DECODE": 10}, {"DECODE": 9, "EXTEND": 1})
    assert small == pytest.approx(0.1) and small < MIX_CHANGED
    assert mix_distance({}, {"DECODE": 3}) is None and mix_distance({"DECODE": 3}, {}) is None


kinds = st.dictionaries(st.sampled_from(["DECODE", "EXTEND", "MIXED"]), st.integers(0, 20), max_size=3)


@given(kinds, kinds)
def test_the_mix_distance_is_a_bounded_symmetric_distance(a: dict, b: dict) -> None:
    d = mix_distance(a, b)
    if not sum(a.values()) or not sum(b.values()):
        assert d is None
        return
    assert d is not None and 0.0 <= d <= 1.0 + 1e-12
    assert d == pytest.approx(mix_distance(b, a))
    assert mix_distance(a, a) == pytest.approx(0.0)


rows = st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 100, allow_nan=False), max_size=6)


@given(rows, rows, st.floats(0.1, 100), st.floats(0.1, 100))
def test_ranking_is_by_absolute_change_and_covers_every_key(b: dict, a: dict, sb: float, sa: float) -> None:
    d = diff_tables(table(sb, *(row(k, v) for k, v in b.items())), table(sa, *(row(k, v) for k, v in a.items())))
    assert {r.key for r in d.rows} == set(a) | set(b)
    changes = [abs(r.change_ms_per_step) for r in d.rows]
    assert changes == sorted(changes, reverse=True)
    for r in d.rows:
        assert r.change_ms_per_step == pytest.approx(a.get(r.key, 0.0) - b.get(r.key, 0.0))


def test_a_stored_table_that_is_not_one_is_refused() -> None:
    good = table(1.0, row("a", 0.5)).to_dict()
    for bad in (
        [],
        {**good, "schema": 99},
        {**good, "steps": 0},
        {**good, "step_ms": float("nan")},
        {**good, "source": "gpu"},
        {**good, "rows": [{"key": 1}]},
        {k: v for k, v in good.items() if k != "rows"},
    ):
        with pytest.raises(ExplainError, match=r"explain table t\.json"):
            ProfileTable.from_dict(bad, "t.json")
    assert ProfileTable.from_dict(good, "t.json") == table(1.0, row("a", 0.5))
