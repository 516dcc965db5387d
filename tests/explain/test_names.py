"""Kernel names as stable keys: template arguments and tactic ids do not make a new row."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from perfgate.explain import normalise, variant
from perfgate.explain._names import MAX_KEY_CHARS

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}(::[A-Za-z_][A-Za-z0-9_]{0,20}){0,3}", fullmatch=True).filter(
    lambda s: "tactic" not in s.lower() and not s.startswith("void")
)
template_args = st.text(alphabet=st.characters(blacklist_characters="<>()"), max_size=30)


def test_examples() -> None:
    assert normalise("void cutlass::fused_moe_gemm<cutlass::bfloat16_t, 128>(Params, tactic_12)") == (
        "cutlass::fused_moe_gemm"
    )
    assert normalise("aten::mm") == "aten::mm"
    assert normalise("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long)") == (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    )
    assert normalise("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, F)") == (
        "at::native::vectorized_elementwise_kernel"
    )
    assert normalise("") == "<unnamed>"
    assert normalise("<>") == "<>"
    assert variant("void cutlass::fused_moe_gemm<x>(tactic_12)") == "cutlass, tactic 12"
    assert variant("aten::mm") == ""


@given(st.text(max_size=400))
def test_any_name_has_a_bounded_non_empty_key(raw: str) -> None:
    key = normalise(raw)
    assert key and len(key) <= MAX_KEY_CHARS


@given(identifiers, template_args, template_args)
def test_template_arguments_do_not_change_the_key(base: str, a: str, b: str) -> None:
    assert normalise(f"void {base}<{a}>(int, float)") == normalise(f"{base}<{b}>") == base


@given(identifiers, st.integers(0, 10**6), st.integers(0, 10**6))
def test_tactic_ids_do_not_change_the_key_but_show_in_the_variant(base: str, t1: int, t2: int) -> None:
    assert normalise(f"{base}_tactic_{t1}") == normalise(f"{base}(tactic{t2})") == base
    assert variant(f"{base}_tactic_{t1}").endswith(f"tactic {t1}")


@given(st.text(max_size=200))
def test_a_key_is_its_own_key(raw: str) -> None:
    key = normalise(raw)
    assert normalise(key) == key or key == "<unnamed>"
