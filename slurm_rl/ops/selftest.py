"""``slurm-rl selftest``: can this host run the daemon? One line per check, ``ok`` or the fix.

Checks: munge encodes and decodes a credential (on slurm.conf's ``AuthInfo`` socket, if
any); ``scontrol ping`` finds slurmctld UP; ``squeue --json`` and ``sinfo --json`` answer and
parse, and how long they take against ``slurm_timeout_s``; the daemon's user may update jobs
(root, SlurmUser or an administrator: a harmless no-op update of a pending job's admin
comment when one is there; an Operator in slurmdbd's accounts: its AdminLevel); with mode
enforce, slurm.conf's ``SchedulerParameters`` has ``disable_job_shrink``; the managed
partitions, the GPU prices and the GPU types match what Slurm shows; the
job_submit plugin is installed and reads what this daemon writes (heartbeat, window,
partitions; ``ops/plugin_check.py``); the directories the daemon keeps its files in pass its
own safety check, or do not exist yet and the daemon can make them; the store opens, or the
daemon can create it; the configured policy builds (its bundle loads). Exit 0 when all pass,
1 otherwise.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import DaemonConfig
from slurm_rl.errors import SlurmRLError
from slurm_rl.live_policy import is_learned, make_policy
from slurm_rl.ops import plugin_check
from slurm_rl.ops.common import load, open_store, safe
from slurm_rl.ops.prometheus import model_version
from slurm_rl.safefile import UnsafePathError, require_private_dir
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.plan import Mode
from slurm_rl.slurm.proc import Runner, make_runner
from slurm_rl.slurm.records import SlurmJob
from slurm_rl.slurm.site_check import site_problems
from slurm_rl.slurm.source import in_partitions
from slurm_rl.store import migrate
from slurm_rl.store.models import CycleRow
from slurm_rl.store.repository import Store, sqlite_file

DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # what was found, or the fix

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {safe(self.detail)}"


def _env(config: DaemonConfig) -> dict[str, str]:
    env = dict(os.environ)
    if config.slurm_conf:
        env["SLURM_CONF"] = str(config.slurm_conf)
    return env


def _slurm_conf(config: DaemonConfig) -> Path:
    return config.slurm_conf or Path(os.environ.get("SLURM_CONF", DEFAULT_SLURM_CONF))


def _found_slurm_conf(config: DaemonConfig, runner: Runner) -> Path:
    """slurm.conf as slurmctld reads it: the configured one, else the one ``scontrol show
    config`` names (a source build keeps it in /usr/local/etc, older Ubuntus in
    /etc/slurm-llnl), else the default."""
    if config.slurm_conf or os.environ.get("SLURM_CONF"):
        return _slurm_conf(config)
    try:
        shown = runner(("scontrol", "show", "config"), config.slurm_timeout_s).stdout
    except SlurmRLError:
        return DEFAULT_SLURM_CONF
    match = re.search(r"^SLURM_CONF\s*=\s*(\S+)", shown, re.MULTILINE)
    return Path(match.group(1)) if match else DEFAULT_SLURM_CONF


def _munge_socket(config: DaemonConfig) -> str | None:
    try:
        text = _slurm_conf(config).read_text()
    except OSError:
        return None
    match = re.search(r"^\s*AuthInfo\s*=.*?socket=([^,\s]+)", text, re.MULTILINE | re.IGNORECASE)
    return match.group(1) if match else None


def check_munge(config: DaemonConfig) -> Check:
    socket = _munge_socket(config)
    extra = ["--socket", socket] if socket else []
    try:
        cred = subprocess.run(["munge", "-n", *extra], capture_output=True, text=True,
                              timeout=10, check=False)
        back = subprocess.run(["unmunge", *extra], input=cred.stdout, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("munge", False, f"cannot run munge ({exc}); fix: install munge")
    where = f" on {socket}" if socket else ""
    if cred.returncode != 0 or back.returncode != 0:
        error = " ".join((cred.stderr or back.stderr).split())
        return Check("munge", False, f"{error}; fix: start munged{where} "
                     "(runuser -u munge -- munged) and check /etc/munge/munge.key")
    return Check("munge", True, f"credential encoded and decoded{where}")


def check_ping(runner: Runner, timeout_s: float) -> Check:
    try:
        result = runner(("scontrol", "ping"), timeout_s)
    except SlurmRLError as exc:
        return Check("scontrol ping", False, f"{exc}; fix: is slurmctld running and answering?")
    text = " ".join(result.stdout.split())
    if result.ok and "UP" in text:
        return Check("scontrol ping", True, text)
    return Check("scontrol ping", False, f"{text or result.stderr.strip()}; fix: start "
                 "slurmctld, or point slurm_conf at its slurm.conf")


def check_latency(
    client: CliSlurmClient, config: DaemonConfig
) -> tuple[Check, list[SlurmJob]]:
    pending: list[SlurmJob] = []
    try:
        started = time.monotonic()
        jobs = client.jobs()
        squeue = time.monotonic() - started
        started = time.monotonic()
        nodes = client.nodes()
        sinfo = time.monotonic() - started
    except SlurmRLError as exc:
        return Check("query latency", False, f"{exc}; fix: see scontrol ping"), pending
    pending = [j for j in jobs.jobs
               if j.is_pending and in_partitions(j.partition.split(","), config.partitions)]
    detail = (f"squeue --json {squeue:.3f} s ({len(jobs.jobs)} jobs), sinfo --json "
              f"{sinfo:.3f} s ({len(nodes.nodes)} nodes)")
    slow = max(squeue, sinfo) > config.slurm_timeout_s / 2
    if slow:
        detail += f"; fix: raise slurm_timeout_s (now {config.slurm_timeout_s:g} s)"
    return Check("query latency", not slow, detail), pending


def _slurm_user(runner: Runner, timeout_s: float) -> str | None:
    try:
        result = runner(("scontrol", "show", "config"), timeout_s)
    except SlurmRLError:
        return None
    match = re.search(r"^SlurmUser\s*=\s*([^\s(]+)", result.stdout, re.MULTILINE)
    return match.group(1) if match else None


def check_shrink(runner: Runner, config: DaemonConfig) -> Check:
    """enforce pins jobs; a pin reaching a job that started since the snapshot resizes it
    unless ``SchedulerParameters`` has ``disable_job_shrink`` (slurm.conf.example)."""
    name = "job shrink"
    if config.actuator_mode is not Mode.ENFORCE:
        return Check(name, True, f"not needed: mode {config.actuator_mode.value} pins no job")
    try:
        result = runner(("scontrol", "show", "config"), config.slurm_timeout_s)
    except SlurmRLError as exc:
        return Check(name, False, f"cannot read Slurm's config ({exc})")
    match = re.search(r"^SchedulerParameters\s*=\s*(\S*)", result.stdout, re.MULTILINE)
    parameters = match.group(1).split(",") if match else []
    if "disable_job_shrink" in parameters:
        return Check(name, True, "SchedulerParameters has disable_job_shrink")
    return Check(name, False, "a pin that reaches a job Slurm started meanwhile would resize "
                 "it; fix: add disable_job_shrink to SchedulerParameters in slurm.conf "
                 "(slurm.conf.example), then scontrol reconfigure")


def check_site(client: CliSlurmClient, config: DaemonConfig) -> Check:
    """The site config against the cluster Slurm shows (slurm_rl/slurm/site_check.py)."""
    name = "site config"
    try:
        nodes = client.nodes().nodes
    except SlurmRLError as exc:
        return Check(name, False, f"cannot read the nodes ({exc})")
    problems = site_problems(nodes, config.partitions, config.price_per_gpu_hour)
    if problems:
        return Check(name, False, "; ".join(problems) + "; fix: the [daemon] keys named, "
                     "or a Type= in gres.conf the performance model knows "
                     "(docs/performance-model.md, GPU names)")
    return Check(name, True, "partitions, prices and GPU types match the cluster")


def admin_level(runner: Runner, user: str, timeout_s: float) -> str | None:
    """The user's AdminLevel in slurmdbd (None, Operator, Administrator), or None when
    there is no accounting database to ask."""
    try:
        result = runner(("sacctmgr", "-n", "-P", "show", "user", user, "format=adminlevel"),
                        timeout_s)
    except SlurmRLError:
        return None
    level = result.stdout.strip().splitlines()[0].strip() if result.ok and result.stdout.strip() \
        else ""
    return level or None


def check_permission(client: CliSlurmClient, runner: Runner, pending: list[SlurmJob]) -> Check:
    me = pwd.getpwuid(os.geteuid()).pw_name
    admin = _slurm_user(runner, client.timeout_s)
    level = None if me in ("root", admin) else admin_level(runner, me, client.timeout_s)
    if level == "Operator":
        # Operators may set Priority, ReqNodeList, NumNodes, StartTime and ExcNodeList of
        # any job (tests/slurm/test_operator_live.py), but not AdminComment (an
        # administrator's field): no probe, slurmdbd's word is enough.
        return Check("permission to update jobs", True,
                     f"running as {me}, AdminLevel=Operator in slurmdbd")
    if me not in ("root", admin) and level != "Administrator":
        return Check("permission to update jobs", False,
                     f"running as {me}, who is neither root, SlurmUser ({admin}) nor an "
                     f"Operator; fix: run the daemon as {admin}, or where slurmdbd runs: "
                     f"sacctmgr modify user {me} set adminlevel=Operator (docs/operations.md)")
    if not pending:
        return Check("permission to update jobs", True,
                     f"running as {me} (SlurmUser is {admin}); no pending job to try an update on")
    job = pending[0]
    # A no-op: the admin comment set to what it already is (only operators may set it), as
    # squeue's JSON gives it. Never as `scontrol show job -o` prints it: a user's own StdOut
    # path or job name may hold "AdminComment=...", which this probe would then write with
    # SlurmUser's rights.
    result = client.update_jobs([job.job_id], {"AdminComment": job.admin_comment})
    if result.ok:
        return Check("permission to update jobs", True,
                     f"running as {me}; a no-op update of job {job.job_id} was accepted")
    return Check("permission to update jobs", False,
                 f"{' '.join(result.stderr.split())}; fix: run as root or SlurmUser ({admin})")


# -- the directories the daemon trusts --------------------------------------------------

DIRECTORIES = "directories"
# What the daemon asks mkdir for (the umask takes its bits off): Daemon._open_store's plain
# mkdir for the state directory, deferral.beat's 0755 for the heartbeat's.
STATE_DIR_MODE, HEARTBEAT_DIR_MODE = 0o777, 0o755
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _trusted_dirs(config: DaemonConfig) -> list[tuple[str, Path, int, bool]]:
    """(what, path, mkdir mode, whether the daemon makes it when missing), as
    ``check_private_dirs`` in daemon/runner.py lists them: the state directory always (made
    only when the config keeps something there), the heartbeat's when the run beats."""
    found = [("state directory", config.state_dir, STATE_DIR_MODE, config.uses_state_dir)]
    beat_dir = config.heartbeat.parent
    if config.changes_slurm and os.path.abspath(beat_dir) != os.path.abspath(config.state_dir):
        found.append(("heartbeat directory", beat_dir, HEARTBEAT_DIR_MODE, True))
    return found


