"""A real Slurm cluster for integration tests: the native dev cluster or docker compose.

Both kinds expose the same :class:`LiveCluster`: a runner for Slurm commands (argv lists),
a way to run them as a test user, the heartbeat the job_submit plugin checks, and helpers to
submit, cancel and wait. The tests never know which kind they talk to.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_rl.devcluster.cluster import DevCluster, free_base_port
from slurm_rl.devcluster.config import DevClusterConfig
from slurm_rl.slurm import deferral
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.proc import CommandResult, Runner, make_runner
from slurm_rl.slurm.scontrol import ScontrolJob

WINDOW_S = 6
COMMAND_TIMEOUT_S = 30.0


@dataclass
class LiveCluster:
    """What a test needs from a running cluster, whatever hosts it."""

    kind: str
    runner: Runner
    jobs_dir: str
    window_s: int
    set_heartbeat: Callable[[float], None]
    as_user: Callable[[str, Sequence[str]], tuple[str, ...]]
    submitted: list[str] = field(default_factory=list)
    # The native cluster's controller, for the fault suite (None elsewhere).
    controller: DevCluster | None = None

    @property
    def client(self) -> CliSlurmClient:
        return CliSlurmClient(runner=self.runner, timeout_s=COMMAND_TIMEOUT_S)

    def run(self, *argv: str, user: str | None = None) -> CommandResult:
        full = tuple(argv) if user is None else self.as_user(user, argv)
        return self.runner(full, COMMAND_TIMEOUT_S)

    def beat(self) -> None:
        self.set_heartbeat(time.time())

    def stop_beating(self) -> None:
        self.set_heartbeat(time.time() - 3600)

    def sbatch(self, user: str | None, *options: str, script: str = "sleep 300",
               keep_deferred: bool = False) -> str:
        """Submit as ``user``; with ``keep_deferred`` the plugin's deferral is lengthened
        at once (:meth:`keep_deferred`)."""
        argv = ("sbatch", "--parsable", f"--chdir={self.jobs_dir}", "--output=/dev/null")
        result = self.run(*argv, *options, f"--wrap={script}", user=user)
        assert result.ok, f"sbatch {options} failed: {result.stderr}"
        job_id = result.stdout.strip().split(";")[0]
        self.submitted.append(job_id)
        if keep_deferred:
            self.keep_deferred(job_id)
        return job_id

    def keep_deferred(self, job_id: str, seconds: int = 300) -> None:
        """Lengthen the plugin's deferral of ``job_id``, just submitted, to ``seconds``. Its
        tag stays, so the actuator still releases it as the plugin's. For a test whose
        actuator call must find the job pending: the window (6 s) is shorter than the
        commands a test runs before that call on a loaded machine, where each one is a
        ``docker exec`` (CI, stop 34: a job left its window and started on its own)."""
        assert deferral.deferred_until(self.job(job_id).admin_comment) is not None, (
            f"job {job_id} was not deferred by the plugin")
        result = self.run("scontrol", "update", f"JobId={job_id}", f"StartTime=now+{seconds}")
        assert result.ok, f"cannot lengthen the deferral of {job_id}: {result.stderr}"

    def nice(self, job_id: str) -> int:
        """The job's nice as ``squeue --json`` shows it (scontrol's record does not keep it;
        the snapshot leaves out a job it sets aside)."""
        return next(job.nice for job in self.client.jobs().jobs if job.job_id == job_id)

    def job(self, job_id: str) -> ScontrolJob:
        found = self.client.show_job(job_id)
        assert found is not None, f"job {job_id} vanished"
        return found

    def wait_for(
        self, check: Callable[[], bool], what: str, timeout_s: float = 30.0, every_s: float = 0.2
    ) -> float:
        """Poll ``check`` until true; returns the seconds it took."""
        started = time.monotonic()
        while not check():
            if time.monotonic() - started > timeout_s:
                raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
            time.sleep(every_s)
        return time.monotonic() - started

    def wait_state(self, job_id: str, state: str, timeout_s: float = 30.0) -> ScontrolJob:
        self.wait_for(lambda: self.job(job_id).state == state, f"job {job_id} {state}", timeout_s)
        return self.job(job_id)

    def cancel_all(self) -> None:
        """Cancel what the tests submitted and wait until no job holds a node."""
        if self.submitted:
            self.run("scancel", *self.submitted)
            self.submitted.clear()

        def quiet() -> bool:
            out = self.run("squeue", "-h", "-t", "R,CG,CF", "-o", "%A")
            return out.ok and not out.stdout.strip()

        self.wait_for(quiet, "running jobs to end", timeout_s=30.0)


# -- native -------------------------------------------------------------------------------


def native_cluster() -> Iterator[LiveCluster]:
    """A private dev cluster in a temporary directory with free ports (needs root)."""
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-test-"))
    root.chmod(0o755)  # jobs of alice and bob must reach their working directory
    config = DevClusterConfig(
        root=root / "cluster",
        base_port=free_base_port(9, start=17800),
        deferral_window_s=WINDOW_S,
        heartbeat_max_age_s=30,
    )
    cluster = DevCluster(config)
    try:
        cluster.up(timeout_s=120.0)
        live = LiveCluster(
            kind="native",
            runner=make_runner(cluster.env()),
            jobs_dir=str(cluster.jobs_dir),
            window_s=WINDOW_S,
            set_heartbeat=lambda t: deferral.beat(cluster.heartbeat_path, t),
            as_user=lambda user, argv: ("runuser", "-u", user, "--", *argv),
            controller=cluster,
        )
        yield live
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


# -- docker compose -----------------------------------------------------------------------

COMPOSE_WINDOW_S = 6  # SLURM_RL_DEFER_WINDOW's default in docker-compose.yml


def compose_cluster() -> Iterator[LiveCluster]:
    """The docker-compose cluster (``docker compose up -d`` must have been run; the project
    and suite come from SLURM_RL_COMPOSE_PROJECT and SLURM_RL_DEBIAN: tests/slurm/compose.py)."""
    from tests.slurm.compose import ComposeError, from_env

    compose = from_env()
    try:
        runner = compose.runner("slurmctld")
        ping = runner(("scontrol", "ping"), 60.0)
    except ComposeError as exc:
        raise RuntimeError(f"compose cluster not reachable: {exc}") from exc
    if not ping.ok:
        last = (ping.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"compose cluster not reachable (docker compose up -d?): {last}")
    try:
        compose.wait_idle()  # right after `up -d`, slurmds may not have registered yet
    except ComposeError as exc:
        raise RuntimeError(str(exc)) from exc

    def set_heartbeat(stamp: float) -> None:
        # The heartbeat lives in the controller's volume; write it there.
        result = runner(("slurm-rl-heartbeat", str(int(stamp))), COMMAND_TIMEOUT_S)
        assert result.ok, f"cannot write the heartbeat: {result.stderr}"

    yield LiveCluster(
        kind="compose",
        runner=runner,
        jobs_dir="/home/shared",
        window_s=COMPOSE_WINDOW_S,
        set_heartbeat=set_heartbeat,
        as_user=lambda user, argv: ("runuser", "-u", user, "--", *argv),
    )


def daemon_toml(settings: dict[str, object]) -> str:
    """A ``[daemon]`` table with these settings (strings, booleans, numbers, lists of them)."""

    def value(v: object) -> str:
        if isinstance(v, bool):  # TOML's true/false; str(True) is not TOML
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    return "[daemon]\n" + "".join(f"{k} = {value(v)}\n" for k, v in settings.items())
