"""plugins/job_submit.lua under a standalone Lua interpreter (the 5.1 that Debian 12's
job_submit_lua.so links), with a stub of slurmctld's ``slurm`` table.

Each test lays out a site in ``tmp_path`` (the plugin and its config beside it, a heartbeat)
and submits job descriptions to ``slurm_job_submit``; what the plugin did to them comes back.
The security review's findings (issue 18, finding 8): the plugin must not follow symlinks nor
block on a FIFO when it reads its config or the heartbeat, must read neither whole when huge,
must keep an admin comment that is there, and must defer only real GPU requests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_rl.slurm import deferral

PLUGIN = Path(__file__).resolve().parent.parent / "plugins" / "job_submit.lua"
TIMEOUT_S = 10.0
WINDOW_S = 7
# Lua versions slurmctld may link (Debian 12: 5.1); each one installed runs every test.
INTERPRETERS = [name for name in ("lua5.1", "lua5.2", "lua5.3", "lua5.4") if shutil.which(name)]

pytestmark = pytest.mark.skipif(
    not INTERPRETERS, reason="no Lua interpreter (scripts/install-slurm.sh installs lua5.1)")

DRIVER = r"""
local plugin, jobs_file = arg[1], arg[2]
local logs = {}
local function logger(level)
   return function(fmt, ...) table.insert(logs, level .. " " .. string.format(fmt, ...)) end
end
slurm = { SUCCESS = 0, ERROR = -1, log_info = logger("info"), log_error = logger("error"),
          log_debug = logger("debug"), log_verbose = logger("verbose"),
          log_user = logger("user") }
dofile(plugin)
local function show(value)
   return (string.gsub(tostring(value), "[\n\\]", { ["\n"] = "\\n", ["\\"] = "\\\\" }))
end
for i, job in ipairs(dofile(jobs_file)) do
   local now = os.time()
   local rc = slurm_job_submit(job.desc, job.parts, 1000)
   print(i .. "\trc\t" .. show(rc))
   print(i .. "\tnow\t" .. now)
   print(i .. "\tbegin_time\t" .. show(job.desc.begin_time))
   print(i .. "\tadmin_comment\t" .. show(job.desc.admin_comment))
