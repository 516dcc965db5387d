"""The errors perfgate raises on purpose.

Every message is complete for a person reading it in a terminal: it names the file, key,
workload or URL involved and says what to do. Code that catches these shows ``str(err)``
and nothing else; a traceback means a bug in perfgate, never bad input.
"""

from __future__ import annotations


class PerfgateError(Exception):
    """Base class: bad input or an environment that cannot give a valid measurement."""


class ProfileError(PerfgateError):
    """A profile TOML file is unreadable or asks for something impossible."""


class ServerError(PerfgateError):
    """The server under test could not be started, reached, or stopped cleanly."""


class LoadError(PerfgateError):
    """The load generator could not run a workload as specified."""


class GpuError(PerfgateError):
    """NVML cannot be used here, or a GPU named in the profile is not on this host."""


class TelemetryError(PerfgateError):
    """GPU telemetry was required but could not be read."""


class BaselineError(PerfgateError):
    """A baseline file is corrupt, of an unknown schema, or may not be written."""


class CorrectnessError(PerfgateError):
    """The correctness probe could not run, or the server answered it in a shape it cannot read."""
