"""Where the project finds its own files and the shared data beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
DATA_DIR = PACKAGE_DIR / "data"


def shared_dir() -> Path:
    """The shared data folder: ``$SLURM_RL_SHARED`` or ``../shared`` beside the checkout."""
    configured = os.environ.get("SLURM_RL_SHARED")
    return Path(configured) if configured else REPO_DIR.parent / "shared"


def shared_traces_dir() -> Path:
    return shared_dir() / "traces"


def shared_perfdata_dir() -> Path:
    return shared_dir() / "perfdata"
