"""Run ``python -m <module> <args>`` as another user: ``python -m tests.slurm.as_user USER
MODULE ARGS...`` (root only).

The interpreter starts as root, imports what the command needs, then drops to USER for good
(groups, gid, uid: real, effective and saved) before the command runs, so every file it
touches and every Slurm command it runs (squeue, scontrol, munge credentials) is USER's.
This stands in for ``runuser -u USER -- python ...`` on hosts whose Python lives where other
users cannot execute it (here: under /root); a real install runs the daemon as ``User=slurm``
from systemd (packaging/slurm-rl.service).
"""

from __future__ import annotations

import importlib
import os
import pwd
import runpy
import sys

# The standard library lives with the interpreter: load what the commands use before the
# drop (site-packages of the venv stay readable afterwards).
PRELOAD = (
    "slurm_rl.cli.main", "slurm_rl.cli.daemon", "slurm_rl.daemon.runner", "slurm_rl.ops.selftest",
    "slurm_rl.ops.explain", "slurm_rl.ops.revert", "slurm_rl.agents.registry",
    "slurm_rl.simulator.perfmodel", "sqlite3", "sqlalchemy.dialects.sqlite.pysqlite",
    "alembic.runtime.migration", "alembic.script", "alembic.command", "logging.config",
    "json", "subprocess", "tomllib", "select", "selectors", "signal", "http.server",
    "wsgiref.simple_server", "urllib.parse", "email.utils", "decimal", "uuid", "zoneinfo",
    "tempfile", "shutil", "hashlib", "csv", "gzip", "bz2", "lzma", "zipfile",
    "_strptime",  # time.strptime imports it at first use (sacct times, accounting_outcomes)
)


def main() -> None:
    user, module, *args = sys.argv[1:]
    for name in PRELOAD:
        importlib.import_module(name)
    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    os.environ.update(USER=user, LOGNAME=user)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
