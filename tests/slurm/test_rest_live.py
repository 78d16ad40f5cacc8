"""RestSlurmClient against a real slurmrestd beside the session's native dev cluster.

slurmrestd refuses to run as root, and the dev cluster's SlurmUser is root, so the
slurmrestd here runs as the test user alice (``rest_auth/local`` on a unix socket in the
cluster's directory). A root client may use that socket, but every request runs as alice:
she may pin, release and lower the priority of her own jobs, and may not raise a priority.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_rl.slurm.actuator import classify_error, per_job_errors
from slurm_rl.slurm.errors import SlurmError
from slurm_rl.slurm.reservations import SlurmReservation
from slurm_rl.slurm.rest import RestSlurmClient
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.live import LiveCluster
from tests.slurm.test_reservations_live import reserved  # noqa: F401

pytestmark = pytest.mark.slurm

REST_USER = "alice"
START_TIMEOUT_S = 20.0


def _wait_for_ping(client: RestSlurmClient, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            if client.socket_path.exists() and client.ping():
                return
        except SlurmError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"slurmrestd did not come up (exit status {process.poll()})")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _slurmrestd_argv(slurm_conf: Path, sock: Path) -> list[str]:
    return [
        "runuser",
        "-u",
        REST_USER,
        "--",
        "env",
        f"SLURM_CONF={slurm_conf}",
        "slurmrestd",
        "-s",
        "openapi/v0.0.38",
        "-a",
        "rest_auth/local",
        f"unix:{sock}",
    ]


@pytest.fixture(scope="module")
def rest(slurm_cluster: LiveCluster) -> Iterator[RestSlurmClient]:
    """A slurmrestd run as alice for this module; stopped and its directory removed after."""
    if slurm_cluster.kind != "native":
        pytest.skip("slurmrestd is started beside the native dev cluster only")
    if shutil.which("slurmrestd") is None:
        pytest.skip("slurmrestd is not installed (apt-get install slurmrestd)")
    root = Path(slurm_cluster.jobs_dir).parent
    rest_dir = root / "rest"
    rest_dir.mkdir(mode=0o755, exist_ok=True)
    shutil.chown(rest_dir, REST_USER, REST_USER)
    client = RestSlurmClient(rest_dir / "slurm.sock", timeout_s=30.0)
    with (rest_dir / "slurmrestd.log").open("wb") as log:
        argv = _slurmrestd_argv(root / "etc" / "slurm.conf", client.socket_path)
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        _wait_for_ping(client, process)
        yield client
    finally:
        _stop(process)
        shutil.rmtree(rest_dir, ignore_errors=True)


def _pending(live: LiveCluster, user: str) -> str:
    """A GPU job that stays pending (its own --begin, which the deferral plugin leaves)."""
    return live.sbatch(user, "--begin=now+600", "--gres=gpu:1", "-t", "10")


def test_ping(rest: RestSlurmClient) -> None:
    (ping,) = rest.ping()
    assert ping["ping"] == "UP"


def test_same_snapshot_as_the_cli(live: LiveCluster, rest: RestSlurmClient) -> None:
    running = live.sbatch("bob", "--gres=gpu:a100:2", "-t", "10")
    pending = _pending(live, "alice")
    live.wait_state(running, "RUNNING")
    now = time.time()
    # A scheduling pass between the two reads could change a job; retry a few times.
    for _ in range(5):
        cli_source, rest_source = (SlurmSource(c, clock=lambda: now) for c in (live.client, rest))
        via_cli, via_rest = cli_source.snapshot(), rest_source.snapshot()
        if via_cli == via_rest:
            break
    assert via_rest == via_cli
    # its user's own --begin: left to Slurm by both (slurm_rl/slurm/waiting.py)
    assert rest_source.set_aside == cli_source.set_aside
    assert rest_source.set_aside.get(pending) == "begin_time"
    assert running in {r.job.job_id for r in via_rest.running}


def test_show_job_and_nodes_match_the_cli(live: LiveCluster, rest: RestSlurmClient) -> None:
    job_id = _pending(live, "alice")
    cli, via_rest = live.job(job_id), rest.show_job(job_id)
    assert via_rest is not None
    same = ("job_id", "state", "reason", "priority", "user", "partition", "required_nodes",
            "excluded_nodes")
    times = ("submit_time", "eligible_time", "start_time", "tres_per_node", "min_nodes")
    for name in (*same, *times):
        assert getattr(via_rest, name) == getattr(cli, name), name
    views = [(n.name, n.states, n.gres, n.gres_used, n.partitions) for n in rest.show_nodes()]
    cli_views = [
        (n.name, n.states, n.gres, n.gres_used, n.partitions) for n in live.client.show_nodes()
    ]
    assert views == cli_views


def test_update_pins_and_releases(live: LiveCluster, rest: RestSlurmClient) -> None:
    job_id = _pending(live, REST_USER)
    node = sorted(n.name for n in live.client.show_nodes() if "v100" in n.gres)[-1]
    pin = {"ReqNodeList": node, "NumNodes": "1-1", "Comment": "via rest"}
    result = rest.update_jobs([job_id], pin)
    assert result.ok, result.stderr
    job = live.job(job_id)
    assert (job.required_nodes, job.min_nodes, job.max_nodes) == ((node,), 1, 1)
    assert job.raw["Comment"] == "via rest"
    released = rest.update_jobs([job_id], {"StartTime": "now"})
    assert released.ok, released.stderr
    assert live.wait_state(job_id, "RUNNING").nodes == (node,)


def test_update_sets_and_clears_excluded_nodes(live: LiveCluster, rest: RestSlurmClient) -> None:
    job_id = _pending(live, REST_USER)
    nodes = sorted(n.name for n in live.client.show_nodes() if "a100" in n.gres)[:2]
    excluded = rest.update_jobs([job_id], {"ExcNodeList": ",".join(nodes)})
    assert excluded.ok, excluded.stderr
    assert live.job(job_id).excluded_nodes == tuple(nodes)
    via_rest = rest.show_job(job_id)
    assert via_rest is not None and via_rest.excluded_nodes == tuple(nodes)
    cleared = rest.update_jobs([job_id], {"ExcNodeList": ""})  # exclude_nodes: ""
    assert cleared.ok, cleared.stderr
    assert live.job(job_id).excluded_nodes == ()


def test_priority_from_a_non_admin_slurmrestd(live: LiveCluster, rest: RestSlurmClient) -> None:
    """Lowering applies but Slurm reports it as not persistent; raising is denied."""
    job_id = _pending(live, REST_USER)
    node = sorted(n.name for n in live.client.show_nodes() if "v100" in n.gres)[0]
    assert live.run("scontrol", "update", f"JobId={job_id}", "Priority=500").ok  # as root
    lowered = rest.update_jobs([job_id], {"ReqNodeList": node, "Priority": "400"})
    assert "not persistent" in per_job_errors(lowered)[job_id]
    job = live.job(job_id)
    assert (job.required_nodes, job.priority) == ((node,), 400)
    raised = rest.update_jobs([job_id], {"Priority": "100000"})
    assert classify_error(per_job_errors(raised)[job_id]) == "permission"
    assert live.job(job_id).priority == 400


def test_update_of_a_vanished_job_is_a_recorded_failure(
    live: LiveCluster, rest: RestSlurmClient
) -> None:
    job_id = _pending(live, REST_USER)
    assert live.run("scancel", job_id).ok
    live.wait_for(lambda: live.job(job_id).state == "CANCELLED", "the job to be cancelled")
    missing = str(int(job_id) + 100000)
    result = rest.update_jobs([job_id, missing], {"Comment": "too late"})
    assert not result.ok
    errors = per_job_errors(result)
    assert set(errors) == {job_id, missing}, result.stderr
    assert classify_error(errors[missing]) == "vanished"
    assert rest.show_job(missing) is None


def test_reservations_match_the_cli(live: LiveCluster, rest: RestSlurmClient,
                                    reserved: str) -> None:  # noqa: F811
    def view(r: SlurmReservation) -> tuple[object, ...]:
        return (r.name, r.nodes, r.start_time, r.end_time)

    (via_cli,), (via_rest,) = live.client.reservations(), rest.reservations()
    assert view(via_rest) == view(via_cli) and via_cli.nodes == (reserved,)
    assert via_rest.active(time.time())  # no state in v0.0.38: its window says so
