"""README.md's "Running against Slurm" block, line by line, against the session's cluster.

Issue 19 (8): the README's trial on the dev cluster deferred nothing (its daemon beat
``<state_dir>/heartbeat``, the cluster's plugin reads ``<root>/heartbeat``), and selftest
failed before the daemon's first run, on the state directory the daemon would create. This
test reads the README's bash block and runs each line as argv lists, never through a shell:
every line must be one of the few forms below, or the test fails, so a README line that
changes without this test breaks it.

What it adapts, as the test session requires: the ``devcluster`` commands get the session
cluster's ``--root`` and ``--base-port``; paths under ``/tmp/`` move into the test's own
directory; ``sudo`` is dropped (the native cluster's tests run as root), but without ``-E``
the command gets sudo's reset environment; the daemon's metrics endpoint is off (other
sessions on this machine may serve its port); and each ``sleep`` waits for what the README
says it is for (the daemon's first beat, then the job started), not for a number of seconds.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli.devcluster import devcluster_group
from slurm_rl.devcluster.cluster import DevCluster
from slurm_rl.slurm.deferral import (
    CONF_NAME,
    DEFERRAL_TAG,
    DeferralConfig,
    deferred_until,
    write_config,
)
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import REPO, SCHED_SLACK_S

pytestmark = pytest.mark.slurm

README = REPO / "README.md"
SECTION = "## Running against Slurm"
SLURM_RL = ".venv/bin/slurm-rl"
ASSIGNMENT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$", re.DOTALL)
SUDO_KEEPS = ("PATH", "HOME", "LANG", "TERM")  # what sudo's env_reset lets through


def readme_block() -> list[str]:
    """The lines of the bash blocks in the README's section (comments and blanks dropped
    later, by shlex)."""
    text = README.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end != -1 else len(text)]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert blocks, f"README.md: no bash block under {SECTION!r}"
    return [line for block in blocks for line in block.splitlines()]


@dataclass(repr=False)  # a failed assert would print every output it holds
class Trial:
    """The shell the README's lines run in: its variables, its background job, its job."""

    live: LiveCluster
    cluster: DevCluster
    tmp: Path
    env: dict[str, str]
    shell_vars: dict[str, str] = field(default_factory=dict)
    background: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    log: Path | None = None
    job: str | None = None
    deferred_until: float | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    waits: list[str] = field(default_factory=lambda: ["first beat", "job started"])

    # -- adapting a line to the session ------------------------------------------------

    def moved(self, word: str) -> str:
        return str(self.tmp / word.removeprefix("/tmp/")) if word.startswith("/tmp/") else word

    def expanded(self, word: str) -> str:
        if word == "$!":
            assert self.background is not None, "$! before a background command"
            return str(self.background.pid)
        if word.startswith("$"):
            assert word[1:] in self.shell_vars, f"{word}: not set by an earlier line"
            return self.shell_vars[word[1:]]
        assert "$" not in word, f"{word!r}: a shell construct this test does not run"
        return self.moved(word)

    def program(self, argv: list[str]) -> list[str]:
        if argv[0] != SLURM_RL:
            return argv
        if argv[1:2] == ["devcluster"]:
            where = ["--root", str(self.cluster.root),
                     "--base-port", str(self.cluster.config.base_port)]
            argv = [*argv, *where]
        return [sys.executable, "-m", "slurm_rl.cli.main", *argv[1:]]

    # -- running one line --------------------------------------------------------------

    def run_line(self, line: str) -> None:
        words = shlex.split(line, comments=True)
        if not words:
            return
        if words[0] == "export":
            self.export(words[1:])
        elif words[0] == "eval":
            self.eval(words[1:])
        elif len(words) == 1 and (found := ASSIGNMENT.match(words[0])) \
                and found.group(2).startswith("$("):
            self.shell_vars[found.group(1)] = self.substitute(found.group(2), line)
        elif words[0] == "sleep":
            self.wait(self.waits.pop(0) if self.waits else f"nothing known ({line})")
        else:
            self.command(words, line)

    def export(self, words: list[str], printed: bool = False) -> None:
        """``printed``: what a command printed names the session's own paths, as they are."""
        for word in words:
            found = ASSIGNMENT.match(word)
            assert found, f"export {word!r}: not NAME=VALUE"
            value = found.group(2)
            self.env[found.group(1)] = value if printed else self.moved(value)

    def eval(self, words: list[str]) -> None:
        """``eval "$(command)"``: the command may print only ``export NAME=VALUE`` lines."""
        assert len(words) == 1 and words[0].startswith("$(") and words[0].endswith(")")
        argv = shlex.split(words[0][2:-1])
        shown = self.checked(self.program(argv), self.env, words[0])
        for printed in shown.stdout.splitlines():
            parts = shlex.split(printed)
            assert parts[0] == "export", f"{words[0]} printed {printed!r}"
            self.export(parts[1:], printed=True)

    def substitute(self, value: str, line: str) -> str:
        assert value.endswith(")"), line
        argv = [self.expanded(w) for w in shlex.split(value[2:-1])]
        shown = self.checked(self.program(argv), self.env, line)
        if argv[0] == "sbatch":
            self.submitted(shown.stdout.strip().split(";")[0])
        return shown.stdout.strip()

    def command(self, words: list[str], line: str) -> None:
        env = dict(self.env)
        if words[0] == "sudo":
            words, env = self.as_root(words[1:])
        while words and (found := ASSIGNMENT.match(words[0])):
            env[found.group(1)] = self.moved(found.group(2))
            words = words[1:]
        background = words[-1] == "&"
        words = words[:-1] if background else words
        target = None
        if len(words) > 2 and words[-2] == ">":
            target, words = Path(self.moved(words[-1])), words[:-2]
        argv = [self.expanded(w) for w in words]
        if argv[0] == "kill":
            self.stop(argv, line)
        elif background:
            self.start(self.program(argv), env, target, line)
        else:
            assert target is None, f"{line}: output redirected in the foreground"
            self.outputs[line] = self.checked(self.program(argv), env, line).stdout

    def as_root(self, words: list[str]) -> tuple[list[str], dict[str, str]]:
        keep = words[:1] == ["-E"]
        words = words[1:] if keep else words
        assert not words[0].startswith("-"), f"sudo {words[0]}: an option this test knows not"
        env = dict(self.env) if keep else {k: self.env[k] for k in SUDO_KEEPS if k in self.env}
        return words, env

    def checked(self, argv: list[str], env: dict[str, str], line: str
                ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=180, check=False)
        assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        return done

    # -- the background daemon, the job ------------------------------------------------

    def start(self, argv: list[str], env: dict[str, str], target: Path | None,
              line: str) -> None:
        assert self.background is None, f"{line}: a second background command"
        self.started_at = time.time()
        self.log = target or self.tmp / "background.log"
        with self.log.open("wb") as out:
            self.background = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out,
                                               stderr=subprocess.STDOUT)

    def stop(self, argv: list[str], line: str) -> None:
        assert self.background is not None and argv == ["kill", str(self.background.pid)], line
        self.background.send_signal(signal.SIGTERM)
        code = self.background.wait(timeout=60)
        assert code == 0, f"{line}: the daemon exited {code}\n{self.daemon_log()}"

    def daemon_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log is not None else ""

    def submitted(self, job_id: str) -> None:
        """Right after sbatch: the plugin tagged it (only the daemon beats in this test)."""
        self.live.submitted.append(job_id)
        self.job = job_id
        self.deferred_until = deferred_until(self.live.job(job_id).admin_comment)
        assert self.deferred_until is not None, f"job {job_id} was not deferred by the plugin"

    def wait(self, what: str) -> None:
        if what == "first beat":
            self.live.wait_for(self.beat_is_fresh, "the daemon's first heartbeat", timeout_s=60)
        elif what == "job started":
            assert self.job is not None, "sleep for a job before sbatch"
            self.live.wait_state(self.job, "RUNNING",
                                 timeout_s=self.live.window_s + SCHED_SLACK_S + 4)
        else:
            raise AssertionError(f"a sleep this test does not know what it waits for: {what}")

    def beat_is_fresh(self) -> bool:
        assert self.background is not None and self.background.poll() is None, \
            f"the daemon is not running:\n{self.daemon_log()}"
        beat = self.cluster.heartbeat_path
        text = beat.read_text().strip() if beat.exists() else ""
        return text.isdigit() and int(text) >= int(self.started_at)


