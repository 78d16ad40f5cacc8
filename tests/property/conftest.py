"""Hypothesis profiles for the property suites, and a wall-clock bound on every test.

``ci`` (the default, what ``make test`` runs): derandomized, so a run is the same every time
and CI never fails on a draw it had not made before; no example database is written. Set
``SLURM_RL_HYPOTHESIS=explore`` to draw fresh random examples, ten times as many, when
hunting for new bugs (a failure prints the ``@reproduce_failure`` line to pin it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings

from tests.timebox import time_limit

_COMMON = {
    "database": None,
    # Parsing one input takes milliseconds; seconds here means a loaded machine, not a bug
    # (a hang is caught by the alarm below, which a deadline cannot do).
    "deadline": timedelta(seconds=5),
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                              HealthCheck.function_scoped_fixture],
    "print_blob": True,
}
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("explore", derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("SLURM_RL_HYPOTHESIS", "ci"))

# No property test may run longer than this, whatever it draws (each one takes seconds).
TEST_TIME_LIMIT_S = 90.0


@pytest.fixture(autouse=True)
def _bounded_in_time(request: pytest.FixtureRequest) -> Iterator[None]:
    with time_limit(TEST_TIME_LIMIT_S, request.node.nodeid):
        yield
