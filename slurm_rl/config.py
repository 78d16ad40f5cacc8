"""The site config: the daemon's settings, which ``slurm-rl selftest|show-config|explain|revert``,
``retrain`` and the store commands (``models``, ``export``) read as well. A typed, validated
model read from the ``[daemon]`` table of a TOML file, environment variables and command-line
overrides on top.

Precedence (lowest first): the defaults below, the file (``--config``, else
``$SLURM_RL_CONFIG``, else ``/etc/slurm-rl/slurm-rl.toml`` when it exists), the environment
(``SLURM_RL_<FIELD>``, e.g. ``SLURM_RL_MODE=enforce``), the command line. SIGHUP re-reads the
file and the environment and re-applies the same command-line overrides, so a flag given at
start-up keeps winning after a reload. Other tables of the file belong to other parts of
slurm-rl and are left alone, so one site file can configure them all; a file without a
``[daemon]`` table (a misspelt ``[deamon]``) or with a key outside any table is refused,
since its settings would silently not apply.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from slurm_rl.core import MAX_PRICE_PER_GPU_HOUR
from slurm_rl.errors import InputError, SlurmRLError
from slurm_rl.fairness import (
    DEFAULT_MAX_WAIT_RATIO,
    DEFAULT_MIN_WAIT_S,
    DEFAULT_NICE_PER_RANK,
    DEFAULT_WINDOW_S,
    LONGEST_HOLD_S,
    RankingRules,
)
from slurm_rl.input_files import open_regular
from slurm_rl.live_policy import check_name
from slurm_rl.slurm.deferral import DeferralConfig
from slurm_rl.slurm.plan import ActuatorConfig, Mode
from slurm_rl.slurm.priority import PriorityLimits

LogLevel = Literal["debug", "info", "warning", "error"]
SECTION = "daemon"
DEFAULT_STATE_DIR = Path("/var/lib/slurm-rl")
STORE_FILE = "slurm-rl.sqlite"
HEARTBEAT_FILE = "heartbeat"
JOBCOMP_POSITION_FILE = "jobcomp.position"
DEFAULT_CONFIG_PATH = Path("/etc/slurm-rl/slurm-rl.toml")
CONFIG_PATH_ENV = "SLURM_RL_CONFIG"
ENV_PREFIX = "SLURM_RL_"
# Upper bounds: no value past them is a setting anyone means (inf, 1e300, a typo), and some
# break later (an interval of 1e300 s never wakes; a timeout past 2**31 s overflows).
HOUR, DAY = 3600, 86400
TEN_YEARS_D = 3650
# Slurm's job priorities are 32-bit; the daemon ranks from the floor upwards and renumbers
# below 2**31 (slurm/priority.py), so the floor leaves room for a billion ranks.
MAX_PRIORITY_FLOOR = 2**30


# retention_days keeps at least the retrain window plus this (a job's decisions are older
# than its end by its wait and run time).
RETENTION_MARGIN_DAYS = 7.0
# The actuator's own defaults, so that the daemon's cannot drift from them.
_ACTUATOR = ActuatorConfig()


class DaemonConfig(BaseModel):
    """Everything one daemon run needs; see docs/daemon.md for each field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str = "fifo+best-fit"  # <ordering>+<placement>; rl+rl is the learned dual agent
    policy_bundle: Path | None = None  # learned policies' bundle; default policies/default
    mode: Mode = Mode.SHADOW
    dry_run: bool = False  # plan as `mode` would, send nothing (the shadow actuator)
    interval_s: float = Field(default=5.0, gt=0, le=HOUR)  # from one cycle's start to the next
    partitions: tuple[str, ...] = ()  # managed partitions; empty = all
    cluster_name: str = ""  # the name jobs are stored under; default: Slurm's, or "slurm"
    state_dir: Path = DEFAULT_STATE_DIR
    store_url: str | None = None  # SQLAlchemy URL; default: SQLite in state_dir
    heartbeat_path: Path | None = None  # default: <state_dir>/heartbeat
    plugin_conf_dir: Path | None = None  # slurm.conf's directory: job_submit config goes there
    heartbeat_max_age_s: int = Field(default=30, ge=1, le=DAY)
    defer_window_s: int = Field(default=10, ge=1, le=HOUR)
    defer_extension_s: float = Field(default=_ACTUATOR.defer_extension_s, gt=0, le=HOUR)
    defer_cap_s: float = Field(default=_ACTUATOR.defer_cap_s, ge=0, le=LONGEST_HOLD_S)
    # Dispatch (docs/daemon.md, "Dispatch"): hold every pending job the policy does not start
    # now, so Slurm starts no job on its own order; enforce (or shadow) only, and holds end at
    # defer_cap_s, so raise that above the waits the cluster sees.
    dispatch: bool = False
    # the lowest Priority the daemon gives the last job it ranks; above the site's largest
    # multifactor priority, ranked jobs go before unranked ones (docs/slurm.md)
    priority_floor: int = Field(default=_ACTUATOR.priority_floor, ge=1, le=MAX_PRIORITY_FLOOR)
    # Priority churn bounds (docs/daemon.md, "Priorities"): a job already ordered by the
    # daemon keeps its priority while it is at most this many places from its rank; no job
    # gets more than `priority_updates_per_job_hour` priority changes in any hour; a cycle
    # sends at most `priority_updates_per_cycle` (the highest-ranked first, the rest wait).
    priority_tolerance_ranks: int = Field(default=2, ge=0, le=1_000_000)
    priority_updates_per_job_hour: int = Field(default=2, ge=1, le=3600)
    priority_updates_per_cycle: int = Field(default=200, ge=1, le=1_000_000)
    # Fairness and --nice (docs/fairness.md), for every policy: the
    # bound on the most-waiting user's mean wait over the users' average (0 = off; the ratio
    # is never below 1). The guard acts half-way there: past it, the jobs of the users past
    # it come first, the first that does not fit with a reservation ...
    fairness_max_wait_ratio: float = Field(default=DEFAULT_MAX_WAIT_RATIO, ge=0, le=1_000_000)
    # ... counting pending jobs' waits and those of jobs started in the last this many s ...
    fairness_window_s: float = Field(default=DEFAULT_WINDOW_S, ge=0, le=30 * DAY)
    # ... once that user has waited this long on average (below, waits differ by jitter).
    fairness_min_wait_s: float = Field(default=DEFAULT_MIN_WAIT_S, ge=0, le=30 * DAY)
    # A job's --nice moves it one place down per this many points (negative nice: up);
    # 0 = --nice is not weighed (Slurm ignores it once the daemon sets the priority).
    nice_per_rank: int = Field(default=DEFAULT_NICE_PER_RANK, ge=0, le=2**31)
    # Move running jobs that opted in (docs/daemon.md); off unless the admin turns it on.
    migrate: bool = _ACTUATOR.migrate
    # An untyped request (--gpus=2) may run as a gang of several GPU types, at the slowest
    # one's pace; off: the guard keeps every placement on one type (issue 19).
    allow_mixed_gpu_types: bool = False
    max_migrations_per_cycle: int = Field(default=_ACTUATOR.max_migrations, ge=1, le=1000)
    slurm_timeout_s: float = Field(default=15.0, gt=0, le=HOUR)  # every squeue/sinfo/scontrol call
    slurm_conf: Path | None = None  # SLURM_CONF for the Slurm commands
    jobcomp_path: Path | None = None  # JobCompLoc of jobcomp/filetxt: outcomes squeue forgot
    # sacct (where slurmdbd runs): outcomes squeue forgot, for jobs decided in the lookback
    accounting_outcomes: bool = False
    accounting_every_s: float = Field(default=600.0, gt=0, le=DAY)
    accounting_lookback_days: float = Field(default=7.0, gt=0, le=TEN_YEARS_D)
    price_per_gpu_hour: dict[str, float] = Field(default_factory=dict)
    # a new policy (start, SIGHUP, model switch) first learns from the jobs stored as finished
    # in the last N days (docs/daemon.md); 0: it starts from its prior
    history_days: float = Field(default=7.0, ge=0, le=TEN_YEARS_D)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    log_level: LogLevel = "info"
    # Retraining and the model registry (docs/retraining.md).
    models_follow: bool = True  # run the registry's active version when there is one
    models_cache_dir: Path | None = None  # default: <state_dir>/models
    # 0 = no scheduled retraining
    retrain_every_h: float = Field(default=0.0, ge=0, le=TEN_YEARS_D * 24)
    retrain_window_days: float = Field(default=7.0, gt=0, le=TEN_YEARS_D)
    retrain_margin: float = Field(default=0.02, ge=0, lt=1)
    # promote only if the candidate's fees are at most this fraction above the current's
    retrain_fee_tolerance: float = Field(default=0.05, ge=0, le=100)
    # ... and if its p99 queue wait is at most this fraction (plus an hour) above the current's
    retrain_wait_tolerance: float = Field(default=0.5, ge=0, le=100)
    retrain_iterations: int = Field(default=10, ge=0, le=100_000)
    retrain_episodes: int = Field(default=4, ge=1, le=10_000)
    retrain_gate_seeds: int = Field(default=3, ge=1, le=1000)
    retrain_base_bundle: Path | None = None  # fine-tune from this, not the current policy
    retrain_misfire_grace_s: float = Field(default=3600.0, gt=0, le=30 * DAY)
    retrain_timeout_s: float = Field(default=4 * 3600.0, gt=0, le=7 * DAY)
    retention_days: float = Field(default=0.0, ge=0, le=10 * TEN_YEARS_D)  # 0 = keep every row
    log_json: bool = True  # one JSON line per decision on stdout (besides the cycle line)
    metrics_port: int = Field(default=9464, ge=0, le=65535)  # Prometheus on 127.0.0.1; 0 = off
    metrics_address: str = "127.0.0.1"  # never a public interface by default

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: object, info: ValidationInfo) -> object:
        # pydantic reads true as 1: `metrics_port = true` would serve on port 1
        numeric = cls.model_fields[str(info.field_name)].annotation in (int, float)
        if numeric and isinstance(value, bool):
            raise ValueError(f"a number, not {str(value).lower()}")
        return value

    @field_validator("*")
    @classmethod
    def _no_control_characters(cls, value: object, info: ValidationInfo) -> object:
        # A newline in a partition or a path was rendered into the plugin's config as an
        # extra line; no setting has a use for control characters.
        texts = value if isinstance(value, tuple) else (value,)
        for text in texts:
            if isinstance(text, str | Path) and any(ord(c) < 32 or ord(c) == 127
                                                     for c in str(text)):
                raise ValueError(f"{str(text)!r} holds a control character (a newline?)")
        return value

    @field_validator("partitions")
    @classmethod
    def _partitions_are_names(cls, partitions: tuple[str, ...]) -> tuple[str, ...]:
        for name in partitions:
            if not name or any(c in name for c in ", =\t"):
                raise ValueError(f"{name!r} is not a partition name (no spaces, commas or =)")
        return partitions

    @field_validator("fairness_max_wait_ratio")
    @classmethod
    def _ratio_is_off_or_at_least_one(cls, ratio: float) -> float:
        # A bound below 1 would re-rank every cycle, even when every user waits as long.
        if 0 < ratio < 1:
            raise ValueError(f"{ratio:g}: 0 (off) or at least 1 (the most-waiting user's "
                             "mean wait over the users' average is never below 1)")
        return ratio

    @field_validator("price_per_gpu_hour")
    @classmethod
    def _prices_are_finite(cls, prices: dict[str, float]) -> dict[str, float]:
        bad = [gpu for gpu, price in prices.items() if not 0 <= price <= MAX_PRICE_PER_GPU_HOUR]
        if bad:
            raise ValueError(f"{', '.join(bad)}: a price must be a number from 0 to "
                             f"{MAX_PRICE_PER_GPU_HOUR:g}")
        return prices

    @field_validator("state_dir", mode="before")
    @classmethod
    def _state_dir_is_named(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("empty; name a directory (default /var/lib/slurm-rl)")
        return value

    @field_validator("policy")
    @classmethod
    def _policy_runs_live(cls, policy: str) -> str:
        try:
            check_name(policy)
        except SlurmRLError as exc:
            raise ValueError(str(exc)) from None
        return policy

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

    @model_validator(mode="after")
    def _retention_keeps_what_is_read(self) -> DaemonConfig:
        # A retrain reads the jobs that ended in its window with their decision rows, which
        # may be older by the jobs' own wait and run time; history priming reads its days.
        # Rows retention deleted would silently drop those jobs from what is learned.
        if not self.retention_days:
            return self
        needed = max(self.retrain_window_days + RETENTION_MARGIN_DAYS
                     if self.retrain_every_h else 0.0, self.history_days)
        if self.retention_days < needed:
            raise ValueError(
                f"retention_days ({self.retention_days:g}) must be at least {needed:g}: "
                "retrain_window_days plus a week for the jobs' own wait and run time, and "
                "history_days, or a retrain or a new policy learns from jobs whose decisions "
                "were deleted")
        return self

    @field_validator("dispatch")
    @classmethod
    def _dispatch_places(cls, dispatch: bool, info: ValidationInfo) -> bool:
        # advise releases the ranked jobs and leaves the others' deferral to run out: nothing
        # would be held, and the setting would promise what the daemon does not do.
        if dispatch and info.data.get("mode") is Mode.ADVISE:
            raise ValueError("needs mode enforce (or shadow): advise holds no job")
        return dispatch

    @property
    def store(self) -> str:
        """The store URL (SQLite under ``state_dir`` unless one is given)."""
        return self.store_url or f"sqlite:///{self.state_dir / STORE_FILE}"

    @property
    def models_cache(self) -> Path:
        """Where registry versions are unpacked into bundle directories."""
        return self.models_cache_dir or self.state_dir / "models"

    @property
    def ranking_rules(self) -> RankingRules:
        """The fairness guard and --nice, as the policy's scheduler takes them."""
        return RankingRules(max_wait_ratio=self.fairness_max_wait_ratio or None,
                            window_s=self.fairness_window_s,
                            min_wait_s=self.fairness_min_wait_s,
                            nice_per_rank=self.nice_per_rank or None,
                            dispatch=self.dispatch)

    @property
    def heartbeat(self) -> Path:
        return self.heartbeat_path or self.state_dir / HEARTBEAT_FILE

    @property
    def deferral(self) -> DeferralConfig:
        """What the job_submit plugin must read for this daemon (job_submit_slurm_rl.conf)."""
        return DeferralConfig(heartbeat_path=self.heartbeat,
                              heartbeat_max_age_s=self.heartbeat_max_age_s,
                              window_s=self.defer_window_s, partitions=self.partitions)

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
    def actuator_mode(self) -> Mode:
        """What the actuator really does: the configured mode, or ``shadow`` for a dry run."""
        return Mode.SHADOW if self.dry_run else Mode(self.mode)  # a model_copy keeps a str

    @property
    def actuator_config(self) -> ActuatorConfig:
        """The actuator's settings (:mod:`slurm_rl.slurm.actuator`) from this config."""
        return ActuatorConfig(
            mode=self.actuator_mode,
            defer_extension_s=self.defer_extension_s,
            defer_cap_s=self.defer_cap_s,
            priority_floor=self.priority_floor,
            migrate=self.migrate,
            max_migrations=self.max_migrations_per_cycle,
            one_gpu_type=not self.allow_mixed_gpu_types,
            priority_limits=PriorityLimits(self.priority_tolerance_ranks,
                                           self.priority_updates_per_job_hour,
                                           self.priority_updates_per_cycle),
        )

    @property
    def changes_slurm(self) -> bool:
        """Whether this run may change anything in Slurm (heartbeat and plugin config too)."""
        return self.actuator_mode is not Mode.SHADOW

    @property
    def recorded_mode(self) -> str:
        """The mode stored with each cycle (a dry run is told apart from shadow)."""
        return "dry-run" if self.dry_run else Mode(self.mode).value


def _read_section(path: Path) -> dict[str, Any]:
    try:
        with open_regular(path, "config file") as handle:  # a FIFO would hang the daemon
            document = tomllib.load(handle)
    except OSError as exc:
        raise InputError(f"cannot read the config: {exc.strerror}", path=path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path=path) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", path=path) from None
    except RecursionError:  # tomllib recurses once per level of nesting
        raise InputError("not valid TOML: arrays or tables nested too deeply",
                         path=path) from None
    except ValueError as exc:  # an integer of more than 4300 digits, which int() refuses
        raise InputError(f"not valid TOML: {exc}", path=path) from None
    return _daemon_table(document, path)


def _daemon_table(document: dict[str, Any], path: Path) -> dict[str, Any]:
    """The ``[daemon]`` table; a key outside any table, or a file without the table (a
    misspelt ``[deamon]``), is an error: its settings would silently not apply."""
    stray = [key for key, value in document.items() if not isinstance(value, dict)]
    if stray:
        raise InputError(f"{', '.join(stray)}: outside any table; the daemon's settings go "
                         f"under [{SECTION}]", path=path)
    if document and SECTION not in document:
        raise InputError(f"no [{SECTION}] table (found [{'], ['.join(document)}]); the "
                         f"daemon's settings go under [{SECTION}]", path=path)
    section: dict[str, Any] = document.get(SECTION, {})
    return section


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or SECTION
    # Our validators' own sentences, without pydantic's "Value error, " in front.
    return f"[{SECTION}] {where}: {first['msg'].removeprefix('Value error, ')}"


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _env_value(field: str, text: str) -> object:
    """An environment string as the field wants it: lists and tables as JSON or commas."""
    if field == "partitions":
        return tuple(p.strip() for p in text.split(",") if p.strip())
    if field == "price_per_gpu_hour":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"not a JSON table: {exc.msg}", path=env_name(field)) from exc
    return text  # pydantic converts "5", "true", "/path" itself


