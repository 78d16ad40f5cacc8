"""Per-machine speed fluctuation and stragglers: a seeded, mean-reverting random walk.

Each machine ``i`` has a speed factor ``f_i(t) = exp(m_i + x_i(t))`` multiplying the measured
speed of its GPU type. ``x_i`` is an Ornstein–Uhlenbeck process in log-speed with stationary
standard deviation ``sigma`` and correlation time ``tau``, sampled exactly at the step times
``t_k = k·Δ`` (the exact OU transition, so ``Δ`` sets only how often speeds change)::

    x_{t+Δ} = e^{-Δ/τ} · x_t + sigma · sqrt(1 - e^{-2Δ/τ}) · ε,   ε ~ N(0, 1)

``x(0)`` is drawn from the stationary law N(0, sigma²), so there is no burn-in. ``m_i`` is
0 for a healthy machine and ``log(straggler_factor)`` for the ``round(straggler_share · n)``
stragglers, chosen by the seed. A machine's long-run mean factor is therefore
``E[f_i] = exp(m_i + sigma²/2)``.

Our measured data has no per-machine fluctuation, so the defaults are an **assumption**
based on published measurements: Sinha et al., "Not All GPUs Are Created Equal" (SC '22,
arXiv 2208.11035) report about 8 % average performance variation between GPUs of the same
SKU, with outliers up to 1.5x slower than the median GPU. Hence sigma = 0.05 (a ±2 sigma band
of about ±10 %) and straggler_factor = 0.67 (1/1.5). The straggler share (3 %), the
correlation time (6 h) and the step (1 h) are our choices; docs/performance-model.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

HOUR = 3600.0
# The slowest a straggler may be: 100x slower than a healthy machine. The slowest measured
# outliers are 1.5x (module docstring); a factor far below this is a typo that replays a job
# for ever (1e-9 stretched one hour into a hundred thousand years of steps, and hung).
MIN_STRAGGLER_FACTOR = 0.01


@dataclass(frozen=True)
class FluctuationConfig:
    """How machines drift (see the module docstring). ``enabled=False`` keeps every factor 1."""

    enabled: bool = True
    sigma: float = 0.05
    tau_s: float = 6 * HOUR
    step_s: float = 1 * HOUR
    straggler_share: float = 0.03
    straggler_factor: float = 0.67
    seed: int = 0

    def __post_init__(self) -> None:
        checks = (
            ("sigma", self.sigma >= 0 and math.isfinite(self.sigma), "a finite number >= 0"),
            ("tau_s", self.tau_s > 0 and math.isfinite(self.tau_s), "a finite number > 0"),
            ("step_s", self.step_s > 0 and math.isfinite(self.step_s), "a finite number > 0"),
            ("straggler_share", 0 <= self.straggler_share <= 1, "between 0 and 1"),
            ("straggler_factor", MIN_STRAGGLER_FACTOR <= self.straggler_factor <= 1,
             f"between {MIN_STRAGGLER_FACTOR:g} (100x slower) and 1"),
        )
        for name, ok, wanted in checks:
            if not ok:
                raise ValueError(f"fluctuation {name} must be {wanted}, not {getattr(self, name)}")

    @classmethod
    def disabled(cls) -> FluctuationConfig:
        return cls(enabled=False)

    def straggler_count(self, num_nodes: int) -> int:
        """How many of ``num_nodes`` machines are stragglers (rounded half up)."""
        return min(num_nodes, math.floor(self.straggler_share * num_nodes + 0.5))


class MachineFluctuation:
    """The speed factors of ``num_nodes`` machines over time; reproducible from the seed.

    ``advance_to(t)`` steps through every step boundary ``<= t`` in order, one draw per
    boundary, so the path does not depend on how often it is called.
    """

    def __init__(self, num_nodes: int, config: FluctuationConfig) -> None:
        if num_nodes < 0:
            raise ValueError(f"num_nodes must be >= 0, not {num_nodes}")
        self.config = config
        self._n = num_nodes
        setup, steps = np.random.SeedSequence(config.seed).spawn(2)
        self._rng = np.random.default_rng(steps)
        self._step = 0
        self._decay = math.exp(-config.step_s / config.tau_s)
        self._kick = config.sigma * math.sqrt(1.0 - self._decay**2)
        self._offset, self._x = self._initial_state(np.random.default_rng(setup))
        self._factors = self._compute_factors()

    def _initial_state(
        self, rng: np.random.Generator
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        offset = np.zeros(self._n)
        x = np.zeros(self._n)
        if not self.config.enabled:
            self._stragglers: frozenset[int] = frozenset()
            return offset, x
        chosen = rng.choice(self._n, size=self.config.straggler_count(self._n), replace=False)
        self._stragglers = frozenset(int(i) for i in chosen)
        offset[chosen] = math.log(self.config.straggler_factor)
        x = rng.normal(0.0, self.config.sigma, size=self._n)
        return offset, x

    def _compute_factors(self) -> NDArray[np.float64]:
        factors = np.exp(self._offset + self._x)
        factors.setflags(write=False)
        return factors

    @property
    def factors(self) -> NDArray[np.float64]:
        """Current factor of every machine (read-only; a new array after each change)."""
        return self._factors

    @property
    def stragglers(self) -> frozenset[int]:
        return self._stragglers

    @property
    def next_step_time(self) -> float:
        """When the factors next change (process time, seconds); inf when disabled."""
        if not self.config.enabled or self._n == 0:
            return math.inf
        return (self._step + 1) * self.config.step_s

    def advance_to(self, t: float) -> bool:
        """Apply every step at times ``<= t``; True when the factors changed."""
        if not math.isfinite(t):
            raise ValueError(f"cannot advance machine fluctuation to t={t}")
        changed = False
        while self.next_step_time <= t:
            noise = self._rng.standard_normal(self._n)
            self._x = self._decay * self._x + self._kick * noise
            self._step += 1
            changed = True
        if changed:
            self._factors = self._compute_factors()
        return changed

    def mean_factor(self, i: int) -> float:
        """Machine ``i``'s long-run mean factor ``exp(m_i + sigma²/2)`` (1 when disabled)."""
        if not self.config.enabled:
            return 1.0
        return math.exp(float(self._offset[i]) + self.config.sigma**2 / 2.0)

    def mean_factors(self) -> NDArray[np.float64]:
        """``mean_factor`` of every machine, as one array."""
        return np.array([self.mean_factor(i) for i in range(self._n)])
