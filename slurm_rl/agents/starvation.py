"""The starvation guard (age guard): jobs pending too long go first, the longest-waiting first.

One rule, shared by the learned ordering agent (:class:`~slurm_rl.agents.dual.agent.
OrderingAgent`, its threshold per bundle) and by every heuristic ordering's ``-aged`` twin
(:class:`~slurm_rl.agents.ordering_baselines.AgeGuarded`), so that a comparison of the two
compares orderings, not guards (docs/orderings.md, "The age guard").

With scores ``s_j`` from the ordering, waits ``w_j = t − submit_j`` and threshold ``L``::

    s'_j = T + w_j / L     if w_j ≥ L      (T = max of the finite s_k, plus 1; 1 if none is)
    s'_j = s_j             otherwise

so every job pending for ``L`` or longer ranks ahead of every other job, the longest-waiting
first, and the ordering's own order stands among the rest. ``L`` = None or 0: the scores are
returned unchanged.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# A job pending longer than this goes ahead of every job that has waited less (a bundle's
# meta key ``starvation_h`` overrides it for the learned ordering; 0 turns the guard off).
# Chosen on Philly September-November (docs/ordering-agent.md, "Starvation guard").
STARVATION_H = 168.0
STARVATION_S = STARVATION_H * 3600.0


def guard_seconds(hours: float) -> float | None:
    """A guard given in hours (a bundle's ``starvation_h``, ``train --starvation-h``) as
    :func:`promote_starved` takes it: seconds, or None when ``hours`` is 0 (off)."""
    return hours * 3600.0 if hours > 0 else None


def promote_starved(scores: FloatArray, waits_s: FloatArray,
                    limit_s: float | None) -> FloatArray:
    """Scores that rank every job pending for ``limit_s`` or longer ahead of all others, the
    longest-waiting first (None or 0: unchanged; module docstring). A learned ordering may rank
    a kind of job low forever; with backfill the first-ranked waiting job gets the reservation,
    so a job this promotes starts as soon as FIFO would have started it from here on. Scores
    of −∞ (a job an ordering knows nothing about) stay below the promoted jobs."""
    if not limit_s or not len(scores):
        return scores
    starved = waits_s >= limit_s
    if not starved.any():
        return scores
    finite = scores[np.isfinite(scores)]
    top = (float(finite.max()) if finite.size else 0.0) + 1.0
    promoted: FloatArray = np.where(starved, top + waits_s / limit_s, scores)
    return promoted
