r"""Rewards of an episode's decisions: the same total cost, two ways of handing it out.

The objective is the reward of the issue, :math:`-(\sum_j \text{JCT}_j/3600 + λ\,\text{fees})`
(:mod:`slurm_rl.objective`, which both rewards below are computed with).

* ``time`` — what the cost accrues between decision :math:`t` and the next:
  :math:`r_t = -(Δ\text{job-seconds}/3600 + λ\,Δ\text{fees})` (job-seconds = ∫ jobs in the
  system dt). Faithful, but a placement's effect shows up only as a job finishes hours or
  days later, far beyond the horizon a per-decision discount :math:`γ` sees.
* ``job`` (default) — hindsight attribution: the queueing part stays where it accrues, and each
  job's run is charged at the decision after which it started:

  .. math::

      r_t = -\Bigl(\frac{1}{3600}\int_{t}^{t+1} |\text{pending}|\,dτ
            + \sum_{j \text{ started in } [t, t+1)} \Bigl[\frac{ρ_j - ρ^*_j}{3600}
            + λ\,(f_j - f^*_j)\Bigr]\Bigr)

  with :math:`ρ_j` the job's run time, :math:`ρ^*_j` its run time alone on the fastest GPUs it
  could use (the simulator's JCT lower-bound term), :math:`f_j` its fee and
  :math:`f^*_j = ρ^*_j\,g_j\,\bar p/3600` a reference fee at the cluster's mean GPU price.
  Since :math:`\text{JCT}_j` = wait + :math:`ρ_j` and :math:`ρ^*_j, f^*_j` do not depend on the
  policy, the rewards still sum to minus the cost plus a constant; subtracting the references
  keeps a job's unavoidable run time from looking like a cost of starting it (which, under
  discounting, would teach the agent to postpone long jobs). The outcomes are known in
  hindsight because the episode is drained (the teacher finishes the jobs) before rewards are
  computed. The simulator's ground truth enters only the rewards, never the agents' inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from slurm_rl.core import Cluster
from slurm_rl.objective import SECONDS_PER_HOUR, cost_terms, hours, reward
from slurm_rl.simulator.outcomes import JobOutcome, Timeline

FloatArray = NDArray[np.float64]
RewardKind = Literal["time", "job"]


def pending_integrals(timeline: Timeline, edges: FloatArray) -> FloatArray:
    """∫ queue length dτ (job-seconds) over each ``[edges[i], edges[i + 1])``."""
    times = np.asarray(timeline.times, dtype=float)
    if len(times) == 0:
        return np.zeros(len(edges) - 1)
    queue = np.asarray(timeline.queue_length, dtype=float)
    cumulative = np.concatenate([[0.0], np.cumsum(queue[:-1] * np.diff(times))])
    k = np.clip(np.searchsorted(times, edges, side="right") - 1, 0, len(times) - 1)
    at = cumulative[k] + queue[k] * np.maximum(edges - times[k], 0.0)
    return np.diff(at)


def mean_price(cluster: Cluster) -> float:
    gpus = sum(n.gpus for n in cluster.nodes)
    return sum(n.gpus * n.price_per_gpu_hour for n in cluster.nodes) / max(gpus, 1)


def run_charges(outcomes: Sequence[JobOutcome], edges: FloatArray, fee_weight: float,
                reference_price: float) -> FloatArray:
    """Per interval, the excess run time (hours) and λ × excess fee of the jobs started in it."""
    charges = np.zeros(len(edges) - 1)
    for outcome in outcomes:
        i = int(np.searchsorted(edges, outcome.start, side="right")) - 1
        if not 0 <= i < len(charges):
            continue
        best = outcome.best_runtime
        reference_fee = best * outcome.job.num_gpus * reference_price / SECONDS_PER_HOUR
        excess = cost_terms(hours(outcome.runtime - best), outcome.fee - reference_fee, fee_weight)
        for term in excess:  # one at a time, as every bundle's rewards were summed
            charges[i] += term
    return charges


def job_rewards(outcomes: Sequence[JobOutcome], timeline: Timeline, decision_times: Sequence[float],
                phase_end: float, fee_weight: float, cluster: Cluster) -> FloatArray:
    """The ``job`` rewards (module docstring) of decisions at ``decision_times``."""
    if not decision_times:
        return np.zeros(0)
    edges = np.array([*decision_times, max(phase_end, decision_times[-1])], dtype=float)
    waiting = pending_integrals(timeline, edges) / SECONDS_PER_HOUR
    return reward(waiting + run_charges(outcomes, edges, fee_weight, mean_price(cluster)))
