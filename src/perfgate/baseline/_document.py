"""The baseline document: what one JSON file holds, its schema version and migrations.

Files are written with sorted keys, indent 2 and a trailing newline so that a baseline update
reads well in ``git diff``. A document from an older schema is upgraded on read through
:data:`MIGRATIONS` (version -> function returning the next version's dict); a document from a
newer perfgate is refused rather than guessed at.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate._limits import MAX_BOOTS, is_boot
from perfgate._stats import median
from perfgate.baseline._args import normalize_args
from perfgate.baseline._fingerprint import Fingerprint, driver_major
from perfgate.catalogue import METRICS, names
from perfgate.errors import BaselineError

SCHEMA_VERSION = 1

FIX_HINT = (
    "re-record it with `pytest perf_tests --perf-update-baselines` (the unusable file is moved aside, "
    "not deleted), or delete it"
)


class NewerSchemaError(BaselineError):
    """A baseline written by a newer perfgate: valid, only not for this one; never overwritten."""


@dataclass
class Baseline:
    """The accepted numbers for one (profile, workload, fingerprint).

    ``repeats`` holds every repeat's raw metrics (flat dicts of finite numbers); ``telemetry``
    is the per-GPU telemetry summary as given by the caller (any JSON-able dict);
    ``provenance`` holds versions, date, host, user, git commit and acceptance notes.
    ``record`` is what a stage keeps beside its numbers (the correctness probe's answers; any
    JSON-able dict, validated by that stage; left out of the file when empty).
    ``source`` is the file it was read from (not stored).
    ``boots`` labels each repeat with the boot of the server it ran on (``[gate] boots``),
    counted from 1; None when all ran on one boot, and then the file has no "boots" key, as
    every baseline recorded before boots existed: those load and gate as one boot.
    """

    profile: str
    workload: str
    fingerprint: Fingerprint
    repeats: list[dict[str, float]]
    telemetry: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    source: Path | None = field(default=None, compare=False)
    record: dict[str, Any] = field(default_factory=dict)
    boots: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return (
            ({"record": self.record} if self.record else {})
            | ({"boots": self.boots} if self.boots else {})
            | {
                "schema_version": SCHEMA_VERSION,
                "profile": self.profile,
                "workload": self.workload,
                "fingerprint": self.fingerprint.to_dict(),
                "fingerprint_digest": self.fingerprint.digest,
                "repeats": [dict(r) for r in self.repeats],
                "telemetry": self.telemetry,
                "provenance": self.provenance,
            }
        )

    def to_json(self) -> str:
        """Stable text: sorted keys, indent 2, trailing newline. ValueError on NaN/inf."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def medians(self) -> dict[str, float]:
        """Median over repeats of every metric any repeat has."""
        names = sorted({k for r in self.repeats for k in r})
        return {k: median([r[k] for r in self.repeats if k in r]) for k in names}

    @classmethod
    def from_dict(cls, data: Any, source: Path) -> Baseline:
        """Validate (and migrate) a parsed document; BaselineError names ``source`` and the fix."""
        if not isinstance(data, dict):
            raise BaselineError(f"baseline {source}: expected a JSON object at the top level; {FIX_HINT}")
        if "schema_version" in data:
            version = data["schema_version"]
        elif _V0_KEYS & data.keys():
            # Schema 0 files had no version key; they are known by their own keys.
            version = 0
        else:
            raise BaselineError(
                f"baseline {source}: no schema_version key, and it is not a schema 0 baseline (those have "
                f"{', '.join(sorted(_V0_KEYS))}); if it is a current baseline that lost the key, add "
                f'"schema_version": {SCHEMA_VERSION}, else {FIX_HINT}'
            )
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise BaselineError(
                f"baseline {source}: schema_version must be a whole number, got {version!r}; {FIX_HINT}"
            )
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(
                f"baseline {source}: written by a newer perfgate (schema {version}; this perfgate reads up to "
                f"{SCHEMA_VERSION}); upgrade perfgate (pip install -U perfgate) to use or replace it"
            )
        try:
            while version < SCHEMA_VERSION:
                data = MIGRATIONS[version](data)
                version += 1
            return cls._from_current(data, source)
        except (KeyError, TypeError, ValueError) as e:
            what = f"missing key {e}" if isinstance(e, KeyError) else str(e)
            raise BaselineError(
                f"baseline {source}: not a valid schema {version} baseline ({what}); {FIX_HINT}"
            ) from None

    @classmethod
    def _from_current(cls, data: Mapping[str, Any], source: Path) -> Baseline:
        for key in ("profile", "workload"):
            if not isinstance(data[key], str):
                raise TypeError(f"{key} must be a string")
        for key in ("telemetry", "provenance", "record"):
            if not isinstance(data.get(key, {}), dict):
                raise TypeError(f"{key} must be an object")
        fingerprint = Fingerprint.from_dict(data["fingerprint"])
        repeats = check_repeats(data["repeats"])
        return cls(
            profile=data["profile"],
            workload=data["workload"],
            fingerprint=fingerprint,
            repeats=repeats,
            boots=check_boots(data.get("boots"), len(repeats)),
            telemetry=dict(data.get("telemetry", {})),
            provenance=dict(data.get("provenance", {})),
            source=source,
            record=dict(data.get("record", {})),
        )


