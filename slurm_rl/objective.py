r"""The objective every learner here is scored by: cost = JCT hours + λ · fees, reward = −cost.

λ (``fee_weight``) is the user's price of money in job-hours: currency units worth one hour of
one job's completion time. Training's per-decision rewards (:mod:`slurm_rl.training.rewards`,
:mod:`slurm_rl.training.rollout`), the checkpoint selection (:mod:`slurm_rl.training.validation`)
and the Gymnasium environment (:mod:`slurm_rl.gym_env`) all derive their figures from the
functions below, so that what the agents are trained on, what picks their checkpoint and what
the docs call the objective cannot drift apart.

Each caller keeps its own order of operations (a difference of costs, or the cost of
differences; hours before or after a subtraction): floating point is not associative, and the
figures of every trained bundle were computed that way (``tests/test_objective.py`` pins them).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

SECONDS_PER_HOUR = 3600.0

Amount = TypeVar("Amount", float, NDArray[np.float64])


def hours(seconds: float) -> float:
    """Job-seconds (a JCT, a sum of JCTs, ∫ jobs in the system dt) as the objective's hours."""
    return seconds / SECONDS_PER_HOUR


def cost_terms(job_hours: float, fees: float, fee_weight: float) -> tuple[float, float]:
    """The cost's two terms, time and money in job-hours, for callers that accumulate them
    one at a time (their sum is :func:`cost`)."""
    return job_hours, fee_weight * fees


def cost(job_hours: float, fees: float, fee_weight: float) -> float:
    """``job_hours + λ · fees``: what a policy is charged for a span of time or a whole run."""
    time_term, money_term = cost_terms(job_hours, fees, fee_weight)
    return time_term + money_term


def reward(cost_incurred: Amount) -> Amount:
    """The reward the learners maximise: the cost, negated (exact in floating point)."""
    return -cost_incurred
