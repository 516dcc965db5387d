"""What changed in the server's stack between a baseline's record and this run's: the suspects
of a regression, most likely first.

The tactics FlashInfer's autotune picked come first: an autotune that chose other kernels moves
throughput by itself (9 % between two fresh tunes of the same release, FlashInfer RFC #3920),
whatever else changed. Then whether the autotune ran at all, then the packages' versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfgate.server.autotune import TacticRecord, compare_tactics


def describe_autotune(autotune: Mapping[str, Any]) -> str:
    """A server provenance's ``autotune`` record in one line: the decision, the evidence and the
    tactics, e.g. ``decision native (SGLang native), cached; evidence: FlashInfer autotune ran on
    1/1 TP ranks (...); tactics: 191 in 1 file (sm90, flashinfer 0.6.15.post1), digest ...``."""
    tuning = f", {autotune['tuning']}" if autotune.get("tuning") else ""
    line = f"decision {autotune.get('decision')} (SGLang {autotune.get('status')}){tuning}"
    line += f"; evidence: {autotune.get('evidence')}"
    tactics = autotune.get("tactics")
    if tactics is not None:
        try:
            line += f"; {TacticRecord.from_dict(tactics).summary()}"
        except ValueError as e:
            line += f"; tactic record malformed: {e}"
    return line


def _autotune_state(autotune: Mapping[str, Any]) -> str:
    ran = "ran" if autotune.get("ok") is True else "not verified"
    return f"{autotune.get('decision', '?')}, {ran}"


def stack_changes(old: Any, new: Mapping[str, Any]) -> list[str]:
    """The differences between ``old`` (a baseline's ``provenance["server"]``: any shape, a
    person can edit the file) and ``new`` (this run's server provenance), most suspect first,
    e.g. ``["autotune tactics: 86 of 191 entries differ from the baseline's (86 changed)",
    "flashinfer 0.6.11.post1 -> 0.6.15.post1"]``; [] when nothing perfgate records changed."""
    if not isinstance(old, Mapping):
        return []
    out = []
    before, now = old.get("autotune"), new.get("autotune")
    if isinstance(before, Mapping) and isinstance(now, Mapping):
        tactics = compare_tactics(before.get("tactics"), now.get("tactics"))
        if tactics:
            out.append(tactics)
        if _autotune_state(before) != _autotune_state(now):
            out.append(f"FlashInfer autotune: {_autotune_state(before)} -> {_autotune_state(now)}")
    old_versions, new_versions = old.get("versions"), new.get("versions")
    # A baseline that recorded no versions says nothing about them (not "absent -> x" for each).
    if isinstance(old_versions, Mapping) and old_versions and isinstance(new_versions, Mapping):
        for package in sorted({*old_versions, *new_versions}, key=str):
            a, b = old_versions.get(package), new_versions.get(package)
            if a != b:
                out.append(f"{package} {a or 'absent'} -> {b or 'absent'}")
    return out
