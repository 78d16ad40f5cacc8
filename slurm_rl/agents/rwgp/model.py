r"""The RWGP model: machine-speed posteriors learned online from speed observations.

This is **our reconstruction** of the RWGP the paper (Xing et al., KDD 2023) names in one
sentence; the kernel is in :mod:`.kernels`, the exact online update in :mod:`.belief`.

**Bounded cost.** Four things keep a 1,000-machine cluster cheap:

1. *The posterior lives in state-space form* (:class:`~.belief.SpeedBelief`): its size is
   ``n = 2M + K·C`` (machines, job classes seen, cells), whatever the number of observations,
   and a batch of ``B`` readings costs ``O(n² B)``. A sliding-window GP would forget a machine
   no job has used lately — exactly the straggler the placement avoids — and inducing points
   would blur the per-machine resolution that finds a straggler; the state-space form keeps
   both, exactly, because the temporal part (Matérn-½) is Markov.
2. *Observations are merged* before they enter: all readings of one node set and job class
   within ``bucket_s`` become one, with noise ``σ_n² / count`` (the simulator emits a reading
   per running job at every fluctuation step, many of them repeats).
3. *A cycle assimilates at most* ``update_budget`` *readings*; the rest of a burst (a reading
   from every running job when machine speeds change) waits, in order, for the next cycles.
   Predictions between updates look ahead in time analytically, in ``O(M)``
   (:meth:`~.belief.SpeedBelief.marginals`), so a cycle without readings touches no ``n × n``
   matrix.
4. *Hyperparameters* (edge weights, scales, ``ℓ``, ``ρ``, ``μ₀``, ``σ_n``) are fitted by type-II
   maximum likelihood on the latest ``fit_window`` readings (``O(fit_window³)``), only at
   geometrically spaced reading counts (``first_fit``, ×``fit_growth``, …), so refits are
   ``O(log N)`` over a run. After a refit the belief is rebuilt from the readings still in the
   ``window`` (``O(n² · window)``); what is older than the window is forgotten then, and only
   then.

**Gangs** are read by moment matching (:func:`~.belief.gang_readings`). A gang reading that
only says "one of these is slow" is *held* until the belief tells its members apart (a member
read alone, or in another gang) or ``gang_hold_h`` passes, and then read at that belief: a
fixed-lag choice of where to match, which keeps an early, even split of the blame from
marking a healthy machine slow for good (the placement would then never use it again, so
nothing would ever clear it).

Weak log-normal priors centred on the initial :class:`~.kernels.Hyperparameters` keep an early
fit on few readings from running off.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from slurm_rl.agents.rwgp.belief import (
    Batch,
    GangReadings,
    SpeedBelief,
    StatePrior,
    gang_readings,
)
from slurm_rl.agents.rwgp.kernels import Hyperparameters, MachineGraph, RwgpPrior
from slurm_rl.core import Cluster, SpeedObservation

_DTYPE = torch.float64


@dataclass(frozen=True)
class RwgpConfig:
    """How the model learns; see the module docstring for what each bound buys."""

    hyper: Hyperparameters = field(default_factory=Hyperparameters)
    time_unit_s: float = 3600.0  # the model's clock is in hours
    bucket_s: float = 600.0
    window: int = 2048
    fit_window: int = 256
    first_fit: int = 128
    fit_growth: float = 4.0
    fit_steps: int = 30
    fit_lr: float = 0.05
    prior_log_std: float = 1.5
    update_budget: int = 256  # readings per update; a burst's excess waits for the next
    gang_hold_h: float = 3.0  # the longest a "one of them is slow" gang reading is held
    max_held: int = 1024
    max_classes: int = 32  # classes beyond this share the last slot
    symmetrize_every: int = 128  # updates between re-symmetrising Σ (an O(n²) pass)


@dataclass(frozen=True)
class Reading:
    """One merged observation: ``count`` readings of one node set and class, averaged."""

    machines: tuple[int, ...]
    slot: int
    time_h: float
    speed: float
    count: int
    extra_var: float = 0.0  # noise beyond σ_n² / count (runtime-derived readings)


@dataclass(frozen=True)
class Pseudo:
    """What the belief is conditioned on: one machine's speed with Gaussian noise (a one-node
    reading as it is, a gang member's moment-matched share)."""

    machine: int
    slot: int
    time_h: float
    speed: float
    noise: float


