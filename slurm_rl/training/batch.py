"""Padded tensors from recorded steps, for batched forward passes in the updates.

Candidate sets differ in size from one decision to the next (a few jobs to ``max_jobs``), so
a batch keeps them ragged — all rows in one matrix, pooled per step by segment — which costs
no compute on padding; only the small ranking tensors are padded. Placement choices are
flattened across the batch's steps, each with the position of its step (for its advantage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from slurm_rl.training.actors import Step


@dataclass(frozen=True)
class StepBatch:
    """Steps as one ragged batch: every candidate-set row in one matrix, ``segment`` saying
    whose it is and ``slot`` where; the ranking side (``valid``, ``order``) is padded."""

    jobs: Tensor  # [N, Fj]
    messages: Tensor  # [N, Fm]
    segment: Tensor  # [N]
    slot: Tensor  # [N]
    cluster: Tensor  # [B, Fu]
    valid: Tensor  # [B, m]
    order: Tensor  # [B, K] (0 where padded)
    prefix: Tensor  # [B, K]
    old_logp: Tensor  # [B]
    acted: Tensor  # [B]: the step ranked at least one job

    def ragged(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Arguments of ``OrderingNetwork.ragged`` and ``Critic.ragged``."""
        return self.jobs, self.messages, self.cluster, self.segment

    def padded(self, scores: Tensor) -> Tensor:
        """Ragged per-row ``scores`` [N] as [B, m] (0 on absent rows)."""
        out = scores.new_zeros(self.valid.shape)
        out[self.segment, self.slot] = scores
        return out


@dataclass(frozen=True)
class PlacementBatch:
    job: Tensor  # [P, Fj]
    candidates: Tensor  # [P, C, Fc]
    cluster: Tensor  # [P, Fu]
    present: Tensor  # [P, C]
    log_cost: Tensor  # [P, C]
    choice: Tensor  # [P]
    old_logp: Tensor  # [P]
    step: Tensor  # [P]: position of the step in the batch

    def __len__(self) -> int:
        return int(self.choice.shape[0])


def collate_steps(steps: Sequence[Step]) -> StepBatch:
    size = max([len(s.jobs) for s in steps] + [1])
    width = max([len(s.order) for s in steps] + [1])
    lengths = np.array([len(s.jobs) for s in steps], dtype=np.int64)
    segment = np.repeat(np.arange(len(steps)), lengths)
    slot = np.arange(len(segment)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    valid = np.zeros((len(steps), size), dtype=bool)
    order = np.zeros((len(steps), width), dtype=np.int64)
    prefix = np.zeros((len(steps), width), dtype=bool)
    for b, step in enumerate(steps):
        valid[b, : len(step.valid)] = step.valid
        order[b, : len(step.order)], prefix[b, : len(step.order)] = step.order, True
    return StepBatch(
        torch.from_numpy(np.concatenate([s.jobs for s in steps])),
        torch.from_numpy(np.concatenate([s.messages for s in steps])),
        torch.from_numpy(segment), torch.from_numpy(slot),
        torch.from_numpy(np.stack([s.cluster for s in steps])),
        torch.from_numpy(valid), torch.from_numpy(order), torch.from_numpy(prefix),
        torch.tensor([s.logp for s in steps], dtype=torch.float32),
        torch.from_numpy(prefix.any(axis=1)),
    )


def collate_placements(steps: Sequence[Step]) -> PlacementBatch | None:
    chosen = [(b, p) for b, step in enumerate(steps) for p in step.placements]
    if not chosen:
        return None
    width = max(len(p.candidates) for _, p in chosen)
    count, features = len(chosen), chosen[0][1].candidates.shape[1]
    candidates = np.zeros((count, width, features), dtype=np.float32)
    present = np.zeros((count, width), dtype=bool)
    log_cost = np.zeros((count, width), dtype=np.float32)
    for i, (_, p) in enumerate(chosen):
        candidates[i, : len(p.candidates)] = p.candidates
        present[i, : len(p.candidates)] = True
        log_cost[i, : len(p.candidates)] = p.log_cost
    return PlacementBatch(
        torch.from_numpy(np.stack([p.job for _, p in chosen])),
        torch.from_numpy(candidates),
        torch.from_numpy(np.stack([p.cluster for _, p in chosen])),
        torch.from_numpy(present),
        torch.from_numpy(log_cost),
        torch.tensor([p.choice for _, p in chosen], dtype=torch.int64),
        torch.tensor([p.logp for _, p in chosen], dtype=torch.float32),
        torch.tensor([b for b, _ in chosen], dtype=torch.int64),
    )