def check_directories(config: DaemonConfig) -> Check:
    """The daemon's own check of its directories (``require_private_dir``: no symbolic link,
    its user's or root's, writable by nobody else), passed now; or, for one not there yet
    (a fresh install, a first trial), what the daemon's ``mkdir`` would need: a directory
    above it that it may write, and a umask that leaves the new directory private."""
    notes = []
    for what, path, mode, used in _trusted_dirs(config):
        try:
            require_private_dir(path, what)
        except UnsafePathError as exc:
            return Check(DIRECTORIES, False, str(exc))
        if not used:
            notes.append(f"{what} {path}: this config keeps nothing in it")
            continue
        problem = _write_problem(what, path) if os.path.lexists(path) \
            else _creation_problem(what, path, mode)
        if problem is not None:
            return Check(DIRECTORIES, False, problem)
        notes.append(f"{what} {path} is private" if os.path.lexists(path)
                     else f"{what} {path} will be created by the daemon")
    return Check(DIRECTORIES, True, "; ".join(notes))


def _write_problem(what: str, path: Path) -> str | None:
    """A private directory of root's that the daemon's user may not write: it starts, but
    cannot create its store or write its beat there."""
    if os.access(path, os.W_OK | os.X_OK):
        return None
    me = pwd.getpwuid(os.geteuid()).pw_name
    return f"{me} may not write {what} {path}; fix: chown it to the daemon's user"