def env_values(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The ``SLURM_RL_<FIELD>`` variables set in ``environ`` (empty ones are ignored)."""
    environ = os.environ if environ is None else environ
    return {
        field: _env_value(field, environ[env_name(field)])
        for field in DaemonConfig.model_fields
        if environ.get(env_name(field), "") != ""
    }


def config_path(given: Path | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """``--config``, else ``$SLURM_RL_CONFIG``, else the site file if it exists."""
    environ = os.environ if environ is None else environ
    if given is not None:
        return given
    if environ.get(CONFIG_PATH_ENV):
        return Path(environ[CONFIG_PATH_ENV])
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.is_file() else None


def store_command_config(given: Path | None, store_url: str | None,
                         overrides: Mapping[str, object] | None = None) -> DaemonConfig:
    """The config a store command (retrain, models, export) acts on: ``--config``; without
    it and without ``--store``, the file the daemon would read (``$SLURM_RL_CONFIG``, the
    site file). ``--store`` alone reads no file: the daemon's scheduled retrain passes its
    settings on the command line (``overrides``: the command's options, by field name; None
    values are not given), and a user who may not read the site file can still name a
    store."""
    path = given if given is not None or store_url is not None else config_path(None)
    if path is None and store_url is None:
        raise InputError(f"give --store URL or --config FILE (the daemon's store); neither "
                         f"${CONFIG_PATH_ENV} nor {DEFAULT_CONFIG_PATH} names one")
    return load_config(path, {**(overrides or {}), "store_url": store_url})


def layers(
    path: Path | None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Each source with the values it sets, lowest precedence first."""
    file_values: dict[str, Any] = _read_section(path) if path is not None else {}
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    return [
        (str(path), file_values),
        ("environment", env_values(environ)),
        ("command line", given),
    ]


def load_config(
    path: Path | None = None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> DaemonConfig:
    """The defaults, then ``[daemon]`` of ``path`` (if given), then ``SLURM_RL_*`` variables
    of ``environ`` (default: this process's), then ``overrides``.

    Overrides set to None are ignored (a command-line option that was not given). Any
    problem raises :class:`InputError` with one line naming the file (or variable) and key.
    """
    return load_with_sources(path, overrides, environ)[0]


def load_with_sources(
    path: Path | None = None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[DaemonConfig, dict[str, str]]:
    """The config and, per field, where its value came from (``default`` when unset)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, layer in layers(path, overrides, environ):
        values.update(layer)
        sources.update((key, source) for key in layer)
    try:
        config = DaemonConfig(**values)
    except ValidationError as exc:
        raise InputError(_one_line(exc), path=_blame(exc, sources, path)) from exc
    return config, {f: sources.get(f, "default") for f in DaemonConfig.model_fields}


def _blame(error: ValidationError, sources: Mapping[str, str], path: Path | None) -> str:
    """The file or variable that set the first bad key."""
    loc = error.errors()[0]["loc"]
    key = str(loc[0]) if loc else ""
    source = sources.get(key)
    if source == "environment":
        return env_name(key)
    if source is None and key not in DaemonConfig.model_fields:
        return str(path) if path is not None else "command line"
    return source or (str(path) if path is not None else "command line")
