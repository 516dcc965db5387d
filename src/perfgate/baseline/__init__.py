"""Baselines: the accepted numbers per (profile, workload, hardware + software fingerprint).

``fingerprint_for(...)`` builds the comparability key; ``BaselineStore(root)`` loads and saves
one JSON file per key, atomically and under a file lock, refusing to store worse numbers
unless a reason is given. Every unusable file raises :class:`perfgate.errors.BaselineError`.
"""

from perfgate.baseline._args import normalize_args
from perfgate.baseline._diff import BaselineDiff, MetricChange, diff, others_note
from perfgate.baseline._document import FIX_HINT, MIGRATIONS, SCHEMA_VERSION, Baseline
from perfgate.baseline._fingerprint import Fingerprint, fingerprint_for
from perfgate.baseline._provenance import (
    current_user,
    git_commit,
    perfgate_version,
    provenance,
    utc_now_iso,
)
from perfgate.baseline._store import BaselineStore, read_baseline

__all__ = [
    "FIX_HINT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Baseline",
    "BaselineDiff",
    "BaselineStore",
    "Fingerprint",
    "MetricChange",
    "current_user",
    "diff",
    "fingerprint_for",
    "git_commit",
    "normalize_args",
    "others_note",
    "perfgate_version",
    "provenance",
    "read_baseline",
    "utc_now_iso",
]
