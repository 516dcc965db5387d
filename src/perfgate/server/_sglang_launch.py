"""SGLang-specific steps around a launch: preflight, the autotune plan, and its verification."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from perfgate.server._gpu_procs import gpu_holders
from perfgate.server._sglang import check_flags, find_sglang_root, flags_from_source, known_flags, sglang_help_text, sglang_versions
from perfgate.server.autotune import (
    AutotuneEvidence,
    AutotunePlan,
    autotune_cache_root,
    plan_autotune,
    snapshot_autotune_cache,
    verify_autotune_log,
)


@dataclass
class SGLangPreflight:
    """What was checked before launch and what the launch must add."""

    versions: dict[str, str]
    plan: AutotunePlan
    warnings: list[str] = field(default_factory=list)
    cache_before: dict[str, str] = field(default_factory=dict)
    flag_source: str = ""


def preflight(spec: ServerSpec, python: str, env: Mapping[str, str]) -> SGLangPreflight:
    """Everything that can be known to fail before a multi-minute boot, each with its own message."""
    root = find_sglang_root(python)
    versions = {k: v for k, v in sglang_versions(python).items() if v}
    version = versions.get("sglang", "unknown")
    try:
        known, flag_source = known_flags(sglang_help_text(python)), "launch_server --help"
    except ServerError:
        # --help imports torch; when that fails the source still knows the flags.
        known, flag_source = flags_from_source(root), f"{root}/srt/server_args.py"
    warnings = check_flags(spec.args, known, version)
    if spec.gpus:
        holders = gpu_holders(spec.gpus)
        busy = {g: p for g, p in (holders or {}).items() if p}
        if busy:
            detail = "; ".join(f"GPU {g}: pid {', '.join(map(str, p))}" for g, p in busy.items())
            raise ServerError(
                f"the profile's GPUs are in use before launch ({detail}); a measurement on shared GPUs is "
                "not comparable: stop those processes or choose other [server] gpus"
            )
    plan = plan_autotune(spec.flashinfer_cutlass_autotune, root)
    warnings += plan.warnings(spec.args)
    cache_before = snapshot_autotune_cache(autotune_cache_root(env))
    return SGLangPreflight(versions, plan, warnings, cache_before, flag_source)


def tp_size(spec: ServerSpec) -> int:
    args = list(spec.args)
    for i, a in enumerate(args):
        for flag in ("--tp", "--tp-size", "--tensor-parallel-size"):
            if a == flag and i + 1 < len(args):
                return int(args[i + 1])
            if a.startswith(flag + "="):
                return int(a.split("=", 1)[1])
    return max(1, len(spec.gpus))


def verify(spec: ServerSpec, pre: SGLangPreflight, log_text: str, env: Mapping[str, str]) -> AutotuneEvidence:
    """Autotune evidence from the boot log; fails the boot under require_autotune when missing."""
    evidence = verify_autotune_log(
        log_text, tp_size(spec), expect_patch=pre.plan.decision == "patched", cache_before=pre.cache_before
    )
    if spec.require_autotune and not evidence.ok:
        raise ServerError(
            f"[server] require_autotune = true but the boot log shows no complete FlashInfer autotune "
            f"(plan: {pre.plan.decision}): {evidence.message}; autotune cache {autotune_cache_root(env)}"
        )
    return evidence