def _creation_problem(what: str, path: Path, mode: int) -> str | None:
    """Why the daemon's ``mkdir(parents=True)`` of ``path`` would fail, or leave a directory
    its next start refuses (None: neither)."""
    base = next(p for p in path.absolute().parents if os.path.lexists(p))
    setting = "state_dir" if what == "state directory" else "heartbeat_path"
    if not base.is_dir():
        return f"cannot create {what} {path}: {base} is not a directory; fix: set {setting}"
    if not os.access(base, os.W_OK | os.X_OK):
        me = pwd.getpwuid(os.geteuid()).pw_name
        return (f"cannot create {what} {path}: {me} may not write {base}; fix: create it for "
                f"the daemon's user, mode 0755 or stricter (the systemd unit does), or set "
                f"{setting}")
    # mkdir -p makes the directories between base and path with plain 0777 (less the umask):
    # one its group may write lets the group swap the directory below it.
    umask = _umask()
    made = (mode | (0o777 if base != path.absolute().parent else 0)) & ~umask
    if made & _OTHERS_WRITE:
        return (f"the daemon would create {what} {path} with mode {made:04o} (umask "
                f"{umask:04o}), which its group or others may write, and refuse it at its next "
                f"start; fix: run the daemon with umask 022, or create {path} with mode 0700")
    return None


def _umask() -> int:
    # No call reads the umask without setting it; selftest runs no threads meanwhile.
    current = os.umask(0o077)
    os.umask(current)
    return current


# -- the store --------------------------------------------------------------------------


