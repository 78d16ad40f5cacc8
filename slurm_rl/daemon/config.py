"""The daemon's settings: a typed, validated model read from the ``[daemon]`` table of a TOML
file, with command-line overrides on top.

Precedence (lowest first): the defaults below, the file, the command line. SIGHUP re-reads
the file and re-applies the same command-line overrides, so a flag given at start-up keeps
winning after a reload. Other tables of the file belong to other parts of slurm-rl and are
left alone, so one site file can configure them all.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from slurm_rl.errors import InputError

ModeName = Literal["shadow", "advise", "enforce"]
LogLevel = Literal["debug", "info", "warning", "error"]
SECTION = "daemon"
DEFAULT_STATE_DIR = Path("/var/lib/slurm-rl")
STORE_FILE = "slurm-rl.sqlite"
HEARTBEAT_FILE = "heartbeat"
JOBCOMP_POSITION_FILE = "jobcomp.position"


class DaemonConfig(BaseModel):
    """Everything one daemon run needs; see docs/daemon.md for each field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str = "fifo+best-fit"  # <ordering>+<placement>; rl+rl is the learned dual agent
    policy_bundle: Path | None = None  # learned policies' bundle; default policies/default
    mode: ModeName = "shadow"
    dry_run: bool = False  # plan as `mode` would, send nothing (the shadow actuator)
    interval_s: float = Field(default=5.0, gt=0)  # from one cycle's start to the next
    partitions: tuple[str, ...] = ()  # managed partitions; empty = all
    cluster_name: str = ""  # the name jobs are stored under; default: Slurm's, or "slurm"
    state_dir: Path = DEFAULT_STATE_DIR
    store_url: str | None = None  # SQLAlchemy URL; default: SQLite in state_dir
    heartbeat_path: Path | None = None  # default: <state_dir>/heartbeat
    plugin_conf_dir: Path | None = None  # slurm.conf's directory: job_submit config goes there
    heartbeat_max_age_s: int = Field(default=30, ge=1)
    defer_window_s: int = Field(default=10, ge=1)
    defer_extension_s: float = Field(default=30.0, gt=0)
    defer_cap_s: float = Field(default=600.0, ge=0)
    slurm_timeout_s: float = Field(default=15.0, gt=0)  # every squeue/sinfo/scontrol call
    slurm_conf: Path | None = None  # SLURM_CONF for the Slurm commands
    jobcomp_path: Path | None = None  # JobCompLoc of jobcomp/filetxt: outcomes squeue forgot
    price_per_gpu_hour: dict[str, float] = Field(default_factory=dict)
    seed: int = 0
    log_level: LogLevel = "info"
    # Retraining and the model registry (docs/retraining.md).
    models_follow: bool = True  # run the registry's active version when there is one
    models_cache_dir: Path | None = None  # default: <state_dir>/models
    retrain_every_h: float = Field(default=0.0, ge=0)  # 0 = no scheduled retraining
    retrain_window_days: float = Field(default=7.0, gt=0)
    retrain_margin: float = Field(default=0.02, ge=0, lt=1)
    retrain_iterations: int = Field(default=10, ge=0)
    retrain_episodes: int = Field(default=4, ge=1)
    retrain_gate_seeds: int = Field(default=3, ge=1)
    retrain_base_bundle: Path | None = None  # fine-tune from this, not the current policy
    retrain_misfire_grace_s: float = Field(default=3600.0, gt=0)
    retrain_timeout_s: float = Field(default=4 * 3600.0, gt=0)
    retention_days: float = Field(default=0.0, ge=0)  # 0 = keep every row

    @model_validator(mode="after")
    def _heartbeat_outlives_a_cycle(self) -> DaemonConfig:
        # A beat older than max_age means "daemon down": two cycles must fit in it, or a
        # slow cycle would switch the deferral off while the daemon is fine.
        if self.heartbeat_max_age_s < 2 * self.interval_s:
            raise ValueError(
                f"heartbeat_max_age_s ({self.heartbeat_max_age_s}) must be at least twice "
                f"interval_s ({self.interval_s:g})"
            )
        return self

    @property
    def store(self) -> str:
        """The store URL (SQLite under ``state_dir`` unless one is given)."""
        return self.store_url or f"sqlite:///{self.state_dir / STORE_FILE}"

    @property
    def models_cache(self) -> Path:
        """Where registry versions are unpacked into bundle directories."""
        return self.models_cache_dir or self.state_dir / "models"

    @property
    def heartbeat(self) -> Path:
        return self.heartbeat_path or self.state_dir / HEARTBEAT_FILE

    @property
    def uses_state_dir(self) -> bool:
        """Whether anything of this config lives in ``state_dir`` (which must then exist)."""
        defaults = self.store_url is None or self.heartbeat_path is None
        return defaults or self.jobcomp_path is not None

    @property
    def jobcomp_position(self) -> Path:
        """Where the daemon keeps its place in the jobcomp log across restarts."""
        return self.state_dir / JOBCOMP_POSITION_FILE

    @property
    def actuator_mode(self) -> str:
        """What the actuator really does: the configured mode, or ``shadow`` for a dry run."""
        return "shadow" if self.dry_run else self.mode

    @property
    def changes_slurm(self) -> bool:
        """Whether this run may change anything in Slurm (heartbeat and plugin config too)."""
        return self.actuator_mode != "shadow"

    @property
    def recorded_mode(self) -> str:
        """The mode stored with each cycle (a dry run is told apart from shadow)."""
        return "dry-run" if self.dry_run else self.mode


def _read_section(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise InputError(f"cannot read the config: {exc.strerror}", path=path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path=path) from exc
    section = document.get(SECTION, {})
    if not isinstance(section, dict):
        raise InputError(f"'{SECTION}' must be a table", path=path)
    return section


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or SECTION
    return f"[{SECTION}] {where}: {first['msg']}"


def load_config(
    path: Path | None = None, overrides: Mapping[str, object] | None = None
) -> DaemonConfig:
    """The defaults, then ``[daemon]`` of ``path`` (if given), then ``overrides``.

    Overrides set to None are ignored (a command-line option that was not given). Any
    problem raises :class:`InputError` with one line naming the file and the key.
    """
    values: dict[str, Any] = _read_section(path) if path is not None else {}
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return DaemonConfig(**values)
    except ValidationError as exc:
        raise InputError(_one_line(exc), path=path or "command line") from exc
