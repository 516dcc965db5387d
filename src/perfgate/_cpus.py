"""CPU lists in the kernel's cpulist syntax (``taskset -c``, cpusets, ``Cpus_allowed_list``):
``"0-3,8,10-11"``.

:func:`parse_cpu_list` reads what a person writes (the profile's ``[server] cpu_affinity``) and
:func:`format_cpu_list` writes the one normal form, so ``parse_cpu_list(format_cpu_list(s)) == s``
for every set ``s`` of CPUs and a list written two ways (``"2,0-1,1"``, ``"0-2"``) is recorded alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CPU_MAX = 65_535
"""The highest CPU number a list may name: beyond any kernel's NR_CPUS (8,192 on x86's largest
configuration), low enough that a range of them is a small set, not ``0-99999999999``."""

_NUMBER = re.compile(r"[0-9]+")


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs ``text`` names: comma-separated numbers and ``a-b`` ranges (inclusive), spaces
    around them ignored, repeats and overlaps merged. ValueError saying what is wrong and how to
    write it for an empty list or entry, a negative number, a reversed range, a number above
    :data:`CPU_MAX`, or anything else."""
    if not text.strip():
        raise ValueError("it names no CPU")
    cpus: set[int] = set()
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            raise ValueError(f"{text!r} has an empty entry (two commas, or one at an end)")
        first, dash, last = entry.partition("-")
        first, last = first.strip(), last.strip()
        if dash and not first:
            raise ValueError(f"{entry!r} is negative or a range without a start; CPUs are numbered from 0")
        if dash and not last:
            raise ValueError(f"{entry!r} is a range without an end")
        if not _NUMBER.fullmatch(first) or (dash and not _NUMBER.fullmatch(last)):
            raise ValueError(f"{entry!r} is not a CPU number or a range a-b of them")
        lo = int(first)
        hi = int(last) if dash else lo
        if max(lo, hi) > CPU_MAX:
            raise ValueError(f"{entry!r} names a CPU above {CPU_MAX:,}")
        if hi < lo:
            raise ValueError(f"{entry!r} runs backwards; write {hi}-{lo}")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 5}`` as ``"0-2,5"``: ascending, runs of consecutive CPUs as ranges ("" for none)."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
