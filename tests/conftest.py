"""pytest configuration shared by the Python test suite.

Hypothesis profiles:

* ``ci``  - selected when the environment has ``CI=true``: fewer examples, ``derandomize=True``
  so every CI run draws the same examples (reproducible failures).
* ``dev`` - everything else: more examples, random seeds (the example database in .hypothesis/
  replays earlier failures first).
* ``stress`` - only on request (``HYPOTHESIS_PROFILE=stress``): 10x the dev examples.

``HYPOTHESIS_PROFILE=<name>`` overrides the choice. Tests scale their example counts from the
loaded profile through ``helpers_compress.examples``.
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # so test modules can import helpers_compress

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
)
settings.register_profile("ci", max_examples=30, derandomize=True, **_COMMON)
settings.register_profile("dev", max_examples=100, **_COMMON)
settings.register_profile("stress", max_examples=1000, **_COMMON)  # bug hunting, minutes

_in_ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _in_ci else "dev"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: large inputs (seconds, not milliseconds); deselect with -m 'not slow'"
    )
