"""The learned dual agent: the ordering agent (squeeze-and-communicate network over the queue)
and the learned placement head over the RWGP's per-GPU-type candidates. Our reconstruction of
the KDD 2023 paper's dual agent, whose internals are not public: docs/ordering-agent.md."""

from slurm_rl.agents.ordering.agent import (
    Bundle,
    BundleError,
    OrderingAgent,
    build_scheduler,
    load_bundle,
    registry_scheduler,
    save_bundle,
)
from slurm_rl.agents.ordering.placement import LearnedPlacement

__all__ = [
    "Bundle",
    "BundleError",
    "LearnedPlacement",
    "OrderingAgent",
    "build_scheduler",
    "load_bundle",
    "registry_scheduler",
    "save_bundle",
]
