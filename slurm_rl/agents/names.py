"""Every policy name in one table. A scheduler is named ``<ordering>+<placement>``, parsed here
and nowhere else.

Each half is an entry: its name, how it is built (``None`` for the learned halves, which come
from a policy bundle), and what the callers ask of a name: can a real cluster run it, is it
learned, does it take the fee weight λ, is it a baseline every comparison replays. Every list
of names (``slurm-rl simulate``'s default policies, the daemon's check of its config, the
evaluation's baselines, the error messages) is read from :data:`ORDERINGS` and
:data:`PLACEMENTS`, so they cannot disagree. The heuristic placements come from
:data:`slurm_rl.agents.placement_baselines.HEURISTICS`: adding one touches only that file
(CONTRIBUTING.md). Building is the registry's (:mod:`slurm_rl.agents.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slurm_rl.agents.base import PlacementContext
from slurm_rl.agents.ordering_baselines import (
    AGED_SUFFIX,
    AgeGuarded,
    Fifo,
    Multifactor,
    Qssf,
    SjfLimit,
    SjfOracle,
    SjfPredicted,
)
from slurm_rl.agents.placement_baselines import HEURISTICS
from slurm_rl.errors import SlurmRLError, UnknownNameError
from slurm_rl.policy import OrderingPolicy, PlacementPolicy

SEPARATOR = "+"
#: The placement every ordering is compared with, Slurm's own among equal nodes.
REFERENCE_PLACEMENT = "first-fit"
#: The ordering every placement is compared with.
REFERENCE_ORDERING = "fifo"
#: The shipped dual agent: both halves from the default bundle.
DUAL_AGENT = "rl+rl"


@dataclass(frozen=True)
class OrderingEntry:
    """An ordering name. ``build`` is None for a learned one (the bundle's ordering agent);
    ``realisable`` is False for one that needs what only a trace knows (true run times);
    ``communicates`` is False for the ablation that cuts the learned placement's message,
    which therefore pairs only with the learned placement."""

    name: str
    build: Callable[[], OrderingPolicy] | None = None
    realisable: bool = True
    communicates: bool = True

    @property
    def learned(self) -> bool:
        return self.build is None

    def make(self) -> OrderingPolicy:
        if self.build is None:
            raise SlurmRLError(f"ordering {self.name!r} is learned: it comes from a bundle")
        return self.build()


@dataclass(frozen=True)
class PlacementEntry:
    """A placement name. ``build`` is None for the learned one (the bundle's placement agent);
    ``baseline``: a heuristic every comparison replays; ``takes_fee_weight``: its score
    prices fees at λ, which :class:`~slurm_rl.agents.base.PlacementContext` carries."""

    name: str
    build: Callable[[PlacementContext], PlacementPolicy] | None = None
    baseline: bool = False
    takes_fee_weight: bool = False

    @property
    def learned(self) -> bool:
        return self.build is None

    def make(self, context: PlacementContext) -> PlacementPolicy:
        if self.build is None:
            raise SlurmRLError(f"placement {self.name!r} is learned: it comes from a bundle")
        return self.build(context)


def _rwgp(context: PlacementContext) -> PlacementPolicy:
    """The RWGP placement agent."""
    # lazy: the RWGP pulls in torch and gpytorch, which no other name needs
    from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement

    if context.fee_weight is None:
        return RwgpPlacement(context.gpu_speed)
    return RwgpPlacement(context.gpu_speed, PlacementConfig(fee_weight=context.fee_weight))


def _aged(build: Callable[[], OrderingPolicy]) -> Callable[[], OrderingPolicy]:
    """``build``'s ordering under the dual agent's age guard (``<ordering>-aged``)."""
    return lambda: AgeGuarded(build())


# The heuristic orderings; each realisable one but FIFO also gets an age-guarded twin (FIFO
# already ranks the longest-waiting first: the guard would not change its order).
_HEURISTIC_ORDERINGS = (
    OrderingEntry("fifo", Fifo),
    OrderingEntry("sjf-oracle", SjfOracle, realisable=False),
    OrderingEntry("qssf", Qssf),
    OrderingEntry("multifactor", Multifactor),
    OrderingEntry("sjf-predicted", SjfPredicted),
    OrderingEntry("sjf-limit", SjfLimit),
)
_AGED_ORDERINGS = tuple(
    OrderingEntry(f"{entry.name}{AGED_SUFFIX}", _aged(entry.build))
    for entry in _HEURISTIC_ORDERINGS
    if entry.build is not None and entry.realisable and entry.build is not Fifo)

ORDERINGS: dict[str, OrderingEntry] = {entry.name: entry for entry in (
    *_HEURISTIC_ORDERINGS,
    *_AGED_ORDERINGS,
    OrderingEntry("rl"),  # the dual agent's ordering
    OrderingEntry("rl-nocomm", communicates=False),  # its no-communication ablation
)}

PLACEMENTS: dict[str, PlacementEntry] = {entry.name: entry for entry in (
    *(PlacementEntry(name, build, baseline=True) for name, build in HEURISTICS.items()),
    PlacementEntry("rwgp", _rwgp, takes_fee_weight=True),
    PlacementEntry("rl"),  # the dual agent's placement (the bundle's λ, not the caller's)
)}


@dataclass(frozen=True)
class PolicyName:
    """A parsed ``<ordering>+<placement>``."""

    ordering: OrderingEntry
    placement: PlacementEntry

    def __str__(self) -> str:
        return policy_name(self.ordering.name, self.placement.name)

    @property
    def learned(self) -> bool:
        """Served by a policy bundle (either half learned): it keeps the bundle's λ."""
        return self.ordering.learned or self.placement.learned

    @property
    def takes_fee_weight(self) -> bool:
        """Whether a caller's λ reaches it (a learned policy keeps its bundle's)."""
        return not self.learned and self.placement.takes_fee_weight


def policy_name(ordering: str, placement: str) -> str:
    """The name of ``ordering`` with ``placement`` (not checked: :func:`parse` does)."""
    return f"{ordering}{SEPARATOR}{placement}"


def ordering_of(label: str) -> str | None:
    """The ordering half of a policy name; None for a label that names no policy (a report's
    ``dual-agent``)."""
    try:
        return parse(label).ordering.name
    except SlurmRLError:
        return None


def ordering_names(*, live: bool = False) -> list[str]:
    """Every ordering name; ``live``: only those a real cluster can run."""
    return [name for name, entry in ORDERINGS.items() if entry.realisable or not live]


def parse(name: str, *, live: bool = False) -> PolicyName:
    """The entries ``name`` names, or :class:`UnknownNameError` saying which half is unknown.
    ``live``: for a real cluster, where an oracle ordering is refused (it has no true run
    times; it would silently be FIFO)."""
    ordering_name, separator, placement_name = name.partition(SEPARATOR)
    if not separator:
        raise UnknownNameError("policy", name, [naming_help(live=live)])
    ordering = ORDERINGS.get(ordering_name)
    if ordering is None:
        raise UnknownNameError("ordering policy", ordering_name, ordering_names(live=live))
    if live and not ordering.realisable:
        raise SlurmRLError(f"{ordering_name} orders jobs by their true run times, which only a "
                           "trace has (live it would be FIFO); use qssf, multifactor or rl")
    placement = PLACEMENTS.get(placement_name)
    if placement is None:
        raise UnknownNameError("placement policy", placement_name, list(PLACEMENTS))
    if not ordering.communicates and not placement.learned:
        learned = [p for p, entry in PLACEMENTS.items() if entry.learned]
        raise UnknownNameError("policy", name, [policy_name(ordering_name, p) for p in learned])
    return PolicyName(ordering, placement)


def is_learned(name: str) -> bool:
    """True for names served by a policy bundle (``rl+rl``, ``rl+<placement>``,
    ``<ordering>+rl``): they use the fee weight the bundle was trained with."""
    return parse(name).learned


def takes_fee_weight(name: str) -> bool:
    """True when a caller's λ (``make_scheduler(name, …, fee_weight=λ)``) is put to use."""
    return parse(name).takes_fee_weight


def realisable_orderings() -> list[str]:
    """The heuristic orderings a real cluster could run: what the evaluation compares with."""
    return [name for name, entry in ORDERINGS.items() if entry.realisable and not entry.learned]


def reference_orderings() -> list[str]:
    """The orderings no real cluster has (oracles), shown as the reference to approach."""
    return [name for name, entry in ORDERINGS.items() if not entry.realisable]


def baseline_placements() -> list[str]:
    """The heuristic placements every comparison replays."""
    return [name for name, entry in PLACEMENTS.items() if entry.baseline]


def baseline_names(*, with_dual_agent: bool) -> list[str]:
    """Every heuristic ordering with the reference placement, the reference ordering with every
    other baseline placement, and the dual agent (``rl+rl``) when its bundle is at hand."""
    orderings = [name for name, entry in ORDERINGS.items() if not entry.learned]
    names = [policy_name(o, REFERENCE_PLACEMENT) for o in orderings]
    names += [policy_name(REFERENCE_ORDERING, p) for p in baseline_placements()
              if p != REFERENCE_PLACEMENT]
    return names + ([DUAL_AGENT] if with_dual_agent else [])


def names_help(*, live: bool = False) -> str:
    """Every ordering and every placement, for a ``--policy`` help and the error of a name
    without ``+``; ``live``: only what a real cluster can run."""
    return (f"orderings {', '.join(ordering_names(live=live))}; "
            f"placements {', '.join(PLACEMENTS)}")


def naming_help(*, live: bool = False) -> str:
    """How a policy is named, with every name it can be made of."""
    return f"<ordering>{SEPARATOR}<placement>, e.g. fifo+best-fit; {names_help(live=live)}"
