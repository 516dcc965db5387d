"""The metric catalogue: every metric's unit, direction, category, gate test and default tolerance.

``metric(name)`` is a metric's one declaration (:class:`Metric`); ``direction_of`` and
``unit_of`` read it; ``names(source)`` lists what one stage reports; ``SHOWN`` is what the
summary table always shows; ``DEFAULT_TOLERANCE`` is ``[gate] tolerance`` when a profile says
nothing. A leaf module: every stage may read it, it reads none of them.
"""

from perfgate.catalogue._metrics import (
    CAPACITY,
    DEFAULT_LIMITS,
    DEFAULT_TOLERANCE,
    METRICS,
    SHOWN,
    SLO_TARGETS,
    Category,
    Direction,
    GateTest,
    Metric,
    Source,
    direction_of,
    fmt_value,
    gateable,
    metric,
    names,
    unit_of,
)

__all__ = [
    "CAPACITY",
    "DEFAULT_LIMITS",
    "DEFAULT_TOLERANCE",
    "METRICS",
    "SHOWN",
    "SLO_TARGETS",
    "Category",
    "Direction",
    "GateTest",
    "Metric",
    "Source",
    "direction_of",
    "fmt_value",
    "gateable",
    "metric",
    "names",
    "unit_of",
]
