"""What makes two measurements comparable: hardware, driver, engine, model, flags, workload.

Library versions (SGLang, FlashInfer, torch, CUDA) are deliberately NOT part of it: they are
provenance, so that an upgrade is gated against the numbers recorded before it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from perfgate._cpus import format_cpu_list, parse_cpu_list
from perfgate.baseline._args import normalize_args
from perfgate.profile import Workload


@dataclass(frozen=True)
class Fingerprint:
    """The comparability key of a baseline.

    ``power_limit_w`` is the enforced per-GPU power limit rounded to whole watts (None when it
    could not be read, e.g. no GPU); ``driver_major`` is "580" for driver "580.105.08";
    ``server_args`` is already normalized (see :func:`normalize_args`); ``workload`` is
    :meth:`Workload.spec`. ``cpu`` describes the host's processor where no GPU serves (e.g.
    "AMD EPYC 9654 96-Core Processor x2"); "" on GPU hosts, where it is left out of the
    canonical form so GPU fingerprints keep their digests. ``cpu_affinity`` is ``[server]
    cpu_affinity`` in the kernel's cpulist form ("0-7"): where the server's processes may run changes
    how fast its host side is, so a pinned server is not compared with an unpinned one; "" (not
    set) is left out of the canonical form, so fingerprints from before the key keep their digests.
    """

    gpu_model: str
    gpu_count: int
    power_limit_w: int | None
    driver_major: str
    engine: str
    model: str
    server_args: tuple[str, ...]
    workload: Mapping[str, Any] = field(default_factory=dict)
    cpu: str = ""
    cpu_affinity: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "power_limit_w": self.power_limit_w,
            "driver_major": self.driver_major,
            "engine": self.engine,
            "model": self.model,
            "server_args": list(self.server_args),
            "workload": dict(self.workload),
        }
        if self.cpu:
            out["cpu"] = self.cpu
        if self.cpu_affinity:
            out["cpu_affinity"] = self.cpu_affinity
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fingerprint:
        """Inverse of :meth:`to_dict`; raises KeyError/TypeError/ValueError on a bad shape."""
        expected = {f.name for f in fields(cls)}
        optional = {"cpu", "cpu_affinity"}
        if not expected - optional <= set(data) <= expected:
            missing = sorted(expected - optional - set(data))
            extra = sorted(set(data) - expected)
            raise ValueError(f"fingerprint fields differ (missing {missing}, unexpected {extra})")
        cpu, cpu_affinity = data.get("cpu", ""), data.get("cpu_affinity", "")
        for name, value in (("cpu", cpu), ("cpu_affinity", cpu_affinity)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a string, got {value!r}")
        limit = data["power_limit_w"]
        if not (limit is None or (isinstance(limit, int) and not isinstance(limit, bool))):
            raise TypeError(f"power_limit_w must be an integer or null, got {limit!r}")
        if not isinstance(data["gpu_count"], int) or isinstance(data["gpu_count"], bool):
            raise TypeError(f"gpu_count must be an integer, got {data['gpu_count']!r}")
        for key in ("gpu_model", "driver_major", "engine", "model"):
            if not isinstance(data[key], str):
                raise TypeError(f"{key} must be a string, got {data[key]!r}")
        args = data["server_args"]
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise TypeError("server_args must be a list of strings")
        if not isinstance(data["workload"], dict):
            raise TypeError("workload must be an object")
        return cls(
            gpu_model=data["gpu_model"],
            gpu_count=data["gpu_count"],
            power_limit_w=limit,
            driver_major=data["driver_major"],
            engine=data["engine"],
            model=data["model"],
            server_args=tuple(args),
            workload=dict(data["workload"]),
            cpu=cpu,
            cpu_affinity=cpu_affinity,
        )

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    @property
    def digest(self) -> str:
        """12 hex digits of sha256 over the canonical JSON: stable across runs and machines."""
        return hashlib.sha256(self.canonical_json().encode("ascii")).hexdigest()[:12]

    @property
    def slug(self) -> str:
        """Readable hardware part of a file name, e.g. ``8xrtx-pro-6000-blackwell-600W``, or
        ``cpu-amd-epyc-9654-96-core-processor-x2`` where no GPU serves."""
        if self.cpu and not self.gpu_count:
            return "cpu-" + _slugify(self.cpu)[:48].strip("-")
        gpu = _slugify(re.sub(r"(?i)^nvidia\s+", "", self.gpu_model)) or "nogpu"
        limit = f"-{self.power_limit_w}W" if self.power_limit_w is not None else ""
        return f"{self.gpu_count}x{gpu[:40].strip('-')}{limit}"

    def __hash__(self) -> int:
        return hash(self.canonical_json())

    def differences(self, other: Fingerprint) -> list[tuple[str, Any, Any]]:
        """(field, self's value, other's value) for every field that differs (a field left out of one's
        canonical form, ``cpu`` or ``cpu_affinity``, is "" there)."""
        mine, theirs = self.to_dict(), other.to_dict()
        names = [*mine, *(k for k in theirs if k not in mine)]
        return [(k, mine.get(k, ""), theirs.get(k, "")) for k in names if mine.get(k, "") != theirs.get(k, "")]

    def describe_difference(self, other: Fingerprint) -> str:
        """One line such as ``gpu_count 8 -> 4, server_args --tp-size=8 -> --tp-size=4`` (self -> other;
        for server_args, the flags only self has -> the flags only other has)."""
        parts = []
        for name, old, new in self.differences(other):
            if name == "server_args":
                removed = sorted(set(old) - set(new))
                added = sorted(set(new) - set(old))
                parts.append(f"server_args {' '.join(removed) or '(none)'} -> {' '.join(added) or '(none)'}")
            elif name == "workload":
                keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
                parts.append("workload " + ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys))
            else:
                parts.append(f"{name} {old!r} -> {new!r}" if isinstance(old, str) else f"{name} {old} -> {new}")
        return ", ".join(parts) or "nothing"


def _slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def driver_major(version: str) -> str:
    """ "580.105.08" -> "580"; "" stays "" (no driver, e.g. the simulator)."""
    return version.strip().split(".", 1)[0]


def fingerprint_for(
    *,
    gpu_model: str,
    gpu_count: int,
    power_limit_w: float | None,
    driver_version: str,
    engine: str,
    model: str,
    server_args: Iterable[str],
    workload: Workload | Mapping[str, Any],
    flag_aliases: Mapping[str, str] | None = None,
    cpu: str = "",
    cpu_affinity: str = "",
) -> Fingerprint:
    """Build a fingerprint from raw facts: rounds the limit, cuts the driver to its major
    version, normalizes the args (``flag_aliases``: the server's short options -> long names)
    and takes the workload's spec. Runs of spaces in the GPU model name collapse to one
    ("NVIDIA  H100" == "NVIDIA H100"). ``cpu_affinity`` (a cpulist) is kept in its normal form
    ("1,0" == "0-1")."""
    limit = None if power_limit_w is None or not math.isfinite(power_limit_w) else round(power_limit_w)
    spec = workload.spec() if isinstance(workload, Workload) else dict(workload)
    return Fingerprint(
        gpu_model=" ".join(gpu_model.split()),
        gpu_count=gpu_count,
        power_limit_w=limit,
        driver_major=driver_major(driver_version),
        engine=engine,
        model=model.strip().rstrip("/"),
        server_args=normalize_args(server_args, flag_aliases),
        workload=spec,
        cpu=" ".join(cpu.split()),
        cpu_affinity=format_cpu_list(parse_cpu_list(cpu_affinity)) if cpu_affinity else "",
    )