# No perfgate metric comes near this (tokens, joules, milliseconds of a long run are < 1e12):
# a larger value is a corrupt or hand-made file, and as a baseline it would pass any run.
PLAUSIBLE_MAX = 1e15


def check_repeats(repeats: Any) -> list[dict[str, float]]:
    """Repeats as a list of {metric: number in [0, PLAUSIBLE_MAX]} (every perfgate metric is a
    count, a rate, a time or a share: none is negative); TypeError/ValueError naming the problem."""
    if not isinstance(repeats, list) or not repeats:
        raise ValueError("repeats must be a non-empty list of metric objects")
    out = []
    for i, r in enumerate(repeats):
        if not isinstance(r, dict):
            raise TypeError(f"repeat #{i + 1} must be an object of metric: number")
        for k, v in r.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise ValueError(f"repeat #{i + 1} metric {k!r} must be a finite number, got {v!r}")
            if not 0 <= v <= PLAUSIBLE_MAX:
                raise ValueError(
                    f"repeat #{i + 1} metric {k!r} is {v!r}: no measurement is negative or above {PLAUSIBLE_MAX:g}"
                )
        out.append({str(k): float(v) for k, v in r.items()})
    return out


def check_boots(boots: Any, n_repeats: int) -> list[int] | None:
    """The "boots" key: absent (None), or one boot number (1 to MAX_BOOTS) per repeat; ValueError
    naming the problem."""
    if boots is None:
        return None
    if not isinstance(boots, list) or len(boots) != n_repeats or not all(map(is_boot, boots)):
        raise ValueError(
            f"boots must list the boot (a whole number from 1 to {MAX_BOOTS}) of each of the {n_repeats} repeats, "
            f"got {boots!r}"
        )
    return list(boots)


def gated_problems(baseline: Baseline, gated: Iterable[str]) -> list[str]:
    """Why ``baseline`` cannot judge the ``gated`` metrics: one missing from a repeat (it would
    read as "no baseline" and pass unjudged), or 0 where that gates nothing (see
    :attr:`perfgate.catalogue.Metric.zero_ok`). Power metrics may all be absent together: power was
    not measured when it was recorded, which the gate reports as such."""
    power = names("telemetry")
    measured_power = any(m in power for r in baseline.repeats for m in r)
    problems = []
    for metric in sorted(set(gated)):
        if metric in power and not measured_power:
            continue
        missing = [i for i, r in enumerate(baseline.repeats, start=1) if metric not in r]
        if missing:
            problems.append(f"gated metric {metric!r} is missing from repeat(s) {', '.join(map(str, missing))}")
        elif (
            metric in METRICS
            and not METRICS[metric].zero_ok
            and (zero := [i for i, r in enumerate(baseline.repeats, 1) if r[metric] <= 0])
        ):
            problems.append(
                f"gated metric {metric!r} is 0 in repeat(s) {', '.join(map(str, zero))}: a run that measured nothing"
            )
    return problems


def _v0_to_v1(old: Mapping[str, Any]) -> dict[str, Any]:
    """Schema 0 (perfgate before baselines kept raw repeats) to schema 1.

    Schema 0 kept only the mean of each metric ("means") and the repeat count, hardware under
    "machine" (gpu, gpus, power_limit in W as a float, full driver version), the server under
    "server" (engine, model, raw args) and the workload spec under "spec". The means become one
    repeat, so the noise test stays off (tolerance alone) until the baseline is re-recorded.
    """
    machine, server = old["machine"], old["server"]
    limit = machine.get("power_limit")
    fingerprint = Fingerprint(
        gpu_model=" ".join(str(machine["gpu"]).split()),
        gpu_count=int(machine["gpus"]),
        power_limit_w=None if limit is None else round(float(limit)),
        driver_major=driver_major(str(machine.get("driver", ""))),
        engine=str(server.get("engine", "sglang")),
        model=str(server["model"]).strip().rstrip("/"),
        server_args=normalize_args(server.get("args", [])),
        workload=dict(old["spec"]),
    )
    provenance = {
        "versions": dict(old.get("versions", {})),
        "date": old.get("recorded_at"),
        "user": old.get("recorded_by"),
        "migrated_from_schema": 0,
        "migration_note": (
            f"schema 0 kept means of {old.get('n_repeats', '?')} repeats only; they are stored as one repeat, "
            "so the noise test is off until this baseline is re-recorded"
        ),
    }
    return {
        "schema_version": 1,
        "profile": old["profile"],
        "workload": old["workload"],
        "fingerprint": fingerprint.to_dict(),
        "repeats": [dict(old["means"])],
        "telemetry": {},
        "provenance": provenance,
    }


# Keys only a schema 0 document has (it had no schema_version).
_V0_KEYS = frozenset({"machine", "means", "spec"})

MIGRATIONS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {0: _v0_to_v1}
"""schema version -> function upgrading a parsed document of that version to the next one."""
