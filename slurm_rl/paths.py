"""Where the project finds its own files and the shared data beside the checkout."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
DATA_DIR = PACKAGE_DIR / "data"
# Where an installed wheel puts the files the project ships beside the package (pyproject's
# data-files): the default policy bundles, the cluster specs and the job_submit plugin. The
# install scheme's data directory (Debian's system pip: /usr/local while sys.prefix is /usr),
# then sys.prefix, then a `pip install --user`'s (~/.local).
SHARE_DIRS = tuple(dict.fromkeys(
    Path(root) / "share" / "slurm-rl"
    for root in (sysconfig.get_path("data"), sys.prefix,
                 sysconfig.get_path("data", f"{os.name}_user"))))


def shipped(relative: str) -> Path:
    """A file the project ships beside the package (``policies/default``,
    ``sim/clusters``, ``plugins/job_submit.lua``): in the checkout, else where an installed
    wheel put it (``<data>/share/slurm-rl``); the checkout's path when none has it."""
    in_checkout = REPO_DIR / relative
    if in_checkout.exists():
        return in_checkout
    installed = (share / relative for share in SHARE_DIRS)
    return next((path for path in installed if path.exists()), in_checkout)


def default_bundle_path() -> Path:
    """The shipped policy bundle learned names run by default (``policies/default``)."""
    return shipped("policies/default")


def shared_dir() -> Path:
    """The shared data folder: ``$SLURM_RL_SHARED`` or ``../shared`` beside the checkout."""
    configured = os.environ.get("SLURM_RL_SHARED")
    return Path(configured) if configured else REPO_DIR.parent / "shared"


def shared_traces_dir() -> Path:
    return shared_dir() / "traces"


def shared_perfdata_dir() -> Path:
    return shared_dir() / "perfdata"
