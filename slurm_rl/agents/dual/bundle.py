"""Policy bundles: saving, loading and checking the learned dual agent's files.

A *bundle* is a directory: ``weights.pt`` (the :class:`~.network.DualNetwork` ``state_dict``,
loaded with ``weights_only=True``) and ``meta.json`` (bundle format, feature schema, network
sizes, λ, the node-set chooser, training windows, seed, metrics, package version). A bundle
whose feature schema differs from this package's is refused with one line
(:class:`BundleError`): features would be misread silently otherwise. Every setting meta.json
carries is checked at load (:func:`load_bundle`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from slurm_rl import __version__
from slurm_rl.agents.dual.candidates import CANDIDATE_FEATURES
from slurm_rl.agents.dual.features import CLUSTER_FEATURES, FEATURE_SCHEMA_VERSION, JOB_FEATURES
from slurm_rl.agents.dual.messages import MESSAGE_FEATURES
from slurm_rl.agents.dual.network import DualNetwork, NetworkConfig
from slurm_rl.agents.starvation import STARVATION_H, guard_seconds
from slurm_rl.errors import InputError, SlurmRLError
from slurm_rl.input_files import open_regular
from slurm_rl.safefile import write_atomic

BUNDLE_FORMAT = "slurm-rl-policy-bundle/1"
WEIGHTS_FILE = "weights.pt"
META_FILE = "meta.json"
PLACEMENT_GP = "placement_gp"  # meta key: the chooser's refit RWGP hyperparameters
#: Node-set choosers inside the placement agent. ``rwgp-excluding`` also keeps gangs off nodes
#: far slower than their best (the RWGP's exclusions); ``rwgp`` offers every node set, as the
#: bundles trained before it expect; ``rwgp-patient`` excludes as ``rwgp-excluding`` does until
#: the gang has waited an hour (``PlacementConfig.exclusion_patience_s``);
#: ``rwgp-excluding-long`` excludes as ``rwgp-excluding`` does and also keeps any job with a
#: time limit of a day or more off slow nodes (``PlacementConfig.exclusion_min_limit_s``);
#: ``rwgp-long`` keeps only those long jobs off slow nodes (its ablation: no gang rule);
#: ``rwgp-long-patient`` does so until the long job has waited an hour; ``rwgp-long-queue``
#: while the long jobs' queue is shallow (``PlacementConfig.exclusion_queue_h``);
#: ``rwgp-long-lull`` while it is shallow or a shorter job waits (``exclusion_queue_lull``).
CHOOSERS = ("rwgp-excluding", "rwgp", "rwgp-patient", "rwgp-excluding-long", "rwgp-long",
            "rwgp-long-patient", "rwgp-long-queue", "rwgp-long-lull", "best-fit")
UNNAMED_CHOOSER = "rwgp"  # a meta.json without the key: bundles from before the key existed
#: The time limit from which the ``-long`` choosers keep any job off slow nodes (meta.json
#: ``long_limit_h``): a day, one untuned value (session 40). A job that asks for a day runs 8 h
#: or more on the reference GPU, so a slow node (under a quarter of the best pace) would cost
#: it a day or more. A site whose partitions default to a day or more sets it above that.
LONG_LIMIT_H = 24.0
#: The meta keys a fine-tuned bundle (``slurm-rl retrain``) keeps from its base: how it acts
#: (λ, the chooser, communication, the age guard) and how the base was trained. Retraining
#: must not change a setting the site deployed with, such as a guard turned off.
INHERITED_META = ("fee_weight", "chooser", "communicate", "starvation_h", "long_limit_h",
                  "training", "settings_changed")
#: meta.json key: the record of :func:`change_settings`, oldest first.
SETTINGS_CHANGED = "settings_changed"


class BundleError(SlurmRLError):
    """A policy bundle that cannot be used (missing, malformed, or another feature schema)."""


def feature_schema() -> dict[str, Any]:
    return {
        "version": FEATURE_SCHEMA_VERSION,
        "job": list(JOB_FEATURES),
        "cluster": list(CLUSTER_FEATURES),
        "message": list(MESSAGE_FEATURES),
        "candidate": list(CANDIDATE_FEATURES),
    }


@dataclass(frozen=True)
class Bundle:
    path: Path
    network: DualNetwork
    meta: Mapping[str, Any]

    @property
    def fee_weight(self) -> float:
        return float(self.meta.get("fee_weight", 0.0))

    @property
    def chooser(self) -> str:
        return str(self.meta.get("chooser", UNNAMED_CHOOSER))

    @property
    def starvation_s(self) -> float | None:
        """The ordering's starvation guard (:func:`promote_starved`); None: off."""
        return guard_seconds(float(self.meta.get("starvation_h", STARVATION_H)))

    @property
    def long_limit_s(self) -> float:
        """The time limit from which the ``-long`` choosers keep a job off slow nodes."""
        return 3600.0 * float(self.meta.get("long_limit_h", LONG_LIMIT_H))

    @property
    def placement_gp(self) -> Mapping[str, Any] | None:
        """The RWGP hyperparameters a retrain refit on the site's logs, if any."""
        found = self.meta.get(PLACEMENT_GP)
        return found if isinstance(found, Mapping) else None


