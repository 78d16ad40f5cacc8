"""The dual agent's candidate memo (slurm_rl.agents.dual.candidates): within one snapshot a
request shape in the same free GPUs gets its RWGP candidates once, and the schedule is the
one computed without the memo."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from slurm_rl.agents.dual.candidates import CandidateGenerator, CandidateSet
from slurm_rl.agents.registry import make_scheduler
from slurm_rl.core import ClusterSnapshot, Job
from slurm_rl.fairness import LONGEST_HOLD_S, RankingRules
from slurm_rl.offered_load import load_points
from slurm_rl.scenario import Scenario, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.engine import SimConfig
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds
from slurm_rl.workloads import open_workload


def _loaded_replay() -> list[tuple[str, float, tuple[str, ...], tuple[int, ...]]]:
    """The shipped dual agent on a few synthetic hours at offered load 3, dispatch on (a
    queue, so several jobs of one shape ask in the same free GPUs)."""
    trace = open_workload("synthetic", days=0.2, seed=3)
    config = SimConfig(mode="slurm", hold_cap_s=LONGEST_HOLD_S)
    scenario = Scenario(load_cluster_spec("philly-hetero"), trace, config)
    loaded = load_points(scenario, [3.0])[0].scenario
    scheduler = make_scheduler("rl+rl", datasheet_gpu_speeds(),
                               rules=RankingRules(dispatch=True))
    result = replay(loaded, scheduler, policy_id="rl+rl")
    return sorted((o.job.job_id, o.start, tuple(o.nodes), tuple(o.gpus))
                  for o in result.outcomes)


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
