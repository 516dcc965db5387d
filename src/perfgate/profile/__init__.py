"""Profiles: a TOML file that says what server to boot and what to hold it to.

``load_profile(path)`` is the only way in; it validates everything before anything boots and
raises :class:`perfgate.errors.ProfileError` naming the file, the key and what was expected.
"""

from perfgate.profile._load import load_profile, parse_profile
from perfgate.profile._model import (
    DEFAULT_TOLERANCE,
    GateSpec,
    Profile,
    ServerSpec,
    TelemetrySpec,
    Workload,
)

__all__ = [
    "DEFAULT_TOLERANCE",
    "GateSpec",
    "Profile",
    "ServerSpec",
    "TelemetrySpec",
    "Workload",
    "load_profile",
    "parse_profile",
]