end
for _, line in ipairs(logs) do print("log\t" .. show(line)) end
"""


@dataclass
class Outcome:
    """What the plugin did to one submitted job."""

    rc: int
    now: int
    begin_time: int | None
    admin_comment: str | None

    @property
    def deferred(self) -> bool:
        return self.begin_time is not None and self.begin_time > self.now


@dataclass
class Run:
    jobs: list[Outcome]
    logs: list[str] = field(default_factory=list)


def _lua_string(text: str) -> str:
    return '"' + "".join(c if c.isalnum() or c in " :/=,._-()*" else f"\\{ord(c)}"
                         for c in text) + '"'


def _lua_table(values: Mapping[str, str | int]) -> str:
    items = [f"[{_lua_string(key)}] = "
             + (str(value) if isinstance(value, int) else _lua_string(value))
             for key, value in values.items()]
    return "{" + ", ".join(items) + "}"


def _value(text: str) -> str | None:
    return None if text == "nil" else text.replace("\\n", "\n").replace("\\\\", "\\")


@dataclass
class Site:
    """slurm.conf's directory (the plugin and its config) and the heartbeat's."""

    root: Path
    interpreter: str
    plugin_text: str = field(default_factory=PLUGIN.read_text)

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / deferral.CONF_NAME

    @property
    def heartbeat(self) -> Path:
        return self.root / "run" / "heartbeat"

    def lay_out(self) -> None:
        for directory in (self.etc, self.heartbeat.parent):
            directory.mkdir(parents=True)
            directory.chmod(0o755)
        self.root.chmod(0o755)
        self.write_conf(self.heartbeat)
        self.beat()

    def write_conf(self, heartbeat: Path, *, at: Path | None = None, extra: str = "") -> None:
        config = deferral.DeferralConfig(heartbeat_path=heartbeat, window_s=WINDOW_S,
                                         partitions=("gpu",))
        (at or self.conf).write_text(config.render() + extra)

    def beat(self, stamp: float | None = None, *, at: Path | None = None) -> None:
        deferral.beat(at or self.heartbeat, time.time() if stamp is None else stamp)

    def submit(self, *descs: Mapping[str, str | int]) -> Run:
        (self.etc / deferral.PLUGIN_NAME).write_text(self.plugin_text)
        jobs = self.root / "jobs.lua"
        parts = '{ gpu = { name = "gpu", flag_default = 1 }, cpu = { name = "cpu" } }'
        jobs.write_text("return {\n" + "".join(
            f"  {{ desc = {_lua_table(desc)}, parts = {parts} }},\n" for desc in descs) + "}\n")
        driver = self.root / "driver.lua"
        driver.write_text(DRIVER)
        result = subprocess.run(
            [self.interpreter, str(driver), str(self.etc / deferral.PLUGIN_NAME), str(jobs)],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=self.root,
            stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stderr
        fields: dict[int, dict[str, str | None]] = {}
        logs: list[str] = []
        for line in result.stdout.splitlines():
            key, _, rest = line.partition("\t")
            if key == "log":
                logs.append(_value(rest) or "")
                continue
            name, _, value = rest.partition("\t")
            fields.setdefault(int(key), {})[name] = _value(value)
        outcomes = []
        for index in sorted(fields):
            got = fields[index]
            begin, comment = got["begin_time"], got["admin_comment"]
            outcomes.append(Outcome(int(got["rc"] or -1), int(got["now"] or 0),
                                    None if begin is None else int(float(begin)), comment))
        assert len(outcomes) == len(descs), result.stdout
        return Run(outcomes, logs)

    def one(self, **desc: str | int) -> Outcome:
        return self.submit({"partition": "gpu", "tres_per_node": "gres:gpu:a100:2",
                            **desc}).jobs[0]


@pytest.fixture(params=INTERPRETERS)
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    found = Site(tmp_path / "site", str(request.param))
    found.lay_out()
    yield found


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")


# -- what must keep working ---------------------------------------------------------------


def test_a_fresh_heartbeat_defers_a_gpu_job_and_tags_it(site: Site) -> None:
    run = site.submit(*[{"partition": "gpu", "tres_per_node": "gres:gpu:a100:2"}] * 2)
    for job in run.jobs:  # the second is the plugin's cached path through the same files
        assert job.rc == 0 and job.deferred
        assert job.begin_time is not None and job.begin_time - job.now == WINDOW_S
        assert job.admin_comment == f"{deferral.DEFERRAL_TAG}{job.begin_time}"
        assert deferral.deferred_until(job.admin_comment) == job.begin_time
    assert run.logs == ["info slurm-rl job_submit.lua loaded"]


def test_a_burst_of_submissions_runs_stat_once(site: Site) -> None:
    """stat forks slurmctld while it holds its job locks: one run serves STAT_TTL_S."""
    counter = site.root / "stat-runs"
    wrapper = site.root / "counting-stat"
    wrapper.write_text(f"#!/bin/sh\necho run >> {counter}\nexec /usr/bin/stat \"$@\"\n")
    wrapper.chmod(0o755)
    site.plugin_text = site.plugin_text.replace('local STAT = "/usr/bin/stat"',
                                                f'local STAT = "{wrapper}"')
    run = site.submit(*[{"partition": "gpu", "tres_per_node": "gres:gpu:a100:1"}] * 20)
    assert all(job.deferred for job in run.jobs)
    # one run for the config and the default heartbeat path, one once the config named
    # another: then every submission finds its answer
    assert counter.read_text().count("run") == 2


def test_a_stale_or_missing_heartbeat_defers_nothing(site: Site) -> None:
    site.beat(time.time() - 3600)
    assert not site.one().deferred
    site.heartbeat.unlink()
    job = site.one()
    assert not job.deferred and job.admin_comment is None


def test_other_partitions_and_a_users_own_begin_time_are_left_alone(site: Site) -> None:
    assert not site.one(partition="cpu").deferred
    later = int(time.time()) + 600
    job = site.one(begin_time=later)
    assert job.begin_time == later and job.admin_comment is None


def test_without_a_config_the_plugins_defaults_apply(site: Site) -> None:
    """No config: the defaults (heartbeat in /run/slurm-rl, which this host's daemon does not
    beat) — the contract slurm_rl.ops.plugin_check relies on (deferral.PLUGIN_DEFAULTS)."""
    site.conf.unlink()
    job = site.one()
    assert not job.deferred
    defaults = PLUGIN.read_text()
    for key, value in deferral.PLUGIN_DEFAULTS.items():
        assert f'{key} = "{value}"' in defaults


def test_a_heartbeat_in_a_directory_of_the_daemons_own_account_is_trusted(
    site: Site
) -> None:
    """The packaged layout: /run/slurm-rl belongs to the daemon's user (not slurmctld's),
    writable by it alone, under directories of root."""
    _needs_root()
    os.chown(site.heartbeat.parent, 64030, 64030)
    os.chown(site.heartbeat, 64030, 64030)
    assert site.one().deferred


def test_a_heartbeat_under_a_sticky_shared_directory_is_trusted_in_roots_directory(
    site: Site
) -> None:
    """/tmp/<root's directory>/heartbeat, as the test clusters have it."""
    shared = site.root / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    own = shared / "mine"
    own.mkdir(mode=0o755)
    site.write_conf(own / "beat")
    site.beat(at=own / "beat")
    assert site.one().deferred


