"""Profiles: a TOML file that says what server to boot and what to hold it to.

``load_profile(path)`` is the only way in; it validates everything before anything boots and
raises :class:`perfgate.errors.ProfileError` naming the file, the key and what was expected.
Every key is declared once, on its dataclass field (``_model.py``); :func:`reference_markdown`
(``python -m perfgate.profile --reference``) renders the key reference from those declarations.
"""

from perfgate.profile._load import load_profile, parse_profile
from perfgate.profile._model import (
    DEFAULT_TOLERANCE,
    GateSpec,
    Profile,
    ServerSpec,
    Sweep,
    TelemetrySpec,
    Workload,
)
from perfgate.profile._reference import reference_markdown
from perfgate.profile._tables import SLO_KEYS, LengthDist, Slo

__all__ = [
    "DEFAULT_TOLERANCE",
    "SLO_KEYS",
    "GateSpec",
    "LengthDist",
    "Profile",
    "ServerSpec",
    "Slo",
    "Sweep",
    "TelemetrySpec",
    "Workload",
    "load_profile",
    "parse_profile",
    "reference_markdown",
]
