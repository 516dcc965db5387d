"""Which FlashInfer autotune tactics a boot used: the tactic cache, read and fingerprinted.

Two fresh autotunes of the same kernels can pick different tactics and serve several per cent
apart (FlashInfer RFC #3920: 86 of 191 entries differed, 9 %), so a gate that sees only "the
autotune ran" cannot tell a slower boot from a slower release. The record kept here names each
tuned shape and its tactic by a short digest, so two boots' records say how many entries differ.

FlashInfer's cache file (``AutoTuner.save_configs``, flashinfer/autotuner/autotuner.py, 0.6.15):
one JSON object per TP rank, SGLang's ``rank_tp<r>_pp<p>_dp<d>.json`` under
``$SGLANG_CACHE_DIR/flashinfer/autotune/<flashinfer version>/<sm>/<hash>/`` (SGLang 0.5.12+),
``"_metadata"`` first (``flashinfer_version``, ``cuda_version``, ``cublas_version``,
``cudnn_version``, ``cudnn_frontend_version``, ``gpu``), then one entry per tuned shape:
``"(<op>, <runner>, <profile>, <extras>)": [<runner>, <tactic>]``. ``load_configs`` ignores a
whole file whose metadata differs from the running environment, re-tunes, and does not
overwrite it (``save_configs`` keeps another environment's file): the file on disk is then not
what the boot used.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate import _json
from perfgate._files import read_bytes

MAX_CACHE_BYTES = 16 * 1024 * 1024
"""A rank's cache file read at most: 191 tuned shapes take about 40 KB."""
_METADATA = "_metadata"
_SM = re.compile(r"sm_?\d+[a-z]?")
# The metadata fields perfgate can check against what it knows of the server's environment
# (its package versions); the others (cuBLAS, cuDNN, the GPU's name) FlashInfer checks alone.
_CHECKED = {"flashinfer_version": "flashinfer", "cuda_version": "cuda"}


def _short(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class TacticRecord:
    """The tactics in a boot's autotune cache files.

    ``entries``: ``<rank file stem>:<digest of the tuned shape>`` -> digest of its runner and
    tactic; ``digest``: SHA-256 over all of them ("" when none); ``flashinfer_version`` and
    ``arch`` (e.g. "sm90") from the files' metadata and folder; ``environment``: the metadata
    FlashInfer recorded when it wrote the first file. ``problem``: why the record does not
    describe the tactics this boot used ("" when it does): a missing, unreadable or empty file,
    or one FlashInfer ignored.
    """

    files: tuple[str, ...]
    entries: Mapping[str, str] = field(default_factory=dict)
    digest: str = ""
    flashinfer_version: str = ""
    arch: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "entries": len(self.entries),
            "digest": self.digest,
            "flashinfer_version": self.flashinfer_version,
            "arch": self.arch,
            "environment": dict(self.environment),
            "problem": self.problem,
            "tactics": dict(sorted(self.entries.items())),
        }

    @classmethod
    def from_dict(cls, data: Any) -> TacticRecord:
        """Inverse of :meth:`to_dict`; ValueError naming what is wrong for anything else (a
        baseline's provenance is a file a person can edit)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a tactic record is an object, not {type(data).__name__}")
        tactics = data.get("tactics")
        if not isinstance(tactics, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in tactics.items()
        ):
            raise ValueError("its 'tactics' must map strings to strings")
        files = data.get("files")
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ValueError("its 'files' must be a list of paths")
        text = {k: data.get(k, "") for k in ("digest", "flashinfer_version", "arch", "problem")}
        if not all(isinstance(v, str) for v in text.values()):
            raise ValueError(f"its {', '.join(text)} must be strings")
        environment = data.get("environment", {})
        if not isinstance(environment, Mapping):
            raise ValueError("its 'environment' must be an object")
        if text["digest"] != _digest(tactics):
            raise ValueError("its digest does not match its tactics (edited by hand?)")
        return cls(
            tuple(files),
            dict(tactics),
            text["digest"],
            text["flashinfer_version"],
            text["arch"],
            {str(k): str(v) for k, v in environment.items()},
            text["problem"],
        )

    def summary(self) -> str:
        """E.g. ``191 tactics in 1 file (sm90, flashinfer 0.6.15.post1), digest 3f2a9c1e0b7d4455``."""
        if self.problem:
            return f"tactics not recorded: {self.problem}"
        where = ", ".join(
            x for x in (self.arch, self.flashinfer_version and f"flashinfer {self.flashinfer_version}") if x
        )
        files = f"{len(self.files)} file" + ("s" if len(self.files) != 1 else "")
        return (
            f"{len(self.entries)} tactics in {files}"
            + (f" ({where})" if where else "")
            + f", digest {self.digest[:16]}"
        )


def _digest(entries: Mapping[str, str]) -> str:
    if not entries:
        return ""
    text = "\n".join(f"{k}={v}" for k, v in sorted(entries.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _arch_and_version(path: Path) -> tuple[str, str]:
    """``sm90`` and ``0.6.15.post1`` from ``.../<flashinfer version>/<sm>/<hash>/rank_*.json``
    (a ``runs/`` folder of a cache-reuse-disabled boot sits one level deeper)."""
    parents = [p.name for p in path.parents]
    if parents and parents[0] == "runs":
        parents = parents[1:]
    if len(parents) >= 3 and _SM.fullmatch(parents[1]):
        return parents[1], parents[2]
    return "", ""


def _read_one(path: Path) -> tuple[dict[str, Any], str]:
    """A cache file's object, or why it cannot be read."""
    try:
        size = path.stat().st_size
        if size > MAX_CACHE_BYTES:
            return {}, f"{path}: {size:,} bytes, more than the {MAX_CACHE_BYTES:,} a tactic cache is read to"
        data = _json.loads(read_bytes(path))
    except FileNotFoundError:
        return {}, f"{path}: the file SGLang named is missing (FlashInfer saved nothing there)"
    except (OSError, ValueError) as e:
        return {}, f"{path}: unreadable ({e})"
    if not isinstance(data, dict):
        return {}, f"{path}: not a FlashInfer tactic cache (a JSON {type(data).__name__}, not an object)"
    return data, ""


