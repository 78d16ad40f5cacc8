"""The actuator never pins a job where Slurm would never run it: a node outside the job's
partitions, or one its ``--constraint`` does not hold on. Slurm 22.05.8 accepts such a pin
(exit 0), then keeps the job pending with ``BadConstraints`` and priority 0 for good, and
the next snapshot sets it aside as held (a review found both live: a ``-p gpu`` job pinned
to a node of partition ``gpuv``, a ``--constraint=a100`` job pinned to a v100 node)."""

from __future__ import annotations

from slurm_rl.core import Decision, Placement
from slurm_rl.slurm.eligibility import constraint_met, node_conflict
from slurm_rl.slurm.plan import ActuatorConfig, Mode, plan
from slurm_rl.slurm.records import JobsReport, NodesReport, SlurmJob, SlurmMeta, SlurmNode
from slurm_rl.slurm.source import SlurmState

NOW = 1_800_000_000.0
META = SlurmMeta((22, 5, 8), "openapi/v0.0.38")
NODES = (
    SlurmNode("a100-01", ("IDLE",), "gpu:a100:8", "gpu:a100:0", ("gpu",), ("a100", "ib")),
    SlurmNode("a100-02", ("IDLE",), "gpu:a100:8", "gpu:a100:0", ("gpu",), ("a100",)),
    SlurmNode("v100-01", ("IDLE",), "gpu:v100:4", "gpu:v100:0", ("gpuv",), ("v100",)),
)
KNOWN = {node.name: node for node in NODES}


def _job(**fields: object) -> SlurmJob:
    base: dict[str, object] = dict(
        job_id="7", name="j", user="alice", partition="gpu", state="PENDING",
        reason="BeginTime", priority=1, submit_time=NOW - 5, eligible_time=NOW + 5,
        node_count=1, tres_per_job="gres:gpu:2",
        admin_comment=f"slurm-rl:deferred:{NOW + 5:.0f}")
    base.update(fields)
    return SlurmJob(**base)  # type: ignore[arg-type]


def _sent(job: SlurmJob, placement: Placement) -> tuple[dict[str, str], str]:
    """The fields the actuator sends ``job`` for a decision placing it, and its note."""
    state = SlurmState(NOW, JobsReport(META, (job,)), NodesReport(META, NODES),
                       {job.job_id: job})
    planned = plan(Decision("p", (job.job_id,), {job.job_id: placement}), state,
                   ActuatorConfig(mode=Mode.ENFORCE), set())
    fields = {k: v for update in planned.updates for k, v in update.fields}
    return fields, planned.notes.get(job.job_id, "")


def test_a_pin_outside_the_jobs_partition_is_dropped_and_the_job_released() -> None:
    fields, note = _sent(_job(), Placement(("v100-01",), (2,)))
    assert "ReqNodeList" not in fields and fields["StartTime"] == "now"
    assert note == ("placement on v100-01 dropped: v100-01 not in its partition gpu, and "
                    "Slurm would never start it there")
    fields, _ = _sent(_job(partition="gpu,gpuv"), Placement(("v100-01",), (2,)))
    assert fields["ReqNodeList"] == "v100-01"


def test_a_pin_against_the_jobs_constraint_is_dropped() -> None:
    fields, note = _sent(_job(features="ib"), Placement(("a100-02",), (2,)))
    assert "ReqNodeList" not in fields
    assert note.startswith("placement on a100-02 dropped: --constraint=ib does not hold")
    fields, _ = _sent(_job(features="ib"), Placement(("a100-01",), (2,)))
    assert fields["ReqNodeList"] == "a100-01"


def test_the_daemons_one_type_constraint_is_read_as_slurms_matching_or() -> None:
    """``[a100|v100]`` (slurm_rl/slurm/onetype.py): every node of the job has the same one."""
    job = _job(partition="gpu,gpuv", features="[a100|v100]", tres_per_job="gres:gpu:4",
               node_count=2)
    assert node_conflict(job, ("a100-01", "a100-02"), KNOWN) is None
    assert node_conflict(job, ("a100-01", "v100-01"), KNOWN) is not None
    assert constraint_met("a100|v100", [("a100",), ("v100",)])  # plain OR: each its own


def test_a_node_slurm_does_not_show_is_outside_every_partition() -> None:
    assert node_conflict(_job(), ("gone-01",), KNOWN) == "gone-01 not in its partition gpu"
    assert node_conflict(_job(partition=""), ("gone-01",), KNOWN) is None
