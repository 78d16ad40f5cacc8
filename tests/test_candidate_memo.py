"""The dual agent's candidate memo (slurm_rl.agents.dual.candidates): within one snapshot a
request shape in the same free GPUs gets its RWGP candidates once, and the schedule is the
one computed without the memo."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from slurm_rl.agents.dual.candidates import CandidateGenerator, CandidateSet
from slurm_rl.core import ClusterSnapshot, Job
from tests.sim_doubles import Schedule, loaded_dispatch_schedule


def _loaded_replay() -> Schedule:
    """The shipped dual agent on a few synthetic hours at offered load 3, dispatch on (a
    queue, so several jobs of one shape ask in the same free GPUs)."""
    return loaded_dispatch_schedule("rl+rl", days=0.2, seed=3, load=3.0)


def test_the_memo_changes_no_schedule_and_saves_proposals(
        monkeypatch: pytest.MonkeyPatch) -> None:
    proposals = {"count": 0}
    propose = CandidateGenerator._propose

    def counted(self: CandidateGenerator, job: Job, free: np.ndarray,
                snapshot: ClusterSnapshot) -> CandidateSet:
        proposals["count"] += 1
        return propose(self, job, free, snapshot)

    monkeypatch.setattr(CandidateGenerator, "_propose", counted)
    memoised = _loaded_replay()
    with_memo = proposals["count"]

    def unmemoised(self: CandidateGenerator, job: Job, free_gpus: Sequence[int],
                   snapshot: ClusterSnapshot) -> CandidateSet:
        return counted(self, job, np.asarray(free_gpus, dtype=np.int64), snapshot)

    monkeypatch.setattr(CandidateGenerator, "candidates", unmemoised)
    proposals["count"] = 0
    assert _loaded_replay() == memoised
    assert len(memoised) > 20
    assert with_memo < proposals["count"]
