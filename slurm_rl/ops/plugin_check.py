"""``slurm-rl selftest``'s deferral check: will slurmctld's job_submit plugin defer new jobs
for *this* daemon?

slurmctld loads ``job_submit.lua`` from slurm.conf's directory when ``JobSubmitPlugins``
names ``lua``, and the plugin reads ``job_submit_slurm_rl.conf`` beside it. The daemon writes
that file only when ``plugin_conf_dir`` is slurm.conf's directory; otherwise the file (or,
without one, the plugin's defaults) must name the heartbeat the daemon beats, its window and
partitions. A mismatch fails silently in production: the plugin never sees a fresh beat, so
no job is ever deferred and the daemon can place only the jobs that queue.
"""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path

from slurm_rl.config import DaemonConfig
from slurm_rl.slurm import deferral

NAME = "deferral plugin"
_JOB_SUBMIT = re.compile(r"^\s*JobSubmitPlugins\s*=\s*([^#\n]*)", re.MULTILINE | re.IGNORECASE)


def check_deferral(
    config: DaemonConfig, slurm_conf: Path, slurm_user: str | None = None
) -> tuple[bool, str]:
    """(ok, what was found or the fix) for the plugin beside ``slurm_conf``; slurmctld runs
    as ``slurm_user`` (None: root)."""
    if not config.changes_slurm:
        return True, f"not used in {config.recorded_mode} mode (nothing is deferred)"
    try:
        text = slurm_conf.read_text()
    except OSError as exc:
        return False, f"cannot read {slurm_conf}: {exc.strerror}; fix: set slurm_conf"
    conf_dir = slurm_conf.parent
    missing = _not_installed(text, conf_dir)
    if missing is not None:
        return False, missing
    trusted = _trusted_uids(slurm_user)
    for what, path in (("its config", conf_dir / deferral.CONF_NAME),
                       ("the heartbeat", config.heartbeat)):
        refusal = deferral.plugin_refuses(path, trusted)
        if refusal is not None:
            return False, (f"the plugin will not read {what} {path}: {refusal}, so no new job "
                           "is deferred; fix: keep it a regular file in a directory only its "
                           "owner may write, below directories of root or SlurmUser "
                           "(docs/operations.md, \"Trust model\")")
    if config.plugin_conf_dir is not None:
        return _written_by_daemon(config.plugin_conf_dir, conf_dir)
    return _agrees(config, conf_dir / deferral.CONF_NAME)


def _trusted_uids(slurm_user: str | None) -> frozenset[int]:
    try:
        return frozenset({0, pwd.getpwnam(slurm_user).pw_uid if slurm_user else 0})
    except KeyError:
        return frozenset({0})


def _not_installed(slurm_conf_text: str, conf_dir: Path) -> str | None:
    match = _JOB_SUBMIT.search(slurm_conf_text)
    # "lua", "job_submit/lua" (the old spelling Slurm still strips), spaces after commas
    names = match.group(1).lower().split(",") if match else []
    plugins = [name.strip().removeprefix("job_submit/") for name in names]
    script = conf_dir / deferral.PLUGIN_NAME
    if "lua" in plugins and script.is_file():
        return None
    what = "JobSubmitPlugins does not name lua" if "lua" not in plugins else f"no {script}"
    return (f"{what}, so no new job is deferred and the daemon places only jobs that queue; "
            f"fix: install the shipped job_submit.lua as {script}, set JobSubmitPlugins=lua "
            "and restart slurmctld (docs/operations.md)")


def _same(key: str, found: str | None, wanted: str) -> bool:
    """As the plugin reads values: partitions as a set split on commas and spaces, numbers
    as numbers (``30.0`` is ``30``)."""
    if found is None:
        return False
    if key == "partitions":
        return set(re.split(r"[,\s]+", found.strip())) == set(re.split(r"[,\s]+", wanted))
    try:
        return float(found) == float(wanted)
    except ValueError:
        return found == wanted


def _written_by_daemon(plugin_conf_dir: Path, conf_dir: Path) -> tuple[bool, str]:
    if plugin_conf_dir.resolve() != conf_dir.resolve():
        return False, (f"plugin_conf_dir is {plugin_conf_dir}, but the plugin reads its config "
                       f"beside slurm.conf; fix: set plugin_conf_dir = {conf_dir}")
    if not os.access(conf_dir, os.W_OK | os.X_OK):
        return False, (f"the daemon may not write {conf_dir}; fix: let its user write there "
                       "(the unit's ReadWritePaths=) or unset plugin_conf_dir and keep "
                       f"{deferral.CONF_NAME} in step by hand")
    return True, f"the daemon writes {conf_dir / deferral.CONF_NAME}"


# Settings of the plugin's own that the daemon does not depend on.
_PLUGIN_ONLY = frozenset({"path_check_every"})


def _agrees(config: DaemonConfig, path: Path) -> tuple[bool, str]:
    wanted = deferral.parse_config(config.deferral.render())
    try:
        found = deferral.plugin_view(path)
    except (OSError, UnicodeDecodeError) as exc:
        return False, f"cannot read {path}: {exc}; fix: make it readable text (key = value)"
    differ = [f"{key} {found.get(key)} (daemon: {value})" for key, value in wanted.items()
              if key not in _PLUGIN_ONLY and not _same(key, found.get(key), value)]
    source = str(path) if path.is_file() else f"the plugin's defaults (no {path})"
    if not differ:
        return True, f"{source} agrees with the daemon (heartbeat {config.heartbeat})"
    return False, (f"{source} differs: {'; '.join(differ)}; fix: set plugin_conf_dir = "
                   f"{path.parent} (the daemon then writes it) or edit {path}")