@pytest.fixture
def trial(live: LiveCluster, tmp_path: Path) -> Iterator[Trial]:
    cluster = live.controller
    if live.kind != "native" or cluster is None:
        pytest.skip("the README's trial runs on the native dev cluster")
    assert cluster.status().running  # so the README's `devcluster up` leaves it as it is
    live.stop_beating()  # a deferral from here on is the README daemon's doing
    env = {k: v for k, v in os.environ.items()
           if k != "SLURM_CONF" and not k.startswith("SLURM_RL_")}
    env |= {"PYTHONUNBUFFERED": "1", "SLURM_RL_METRICS_PORT": "0"}
    state = Trial(live, cluster, tmp_path, env)
    yield state
    if state.background is not None and state.background.poll() is None:
        state.background.kill()
        state.background.wait(timeout=30)


def test_the_readme_enforce_trial_defers_a_gpu_job_and_the_daemon_places_it(
    trial: Trial, live: LiveCluster
) -> None:
    for line in readme_block():
        trial.run_line(line)
    assert not trial.waits, f"the README no longer waits for: {trial.waits}"
    assert trial.env["SLURM_RL_HEARTBEAT_PATH"] == str(trial.cluster.heartbeat_path)
    selftest = next(out for line, out in trial.outputs.items() if " selftest" in line)
    assert "will be created by the daemon" in selftest and "10 of 10 checks passed" in selftest
    job, until = trial.job, trial.deferred_until
    assert job is not None and until is not None, "the README submits no job"
    shown = next(out for line, out in trial.outputs.items() if line.startswith("scontrol"))
    assert f"AdminComment={DEFERRAL_TAG}" in shown and "JobState=RUNNING" in shown
    running = live.job(job)
    assert running.start_time is not None and running.start_time < until  # released early
    state = Path(trial.env["SLURM_RL_STATE_DIR"])
    explained = next(out for line, out in trial.outputs.items() if " explain " in line)
    cluster = re.search(r"^job \S+ \(cluster (\S+)\)", explained, re.MULTILINE)
    assert cluster, explained
    (row,) = Store(f"sqlite:///{state / 'slurm-rl.sqlite'}").decisions_for(cluster.group(1), job)
    assert row.action == "place" and row.slurm_rc == 0 and row.nodes is not None
    assert set(running.nodes) == set(row.nodes.split(","))
    assert f"sent: scontrol update JobId={job} " in explained and "-> exit 0" in explained
    assert not trial.cluster.heartbeat_path.exists()  # SIGTERM retired the beat