# -- (a) symlinks are not followed ----------------------------------------------------------


def test_a_symlinked_heartbeat_is_not_followed(site: Site) -> None:
    elsewhere = site.root / "elsewhere"
    site.beat(at=elsewhere)
    site.heartbeat.unlink()
    site.heartbeat.symlink_to(elsewhere)
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:a100:2"})
    assert not run.jobs[0].deferred and run.jobs[0].admin_comment is None
    assert any("not a regular file" in line for line in run.logs), run.logs


def test_a_symlinked_directory_on_the_heartbeat_path_is_not_followed(site: Site) -> None:
    (site.root / "link").symlink_to(site.heartbeat.parent)
    site.write_conf(site.root / "link" / "heartbeat")
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred
    assert any("is not a directory" in line for line in run.logs), run.logs


def test_a_symlinked_config_is_not_followed(site: Site) -> None:
    elsewhere = site.root / "elsewhere.conf"
    site.write_conf(site.heartbeat, at=elsewhere)
    site.conf.unlink()
    site.conf.symlink_to(elsewhere)
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred
    assert any(f"config {site.conf}: not a regular file" in line for line in run.logs)


# -- (b) a FIFO does not block ----------------------------------------------------------------


@pytest.mark.parametrize("where", ["heartbeat", "symlink to a fifo", "config"])
def test_a_fifo_is_not_opened(site: Site, where: str) -> None:
    """Opening a FIFO for reading blocks until a writer comes: slurmctld would hang. The
    interpreter's timeout fails the test instead of hanging it."""
    if where == "config":
        site.conf.unlink()
        os.mkfifo(site.conf)
    elif where == "heartbeat":
        site.heartbeat.unlink()
        os.mkfifo(site.heartbeat)
    else:
        os.mkfifo(site.root / "fifo")
        site.heartbeat.unlink()
        site.heartbeat.symlink_to(site.root / "fifo")
    started = time.monotonic()
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert time.monotonic() - started < TIMEOUT_S / 2
    assert not run.jobs[0].deferred
    assert any("not a regular file" in line for line in run.logs), run.logs


# -- (c) a huge file is not read whole ---------------------------------------------------------


def test_a_huge_heartbeat_is_not_read(site: Site) -> None:
    """A fresh time followed by megabytes without a newline: read whole, it still parsed."""
    site.heartbeat.write_text(f"{int(time.time())}" + " " * (4 << 20))
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred
    assert any("larger than 256 bytes" in line for line in run.logs), run.logs


def test_a_heartbeat_within_the_bound_is_read(site: Site) -> None:
    site.heartbeat.write_text(f"{int(time.time())}\n" + " " * 200)
    assert site.one().deferred


def test_a_huge_config_is_not_read(site: Site) -> None:
    site.write_conf(site.heartbeat, extra="# padding\n" * 1000)
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred
    assert any("larger than 8192 bytes" in line for line in run.logs), run.logs


# -- who may write the path ------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_heartbeat_in_a_directory_others_may_write_is_not_trusted(
    site: Site, mode: int
) -> None:
    """Whoever may write the directory may put a FIFO or symlink there after the check."""
    site.heartbeat.parent.chmod(mode)
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred
    assert any("is writable by others" in line for line in run.logs), run.logs


