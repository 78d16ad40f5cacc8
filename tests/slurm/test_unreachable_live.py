"""slurmctld down, for real: the daemon's cycle says slurmctld is not reachable, and counts it so.

Measured on the session's Slurm 22.05.8 (tests/fixtures/slurm/22.05/squeue_unreachable.json):
with slurmctld stopped, ``squeue --json`` exits 0 after about 9 s of connect retries, writes
nothing to stderr, and reports only ``slurm_load_jobs`` "Failed while looking for jobs" in
its JSON's ``errors``. That is slurmctld unreachable (kind ``unreachable``), not bad output
(``output``). The rig's daemon waits 30 s a call here: the fault suite's 3 s would make the
9 s of retries a timeout.
"""

from __future__ import annotations

import os
import re
import signal
import urllib.request

import pytest

from slurm_rl.devcluster.cluster import free_base_port
from tests.slurm.live import LiveCluster
from tests.slurm.test_faults_live import _controller_pid, make_rig  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slurm

LINE = ("cycle skipped: slurmctld is not reachable: `squeue --json` reported: "
        "slurm_load_jobs: Failed while looking for jobs")


def _errors_by_kind(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.findall(r'^slurm_rl_slurm_errors_total\{kind="(\w+)"\} (\S+)$', text, re.M)
    return {kind: float(value) for kind, value in found}


def test_a_stopped_slurmctld_is_logged_and_counted_as_unreachable(
    make_rig, live: LiveCluster  # noqa: F811 (the imported fixture)
) -> None:
    port = free_base_port(1, start=19450)
    rig = make_rig(metrics_port=port, slurm_timeout_s=30)
    rig.wait_healthy_cycles()
    assert _errors_by_kind(port) == {}
    assert live.controller is not None
    os.kill(_controller_pid(live), signal.SIGTERM)
    live.wait_for(lambda: live.controller is not None
                  and live.controller.controller_pid() is None, "slurmctld gone", 30.0)
    rig.wait_log(LINE, timeout_s=90.0)
    skipped = [line for line in rig.output().splitlines() if "cycle skipped" in line]
    # The cycle slurmctld died in may have failed on a later call (sinfo, the reservations):
    # every one says the same.
    assert skipped and all("slurmctld is not reachable: " in line for line in skipped), skipped
    errors = _errors_by_kind(port)
    assert errors.get("unreachable", 0) >= 1 and set(errors) == {"unreachable"}, errors
    live.controller.start_controller()
    rig.wait_healthy_cycles()
    _wait_until_it_schedules(live)


def _wait_until_it_schedules(live: LiveCluster) -> None:
    """The next test needs a cluster that schedules: a restarted slurmctld starts nothing
    until every slurmd has registered again (sinfo marks the others with '*'), and a job
    submitted right after it may still wait a pass for its reason (measured: a dependent
    job's reason None, not Dependency). A probe job that runs to its end shows it does."""
    live.wait_for(lambda: _every_node_answers(live), "every node back after the restart", 90.0)
    live.stop_beating()  # the probe must not wait out a deferral window
    probe = live.sbatch(None, "--gres=gpu:1", "-t", "1", script="true")
    live.wait_state(probe, "COMPLETED", timeout_s=90.0)
    live.beat()


def _every_node_answers(live: LiveCluster) -> bool:
    result = live.run("sinfo", "-h", "-N", "-o", "%T")
    states = result.stdout.split()
    return result.ok and bool(states) and not any(state.endswith("*") for state in states)
