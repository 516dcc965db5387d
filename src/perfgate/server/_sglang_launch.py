"""SGLang-specific steps around a launch: preflight, the autotune plan, and its verification."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate._redact import SECRETS
from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from perfgate.server._gpu_procs import gpu_holders
from perfgate.server._process import ServerProcess, group_members
from perfgate.server._sglang import (
    check_flags,
    find_sglang_root,
    flags_from_source,
    known_flags,
    sglang_help_text,
    sglang_versions,
)
from perfgate.server.autotune import (
    AutotunePlan,
    autotune_cache_root,
    plan_autotune,
    read_tactics,
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


# A Hugging Face repo id: "name" or "namespace/name" in letters, digits, "-", "_" and ".", without
# "--" or ".." (the Hub's rule). SGLang reads a model_path that is no directory as one.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def check_model_path(model_path: str) -> None:
    """A ServerError when ``model_path`` is neither on this host nor a Hugging Face repo id.

    SGLang takes any model_path it cannot find as a repo id, so a mistyped local path reaches
    the user, after the interpreter and torch have started, as an invalid repo id.
    """
    if Path(model_path).exists():
        return
    if _REPO_ID.fullmatch(model_path) and "--" not in model_path and ".." not in model_path:
        return
    where = "" if Path(model_path).is_absolute() else f" (relative to {Path.cwd()}, where the server starts)"
    tilde = "; '~' is not expanded: write the full path" if model_path.startswith("~") else ""
    raise ServerError(
        f"[server] model_path {model_path!r}: no such file or directory on this host{where}{tilde}. "
        "SGLang would take it for a Hugging Face repo id and fail on that; give the model's folder "
        "(the one holding config.json) or a repo id such as 'meta-llama/Llama-3.1-8B-Instruct'"
    )


# The flags of each SGLang install this process has asked: "--help" imports torch and SGLang
# (15-25 s on the H200), and [gate] boots = 3 asked before every boot for the same answer. Keyed by
# the interpreter, the server's environment and server_args.py's modification time, so an install
# changed between boots is asked again.
_FLAGS_READ: dict[tuple[object, ...], frozenset[str]] = {}


def server_flags(python: str, env: Mapping[str, str], root: Path) -> tuple[set[str], str]:
    """The flags ``python``'s SGLang (installed at ``root``) accepts, and where they were read:
    its ``launch_server --help`` (once per install and environment in this process) or, when that
    cannot run, its ``server_args.py``."""
    args_file = root / "srt" / "server_args.py"
    try:
        stamp: int | None = args_file.stat().st_mtime_ns
    except OSError:
        stamp = None
    key = (python, tuple(sorted(env.items())), str(root), stamp)
    if key in _FLAGS_READ:
        return set(_FLAGS_READ[key]), "launch_server --help"
    try:
        # With the server's environment: a CPU or ROCm build may need it just to import.
        known = known_flags(sglang_help_text(python, env=env))
    except ServerError:
        # --help imports torch; when that fails the source still knows the flags.
        return flags_from_source(root), str(args_file)
    _FLAGS_READ[key] = frozenset(known)
    return known, "launch_server --help"


def preflight(spec: ServerSpec, python: str, env: Mapping[str, str]) -> SGLangPreflight:
    """Everything that can be known to fail before a multi-minute boot, each with its own message."""
    check_model_path(spec.model_path)
    root = find_sglang_root(python)
    versions = {k: v for k, v in sglang_versions(python).items() if v}
    version = versions.get("sglang", "unknown")
    known, flag_source = server_flags(python, env, root)
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


def process_names(pgid: int) -> dict[int, str]:
    """What each live process of the server's group calls itself (SGLang retitles its children
    ``sglang::scheduler``, ``sglang::detokenizer``); the command line, shortened, otherwise."""
    names: dict[int, str] = {}
    for pid in sorted(group_members(pgid)):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        # setproctitle pads the old argv area with spaces or NULs.
        words = [w.strip() for w in raw.decode(errors="replace").split("\0") if w.strip()]
        if not words:
            continue
        if "multiprocessing.resource_tracker" in " ".join(words):
            names[pid] = "resource_tracker"
        elif "-m" in words[:-1]:
            names[pid] = "python -m " + words[words.index("-m") + 1]
        else:
            names[pid] = SECRETS.clip(" ".join(words), 60)
    return names


def verify(
    spec: ServerSpec, pre: SGLangPreflight, process: ServerProcess, info: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, Any]:
    """The autotune record of a booted server: the plan, why, and what its processes proved.

    Fails the boot under require_autotune when the log does not prove a complete autotune.
    """
    process.flush_log()
    evidence = verify_autotune_log(
        process.log_path.read_text(errors="replace"),
        tp_size(spec),
        expect_patch=pre.plan.decision == "patched",
        cache_before=pre.cache_before,
        device=str(info.get("device") or ""),
        processes=process_names(process.pid),
        versions=pre.versions,
    )
    if spec.require_autotune and not evidence.ok:
        raise ServerError(
            f"[server] require_autotune = true but the boot log shows no complete FlashInfer autotune "
            f"(plan: {pre.plan.decision}): {evidence.message}; autotune cache {autotune_cache_root(env)}"
        )
    return {
        "decision": pre.plan.decision,
        "why": pre.plan.message,
        "status": pre.plan.status.status,
        "ok": evidence.ok,
        "tuning": evidence.tuning,
        "cache_dir": evidence.cache_dir,
        # Which tactics the boot used, for a later run to compare with (None: no cache file named).
        "tactics": read_tactics(evidence.cache_files, pre.versions).to_dict() if evidence.cache_files else None,
        "evidence": evidence.message,
        "hook": {
            "loaded_in": {str(p): evidence.processes.get(p, "") for p in evidence.loaded_pids},
            "patched_in": {str(p): evidence.processes.get(p, "") for p in evidence.patched_pids},
            "decisions": [
                {"pid": p, "process": evidence.processes.get(p, ""), "result": r} for p, r in evidence.decisions
            ],
            "failures": list(evidence.hook_failures),
        },
        "flags_checked_against": pre.flag_source,
    }
