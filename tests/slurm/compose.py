"""The docker-compose cluster (docker-compose.yml) as the tests and the recorders drive it.

:class:`Compose` names one compose project: which Debian suite (so which Slurm) its images
come from, and how to run a command in one of its containers. Commands go through
``docker exec <container>`` (about 0.05 s each) rather than ``docker compose exec``
(compose v1 is a Python program: about 1 s a call); ``up``/``down`` go through compose.

Environment read by :func:`from_env` (the ``--slurm-cluster=compose`` fixture):
``SLURM_RL_COMPOSE_PROJECT`` (default: compose's own, the directory name) and
``SLURM_RL_DEBIAN`` (bookworm, trixie or sid; default trixie, as in docker-compose.yml).
``SLURM_RL_COMPOSE`` picks the compose program (scripts/compose-test.sh sets it to the one
that brought the project up): ``v2`` Docker's plugin, ``docker compose``; ``v1`` the
``docker-compose`` command (on Debian 12 compose 1.29.2); unset, the plugin where the docker
CLI has one (``DOCKER_CONFIG`` may point it at one: scripts/docker-engine.sh compose-plugin).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_rl.paths import REPO_DIR
from slurm_rl.slurm.proc import CommandResult, Runner, run_command

COMPOSE_FILE = REPO_DIR / "docker-compose.yml"
SUITES = {"bookworm": "22.05", "trixie": "24.11", "sid": "26.05"}
UP_TIMEOUT_S = 600.0  # a first build: apt inside the image (~60 s a suite here)


class ComposeError(RuntimeError):
    """The compose cluster could not be reached, started or stopped (one line)."""


COMPOSE_PROGRAMS = {"v2": ("docker", "compose"), "v1": ("docker-compose",)}


def compose_base() -> tuple[str, ...]:
    """The compose program SLURM_RL_COMPOSE names; unset, ``docker compose`` (the v2 plugin)
    where it exists, else ``docker-compose``."""
    wanted = os.environ.get("SLURM_RL_COMPOSE") or None
    if wanted is not None and wanted not in COMPOSE_PROGRAMS:
        raise ComposeError(f"SLURM_RL_COMPOSE={wanted!r}: one of {', '.join(COMPOSE_PROGRAMS)}")
    if wanted in (None, "v2") and shutil.which("docker") \
            and run_command(("docker", "compose", "version"), 30.0).ok:
        return COMPOSE_PROGRAMS["v2"]
    if wanted in (None, "v1") and shutil.which("docker-compose"):
        return COMPOSE_PROGRAMS["v1"]
    if wanted == "v2":
        raise ComposeError("SLURM_RL_COMPOSE=v2 but the docker CLI has no compose plugin "
                           "(scripts/docker-engine.sh compose-plugin gets one)")
    raise ComposeError("neither 'docker compose' nor 'docker-compose' is installed "
                       "(scripts/docker-engine.sh installs them)")


@dataclass
class Compose:
    """One compose project of docker-compose.yml."""

    project: str | None = None
    suite: str = "trixie"
    # Extra variables docker-compose.yml reads (e.g. SLURM_RL_DEFER_WINDOW).
    settings: Mapping[str, str] = field(default_factory=dict)
    _containers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise ComposeError(f"unknown Debian suite {self.suite!r}: one of "
                               f"{', '.join(SUITES)}")

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_RL_DEBIAN": self.suite, **self.settings}

    def argv(self, *args: str) -> tuple[str, ...]:
        project = ("-p", self.project) if self.project else ()
        return (*compose_base(), "-f", str(COMPOSE_FILE), *project, *args)

    def compose(self, *args: str, timeout_s: float = 120.0) -> CommandResult:
        return run_command(self.argv(*args), timeout_s, self.env)

    def up(self, build: bool = True) -> float:
        """Build what is missing, start every service; seconds until sinfo answers."""
        started = time.monotonic()
        args = ("up", "-d", "--build") if build else ("up", "-d")
        result = self.compose(*args, timeout_s=UP_TIMEOUT_S)
        if not result.ok:
            raise ComposeError(f"compose up failed: {_last_line(result)}")
        self._containers.clear()
        self.wait_idle()
        return time.monotonic() - started

    def down(self) -> None:
        result = self.compose("down", "-v", "--remove-orphans", timeout_s=180.0)
        self._containers.clear()
        if not result.ok:
            raise ComposeError(f"compose down failed: {_last_line(result)}")

    def container(self, service: str) -> str:
        """The id of the service's (first) container."""
        if service not in self._containers:
            result = self.compose("ps", "-q", service, timeout_s=60.0)
            ids = result.stdout.split()
            if not result.ok or not ids:
                raise ComposeError(f"no running container for service {service!r} "
                                   f"(docker compose up -d?): {_last_line(result)}")
            self._containers[service] = ids[0]
        return self._containers[service]

    def exec_argv(self, service: str, argv: Sequence[str]) -> tuple[str, ...]:
        return ("docker", "exec", self.container(service), *argv)

    def runner(self, service: str = "slurmctld") -> Runner:
        """A :data:`Runner` that runs each argv inside the service's container."""

        def run(argv: Sequence[str], timeout_s: float) -> CommandResult:
            result = run_command(self.exec_argv(service, argv), timeout_s)
            return CommandResult(tuple(argv), result.returncode, result.stdout,
                                 result.stderr, result.duration_s)

        return run

    def wait_idle(self, timeout_s: float = 120.0) -> None:
        """Until slurmctld answers and every node it lists is idle or in use (a node whose
        slurmd has not registered yet shows ``unk*`` or ``down*``)."""
        run = self.runner()
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                out = run(("sinfo", "-h", "-N", "-o", "%N %t"), 30.0)
            except ComposeError as exc:
                out, last = None, str(exc)
            if out is not None and out.ok:
                states = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
                ready = [s for s in states if s in ("idle", "mix", "alloc")]
                if states and len(ready) == len(states):
                    return
                last = f"nodes: {' '.join(states) or 'none'}"
            elif out is not None:
                last = _last_line(out)
            time.sleep(0.5)
        raise ComposeError(f"compose cluster not ready after {timeout_s:g} s: {last}")


def _last_line(result: CommandResult) -> str:
    lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


def from_env() -> Compose:
    """The project the ``--slurm-cluster=compose`` tests talk to."""
    return Compose(project=os.environ.get("SLURM_RL_COMPOSE_PROJECT") or None,
                   suite=os.environ.get("SLURM_RL_DEBIAN") or "trixie")