def check_store(config: DaemonConfig) -> Check:
    """The store opens, or the daemon can make it at its first start: a fresh install (the
    systemd unit runs this check before the daemon's first start) has no store yet."""
    missing = _missing_sqlite_file(config.store)
    if missing is not None:
        return _creatable(config, missing)
    try:
        store = open_store(config)
    except SlurmRLError as exc:
        return Check("store", False, f"{exc}; fix: check store_url and state_dir permissions")
    try:
        return _schema_state(store)
    finally:
        store.engine.dispose()


def _missing_sqlite_file(url: str) -> Path | None:
    path = sqlite_file(url)
    return path if path is not None and not path.exists() else None


def _creatable(config: DaemonConfig, path: Path) -> Check:
    folder, me = path.parent, pwd.getpwuid(os.geteuid()).pw_name
    if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
        return Check("store", True, f"no store yet; the daemon creates {path} at its first start")
    # The daemon makes the state directory before it opens the store (Daemon._open_store),
    # so a store inside one that is not there yet is fine if the directory can be made.
    if not os.path.lexists(folder) and _made_state_dir(config, folder):
        if _creation_problem("state directory", folder, STATE_DIR_MODE) is None:
            return Check("store", True, f"no store yet; the daemon creates {folder} and {path} "
                         "at its first start")
        return Check("store", False, f"cannot create {path}: the daemon cannot make the state "
                     f"directory {folder} (fix: see the {DIRECTORIES} line)")
    return Check("store", False, f"cannot create {path}: {folder} is not a directory {me} may "
                 "write; fix: create it for the daemon's user (the systemd unit's "
                 "StateDirectory= does) or set state_dir / store_url")


def _made_state_dir(config: DaemonConfig, folder: Path) -> bool:
    same = os.path.abspath(folder) == os.path.abspath(config.state_dir)
    return same and config.uses_state_dir


def _schema_state(store: Store) -> Check:
    url = store.engine.url.render_as_string(hide_password=True)
    try:
        current, head = migrate.revisions(store.engine)
        if current is None:
            return Check("store", True, f"{url}: no slurm-rl tables yet; the daemon creates "
                         "them at its first start")
        if current != head and not migrate.knows(store.engine, current):
            return Check("store", False, f"{url}: schema {current} is newer than this release "
                         f"({head}); fix: run the slurm-rl release that wrote it")
        if current != head:
            return Check("store", True, f"{url}: schema {current}; the daemon upgrades it to "
                         f"{head} at start")
        cycles = store.count(CycleRow)
    except SQLAlchemyError as exc:
        first = (str(getattr(exc, "orig", None) or exc).splitlines() or [""])[0]
        return Check("store", False, f"{url}: {first}; fix: check the database and the "
                     "daemon user's rights on it")
    return Check("store", True, f"{url}: {cycles} cycles stored")


def check_model(config: DaemonConfig) -> Check:
    try:
        make_policy(config.policy, seed=config.seed, bundle=config.policy_bundle)
    except SlurmRLError as exc:
        return Check("model", False, f"{exc}; fix: retrain or point policy_bundle at a good "
                     "bundle (the daemon would run qssf+fastest-gpu meanwhile)")
    version = model_version(config.policy, config.policy_bundle, is_learned(config.policy))
    return Check("model", True, f"{config.policy} builds ({version})")


def run_checks(config: DaemonConfig) -> list[Check]:
    runner = make_runner(_env(config))
    client = CliSlurmClient(runner=runner, timeout_s=config.slurm_timeout_s)
    checks = [check_munge(config), check_ping(runner, config.slurm_timeout_s)]
    latency, pending = check_latency(client, config)
    checks.append(latency)
    steps: list[Callable[[], Check]] = [
        lambda: check_permission(client, runner, pending),
        lambda: check_shrink(runner, config),
        lambda: check_site(client, config),
        lambda: Check(plugin_check.NAME,
                      *plugin_check.check_deferral(config, _found_slurm_conf(config, runner),
                                                   _slurm_user(runner, client.timeout_s))),
        lambda: check_directories(config), lambda: check_store(config),
        lambda: check_model(config)]
    checks.extend(step() for step in steps)
    return checks


@click.command("selftest")
@click.option("--config", "config_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path), help="The daemon's TOML file.")
@click.option("--store", "store_url", default=None, help="SQLAlchemy URL of the store.")
def selftest_command(config_file: Path | None, store_url: str | None) -> None:
    """Check munge, slurmctld, query latency, permission to update jobs, the deferral plugin,
    the daemon's directories, the store and the model: one line each, ok or the fix. Exit 1
    if any failed."""
    config = load(config_file, store_url)
    checks = run_checks(config)
    for check in checks:
        click.echo(check.line())
    failed = sum(1 for c in checks if not c.ok)
    click.echo(f"{len(checks) - failed} of {len(checks)} checks passed")
    if failed:
        raise SystemExit(1)