def test_a_heartbeat_others_may_write_is_not_trusted(site: Site) -> None:
    site.heartbeat.chmod(0o666)
    assert not site.one().deferred


def test_a_directory_above_others_may_write_is_not_trusted(site: Site) -> None:
    """A writable, non-sticky directory higher up: its entry could be renamed away."""
    site.root.chmod(0o777)
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred
    assert any(f"{site.root} is writable by others" in line for line in run.logs), run.logs


def test_someone_elses_directory_in_a_sticky_directory_is_not_trusted(site: Site) -> None:
    """/tmp/slurm-rl made first by a user: the daemon would beat into the user's directory."""
    _needs_root()
    shared = site.root / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "slurm-rl"
    theirs.mkdir(mode=0o755)
    site.write_conf(theirs / "beat")
    site.beat(at=theirs / "beat")
    os.chown(theirs, 1234, 1234)
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred
    assert any("belongs to uid 1234" in line for line in run.logs), run.logs


def test_without_stat_nothing_is_deferred(site: Site) -> None:
    """Fail open when the files cannot be checked at all."""
    site.plugin_text = site.plugin_text.replace('"/usr/bin/stat"', '"/nonexistent/stat"')
    run = site.submit({"partition": "gpu", "tres_per_node": "gres:gpu:1"})
    assert not run.jobs[0].deferred and run.jobs[0].rc == 0
    assert any("could not be run" in line for line in run.logs), run.logs


# -- (d) the admin comment is kept -------------------------------------------------------------


@pytest.mark.parametrize("before, kept", [
    ("reviewed by ops", "reviewed by ops"),
    ("a,b", "a,b"),
    (f"{deferral.DEFERRAL_TAG}1,reviewed", "reviewed"),  # a tag of ours is this window's
])
def test_an_existing_admin_comment_is_kept(site: Site, before: str, kept: str) -> None:
    job = site.one(admin_comment=before)
    assert job.deferred and job.begin_time is not None
    assert job.admin_comment == f"{deferral.DEFERRAL_TAG}{job.begin_time},{kept}"
    assert deferral.deferred_until(job.admin_comment) == job.begin_time


def test_a_job_left_alone_keeps_its_admin_comment(site: Site) -> None:
    site.beat(time.time() - 3600)
    assert site.one(admin_comment="reviewed").admin_comment == "reviewed"


# -- (e) only real GPU requests ----------------------------------------------------------------


@pytest.mark.parametrize("field_name", ["tres_per_node", "tres_per_job", "tres_per_socket",
                                        "tres_per_task"])
@pytest.mark.parametrize("tres", [
    "gres/gpu:0", "gres:gpu:0", "gres:gpu:a100:0", "gpu:0", "gres/gpu=0",
    "license/gpu_lic:1", "gres:gpu_lic:1", "gpu_lic:2", "gres:mps:100", "cpu:4",
    "gres:gpu:a100:many", "gres:gpu::1",
])
def test_a_request_for_no_gpu_is_not_deferred(site: Site, field_name: str, tres: str) -> None:
    job = site.submit({"partition": "gpu", field_name: tres}).jobs[0]
    assert not job.deferred and job.admin_comment is None


@pytest.mark.parametrize("field_name", ["tres_per_node", "tres_per_job", "tres_per_socket",
                                        "tres_per_task"])
@pytest.mark.parametrize("tres", [
    "gres:gpu:a100:4", "gres:gpu:2", "gres:gpu", "gres:gpu:a100", "gres/gpu:a100:4",
    "gres/gpu=2", "gres/gpu:a100=1", "gpu:1", "gres:mps:50,gres:gpu:1", "gres:gpu:1(S:0)",
    "cpu:2,gres/gpu:v100:1",
])
def test_a_real_gpu_request_is_deferred(site: Site, field_name: str, tres: str) -> None:
    assert site.submit({"partition": "gpu", field_name: tres}).jobs[0].deferred


def test_gpu_only_no_defers_every_job(site: Site) -> None:
    site.write_conf(site.heartbeat, extra="gpu_only = no\n")
    assert site.submit({"partition": "gpu"}).jobs[0].deferred