def test_env_prints_what_the_plugin_reads_and_warns_of_a_root_it_distrusts(
    tmp_path: Path,
) -> None:
    """No cluster needed: ``env`` reads the plugin's config file ``up`` wrote."""
    if os.geteuid() != 0:
        pytest.skip("a directory of another user's is made with chown")
    home = tmp_path / "home"
    root = home / "cluster"
    (root / "etc").mkdir(parents=True)
    write_config(root / "etc", DeferralConfig(heartbeat_path=root / "heartbeat", window_s=7,
                                              heartbeat_max_age_s=40, partitions=("gpu",)))
    trusted = CliRunner().invoke(devcluster_group, ["env", "--root", str(root)])
    assert trusted.exit_code == 0 and trusted.stderr == ""
    assert trusted.stdout.splitlines() == [
        f"export SLURM_CONF={root / 'etc' / 'slurm.conf'}",
        f"export SLURM_RL_HEARTBEAT_PATH={root / 'heartbeat'}",
        "export SLURM_RL_HEARTBEAT_MAX_AGE_S=40", "export SLURM_RL_DEFER_WINDOW_S=7",
        "export SLURM_RL_PARTITIONS=gpu"]
    os.chown(home, 65534, 65534)  # a user's home directory, say
    distrusted = CliRunner().invoke(devcluster_group, ["env", "--root", str(root)])
    assert distrusted.stdout == trusted.stdout  # eval reads stdout; the warning is on stderr
    assert f"will not read {root / 'etc' / CONF_NAME}: {home} belongs to uid 65534" \
        in distrusted.stderr and "so it defers no job" in distrusted.stderr