def save_bundle(directory: Path, network: DualNetwork, meta: Mapping[str, Any]) -> Path:
    """Writes ``weights.pt`` and ``meta.json`` (``meta`` adds to the standard fields)."""
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(network.state_dict(), directory / WEIGHTS_FILE)
    full = {
        "format": BUNDLE_FORMAT,
        "feature_schema": feature_schema(),
        "network": network.config.as_dict(),
        "package_version": __version__,
        **meta,
    }
    (directory / META_FILE).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    return directory


def load_bundle(directory: Path | str) -> Bundle:
    """The bundle in ``directory``; :class:`BundleError` (one line) when it cannot be used."""
    path = Path(directory)
    meta = _read_meta(path)
    _check_schema(path, meta)
    _check_settings(path, meta)
    network = _network(path, meta)
    try:
        network.load_state_dict(_read_weights(path))
    except RuntimeError as error:  # missing, unexpected or misshapen tensors
        raise BundleError(f"policy bundle {path}: its weights do not fit its network: "
                          f"{_first_line(error)}") from None
    network.eval()
    return Bundle(path, network, meta)


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The state dict in ``weights.pt``, loaded with ``weights_only=True``. A file of any other
    kind (text, a full pickle, a truncated zip) raises one of many exception types from deep
    inside torch (IndexError for a text file); all of them mean "not a weights file slurm-rl
    wrote", and torch's own text would advise loading it unsafely. Every tensor must hold
    finite numbers: a NaN weight turns every score into NaN and the order into noise."""
    if not (path / WEIGHTS_FILE).exists():
        raise BundleError(f"policy bundle {path}: no {WEIGHTS_FILE}")
    try:
        with open_regular(path / WEIGHTS_FILE, "weights file") as file:
            state = torch.load(file, weights_only=True, map_location="cpu")
    except InputError as error:
        raise BundleError(f"policy bundle {path}: {WEIGHTS_FILE} not readable: {error}"
                          ) from None
    except OSError as error:
        raise BundleError(f"policy bundle {path}: {WEIGHTS_FILE} not readable: "
                          f"{error.strerror}") from None
    except Exception:  # noqa: BLE001 - see the docstring
        raise BundleError(f"policy bundle {path}: {WEIGHTS_FILE} is not a weights file "
                          "slurm-rl wrote (torch.load with weights_only=True cannot read it)"
                          ) from None
    if not isinstance(state, dict) or not all(
            isinstance(key, str) and isinstance(value, torch.Tensor)
            for key, value in state.items()):
        raise BundleError(f"policy bundle {path}: {WEIGHTS_FILE} holds no state dict")
    for key, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise BundleError(f"policy bundle {path}: {WEIGHTS_FILE} '{key}' holds NaN or "
                              "infinite weights")
    return state


@dataclass(frozen=True)
class SettingsChange:
    """Settings of how a trained bundle acts that may change without retraining (None: keep).

    ``chooser`` (:data:`CHOOSERS`), ``starvation_h`` (the age guard, 0: off),
    ``ordering_sharpness`` (β_o, the weight of the shortest-limit-first prior beside the learned
    residual; from above 0 to 100, since the residual was trained beside a prior) and
    ``long_limit_h`` (:data:`LONG_LIMIT_H`, above 0)."""

    chooser: str | None = None
    starvation_h: float | None = None
    ordering_sharpness: float | None = None
    long_limit_h: float | None = None


def change_settings(directory: Path | str, change: SettingsChange, reason: str) -> Bundle:
    """Rewrites the bundle's meta.json with ``change``, weights untouched, and appends each
    setting that moved to its ``settings_changed`` record (``key``, ``from``, ``to``, ``reason``,
    package version): a shipped bundle then says how it differs from what training wrote.
    Checked as :func:`load_bundle` checks before anything is written."""
    path = Path(directory)
    load_bundle(path)  # usable as it stands
    meta = _read_meta(path)
    moves = _apply(path, meta, change)
    _check_settings(path, meta)
    _check_network_settings(path, meta["network"])
    meta[SETTINGS_CHANGED] = [*meta.get(SETTINGS_CHANGED, []), *(
        {"key": key, "from": old, "to": new, "reason": reason, "package_version": __version__}
        for key, old, new in moves)]
    write_atomic(path / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n", 0o644)
    return load_bundle(path)


def _apply(path: Path, meta: dict[str, Any], change: SettingsChange) -> list[tuple[str, Any, Any]]:
    """Sets ``change`` in ``meta``; the (key, old, new) of each setting that moved."""
    moves: list[tuple[str, Any, Any]] = []
    defaults = {"chooser": UNNAMED_CHOOSER, "starvation_h": STARVATION_H,  # a meta without it
                "long_limit_h": LONG_LIMIT_H}
    for key, new in (("chooser", change.chooser), ("starvation_h", change.starvation_h),
                     ("long_limit_h", change.long_limit_h)):
        old = meta.get(key, defaults[key])
        if new is not None and old != new:
            moves.append((key, old, new))
            meta[key] = new
    network = meta["network"] = dict(meta["network"])
    old, new = network.get("ordering_sharpness", 0.0), change.ordering_sharpness
    if new is not None and old != new:
        if not old or not new > 0:  # the residual was trained beside the prior, or without one
            raise BundleError(f"policy bundle {path}: its ordering was trained "
                              f"{'with' if old else 'without'} a prior (network "
                              f"'ordering_sharpness' {old!r}): a change cannot "
                              f"{'remove' if old else 'add'} it")
        moves.append(("network.ordering_sharpness", old, new))
        network["ordering_sharpness"] = new
    return moves


def _check_settings(path: Path, meta: Mapping[str, Any]) -> None:
    """The settings meta.json carries, checked at load: a wrong type would otherwise fail
    deep inside a replay, or (the string "false") silently mean true."""
    for key in ("fee_weight", "starvation_h"):
        value = meta.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not 0 <= value < math.inf:
            raise BundleError(f"policy bundle {path}: {META_FILE} '{key}' must be a finite "
                              f"number >= 0, not {value!r}")
    long_limit = meta.get("long_limit_h", LONG_LIMIT_H)
    if isinstance(long_limit, bool) or not isinstance(long_limit, int | float) \
            or not 0 < long_limit < math.inf:
        raise BundleError(f"policy bundle {path}: {META_FILE} 'long_limit_h' must be a finite "
                          f"number of hours > 0, not {long_limit!r}")
    if not isinstance(meta.get("communicate", True), bool):
        raise BundleError(f"policy bundle {path}: {META_FILE} 'communicate' must be true or "
                          f"false, not {meta['communicate']!r}")
    if meta.get("chooser", UNNAMED_CHOOSER) not in CHOOSERS:
        raise BundleError(f"policy bundle {path}: {META_FILE} 'chooser' {meta['chooser']!r} "
                          f"is not one of {', '.join(CHOOSERS)}")


def _network(path: Path, meta: dict[str, Any]) -> DualNetwork:
    settings = meta.get("network")
    if not isinstance(settings, dict):
        raise BundleError(f"policy bundle {path}: {META_FILE} 'network' must be a table")
    _check_network_settings(path, settings)
    try:
        network = DualNetwork(NetworkConfig(**settings))
    except (RuntimeError, TypeError, KeyError, ValueError) as error:
        raise BundleError(f"policy bundle {path}: {META_FILE} 'network' does not describe a "
                          f"network this release builds: {_first_line(error)}") from None
    return network


# The sizes a bundle's network may have: the feature counts are the schema's (checked before),
# the hidden width is bounded so a typo cannot allocate gigabytes.
_MAX_HIDDEN = 4096
_MAX_SHARPNESS = 100.0


def _check_network_settings(path: Path, settings: Mapping[str, Any]) -> None:
    """Each of meta.json's network settings in range: a NaN sharpness was accepted and made
    every placement prior NaN, silently changing the schedule."""
    for key, value in settings.items():
        if key == "prior":
            continue  # a string; the network names the known ones
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise BundleError(f"policy bundle {path}: {META_FILE} network '{key}' must be a "
                              f"finite number, not {value!r}")
        if key.endswith("features") or key == "hidden":
            if not isinstance(value, int) or not 1 <= value <= _MAX_HIDDEN:
                raise BundleError(f"policy bundle {path}: {META_FILE} network '{key}' must "
                                  f"be a whole number from 1 to {_MAX_HIDDEN}, not {value!r}")
        elif not 0 <= value <= _MAX_SHARPNESS:
            raise BundleError(f"policy bundle {path}: {META_FILE} network '{key}' must be "
                              f"from 0 to {_MAX_SHARPNESS:g}, not {value!r}")


def _first_line(error: BaseException) -> str:
    """The error's first line; torch's "Error(s) in loading state_dict for X:" says nothing
    before its colon, so the first mismatch it lists is added."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def trained_dispatch(directory: Path | str) -> bool | None:
    """Whether the bundle was last trained in dispatch mode: a retrain's fine-tuning world
    (meta ``retrain.world``), else ``slurm-rl train --dispatch``; None when its meta does
    not say."""
    meta = _read_meta(Path(directory))
    retrain = meta.get("retrain")
    world = retrain.get("world") if isinstance(retrain, dict) else None
    found = world.get("dispatch") if isinstance(world, dict) else None
    if isinstance(found, bool):
        return found
    training = meta.get("training")
    args = training.get("args") if isinstance(training, dict) else None
    found = args.get("dispatch") if isinstance(args, dict) else None
    return found if isinstance(found, bool) else None


