"""Kernel and operator names as stable keys.

A kernel's raw name carries what changes from build to build and tactic to tactic (template
arguments, the tactic an autotuner picked, a launch's argument list); the key keeps what the
kernel *is*, so a re-tuned GEMM is one row whose time moved, not one vanished and one new row.
What was stripped and tells two variants apart (the library, the tactic id) is kept as the
row's ``variant``.
"""

from __future__ import annotations

import re

# Tactic ids as CUTLASS/TensorRT-LLM/FlashInfer autotuners name them: "tactic_12", "tactic12", "tactic=3".
_TACTIC = re.compile(r"[_\s(,]?tactic[_=\s]?(\d+)", re.IGNORECASE)
_LIBRARIES = ("cutlass", "cublas", "flashinfer", "triton", "nccl", "xmma", "cudnn")
_SPACES = re.compile(r"\s+")
# A key is at most this long: names are hostile input and become table keys and report lines.
MAX_KEY_CHARS = 200


def _strip_balanced(text: str, open_ch: str, close_ch: str) -> str:
    """``text`` without any ``open_ch ... close_ch`` span (nested ones too; an unclosed span is cut to the end)."""
    out: list[str] = []
    depth = 0
    for ch in text:
        if ch == open_ch:
            depth += 1
        elif ch == close_ch and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def normalise(raw: str) -> str:
    """The stable key of a kernel or operator name.

    ``void cutlass::fused_moe_gemm<cutlass::bfloat16_t, 128>(tactic_12)`` -> ``cutlass::fused_moe_gemm``;
    ``aten::mm`` stays ``aten::mm``. Never empty: a name with nothing left is its own key.
    """
    text = raw
    # Each pass only shortens the text; stripping can bring a new "tactic_N" together, hence the fixed point.
    while True:
        stripped = _strip_balanced(_strip_balanced(text, "<", ">"), "(", ")")
        stripped = _SPACES.sub(" ", _TACTIC.sub("", stripped)).strip()
        # "void foo", "unsigned int foo": the function is the last word.
        stripped = stripped.rsplit(" ", 1)[-1]
        if stripped == text:
            break
        text = stripped
    key = text or _SPACES.sub(" ", raw).strip() or "<unnamed>"
    return key[:MAX_KEY_CHARS]


def variant(raw: str) -> str:
    """What tells this kernel's build apart: its library and tactic, e.g. ``cutlass, tactic 12`` ("" if neither)."""
    lower = raw.lower()
    parts = [lib for lib in _LIBRARIES if lib in lower][:1]
    tactic = _TACTIC.search(raw)
    if tactic is not None:
        parts.append(f"tactic {int(tactic.group(1))}")
    return ", ".join(parts)
