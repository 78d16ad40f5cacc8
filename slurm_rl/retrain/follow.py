"""The daemon side of the registry: which version is active, checked every cycle (one
indexed SELECT), and the config that runs it."""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import DaemonConfig
from slurm_rl.store.registry import ModelRegistry

log = logging.getLogger("slurm_rl.daemon")
_UNSEEN = -1


class ModelFollower:
    def __init__(self, engine: Engine) -> None:
        self.registry = ModelRegistry(engine)
        self.seen: int | None = _UNSEEN  # the version the running parts were built for
        self.pending: int | None = None

    def changed(self) -> bool:
        """Whether the active version differs from the one running (False when the store
        cannot tell: the running policy stays)."""
        try:
            return self.registry.active_number() != self.seen
        except SQLAlchemyError as exc:
            log.debug("model registry not readable: %s", exc)
            return False

    def effective(self, config: DaemonConfig) -> DaemonConfig:
        """``config`` with the active version's policy and bundle (as is when none is
        active); marks that version as the one running once the caller commits."""
        active = self.registry.active()
        self.pending = active.version if active is not None else None
        if active is None:
            return config
        bundle = (self.registry.materialize(active.version, config.models_cache)
                  if active.has_bundle else None)
        return config.model_copy(update={"policy": active.policy, "policy_bundle": bundle})

    def committed(self) -> None:
        self.seen = self.pending

    def forget(self) -> None:
        """Build again at the next check (after a reload)."""
        self.seen = _UNSEEN
