r"""The placement agent's message to the ordering agent, and the mask of jobs that can start.

For every pending job the placement agent says what it would do with the job *right now*: its
candidates (:mod:`.candidates`) in the snapshot's free GPUs and the one it would pick. The
message :math:`m_j` is

* ``placeable`` — 1 when some candidate exists (the job can start now); the ordering agent
  masks the jobs where it is 0;
* ``log_options`` — log1p(number of candidates);
* ``chosen_*`` — the features of the candidate the placement head would pick for this job
  (argmax of its logits; the only candidate for a heuristic placement);
* ``best_pace`` / ``least_cost`` — the fastest pace and the lowest cost per unit of work over
  the candidates (what the job could get if the placement agent chose differently).

Candidates depend on a job's request shape (and, with the RWGP's patience or long-job rule,
on its wait or time limit), and are built once per distinct shape (queues hold few shapes),
from the shape's first pending job: the message of a shape speaks for that job, and for the
others of the shape only as far as the chooser treats them alike. The head then scores every
job's candidates in one batched call, because its choice depends on the job (a long job is
worth a fast GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray

from slurm_rl.agents.dual.candidates import CANDIDATE_FEATURES, CandidateGenerator
from slurm_rl.agents.dual.features import Encoded, FloatArray
from slurm_rl.agents.dual.network import PlacementHead

BoolArray = NDArray[np.bool_]

MESSAGE_FEATURES: tuple[str, ...] = (
    "placeable",
    "log_options",
    *(f"chosen_{name}" for name in CANDIDATE_FEATURES),
    "best_pace",
    "least_cost",
)
_PACE = CANDIDATE_FEATURES.index("pace")
_COST = CANDIDATE_FEATURES.index("cost_per_work")


@dataclass(frozen=True)
class PaddedCandidates:
    """Candidates of each distinct shape, padded: ``features`` [S, C, F], ``present`` and the
    chooser's ``log_cost`` [S, C]."""

    features: FloatArray
    present: BoolArray
    log_cost: FloatArray


def pad_candidates(generator: CandidateGenerator, encoded: Encoded) -> PaddedCandidates:
    snapshot = encoded.snapshot
    shapes = encoded.groups.shapes
    sets = [generator.candidates(job, snapshot.free_gpus, snapshot) for job in shapes]
    width = max([len(s) for s in sets], default=0)
    features = np.zeros((len(sets), max(width, 1), len(CANDIDATE_FEATURES)))
    present = np.zeros((len(sets), max(width, 1)), dtype=bool)
    log_cost = np.zeros((len(sets), max(width, 1)))
    for s, found in enumerate(sets):
        features[s, : len(found)] = found.features
        present[s, : len(found)] = True
        log_cost[s, : len(found)] = found.log_cost
    return PaddedCandidates(features, present, log_cost)


class Messenger:
    """Builds the messages of a snapshot's pending jobs (module docstring). ``head`` is the
    learned placement head, or None for a heuristic placement (one candidate per job)."""

    def __init__(self, generator: CandidateGenerator, head: PlacementHead | None) -> None:
        self.generator = generator
        self.head = head

    def messages(self, encoded: Encoded) -> tuple[FloatArray, BoolArray]:
        """``[n, len(MESSAGE_FEATURES)]`` messages and the ``[n]`` placeable mask."""
        padded = pad_candidates(self.generator, encoded)
        shape_of = encoded.groups.shape_of
        present = padded.present
        pace = np.where(present, padded.features[:, :, _PACE], -np.inf).max(axis=1)
        cost = np.where(present, padded.features[:, :, _COST], np.inf).min(axis=1)
        any_present: BoolArray = np.asarray(present.any(axis=1), dtype=bool)
        placeable = any_present[shape_of]
        choice = self._choices(encoded, padded)
        out = np.zeros((len(shape_of), len(MESSAGE_FEATURES)))
        out[:, 0] = placeable
        out[:, 1] = np.log1p(present.sum(axis=1))[shape_of]
        out[:, 2 : 2 + len(CANDIDATE_FEATURES)] = padded.features[shape_of, choice]
        out[:, -2] = pace[shape_of]
        out[:, -1] = cost[shape_of]
        out[~placeable] = 0.0
        return out, placeable

    def _choices(self, encoded: Encoded, padded: PaddedCandidates) -> NDArray[np.int64]:
        """The candidate the head would pick for each job (0 without a head or a choice)."""
        count = len(encoded.jobs)
        if self.head is None or padded.present.sum(axis=1).max(initial=0) < 2:
            return np.zeros(count, dtype=np.int64)
        with torch.no_grad():
            logits = self.head.by_shape(
                torch.from_numpy(encoded.jobs).float(),
                torch.from_numpy(encoded.cluster).float(),
                torch.from_numpy(padded.features).float(),
                torch.from_numpy(padded.present),
                torch.from_numpy(encoded.groups.shape_of),
                torch.from_numpy(padded.log_cost).float(),
            )
            logits = torch.nan_to_num(logits, neginf=-1e30)
            return logits.argmax(dim=1).numpy().astype(np.int64)
