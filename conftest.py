"""Project-wide pytest setup for perfgate's own tests and its perf tests.

Hypothesis runs without deadlines (a noisy 2-core CI machine must not fail on timing) and,
under CI, derandomized so every run explores the same examples.
"""

import os

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the perf run does not need hypothesis
    pass
else:
    settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True, print_blob=True)
    settings.load_profile("ci" if os.environ.get("CI") else "default")