def read_tactics(cache_files: Sequence[str], versions: Mapping[str, str | None] | None = None) -> TacticRecord:
    """The record of the tactic cache files a boot's log named (one per TP rank).

    ``versions``: the server's package versions (``flashinfer``, ``cuda``); a file whose
    metadata names others was ignored by FlashInfer, which then tuned afresh and kept the file,
    so the record says so in ``problem`` instead of describing tactics the boot did not use.
    Never raises for a file's content: a missing, unreadable, oversized, malformed or empty file
    is named in ``problem``.
    """
    paths = [Path(f) for f in dict.fromkeys(cache_files)]
    entries: dict[str, str] = {}
    problems: list[str] = []
    environment: dict[str, str] = {}
    for path in paths:
        data, problem = _read_one(path)
        if problem:
            problems.append(problem)
            continue
        meta = data.pop(_METADATA, None)
        if isinstance(meta, dict) and not environment:
            environment = {str(k): str(v) for k, v in meta.items()}
        if isinstance(meta, dict) and (stale := foreign_environment(meta, versions or {})):
            problems.append(
                f"{path}: written under {stale}; FlashInfer ignores such a file, tunes afresh and does not "
                "overwrite it, so this boot's tactics are not on disk (remove the file to record them)"
            )
            continue
        if not data:
            problems.append(f"{path}: holds no tactic (FlashInfer tuned no shape, or saved an empty cache)")
            continue
        for key, value in data.items():
            entries[f"{path.stem}:{_short(key)}"] = _short(json.dumps(value, sort_keys=True, default=str))
    arch, from_folder = _arch_and_version(paths[0]) if paths else ("", "")
    return TacticRecord(
        files=tuple(str(p) for p in paths),
        entries={} if problems else entries,
        digest="" if problems else _digest(entries),
        flashinfer_version=environment.get("flashinfer_version", "") or from_folder,
        arch=arch,
        environment=environment,
        problem="; ".join(problems) if problems else ("" if paths else "SGLang named no cache file"),
    )


def written_elsewhere(path: Path, versions: Mapping[str, str | None]) -> str:
    """What in the FlashInfer stamp of the cache file ``path`` differs from the server's ``versions``
    (see :func:`foreign_environment`); "" when nothing does, and for a file that cannot be read
    (then it is not known to be another environment's)."""
    data, problem = _read_one(path)
    meta = data.get(_METADATA)
    return foreign_environment(meta, versions) if not problem and isinstance(meta, dict) else ""


def foreign_environment(metadata: Mapping[str, Any], versions: Mapping[str, str | None]) -> str:
    """What in a cache file's ``_metadata`` differs from the server's ``versions`` (e.g.
    ``flashinfer_version 0.6.11 (this server: 0.6.15.post1)``); "" when nothing perfgate can
    check does. FlashInfer's wildcard ``"*"`` and values it could not determine match anything."""
    out = []
    for key, package in _CHECKED.items():
        saved, current = metadata.get(key), versions.get(package)
        if saved in (None, "*", "unknown", "None") or not current or str(saved) == current:
            continue
        out.append(f"{key} {saved} (this server: {current})")
    return ", ".join(out)


def compare_tactics(old: Any, new: Any, labels: tuple[str, str] = ("the baseline", "this run")) -> str:
    """What differs between two :meth:`TacticRecord.to_dict` records (a baseline's and this
    run's, or ``labels`` names them: ("A", "B") for an A/B), e.g. ``autotune tactics: 86 of 191
    entries differ from the baseline's (80 changed, 6 only in the baseline)``; "" when they match
    or neither side recorded tactics."""
    if old is None and new is None:
        return ""
    sides: list[tuple[str, TacticRecord | None, str]] = []
    for label, data in zip(labels, (old, new)):
        if data is None:
            sides.append((label, None, "recorded no tactic cache"))
            continue
        try:
            record = TacticRecord.from_dict(data)
        except ValueError as e:
            sides.append((label, None, f"has a malformed tactic record: {e}"))
            continue
        sides.append((label, record, record.problem))
    (_, a, why_a), (_, b, why_b) = sides
    if a is None or b is None or why_a or why_b:
        why = "; ".join(f"{label} {why}" if rec is None else f"{label}: {why}" for label, rec, why in sides if why)
        return f"autotune tactics: not compared ({why})"
    if a.digest == b.digest:
        return ""
    changed = sum(1 for k, v in a.entries.items() if k in b.entries and b.entries[k] != v)
    only_old = len(a.entries.keys() - b.entries.keys())
    only_new = len(b.entries.keys() - a.entries.keys())
    union = len(a.entries.keys() | b.entries.keys())
    parts = [
        f"{n} {what}"
        for n, what in ((changed, "changed"), (only_old, f"only in {labels[0]}"), (only_new, f"only in {labels[1]}"))
        if n
    ]
    where = f"; {a.arch or '?'} -> {b.arch or '?'}" if a.arch != b.arch else ""
    between = "from the baseline's" if labels[0] == "the baseline" else f"between {labels[0]} and {labels[1]}"
    return (
        f"autotune tactics: {changed + only_old + only_new} of {union} entries differ {between} "
        f"({', '.join(parts)}{where})"
    )
