"""Did FlashInfer autotune run on every rank? Read it from the server's log.

Evidence strings, as SGLang and FlashInfer write them:
- SGLang (each scheduler, prefix ``[<time> TP<rank>]`` when tp > 1):
  0.5.6 - 0.5.11 ``Running FlashInfer autotune...`` (no persistent cache: every boot tunes);
  0.5.12+ ``Running FlashInfer autotune with cache: <dir>/rank_tp<r>_pp<p>_dp<d>.json``;
  0.5.13+ also ``Running FlashInfer autotune (cache reuse DISABLED via
  SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); writing fresh result to: <dir>/runs/<file>``;
  0.5.20+ ``FlashInfer autotune: per-rank caches disagree, discarding them and tuning
  from scratch``; all: ``FlashInfer autotune completed.``
  (sglang/srt/model_executor/model_runner.py, runner/base_runner.py in 0.5.14,
  runner/flashinfer_autotune.py from 0.5.15).
- FlashInfer (flashinfer/autotuner.py 0.6.11.post1, flashinfer/autotuner/autotuner.py
  0.7.2): ``[Autotuner]: Autotuning process starts ...`` / ``ends``, ``[Autotuner]: Loaded
  <n> configs from <path>``, ``[Autotuner]: Saved <n> configs to <path> (<k> new, ...)``.
  SGLang sets FlashInfer's logger to ERROR in configure_logger, so these appear only with
  a custom SGLANG_LOGGING_CONFIG_PATH; they are used when present, never required.
- perfgate's hook: ``perfgate-autotune: loaded|patched|checked|FAILED ... in pid <n>`` and
  ``perfgate-autotune: decision evaluated <target> -> <result> in pid <n>`` (see the hook).

Whether the tuning was fresh or came from the cache is decided from the cache files when
the caller snapshotted them before the boot (``snapshot_autotune_cache``): FlashInfer
rewrites a rank's file only when it tuned something new, and writes identical bytes
otherwise. Without a snapshot, the log decides where it can, else "unknown".
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from perfgate.server.autotune._tactics import written_elsewhere
from perfgate.server.autotune.hook import _perfgate_autotune_hook as _hook

Tuning = Literal["fresh", "cached", "mixed", "unknown"]

_START = "Running FlashInfer autotune"
_DONE = "FlashInfer autotune completed."
_DISAGREE = "per-rank caches disagree"
_CACHE_PATH = re.compile(r"(?:with cache|writing fresh result to): (\S+\.json)")
_RANK_FILE = re.compile(r"rank_tp(\d+)_")
_PREFIX_RANK = re.compile(r"^\[[^\]]*\bTP(\d+)\b[^\]]*\]")
_FI_LOADED = re.compile(r"\[Autotuner\]: Loaded \d+ configs from (\S+)")
_FI_SAVED_NEW = re.compile(r"\[Autotuner\]: Saved \d+ configs to (\S+) \((\d+) new")
_HOOK = re.compile(
    re.escape(_hook.EVIDENCE_PREFIX) + r" (loaded|patched|checked|FAILED|decision evaluated)\b(.*) in pid (\d+)"
)
_DECISION_RESULT = re.compile(r" -> (.+)$")


@dataclass(frozen=True)
class AutotuneEvidence:
    """What the server log says about FlashInfer autotune.

    ranks_started / ranks_completed: TP ranks with a start / completion line.
    tuning: "fresh" (tactics were profiled this boot), "cached" (all loaded from the cache),
    "mixed" (some ranks each), "unknown". cache_dir: the autotune cache directory of this
    model and configuration ("" when SGLang logged none). loaded_pids: processes where the
    hook was installed; patched_pids: where it patched (or confirmed) SGLang's decision;
    decisions: (pid, result) each time SGLang called the decision; processes: names of the
    server's processes by pid, when the caller knew them; hook_failures: its FAILED lines.
    lines: every evidence line found, in log order. ok / message: the verdict for
    ``require_autotune``.
    """

    ok: bool
    message: str
    tp_size: int
    ranks_started: tuple[int, ...]
    ranks_completed: tuple[int, ...]
    tuning: Tuning
    cache_dir: str
    cache_files: tuple[str, ...]
    patched_pids: tuple[int, ...]
    hook_failures: tuple[str, ...]
    lines: tuple[str, ...]
    loaded_pids: tuple[int, ...] = ()
    decisions: tuple[tuple[int, str], ...] = ()
    processes: Mapping[int, str] = field(default_factory=dict)

    def hook_summary(self) -> str:
        """Where the hook was loaded, where it patched, and where SGLang decided ("" without a hook)."""
        if not (self.loaded_pids or self.patched_pids or self.hook_failures):
            return ""
        decided = ", ".join(f"{self._name(pid)} -> {result}" for pid, result in self.decisions)
        return (
            f"perfgate hook loaded in {len(self.loaded_pids)} process(es) ({self._names(self.loaded_pids)}), "
            f"patched the decision in {self._names(self.patched_pids) or 'none'}, "
            f"decision evaluated in {decided or 'no process'}"
        )

    def _name(self, pid: int) -> str:
        name = self.processes.get(pid)
        return f"pid {pid} ({name})" if name else f"pid {pid}"

    def _names(self, pids: tuple[int, ...]) -> str:
        return ", ".join(self._name(p) for p in pids)


def autotune_cache_root(env: Mapping[str, str] | None = None) -> Path:
    """``$SGLANG_CACHE_DIR/flashinfer/autotune`` (default ``~/.cache/sglang``) for ``env``."""
    environ = os.environ if env is None else env
    base = environ.get("SGLANG_CACHE_DIR") or "~/.cache/sglang"
    return Path(base).expanduser() / "flashinfer" / "autotune"


def snapshot_autotune_cache(cache_root: Path | None = None) -> dict[str, str]:
    """SHA-256 of every autotune cache file under ``cache_root``, keyed by absolute path.

    Take it before booting the server and pass it to ``verify_autotune_log``.
    """
    root = autotune_cache_root() if cache_root is None else Path(cache_root)
    if not root.is_dir():
        return {}
    return {str(p.resolve()): _sha256(p) for p in root.rglob("*.json") if p.is_file()}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify_autotune_log(
    log_text: str,
    tp_size: int,
    *,
    expect_patch: bool = False,
    cache_before: Mapping[str, str] | None = None,
    device: str = "",
    processes: Mapping[int, str] | None = None,
    versions: Mapping[str, str | None] | None = None,
) -> AutotuneEvidence:
    """Judge the autotune evidence in a server log for a ``tp_size``-rank server.

    ok needs a start and a completion line from every TP rank, no FAILED line from the
    hook, and, with ``expect_patch`` (the plan's decision was "patched"), at least one
    process where the hook patched SGLang. ``cache_before`` is a ``snapshot_autotune_cache``
    taken before the boot; with it, fresh vs cached comes from the files themselves.
    ``device`` (the server's resolved ``device``) explains an autotune that cannot run on
    this host; ``processes`` names the server's pids in the message; ``versions`` (the server's
    packages) tells a cache file FlashInfer ignored, as written in another environment, from
    one it loaded.
    """
    started: set[int] = set()
    completed: set[int] = set()
    unattributed_starts = unattributed_dones = 0
    cache_files: list[str] = []
    pids: list[int] = []
    loaded: list[int] = []
    decisions: list[tuple[int, str]] = []
    failures: list[str] = []
    lines: list[str] = []
    fresh_signal = cached_signal = uncached_run = False
    for line in log_text.splitlines():
        seen = _HOOK.search(line)
        if seen:
            lines.append(line)
            kind, pid = seen.group(1), int(seen.group(3))
            if kind == "FAILED":
                failures.append(line[line.index(_hook.EVIDENCE_PREFIX) :])
            elif kind == "loaded":
                loaded.append(pid)
            elif kind == "decision evaluated":
                result = _DECISION_RESULT.search(seen.group(2))
                decisions.append((pid, result.group(1) if result else "?"))
            elif pid not in pids:
                pids.append(pid)
            continue
        if _START in line:
            lines.append(line)
            path = _CACHE_PATH.search(line)
            if path:
                cache_files.append(path.group(1))
                fresh_signal |= "cache reuse DISABLED" in line
            else:
                uncached_run = True
            rank = _rank(line, path.group(1) if path else "", tp_size)
            if rank is None:
                unattributed_starts += 1
            else:
                started.add(rank)
        elif _DONE in line:
            lines.append(line)
            rank = _rank(line, "", tp_size)
            if rank is None:
                unattributed_dones += 1
            else:
                completed.add(rank)
        elif _DISAGREE in line:
            lines.append(line)
            fresh_signal = True
        elif _FI_LOADED.search(line):
            lines.append(line)
            cached_signal = True
        elif (saved := _FI_SAVED_NEW.search(line)) is not None:
            lines.append(line)
            fresh_signal |= int(saved.group(2)) > 0
    # Without TP prefixes (custom logging config) lines cannot name ranks; count them.
    if unattributed_starts >= tp_size - len(started) > 0:
        started = set(range(tp_size))
    if unattributed_dones >= tp_size - len(completed) > 0:
        completed = set(range(tp_size))
    if cache_before is not None and cache_files:
        tuning = _tuning_from_files(cache_files, cache_before, versions or {})
    elif fresh_signal or uncached_run:
        tuning = "mixed" if cached_signal else "fresh"
    else:
        tuning = "cached" if cached_signal else "unknown"
    cache_dir = _cache_dir(cache_files)
    missing_start = sorted(set(range(tp_size)) - started)
    missing_done = sorted(set(range(tp_size)) - completed)
    problems = []
    if failures:
        problems.append("the perfgate hook failed: " + failures[0])
    if expect_patch and not pids:
        problems.append(
            f"no '{_hook.EVIDENCE_PREFIX} patched' line: the hook did not run in any server "
            "process (is PYTHONPATH overridden by the server command?)"
        )
    if missing_start:
        problems.append(
            f"no '{_START}' line from TP rank(s) {_ranks(missing_start)} of {tp_size}: "
            "SGLang did not autotune there (--disable-flashinfer-autotune? a MoE runner "
            'backend it does not tune? [server] flashinfer_cutlass_autotune = "off"?)'
        )
    elif missing_done:
        problems.append(f"autotune started but no '{_DONE}' line from TP rank(s) {_ranks(missing_done)}")
    evidence = AutotuneEvidence(
        ok=not problems,
        message="",
        tp_size=tp_size,
        ranks_started=tuple(sorted(started)),
        ranks_completed=tuple(sorted(completed)),
        tuning=tuning,
        cache_dir=cache_dir,
        cache_files=tuple(dict.fromkeys(cache_files)),
        patched_pids=tuple(pids),
        hook_failures=tuple(failures),
        lines=tuple(lines),
        loaded_pids=tuple(dict.fromkeys(loaded)),
        decisions=tuple(decisions),
        processes=dict(processes or {}),
    )
    summary = evidence.hook_summary()
    if not started and device and device != "cuda":
        # Nothing to verify is not the same as a failed tuning: say why it cannot happen here.
        message = (
            f"FlashInfer autotune not run on this host: the server runs on device {device!r}, and SGLang "
            "autotunes FlashInfer's MoE kernels only on CUDA GPUs of compute capability 9 or newer"
        )
        extra = [p for p in problems if not p.startswith(f"no '{_START}'")]
        if extra:
            message += "; " + "; ".join(extra)
    elif problems:
        message = "FlashInfer autotune not verified: " + "; ".join(problems)
    else:
        where = f" in {cache_dir}" if cache_dir else ""
        message = f"FlashInfer autotune ran on {tp_size}/{tp_size} TP ranks ({tuning} tactics{where})"
    if summary:
        message += f"; {summary}"
    return replace(evidence, message=message)


def _rank(line: str, cache_path: str, tp_size: int) -> int | None:
    for pattern, text in ((_RANK_FILE, Path(cache_path).name), (_PREFIX_RANK, line)):
        match = pattern.search(text) if text else None
        if match:
            return int(match.group(1))
    return 0 if tp_size == 1 else None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def _cache_dir(cache_files: list[str]) -> str:
    if not cache_files:
        return ""
    parent = Path(cache_files[0]).parent
    return str(parent.parent if parent.name == "runs" else parent)


def _tuning_from_files(cache_files: list[str], before: Mapping[str, str], versions: Mapping[str, str | None]) -> Tuning:
    kinds: set[Tuning] = set()
    for name in dict.fromkeys(cache_files):
        path = Path(name)
        key = str(path.resolve())
        if key in before and path.is_file() and _sha256(path) == before[key]:
            # An unchanged file of another environment was ignored: FlashInfer tuned afresh
            # and kept the other environment's file as it was.
            kinds.add("fresh" if written_elsewhere(path, versions) else "cached")
        else:
            kinds.add("fresh")
    return "mixed" if len(kinds) > 1 else kinds.pop()
