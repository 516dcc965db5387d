"""Profiles: a TOML file that says what server to boot and what to hold it to.

``load_profile(path)`` is the only way in; it validates everything before anything boots and
raises :class:`perfgate.errors.ProfileError` naming the file, the key and what was expected;
:func:`validate` checks what the profile gates against what its workloads measure.
Every key is declared once, on its dataclass field (``_model.py``); :func:`reference_markdown`
(``python -m perfgate.profile --reference``) renders the key reference from those declarations.
"""

from perfgate.profile._keys import checked, integer, key_check, option_type, seconds
from perfgate.profile._load import load_profile, parse_profile
from perfgate.profile._model import (
    DEFAULT_TOLERANCE,
    MAX_REPEATS,
    PROBED_BY_DEFAULT,
    CorrectnessSpec,
    ExplainSpec,
    GateSpec,
    InconclusivePolicy,
    Profile,
    ServerSpec,
    Sweep,
    TelemetrySpec,
    Workload,
)
from perfgate.profile._reference import reference_markdown
from perfgate.profile._tables import SLO_KEYS, LengthDist, Slo
from perfgate.profile._validate import check_gated, merged_gate, validate

__all__ = [
    "DEFAULT_TOLERANCE",
    "MAX_REPEATS",
    "PROBED_BY_DEFAULT",
    "SLO_KEYS",
    "CorrectnessSpec",
    "ExplainSpec",
    "GateSpec",
    "InconclusivePolicy",
    "LengthDist",
    "Profile",
    "ServerSpec",
    "Slo",
    "Sweep",
    "TelemetrySpec",
    "Workload",
    "check_gated",
    "checked",
    "integer",
    "key_check",
    "load_profile",
    "merged_gate",
    "option_type",
    "parse_profile",
    "reference_markdown",
    "seconds",
    "validate",
]