def _read_meta(path: Path) -> dict[str, Any]:
    if not (path / META_FILE).exists():
        raise BundleError(f"no policy bundle at {path} (no {META_FILE})")
    try:  # open_regular: a FIFO or a device in a bundle would block the read for good
        with open_regular(path / META_FILE, "bundle file") as file:
            meta = json.loads(file.read())
    except InputError as error:
        raise BundleError(f"policy bundle {path}: unreadable {META_FILE}: {error}") from None
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError
        raise BundleError(f"policy bundle {path}: unreadable {META_FILE}: {error}") from None
    if not isinstance(meta, dict) or meta.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"policy bundle {path}: not a {BUNDLE_FORMAT} bundle")
    return meta


def _check_schema(path: Path, meta: Mapping[str, Any]) -> None:
    found = meta.get("feature_schema")
    version = found.get("version") if isinstance(found, dict) else None
    if version != FEATURE_SCHEMA_VERSION:
        raise BundleError(
            f"policy bundle {path} has feature schema v{version}, this slurm-rl reads "
            f"v{FEATURE_SCHEMA_VERSION}: retrain it with `slurm-rl train`"
        )
    if found != feature_schema():
        raise BundleError(
            f"policy bundle {path}: its feature names differ from this slurm-rl's "
            f"(schema v{FEATURE_SCHEMA_VERSION}): retrain it with `slurm-rl train`"
        )
