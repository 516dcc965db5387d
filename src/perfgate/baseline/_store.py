"""Baselines on disk: one JSON file per (profile, workload, fingerprint).

Layout: ``<root>/<profile>/<workload>--<count>x<gpu>-<limit>W--<digest>.json``, the names as
``perfgate._names.file_stem`` spells them. The file name is for people; the fingerprint inside
the file is the truth, so lookups read the workload's files and compare fingerprints (a renamed
or migrated file is still found). Only regular files are read; a symbolic link is followed
when its target lies inside the root (a link leading out of it is reported as unusable: a
baseline must be reviewable where it is stored).

Writes go to a temporary file in the same directory, are fsynced, then ``os.replace``d over
the target, all under a ``filelock.FileLock`` per (profile, workload): readers never see a
partial file and concurrent writers never lose a file.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import filelock

from perfgate import _json
from perfgate._files import WriteFailed, kind_of, publish, read_named
from perfgate._json import JSONInputError
from perfgate._names import file_stem, path_in
from perfgate.baseline._document import (
    FIX_HINT,
    Baseline,
    NewerSchemaError,
    check_boots,
    check_repeats,
    gated_problems,
)
from perfgate.baseline._fingerprint import Fingerprint
from perfgate.errors import BaselineError

LOCK_TIMEOUT_S = 120.0


class RegressionCheck(Protocol):
    """What the store asks before it replaces stored numbers, under its lock: the caller's
    judgement of the new repeats against the stored ones (the gate policy's, injected, so that the
    store only stores)."""

    @property
    def gated(self) -> Sequence[str]:
        """The metrics every stored repeat must hold."""
        ...

    def regressions(self, new: Baseline, stored: Baseline) -> list[str]:
        """One line per metric ``new`` is worse in than ``stored``; [] when none is."""
        ...


class BaselineStore:
    """Baseline files under ``root`` (a repository's ``baselines/`` by default at the call site)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        # Unusable files found by check(for_update=True): skipped on reads, moved aside when
        # their workload is recorded.
        self._quarantined: set[Path] = set()
        self.notes: list[str] = []

    def check(self, profile: str, *, for_update: bool, gated: Mapping[str, Collection[str]] | None = None) -> list[str]:
        """Read every baseline file of ``profile`` before anything boots; return notes.

        A gate run must not measure for half an hour and then fail on a file it could have read
        at the start. ``gated`` (workload or sweep name -> gated metrics) adds the sense checks
        of :func:`gated_problems`. Without ``for_update`` any unusable file raises one
        BaselineError listing them all. With it (the documented fix for a corrupt file), corrupt
        files are only noted: they are skipped and moved aside (never deleted) when their
        workload is recorded; a file of a newer perfgate still raises, and so do two files of
        one fingerprint (which one is the accepted baseline is for a person to say) and a
        directory that cannot be written.
        """
        folder = self._folder(profile)
        corrupt: list[BaselineError] = []
        newer: list[BaselineError] = []
        readable: list[Baseline] = []
        for path in self._listed(folder, "*.json"):
            try:
                b = self._read(path)
            except NewerSchemaError as e:
                newer.append(e)
                continue
            except BaselineError as e:
                corrupt.append(e)
                self._quarantined.add(path)
                continue
            if b is None:
                continue
            senseless = gated_problems(b, (gated or {}).get(b.workload, ()))
            if senseless:
                corrupt.append(BaselineError(f"baseline {path}: {'; '.join(senseless)}; {FIX_HINT}"))
                self._quarantined.add(path)
            else:
                readable.append(b)
        newer += _duplicates(readable) + self._shared_folder(profile, folder, readable)
        if newer or (corrupt and not for_update):
            problems = newer + ([] if for_update else corrupt)
            raise BaselineError(
                f"{len(problems)} baseline file(s) of profile {profile!r} cannot be used; nothing was run:\n  "
                + "\n  ".join(str(e) for e in problems)
            )
        if for_update:
            _check_writable(folder)
        return [f"{e} (skipped; moved aside when this workload is recorded)" for e in corrupt]

    def _shared_folder(self, profile: str, folder: Path, readable: Sequence[Baseline]) -> list[BaselineError]:
        """Another profile whose baselines share this one's folder: its name has the same file name
        (``team prod`` and ``team_prod``), or one that differs only in case, which a case-insensitive
        file system (macOS's, Windows') makes the same folder. Found before boot: at save time the
        overwrite guard would refuse only after the measurement."""
        problems = []
        others = sorted({b.profile for b in readable if b.profile != profile})
        if others:
            problems.append(
                BaselineError(
                    f"baselines folder {folder}: holds baselines of profile(s) {', '.join(map(repr, others))}, whose "
                    f'name shares this folder with profile {profile!r}; rename one of them (name = "..."), or move '
                    "the other's files out when it was renamed"
                )
            )
        if self.root.is_dir():
            twins = sorted(
                p for p in self.root.iterdir() if p.name != folder.name and p.name.lower() == folder.name.lower()
            )
            problems += [
                BaselineError(
                    f"baselines folders {folder} and {twin} differ only in case: on a case-insensitive file system "
                    "(macOS, Windows) they are one folder, and the two profiles' baselines overwrite each other; "
                    'rename one profile (name = "...")'
                )
                for twin in twins
            ]
        return problems

    def refuse_inside(self, path: Path, option: str, store_option: str) -> None:
        """BaselineError when ``path`` (given with ``option``, a folder perfgate writes) is the
        store or lies in it: the next run would read what it wrote there as baselines."""
        if Path(os.path.realpath(path)).is_relative_to(os.path.realpath(self.root)):
            raise BaselineError(
                f"{option} {path}: lies inside the baseline store {self.root} ({store_option}), and the next run "
                f"would read the files written there as baselines; pass a folder outside it"
            )

    def _folder(self, profile: str) -> Path:
        return path_in(self.root, file_stem(profile))

    def path_for(self, profile: str, workload: str, fingerprint: Fingerprint) -> Path:
        name = f"{file_stem(workload)}--{fingerprint.slug}--{fingerprint.digest}.json"
        return path_in(self._folder(profile), name)

    def _workload_files(self, profile: str, workload: str) -> list[Path]:
        return self._listed(self._folder(profile), f"{glob.escape(file_stem(workload))}--*.json")

    def _listed(self, folder: Path, pattern: str) -> list[Path]:
        """The files of ``folder`` that match ``pattern``, sorted; BaselineError when the folder (or
        the root) is there but cannot be listed: a symbolic link loop or a file globs as empty,
        and every metric would then pass as having no baseline."""
        for path in (self.root, folder):
            problem = _folder_problem(path)
            if problem:
                raise BaselineError(
                    f"baselines folder {path}: {problem}; make it a folder (or a link to one), or pass "
                    "--perf-baselines another one"
                )
        return sorted(folder.glob(pattern))

    def _read(self, path: Path) -> Baseline | None:
        """``read_baseline``, refusing a symbolic link that leads out of the root or nowhere."""
        if path.is_symlink():
            try:
                target = Path(os.path.realpath(path, strict=True))
            except FileNotFoundError:
                return None  # a link whose file is gone: no file, as for a file deleted meanwhile
            except OSError as e:
                raise BaselineError(
                    f"baseline {path}: a symbolic link that cannot be followed ({e.strerror}); replace the link by "
                    "the file itself, or delete it"
                ) from None
            if not target.is_relative_to(self.root.resolve()):
                raise BaselineError(
                    f"baseline {path}: a symbolic link to {target}, outside the baselines folder {self.root}; "
                    "replace the link by the file itself (a baseline is only read from inside its folder)"
                )
        return read_baseline(path)

    def _workload_baselines(self, profile: str, workload: str) -> list[Baseline]:
        found = []
        for path in self._workload_files(profile, workload):
            if path in self._quarantined:
                continue
            b = self._read(path)
            if b is not None and b.profile == profile and b.workload == workload:
                found.append(b)
        return found

    def load(self, profile: str, workload: str, fingerprint: Fingerprint) -> Baseline | None:
        """The baseline recorded for exactly this fingerprint, or None.

        Raises BaselineError for a corrupt, unreadable or future-schema file of this workload,
        and for two files of this fingerprint.
        """
        found = [b for b in self._workload_baselines(profile, workload) if b.fingerprint == fingerprint]
        if len(found) > 1:
            raise _duplicates(found)[0]
        return found[0] if found else None

    def others(self, profile: str, workload: str, fingerprint: Fingerprint) -> list[Baseline]:
        """Baselines of this profile and workload recorded under a different fingerprint.

        Never used for gating; they let a message say what differs, e.g. via
        ``fingerprint.describe_difference(other.fingerprint)``.
        """
        return [b for b in self._workload_baselines(profile, workload) if b.fingerprint != fingerprint]

    def list_all(self) -> tuple[list[Baseline], list[BaselineError]]:
        """Every readable baseline under the root, sorted by file path, and the error of each
        unusable file (one bad file must not hide the others)."""
        found: list[Baseline] = []
        # A profile's folder that is a link leading nowhere would be left out of the glob unseen.
        errors = [
            BaselineError(f"baselines folder {p}: {problem}; make it a folder, or delete the link")
            for p in self._listed(self.root, "*")
            if p.is_symlink() and (problem := _folder_problem(p))
        ]
        for path in self._listed(self.root, "*/*.json"):
            try:
                b = self._read(path)
            except BaselineError as e:
                errors.append(e)
                continue
            if b is not None:
                found.append(b)
        return found, errors

    def _lock(self, profile: str, workload: str) -> filelock.FileLock:
        lock = path_in(self._folder(profile), f".{file_stem(workload)}.lock")
        return filelock.FileLock(str(lock), timeout=LOCK_TIMEOUT_S)

    def save(
        self,
        baseline: Baseline,
        *,
        check: RegressionCheck,
        accept_regression: str | None = None,
        accept_option: str = "--perf-accept-regression",
    ) -> Path:
        """Store ``baseline`` as the accepted numbers for its fingerprint; return the file path.

        Every repeat must hold ``check.gated``. If a baseline already exists for the fingerprint,
        ``check`` (the caller's policy, e.g. ``perfgate.verdict.ToleranceCheck``) judges the new
        repeats against it; when any metric is worse, the save is refused with BaselineError unless
        ``accept_regression`` gives a reason, which is stored in the provenance together with
        what regressed. The comparison is made against the file on disk under the lock, so two
        racing updates cannot slip a regression past each other. ``accept_option`` is the option
        that gives the reason where the caller runs (the refusal names it).
        """
        path = self.path_for(baseline.profile, baseline.workload, baseline.fingerprint)
        try:
            check_boots(baseline.boots, len(check_repeats(baseline.repeats)))
        except (TypeError, ValueError) as e:
            raise BaselineError(f"baseline {path}: cannot be saved: {e}") from None
        # What the next read would refuse is never written.
        problems = gated_problems(baseline, check.gated)
        if problems:
            raise BaselineError(f"baseline {path}: cannot be saved: {'; '.join(problems)}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BaselineError(
                f"baseline directory {path.parent}: cannot be created ({e}); pass a writable directory "
                "with --perf-baselines or fix its permissions"
            ) from None
        lock = self._lock(baseline.profile, baseline.workload)
        try:
            with lock:
                self._move_aside(baseline.profile, baseline.workload)
                current = self.load(baseline.profile, baseline.workload, baseline.fingerprint)
                if current is None:
                    _refuse_foreign(path, baseline)
                provenance = dict(baseline.provenance)
                if current is not None:
                    regressions = check.regressions(baseline, current)
                    if regressions and not accept_regression:
                        raise BaselineError(
                            f"baseline {path}: refusing to replace the stored baseline with worse numbers: "
                            + "; ".join(regressions)
                            + ". Rerun to check it was noise, or accept the change on purpose with "
                            f'{accept_option}="why"'
                        )
                    if accept_regression:
                        provenance["accepted_regression"] = {
                            "reason": accept_regression,
                            "regressions": regressions,
                            "previous_date": current.provenance.get("date"),
                        }
                elif accept_regression:
                    provenance["accepted_regression"] = {"reason": accept_regression, "regressions": []}
                stored = replace(baseline, provenance=provenance, source=path)
                try:
                    text = stored.to_json()
                except (TypeError, ValueError) as e:
                    raise BaselineError(
                        f"baseline {path}: cannot be saved, its telemetry or provenance is not JSON: {e}"
                    ) from None
                _write_atomic(path, text)
                if current is not None and current.source is not None and current.source != path:
                    # The same fingerprint under an old file name (renamed or migrated): keep one file.
                    with contextlib.suppress(FileNotFoundError):
                        current.source.unlink()
        except filelock.Timeout:
            raise BaselineError(
                f"baseline {path}: could not take the lock {lock.lock_file} within {LOCK_TIMEOUT_S:g} s; another "
                "perfgate run is updating baselines. If none is, delete the lock file"
            ) from None
        return path

    def sidecar_path(self, profile: str, workload: str, fingerprint: Fingerprint, kind: str) -> Path:
        """Where a file of ``kind`` that belongs with a baseline lives (``<profile>/<kind>/``, a
        folder of its own so that no baseline glob reads it)."""
        name = f"{file_stem(workload)}--{fingerprint.slug}--{fingerprint.digest}.json"
        return path_in(path_in(self._folder(profile), file_stem(kind)), name)

    def save_sidecar(self, profile: str, workload: str, fingerprint: Fingerprint, kind: str, text: str) -> Path:
        """Write ``text`` as the ``kind`` file of a baseline, atomically and under the workload's lock."""
        path = self.sidecar_path(profile, workload, fingerprint, kind)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock(profile, workload):
                _write_atomic(path, text)
        except filelock.Timeout:
            raise BaselineError(
                f"baseline {path}: could not take the lock within {LOCK_TIMEOUT_S:g} s; another perfgate run is "
                "updating baselines"
            ) from None
        except OSError as e:
            raise BaselineError(f"baseline {path}: cannot be written ({e.strerror or e})") from None
        return path

    def take_notes(self) -> list[str]:
        """What the store did on its own since the last call (files moved aside)."""
        notes, self.notes = self.notes, []
        return notes

    def _move_aside(self, profile: str, workload: str) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for path in self._workload_files(profile, workload):
            if path in self._quarantined:
                aside = path.with_name(f"{path.name}.unusable-{stamp}")
                os.replace(path, aside)
                self._quarantined.discard(path)
                self.notes.append(f"moved the unusable baseline {path} aside to {aside.name}")


def _duplicates(baselines: Sequence[Baseline]) -> list[BaselineError]:
    """One error per fingerprint that more than one file of a workload holds."""
    by_key: dict[tuple[str, str, str], list[Baseline]] = {}
    for b in baselines:
        by_key.setdefault((b.profile, b.workload, b.fingerprint.digest), []).append(b)
    return [
        BaselineError(
            f"baselines {' and '.join(str(b.source) for b in group)}: both hold workload {workload!r} for "
            f"fingerprint {digest}, so which one gates is unknown; keep the accepted one and delete the other"
        )
        for (_, workload, digest), group in sorted(by_key.items())
        if len(group) > 1
    ]


def _refuse_foreign(path: Path, baseline: Baseline) -> None:
    """Refuse to overwrite the baseline of another profile or workload whose names share the
    file name (``team prod`` and ``team_prod``: one profile cannot see the other's names)."""
    try:
        other = read_baseline(path)
    except BaselineError:
        return  # an unusable file of this name is this workload's to move aside or replace
    if other is not None and (other.profile, other.workload) != (baseline.profile, baseline.workload):
        raise BaselineError(
            f"baseline {path}: holds profile {other.profile!r} workload {other.workload!r}, whose names share "
            f"this file name with profile {baseline.profile!r} workload {baseline.workload!r}; refusing to "
            'overwrite it: rename one of them (name = "...")'
        )


def _folder_problem(path: Path) -> str:
    """Why ``path`` cannot be listed as a folder ("" when it can, or when nothing is there)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return ""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a symbolic link to nothing"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    return "" if stat.S_ISDIR(mode) else f"it is {kind_of(mode) or 'a file'}, not a folder"


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".perfgate-write-check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise BaselineError(
            f"baseline directory {folder} is not writable ({e}); nothing was run. Pass a writable directory "
            "with --perf-baselines or fix its permissions"
        ) from None


def read_baseline(path: Path) -> Baseline | None:
    """Parse one baseline file; None if it vanished; BaselineError if it is unusable."""
    try:
        text = read_named(
            path,
            "baseline",
            BaselineError,
            not_a_file="only regular *.json files are baselines: move it out of the baselines folder",
            unreadable=FIX_HINT,
        )
    except FileNotFoundError:
        return None
    try:
        data = _json.loads(text)
    except JSONInputError as e:
        raise BaselineError(f"baseline {path}: {e}; {FIX_HINT}") from None
    return Baseline.from_dict(data, path)


def _write_atomic(path: Path, text: str) -> None:
    try:
        publish(path, [text], exclusive=False)
    except WriteFailed as e:
        raise BaselineError(
            f"baseline {path}: cannot be written ({e.reason}); check permissions and free space"
        ) from None