@dataclass(frozen=True)
class Prediction:
    """Posterior mean and standard deviation of every machine's relative speed, now."""

    mean: NDArray[np.float64]
    std: NDArray[np.float64]


class RwgpModel:
    """Per-machine speed posteriors for one cluster (module docstring)."""

    def __init__(self, cluster: Cluster, config: RwgpConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or RwgpConfig()
        self.graph = MachineGraph.from_cluster(cluster)
        self.prior = RwgpPrior(self.graph, self.config.hyper)
        self.belief = SpeedBelief(StatePrior.from_prior(self.prior), 0.0)
        self.origin: float | None = None
        self.window: deque[Reading] = deque(maxlen=self.config.window)
        self.readings_seen = 0
        self.fits = 0
        self._slots: dict[str, int] = {}
        self._next_fit = self.config.first_fit
        self._updates = 0
        self._cache: dict[int | None, Prediction] = {}
        self._backlog: deque[Reading] = deque()  # beyond the update budget
        self._held: list[Reading] = []  # gangs waiting for their members to be told apart
        self._now_h = 0.0
        self._checked = -1  # self._updates when the held gangs were last matched

    # ----- clock and classes -----------------------------------------------------------

    @property
    def _bucket_h(self) -> float:
        return self.config.bucket_s / self.config.time_unit_s

    def hours(self, time_s: float) -> float:
        if self.origin is None:
            self.origin = time_s
        return (time_s - self.origin) / self.config.time_unit_s

    def slot(self, job_class: str) -> int | None:
        """The state slot of a class, ``None`` for one never observed."""
        return self._slots.get(job_class)

    def _slot_for(self, job_class: str) -> int:
        known = self._slots.get(job_class)
        if known is not None:
            return known
        if self.belief.num_slots >= self.config.max_classes:
            return self.belief.num_slots - 1
        self._slots[job_class] = self.belief.add_slot()
        return self._slots[job_class]

    # ----- learning --------------------------------------------------------------------

    def observe(
        self, observations: Sequence[SpeedObservation], extra_var: Sequence[float] = ()
    ) -> int:
        """Take speed observations (any order), each with optional noise variance beyond the
        model's ``σ_n²`` (a reading derived from a runtime is far noisier than a measured
        pace); returns how many merged readings entered."""
        readings = self._merge(observations, extra_var or [0.0] * len(observations))
        self._backlog.extend(readings)
        self.readings_seen += len(readings)
        self._drain(self.config.update_budget)
        if readings and self.readings_seen >= self._next_fit:
            self.fit()
            self._next_fit = math.ceil(self._next_fit * self.config.fit_growth)
        return len(readings)

    def flush(self) -> None:
        """Assimilate every reading still waiting: the excess of a burst beyond the update
        budget, and held gangs, told apart or not."""
        self._drain(len(self._backlog))
        self._release_gangs(force=True)

    @property
    def waiting(self) -> int:
        """Readings received but not yet assimilated."""
        return len(self._backlog) + len(self._held)

    def advance(self, time_s: float) -> None:
        """Predict for ``time_s`` from now on (the drift widens the uncertainty). This moves
        only the prediction time; ``Σ`` itself moves when readings arrive."""
        now = max(self._now_h, self.hours(time_s))
        if now != self._now_h:
            self._now_h = now
            self._cache.clear()

    def _merge(
        self, observations: Sequence[SpeedObservation], extra_var: Sequence[float]
    ) -> list[Reading]:
        """Readings: one per (time bucket, node set, class), sorted by time."""
        groups: dict[tuple[int, tuple[int, ...], str], list[tuple[SpeedObservation, float]]] = {}
        for obs, extra in zip(observations, extra_var, strict=True):
            if not obs.nodes or not all(self.cluster.has_node(n) for n in obs.nodes):
                continue
            machines = tuple(sorted(self.cluster.index(n) for n in obs.nodes))
            bucket = math.floor(self.hours(obs.time) / self._bucket_h)
            groups.setdefault((bucket, machines, obs.job_class), []).append((obs, extra))
        readings = [self._reading(key[1], key[2], group) for key, group in groups.items()]
        return sorted(readings, key=lambda r: r.time_h)

    def _reading(self, machines: tuple[int, ...], job_class: str,
                 group: list[tuple[SpeedObservation, float]]) -> Reading:
        speed = float(np.mean([o.relative_speed for o, _ in group]))
        time_h = self.hours(max(o.time for o, _ in group))
        extra = float(np.mean([e for _, e in group])) / len(group)
        return Reading(machines, self._slot_for(job_class), time_h, speed, len(group), extra)

    def _noise(self, reading: Reading) -> float:
        return self.belief.prior.noise_var / reading.count + reading.extra_var

    def _drain(self, budget: int) -> None:
        taken = [self._backlog.popleft() for _ in range(min(budget, len(self._backlog)))]
        for batch in _by_time(taken, self._bucket_h):
            self._assimilate(batch)
        if not taken:
            self._release_gangs()

    def _assimilate(self, readings: list[Reading]) -> None:
        """Readings of one time bucket, at its latest time: one-node readings first, so that
        gangs are matched at a belief that already knows their members' own readings."""
        self.belief.advance(max(r.time_h for r in readings))
        singles = [r for r in readings if len(r.machines) == 1]
        self._condition([
            Pseudo(r.machines[0], r.slot, r.time_h, r.speed, self._noise(r)) for r in singles
        ])
        self.window.extend(singles)
        self._held += [r for r in readings if len(r.machines) > 1]
        self._release_gangs()

    def _release_gangs(self, force: bool = False) -> None:
        """Read the held gangs that are settled (module docstring), have waited
        ``gang_hold_h``, or overflow ``max_held``; hold the rest. Nothing to look at unless
        the belief changed or the oldest gang is due."""
        if not self._held:
            return
        now, config = max(self.belief.time_h, self._now_h), self.config
        overflow = len(self._held) - config.max_held
        oldest_due = now - self._held[0].time_h >= config.gang_hold_h
        if not (force or overflow > 0 or oldest_due or self._updates != self._checked):
            return
        self._checked = self._updates
        match = self._match(self._held)
        settled = match.settled.tolist()
        ready = [
            force or k < overflow or settled[k] or now - r.time_h >= config.gang_hold_h
            for k, r in enumerate(self._held)
        ]
        rows = [k for k, go in enumerate(ready) if go]
        released = [self._held[k] for k in rows]
        self._held = [r for r, go in zip(self._held, ready, strict=True) if not go]
        if released:
            self.belief.advance(now)
            self._condition(_shares(released, match, rows))
            self.window.extend(released)

    def _match(self, gangs: list[Reading]) -> GangReadings:
        """The gangs' moment-matched pseudo-readings at the current belief
        (:func:`~.belief.gang_readings`)."""
        width = max(len(r.machines) for r in gangs)
        machines = torch.tensor([_pad(r.machines, width) for r in gangs], dtype=torch.long)
        slots = torch.tensor([r.slot for r in gangs])[:, None].expand_as(machines)
        mean, var = self.belief.marginals(machines.clamp(min=0), slots)
        return gang_readings(
            mean, var, machines >= 0,
            torch.tensor([r.speed for r in gangs], dtype=_DTYPE),
            torch.tensor([self._noise(r) for r in gangs], dtype=_DTYPE),
        )

    def _condition(self, pseudo: list[Pseudo]) -> None:
        """One batched Kalman update with one-machine (pseudo-)readings."""
        if not pseudo:
            return
        self.belief.condition(Batch(
            machines=torch.tensor([[p.machine] for p in pseudo], dtype=torch.long),
            weights=torch.ones(len(pseudo), 1, dtype=_DTYPE),
            slots=torch.tensor([p.slot for p in pseudo]),
            speeds=torch.tensor([p.speed for p in pseudo], dtype=_DTYPE),
            noise=torch.tensor([p.noise for p in pseudo], dtype=_DTYPE),
        ))
        self._cache.clear()
        self._updates += 1
        if self._updates % self.config.symmetrize_every == 0:
            self.belief.symmetrize()

    # ----- prediction ------------------------------------------------------------------

    def predict(self, job_class: str = "") -> Prediction:
        """Every machine's relative speed for ``job_class`` at the time of the last
        :meth:`advance` (or of the latest reading, if later)."""
        slot = self.slot(job_class)
        cached = self._cache.get(slot)
        if cached is not None:
            return cached
        machines = torch.arange(self.graph.num_machines)
        slots = None if slot is None else torch.full_like(machines, slot)
        mean, var = self.belief.marginals(machines, slots, self._now_h)
        prediction = Prediction(mean.numpy().copy(), var.sqrt().numpy().copy())
        self._cache[slot] = prediction
        return prediction

    # ----- hyperparameters -------------------------------------------------------------

    def fit(self, steps: int | None = None) -> float:
        """Type-II ML on the latest readings, then rebuild the belief; returns the final
        negative log marginal likelihood per reading (NaN with too few readings).

        Every reading in the window is (re-)matched first at the belief that has seen them
        all — a gang read early, when no member was known, is read again now that they are —
        and the fit and the rebuilt belief use the same pseudo-readings."""
        pseudo = self._window_pseudo()
        data = pseudo[-self.config.fit_window :]
        if len(data) < 8:
            return float("nan")
        optimizer = torch.optim.Adam(self.prior.parameters(), lr=self.config.fit_lr)
        loss = torch.tensor(float("nan"))
        for _ in range(steps if steps is not None else self.config.fit_steps):
            optimizer.zero_grad()
            loss = self._negative_mll(data) + self._log_prior_penalty() / len(data)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        self.fits += 1
        noise_scale = float(self.prior.noise_variance.detach()) / self.belief.prior.noise_var
        self._rebuild(pseudo, noise_scale)
        return float(loss.detach())

    def _window_pseudo(self) -> list[Pseudo]:
        readings = list(self.window)
        gangs = [r for r in readings if len(r.machines) > 1]
        pseudo = [
            Pseudo(r.machines[0], r.slot, r.time_h, r.speed, self._noise(r))
            for r in readings if len(r.machines) == 1
        ]
        if gangs:
            pseudo += _shares(gangs, self._match(gangs), list(range(len(gangs))))
        return sorted(pseudo, key=lambda p: p.time_h)

    def _negative_mll(self, data: Sequence[Pseudo]) -> Tensor:
        """``−log N(y − μ₀ | 0, K + R) / N``, ``K`` the GPyTorch kernel over the readings'
        (machine, class, time) and ``R`` their noise."""
        x = torch.tensor([(p.machine, p.slot, p.time_h) for p in data], dtype=_DTYPE)
        y = torch.tensor([p.speed for p in data], dtype=_DTYPE)
        extra = torch.tensor([p.noise for p in data], dtype=_DTYPE)
        # the readings' noise was taken at the old σ_n²; refit it as a scale on that
        scale = self.prior.noise_variance / self.belief.prior.noise_var
        cov = self.prior.covariance(x).to_dense() + torch.diag(scale * extra + 1e-8)
        chol = torch.linalg.cholesky(cov)
        resid: Tensor = (y - self.prior.mean.constant)[:, None]
        alpha = torch.linalg.solve_triangular(chol, resid, upper=False)
        logdet = 2.0 * chol.diagonal().log().sum()
        n = len(data)
        value: Tensor = 0.5 * (alpha.square().sum() + logdet + n * math.log(2 * math.pi)) / n
        return value

    def _log_prior_penalty(self) -> Tensor:
        """``Σ ½((log θ − log θ₀)/s)²`` over the positive hyperparameters, plus a N(μ₀, 0.05²)
        prior on the mean."""
        init, s = self.config.hyper, self.config.prior_log_std
        p = self.prior
        pairs = [
            (p.static.outputscale, init.static_std**2),
            (p.drift.outputscale, init.drift_std**2),
            (p.time_kernel.lengthscale.squeeze(), init.lengthscale_h),
            (p.noise_variance, init.noise_std**2),
            (p.graph_kernel.type_weight, init.type_weight),
            (p.graph_kernel.group_weight, init.group_weight),
        ]
        total = sum(0.5 * ((v.log() - math.log(v0)) / s) ** 2 for v, v0 in pairs)
        mean_term = 0.5 * ((p.mean.constant - init.mean) / 0.05) ** 2
        return total + mean_term  # type: ignore[no-any-return]

    def _rebuild(self, pseudo: list[Pseudo], noise_scale: float) -> None:
        """A fresh belief under the new hyperparameters, conditioned on the window's
        pseudo-readings (sorted by time) again, their noise scaled like ``σ_n²``."""
        now = self.belief.time_h
        start = pseudo[0].time_h if pseudo else now
        self.belief = SpeedBelief(StatePrior.from_prior(self.prior), start)
        for _ in range(len(self._slots)):
            self.belief.add_slot()
        for batch in _by_time(pseudo, self._bucket_h):
            self.belief.advance(batch[-1].time_h)
            self._condition([replace(p, noise=p.noise * noise_scale) for p in batch])
        self.belief.advance(now)
        self._cache.clear()

    # ----- files -----------------------------------------------------------------------

    def save(self, path: str | Path, *, with_belief: bool = False) -> None:
        """Hyperparameters and class names (and the belief, if asked: O(n²) numbers)."""
        state: dict[str, object] = {
            "prior": self.prior.state_dict(),
            "classes": sorted(self._slots, key=self._slots.__getitem__),
            "num_machines": self.graph.num_machines,
        }
        if with_belief:
            state["belief"] = self.belief.state_dict()
            state["origin"] = self.origin
        torch.save(state, path)

    def hyperparameters(self) -> dict[str, Any]:
        """The prior's (raw) hyperparameters as plain JSON: what a retrained bundle carries."""
        return {name: p.detach().tolist() for name, p in self.prior.named_parameters()}

    def use_hyperparameters(self, values: Mapping[str, Any]) -> None:
        """Take another model's :meth:`hyperparameters` (the belief starts over); raises
        ``ValueError`` when they are not this prior's, or not finite."""
        params = dict(self.prior.named_parameters())
        if set(values) != set(params):
            raise ValueError("hyperparameters of another prior")
        new = {name: torch.tensor(values[name], dtype=p.dtype) for name, p in params.items()}
        if any(new[n].shape != p.shape or not bool(torch.isfinite(new[n]).all())
               for n, p in params.items()):
            raise ValueError("hyperparameters of another shape, or not finite")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(new[name])
        self.belief = SpeedBelief(StatePrior.from_prior(self.prior), 0.0)

    def carried_to(self, cluster: Cluster) -> RwgpModel:
        """This model on a changed cluster (a node joined, left or changed price): the same
        hyperparameters, clock and classes, and a belief rebuilt from every reading in the
        window, waiting or held whose nodes the new cluster still has — a machine's speed is
        its own, whatever else joined or left. Cost: one :meth:`flush` of up to ``window``
        readings (0.7 s for 1,000 machines and a full window, one thread)."""
        model = RwgpModel(cluster, self.config)
        model.use_hyperparameters(self.hyperparameters())
        model.origin, model._now_h = self.origin, self._now_h
        for name in sorted(self._slots, key=self._slots.__getitem__):
            model._slot_for(name)
        names = [node.name for node in self.cluster.nodes]
        kept = [
            replace(r, machines=tuple(sorted(cluster.index(names[m]) for m in r.machines)))
            for r in (*self.window, *self._held, *self._backlog)
            if all(cluster.has_node(names[m]) for m in r.machines)
        ]
        model._backlog.extend(sorted(kept, key=lambda r: r.time_h))
        model.readings_seen, model.fits, model._next_fit = (
            self.readings_seen, self.fits, self._next_fit)
        model.flush()
        return model

    @classmethod
    def load(
        cls, path: str | Path, cluster: Cluster, config: RwgpConfig | None = None
    ) -> RwgpModel:
        state = torch.load(path, weights_only=True)
        model = cls(cluster, config)
        if int(state["num_machines"]) != model.graph.num_machines:
            raise ValueError(f"{path} was saved for {state['num_machines']} machines, "
                             f"not {model.graph.num_machines}")
        model.prior.load_state_dict(state["prior"])
        model.belief = SpeedBelief(StatePrior.from_prior(model.prior), 0.0)
        for name in state["classes"]:
            model._slot_for(name)
        if "belief" in state:
            model.belief.load_state_dict(state["belief"])
            model.origin = state["origin"]
        return model


def _shares(gangs: list[Reading], match: GangReadings, rows: list[int]) -> list[Pseudo]:
    """The informative members' pseudo-readings of ``gangs`` (rows ``rows`` of ``match``)."""
    speeds, noises = match.speed[rows].tolist(), match.noise[rows].tolist()
    return [
        Pseudo(m, r.slot, r.time_h, speed[j], noise[j])
        for r, speed, noise in zip(gangs, speeds, noises, strict=True)
        for j, m in enumerate(r.machines) if math.isfinite(noise[j])
    ]


def _pad(values: tuple[int, ...], width: int) -> list[int]:
    return list(values) + [-1] * (width - len(values))


R = TypeVar("R", Reading, Pseudo)


def _by_time(items: list[R], bucket_h: float) -> list[list[R]]:
    """Items (sorted by time) cut into runs no longer than one merge bucket."""
    batches: list[list[R]] = []
    for item in items:
        if batches and item.time_h - batches[-1][0].time_h < bucket_h:
            batches[-1].append(item)
        else:
            batches.append([item])
    return batches
