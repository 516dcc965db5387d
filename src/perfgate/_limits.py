"""Upper bounds shared by every number perfgate reads, from a profile key, an option or an
environment variable alike (the profile's checks in ``profile._keys`` and the simulator's
options, which sit below the profile, both take them from here).

A number past these is no setting of a real run: ``interval_s = 1e308`` made a sampling
thread die with ``OverflowError`` (a wait that long cannot even be scheduled) while the run
went on, and ``request_rate = 1e-300`` made a run that never ends.
"""

from __future__ import annotations

# Upper bounds of integers: far beyond any real run, low enough that the dataset and load
# code (lists of token ids, per-request records, seeds) can take every value they allow.
LENGTH_MAX = 10_000_000
"""Tokens of one prompt, answer or context: ten times the longest context windows."""
COUNT_MAX = 1_000_000
"""Requests of one repeat, in flight at once, or before measuring (records take ~1 KB each)."""
SEED_MAX = 2**32 - 1
"""What every random generator perfgate seeds accepts."""
TOKEN_ID_MAX = 2**32
"""Prompt token ids are stored as 32-bit unsigned integers."""

SECONDS_MAX = 86_400.0
"""Any wait, timeout, period or pause, in seconds: a day."""
FACTOR_MAX = 1_000.0
"""A dimensionless share or factor (of a core, of tokens, a slowdown)."""
RATE_MIN = 0.001
"""Requests per second: one per 1,000 s at least, so that a run's arrivals end."""
RATE_MAX = 1e9
"""Requests per second (``"inf"``, sending at once, is its own value)."""
VALUE_MAX = 1e15
"""A metric's floor, ceiling, tolerance or limit, a histogram weight: any measured value fits."""

MAX_BOOTS = 100
"""Boots of one workload ([gate] boots, --perf-boots): a boot takes minutes on a GPU host, so a
hundred is a day's run already."""


def is_boot(value: object) -> bool:
    """Whether ``value`` is a boot number, as results and baseline files label repeats: 1 to MAX_BOOTS."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_BOOTS
