"""Does this SGLang autotune the FlashInfer CUTLASS MoE runner? Read from its source text."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from perfgate.server._sglang import sglang_version_from_tree
from perfgate.server.autotune.hook import _perfgate_autotune_hook as _hook

Status = Literal["native", "patch-needed", "unknown", "no-autotune"]

# Text that only a release with some FlashInfer autotune contains.
_AUTOTUNE_MARKERS = ("flashinfer.autotuner", "flashinfer_autotune")


@dataclass(frozen=True)
class AutotuneStatus:
    """What ``detect_autotune`` found in one SGLang tree.

    status: "native" (flashinfer_cutlass is autotuned as shipped), "patch-needed" (the
    decision exists and leaves flashinfer_cutlass out: SGLang 0.5.7 - 0.5.12), "unknown"
    (autotune code exists but not in a layout perfgate knows: patching would be a guess),
    "no-autotune" (this release never autotunes MoE runner backends).
    file / function: the file and the function or method that holds the decision ("" when
    none was found); module: its dotted module name, what the hook patches.
    """

    status: Status
    sglang_version: str
    file: str
    function: str
    module: str
    explanation: str

    @property
    def hook_target(self) -> str:
        """``"<module>:<qualname>"``, the value the hook's environment variable takes."""
        return f"{self.module}:{self.function}" if self.module and self.function else ""


def detect_autotune(sglang_root: Path) -> AutotuneStatus:
    """Inspect the ``sglang`` package directory ``sglang_root`` (installed or unpacked)."""
    root = Path(sglang_root)
    version = sglang_version_from_tree(root)

    def without_decision(status: Status, why: str) -> AutotuneStatus:
        return AutotuneStatus(status, version, "", "", "", why)

    if not (root / "srt").is_dir():
        return without_decision("unknown", f"{root} is not an SGLang package directory (no srt/ inside)")
    for target in _hook.TARGETS:
        path = root / target.relpath
        if not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, ValueError, OSError) as exc:
            return AutotuneStatus(
                "unknown", version, str(path), target.qualname, target.module, f"cannot parse {path}: {exc}"
            )
        func = _hook.find_function(tree, target.qualname)
        if func is not None:
            return _judge(func, target, path, version)
    expected = ", ".join(f"{t.relpath}::{t.qualname} ({t.releases})" for t in _hook.TARGETS)
    if _mentions_autotune(root):
        return without_decision(
            "unknown",
            f"SGLang {version} has FlashInfer autotune code, but none of the known decision "
            f"functions: expected one of {expected}",
        )
    return without_decision(
        "no-autotune",
        f"SGLang {version} has no FlashInfer autotune (it arrived in 0.5.6, for MoE runner backends in 0.5.7)",
    )


def _judge(func: ast.FunctionDef, target: _hook.Target, path: Path, version: str) -> AutotuneStatus:
    where = f"{target.relpath}::{target.qualname}"
    lists = _hook.moe_backend_lists(func)

    def status(kind: Status, why: str) -> AutotuneStatus:
        return AutotuneStatus(kind, version, str(path), target.qualname, target.module, why)

    if lists:
        missing = [s for s in lists if _hook.CUTLASS not in (_hook.string_elements(s) or ())]
        if not missing:
            return status(
                "native", f"SGLang {version} lists {_hook.CUTLASS} among the autotuned MoE runner backends in {where}"
            )
        return status(
            "patch-needed",
            f"SGLang {version} leaves {_hook.CUTLASS} out of the "
            f"autotuned MoE runner backends in {where} (line {missing[0].lineno}): "
            "without the patch its MoE kernels run untuned",
        )
    if _hook.reads_moe_backend(func):
        return status(
            "unknown",
            f"{where} in SGLang {version} reads moe_runner_backend but "
            "has no list literal of autotuned MoE backends that perfgate can extend",
        )
    return status(
        "no-autotune",
        f"{where} in SGLang {version} autotunes attention backends "
        "only (opt-in --enable-flashinfer-autotune); no MoE runner backend is tuned",
    )


def _mentions_autotune(root: Path) -> bool:
    for path in (root / "srt" / "model_executor").rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if any(marker in text for marker in _AUTOTUNE_MARKERS):
            return True
    return False
