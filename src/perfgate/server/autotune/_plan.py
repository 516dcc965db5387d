"""From ``[server] flashinfer_cutlass_autotune`` and the installed SGLang to server environment."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from perfgate.errors import ServerError
from perfgate.server.autotune._detect import AutotuneStatus, detect_autotune
from perfgate.server.autotune.hook import _perfgate_autotune_hook as _hook

Decision = Literal["native", "patched", "off"]

# The directory holding the hook's sitecustomize.py; goes first on the server's PYTHONPATH.
HOOK_DIR = Path(_hook.__file__).resolve().parent
ENV_VAR = _hook.ENV_VAR


@dataclass(frozen=True)
class AutotunePlan:
    """What perfgate does to the server's environment for the autotune patch.

    decision: "native" (SGLang autotunes flashinfer_cutlass itself; nothing added),
    "patched" (the hook is put on the server's path), "off" (nothing added, whatever SGLang
    does). env: variables to add; pythonpath_entry: directory to put first on PYTHONPATH
    ("" when none).
    """

    decision: Decision
    status: AutotuneStatus
    env: Mapping[str, str] = field(default_factory=dict)
    pythonpath_entry: str = ""
    message: str = ""

    def warnings(self, args: Sequence[str]) -> list[str]:
        """Why a patch planned for these server ``args`` may change nothing.

        The patched decision reads the MoE runner backend from the server arguments, and
        SGLang 0.5.7 - 0.5.12 resolve ``auto`` at kernel creation, not there: only an
        explicit ``--moe-runner-backend flashinfer_cutlass`` is autotuned by the patch.
        """
        if self.decision != "patched":
            return []
        backend = _flag_value(args, "--moe-runner-backend") or "auto"
        if backend == _hook.CUTLASS:
            return []
        warning = (
            f"[server] flashinfer_cutlass_autotune patches SGLang {self.status.sglang_version} for "
            f"--moe-runner-backend {_hook.CUTLASS}, but the server args ask for {backend!r}: "
            "SGLang decides about autotune as shipped (pass the backend explicitly on SM120)"
        )
        return [warning]

    def apply(self, environ: Mapping[str, str]) -> dict[str, str]:
        """``environ`` plus this plan's variables, the hook directory first on PYTHONPATH."""
        merged = dict(environ)
        merged.update(self.env)
        if self.pythonpath_entry:
            rest = merged.get("PYTHONPATH", "")
            merged["PYTHONPATH"] = os.pathsep.join(p for p in (self.pythonpath_entry, rest) if p)
        return merged


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    value = None
    for i, token in enumerate(args):
        if token == flag and i + 1 < len(args):
            value = args[i + 1]
        elif token.startswith(flag + "="):
            value = token.split("=", 1)[1]
    return value


def plan_autotune(mode: str, sglang_root: Path) -> AutotunePlan:
    """Decide for ``[server] flashinfer_cutlass_autotune = mode`` ("auto", "force", "off").

    auto: native -> nothing; patch-needed -> patch; no-autotune -> nothing (there is no
    decision to patch; ``require_autotune`` will then fail the boot); unknown -> ServerError.
    force: patch whatever the release says, ServerError when the layout is unknown or has
    no MoE autotune. off: nothing.
    """
    if mode not in ("auto", "force", "off"):
        raise ServerError(f'[server] flashinfer_cutlass_autotune = {mode!r}: expected "auto", "force" or "off"')
    status = detect_autotune(sglang_root)
    if mode == "off":
        return AutotunePlan("off", status, message="FlashInfer CUTLASS autotune patch: off")
    if mode == "auto" and status.status == "native":
        return AutotunePlan("native", status, message=status.explanation)
    if mode == "auto" and status.status == "no-autotune":
        return AutotunePlan("off", status, message=status.explanation)
    if status.status in ("unknown", "no-autotune"):
        raise ServerError(
            f"[server] flashinfer_cutlass_autotune = {mode!r}: cannot patch SGLang "
            f"{status.sglang_version} at {sglang_root}: {status.explanation}. Set it to "
            '"off" to run this SGLang as shipped'
        )
    return AutotunePlan(
        "patched",
        status,
        env={ENV_VAR: status.hook_target},
        pythonpath_entry=str(HOOK_DIR),
        message=f"patching {status.hook_target} in every server process: {status.explanation}",
    )
